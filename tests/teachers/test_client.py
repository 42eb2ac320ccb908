"""QueryClient with in-process teachers: order, concurrency, journal resume, money cap."""

import threading
import time

import numpy as np
import pytest
import torch

from ldpclient.privacy import Domain, Guarantee
from ldpclient.privacy.release import _RELEASE_TOKEN, Release
from ldpclient.teachers import (
    CostCapReached,
    CostMeter,
    InferResult,
    Journal,
    JournalMismatch,
    LocalTeacher,
    MalformedResponse,
    QueryClient,
)


def make_release(values: torch.Tensor) -> Release:
    n_el = int(np.prod(values.shape[1:]))
    g = Guarantee("laplace", 1.0, 0.0, float(n_el), 0.0, n_el, Domain())
    return Release(values, g, tuple(values.shape[1:]), _token=_RELEASE_TOKEN)


class CountingTeacher(LocalTeacher):
    """Label = round(9 * mean); counts calls and reports billed units like a server."""

    def __init__(self, delay=0.0, billed_extra=0, **kw):
        super().__init__(self._model, (1, 2, 2), 10, **kw)
        self.calls = []
        self.delay = delay
        self.billed_extra = billed_extra
        self.active = 0
        self.max_active = 0
        self._count_lock = threading.Lock()
        self.journal_scope = "counting"

    @staticmethod
    def _model(x):
        return torch.round(x.flatten(1).mean(1) * 9).long()

    def infer(self, queries, *, request_id=None):
        with self._count_lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.calls.append(request_id)
        try:
            time.sleep(self.delay)
            res = super().infer(queries)
        finally:
            with self._count_lock:
                self.active -= 1
        return InferResult(res.labels, requests=1, billed=len(res.labels) + self.billed_extra)


def batches(n_batches=6, size=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    vals = torch.rand(n_batches * size, 1, 2, 2, generator=g)
    rel = make_release(vals)
    return [(f"b{k}", rel[k * size : (k + 1) * size]) for k in range(n_batches)], vals


def expected_labels(vals):
    return torch.round(vals.flatten(1).mean(1) * 9).long()


def test_label_batches_in_order_with_bounded_concurrency():
    t = CountingTeacher(delay=0.02)
    plan, vals = batches(8)
    client = QueryClient(t, workers=3)
    out = list(client.label_batches(plan))
    assert [b for b, _ in out] == [b for b, _ in plan]
    assert torch.equal(torch.cat([lab for _, lab in out]), expected_labels(vals))
    assert 1 < t.max_active <= 3
    assert client.stats.batches_sent == 8 and client.stats.queries_sent == 32


def test_batch_size_splits_requests_but_journals_one_batch(tmp_path):
    t = CountingTeacher()
    plan, vals = batches(2, size=5)
    with QueryClient(t, batch_size=2, journal=tmp_path / "j.sqlite") as client:
        labels = torch.cat([lab for _, lab in client.label_batches(plan)])
        assert torch.equal(labels, expected_labels(vals))
        assert t.calls == ["b0/0", "b0/1", "b0/2", "b1/0", "b1/1", "b1/2"]
        assert client.journal.count("counting") == 2


def test_journal_resume_sends_nothing_twice_and_keeps_labels(tmp_path):
    plan, vals = batches(6)
    path = tmp_path / "j.sqlite"
    t1 = CountingTeacher()
    c1 = QueryClient(t1, journal=path, cost=CostMeter(price_per_query=0.5))
    it = c1.label_batches(plan)
    first = [next(it) for _ in range(3)]
    it.close()  # interrupted after three batches
    c1.close()
    assert c1.cost.spent_run == pytest.approx(6.0)
    t2 = CountingTeacher()
    c2 = QueryClient(t2, journal=path, cost=CostMeter(price_per_query=0.5))
    out = list(c2.label_batches(plan))
    assert t2.calls == ["b3", "b4", "b5"]
    assert c2.stats.batches_from_journal == 3 and c2.cost.spent_run == pytest.approx(6.0)
    assert c2.cost.spent_total == pytest.approx(12.0)
    assert [lab.tolist() for _, lab in out[:3]] == [lab.tolist() for _, lab in first]
    assert torch.equal(torch.cat([lab for _, lab in out]), expected_labels(vals))
    # a third run sends nothing and pays nothing
    t3 = CountingTeacher()
    c3 = QueryClient(t3, journal=path, cost=CostMeter(price_per_query=0.5))
    list(c3.label_batches(plan))
    assert t3.calls == [] and c3.cost.spent_run == 0.0 and c3.cost.spent_total == pytest.approx(12.0)
    j = Journal(path)
    assert j.total_spend() == pytest.approx(12.0) and j.count() == 6
    j.close()


def test_journal_refuses_changed_queries_under_same_id(tmp_path):
    plan, _ = batches(2)
    path = tmp_path / "j.sqlite"
    list(QueryClient(CountingTeacher(), journal=path).label_batches(plan))
    other, _ = batches(2, seed=1)
    with pytest.raises(JournalMismatch, match="different queries"):
        list(QueryClient(CountingTeacher(), journal=path).label_batches(other))
    # a different teacher scope does not reuse the labels
    t = CountingTeacher()
    t.journal_scope = "other-teacher"
    list(QueryClient(t, journal=path).label_batches(other))
    assert t.calls == ["b0", "b1"]


def test_cost_cap_stops_before_crossing_and_resume_respects_total(tmp_path):
    plan, vals = batches(6)  # 4 queries per batch
    path = tmp_path / "j.sqlite"
    t = CountingTeacher()
    meter = CostMeter(price_per_query=1.0, price_per_request=0.5, cap=10.0)  # 4.5 per batch
    client = QueryClient(t, journal=path, cost=meter, workers=2)
    got = []
    with pytest.raises(CostCapReached) as info:
        for bid, _labels in client.label_batches(plan):
            got.append(bid)
    assert got == ["b0", "b1"] and sorted(t.calls) == ["b0", "b1"]  # two workers: sent in either order
    err = info.value
    assert err.next_batch == "b2" and err.done_batches == 2 and err.spent_run == pytest.approx(9.0)
    assert "was not sent" in str(err) and "cap of 10" in str(err)
    # restart with the same cap: the journal total counts, so nothing new is sent
    t2 = CountingTeacher()
    c2 = QueryClient(t2, journal=path, cost=CostMeter(price_per_query=1.0, price_per_request=0.5, cap=10.0))
    with pytest.raises(CostCapReached):
        list(c2.label_batches(plan))
    assert t2.calls == []
    # raise the cap: resumes at b2
    t3 = CountingTeacher()
    c3 = QueryClient(t3, journal=path, cost=CostMeter(price_per_query=1.0, price_per_request=0.5, cap=100.0))
    labels = torch.cat([lab for _, lab in c3.label_batches(plan)])
    assert t3.calls == ["b2", "b3", "b4", "b5"] and torch.equal(labels, expected_labels(vals))
    assert c3.cost.spent_total == pytest.approx(27.0)


def test_billing_reconciliation_reports_differences():
    plan, _ = batches(3)
    client = QueryClient(CountingTeacher(billed_extra=1), cost=CostMeter(price_per_query=0.01))
    list(client.label_batches(plan))
    r = client.reconcile()
    assert not r.matches and r.expected_units == 12 and r.billed_units == 15
    assert [d.batch_id for d in r.differences] == ["b0", "b1", "b2"]
    assert "MISMATCH" in r.summary()
    ok = QueryClient(CountingTeacher())
    list(ok.label_batches(plan))
    assert ok.reconcile().matches and ok.report()["billing"]["billed_units"] == 12


def test_failures_propagate_after_in_flight_batches_are_journaled(tmp_path):
    class Flaky(CountingTeacher):
        def infer(self, queries, *, request_id=None):
            if request_id == "b2":
                raise MalformedResponse("broken answer", transient=False)
            return super().infer(queries, request_id=request_id)

    plan, _ = batches(5)
    path = tmp_path / "j.sqlite"
    client = QueryClient(Flaky(delay=0.01), journal=path, workers=2)
    with pytest.raises(MalformedResponse, match="broken answer"):
        list(client.label_batches(plan))
    done = set(Journal(path).batch_ids("counting"))
    assert {"b0", "b1"} <= done and "b2" not in done


def test_client_rejects_raw_tensors_and_bad_ids():
    client = QueryClient(CountingTeacher())
    with pytest.raises(TypeError, match="Release or Derived"):
        list(client.label_batches([("b0", torch.zeros(2, 1, 2, 2))]))
    plan, _ = batches(1)
    with pytest.raises(ValueError, match="appears twice"):
        list(client.label_batches(plan + plan))
    with pytest.raises(ValueError, match="workers"):
        QueryClient(CountingTeacher(), workers=0)


def test_label_convenience_uses_stable_ids(tmp_path):
    _, vals = batches(1, size=10)
    t = CountingTeacher(max_batch_size=4)
    client = QueryClient(t, journal=tmp_path / "j.sqlite")
    labels = client.label(make_release(vals), prefix="run")
    assert torch.equal(labels, expected_labels(vals))
    assert t.calls == ["run-000000", "run-000001", "run-000002"]


@pytest.mark.parametrize("cap", [0.05, 0.137, 0.3])
def test_under_the_fault_mix_the_server_never_bills_more_than_the_cap(tmp_path, cap):
    """10% 503, 5% 429, 2% dropped connections, 2% malformed 200s: every attempt that may have been billed
    counts against the cap before the next one is sent, so the server's own bill stays under it."""
    import mock_server
    from ldpclient.privacy import laplace
    from ldpclient.teachers import connect
    from ldpclient.teachers.errors import CostCapReached
    from ldpclient.teachers.http import RetryPolicy
    from ldpclient.transfer.augment import QueryPlan

    g = torch.Generator().manual_seed(0)
    release = laplace(2.0, per="element").release(torch.rand(40, 1, 8, 8, generator=g), generator=g)
    plan = QueryPlan("sup", 40, num_queries=480, seed=2, batch_size=8)
    faults = dict(error_rate_503=0.1, rate_429=0.05, drop_rate=0.02, malformed_rate=0.02, retry_after=0, fault_seed=3)
    with mock_server.serve(model="trivial", image_size=8, price_per_image=0.001, **faults) as srv:
        teacher = connect(f"{srv.url}/v2/models/digits", state_dir=tmp_path,
                          retry=RetryPolicy(max_attempts=8, initial_wait=0.0, jitter=0.0, sleep=lambda s: None))
        client = QueryClient(
            teacher, journal=tmp_path / "journal.sqlite", cost=CostMeter(price_per_query=0.001, cap=cap)
        )
        with pytest.raises(CostCapReached):
            for _ in client.label_batches(plan.batches(release)):
                pass
        billed = srv.usage()["total"]["cost"]
    assert billed <= cap + 1e-9, (billed, cap)
    assert client.cost.spent_total >= billed - 1e-9  # what the client counted covers the server's bill
    assert client.cost.spent_total <= cap + 1e-9
