"""The OIP adapter and QueryClient against the real bundled mock teacher on 127.0.0.1."""

import logging

import numpy as np
import pytest
import torch

mock_server = pytest.importorskip("mock_server")

from ldpclient.privacy import Domain, Guarantee  # noqa: E402
from ldpclient.privacy.release import _RELEASE_TOKEN, Release  # noqa: E402
from ldpclient.teachers import (  # noqa: E402
    CostMeter,
    QueryClient,
    RetriesExhausted,
    TeacherRequestError,
    connect,
)
from ldpclient.teachers.http import RetryPolicy  # noqa: E402

TOKEN = "mock-SECRET-token-42abc"


def make_release(values):
    n_el = int(np.prod(values.shape[1:]))
    g = Guarantee("laplace", 1.0, 0.0, float(n_el), 0.0, n_el, Domain())
    return Release(values, g, tuple(values.shape[1:]), _token=_RELEASE_TOKEN)


def plan(n_batches=10, size=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    rel = make_release(
        torch.rand(n_batches * size, 1, 28, 28, generator=g) * 0.6
        + torch.linspace(0, 0.4, n_batches * size).view(-1, 1, 1, 1)
    )
    return [(f"b{k:03d}", rel[k * size : (k + 1) * size]) for k in range(n_batches)]


def fast(**kw):
    return RetryPolicy(initial_wait=0.001, max_wait=0.005, jitter=0.001, **kw)


@pytest.fixture(scope="module")
def reference_labels():
    with mock_server.serve(model="trivial") as srv:
        client = QueryClient(connect(f"oip+{srv.url}/digits", retry=fast()))
        return torch.cat([lab for _, lab in client.label_batches(plan())])


def test_json_and_binary_agree_and_billing_reconciles(reference_labels):
    with mock_server.serve(model="trivial", max_batch_size=4) as srv:
        out = {}
        for binary in (False, True):
            t = connect(f"oip+{srv.url}/digits", wire="binary" if binary else "json", retry=fast())
            client = QueryClient(t, workers=2, cost=CostMeter(price_per_query=0.001))
            out[binary] = torch.cat([lab for _, lab in client.label_batches(plan())])
            assert client.stats.requests == 20  # 6-query batches split for max_batch_size 4
            rec = client.reconcile()
            assert rec.matches and rec.billed_units == 60 and rec.unreported_batches == 0
        assert torch.equal(out[False], out[True]) and torch.equal(out[True], reference_labels)
        usage = srv.usage()["total"]
        assert usage["images"] == 120 and usage["cost"] == pytest.approx(0.12)


@pytest.mark.parametrize(
    "faults",
    [
        dict(error_rate_500=0.25, error_rate_503=0.15, rate_429=0.15, retry_after=0),
        dict(drop_rate=0.3),
        dict(malformed_rate=0.2),
        dict(fail_first=3, fail_status=503, retry_after=0),
    ],
    ids=["5xx-429", "dropped", "malformed", "fail-first"],
)
def test_fault_injection_is_survived_with_identical_labels(faults, reference_labels, caplog):
    caplog.set_level(logging.WARNING, logger="ldpclient")
    # seeded faults: deterministic in arrival order with one worker
    with mock_server.serve(model="trivial", fault_seed=2, **faults) as srv:
        t = connect(f"oip+{srv.url}/digits", retry=fast(max_attempts=10), timeout=(2.0, 5.0))
        client = QueryClient(t, workers=1, cost=CostMeter(price_per_query=0.001))
        labels = torch.cat([lab for _, lab in client.label_batches(plan())])
        assert torch.equal(labels, reference_labels)
        assert client.stats.attempts > client.stats.requests  # faults really happened and were retried
        billed_by_server = srv.usage()["total"]["images"]
        rec = client.reconcile()
        # every unit the server billed was seen on some answer; differences are listed, not hidden
        assert rec.billed_units <= billed_by_server
        if billed_by_server > 60 and "malformed" in faults:
            assert not rec.matches
        # a fault is a warning line; a busy server (429, 503) waited out as it asked is counted, not printed
        busy_only = set(faults) <= {"fail_first", "fail_status", "retry_after"}
        assert ("retry" in caplog.text) != busy_only
        assert (client.stats.waits.busy == client.stats.attempts - client.stats.requests) == busy_only


def test_quota_429_gives_up_cleanly_and_journal_keeps_progress(tmp_path):
    with mock_server.serve(model="trivial", quota_images=24, retry_after=0) as srv:
        t = connect(f"oip+{srv.url}/digits", retry=fast(max_attempts=3))
        client = QueryClient(t, journal=tmp_path / "j.sqlite")
        got = []
        with pytest.raises(RetriesExhausted, match="HTTP 429"):
            for bid, _ in client.label_batches(plan()):
                got.append(bid)
        assert got == ["b000", "b001", "b002", "b003"]
        assert client.journal.count(client.scope) == 4


def test_auth_token_required_and_never_leaked(caplog):
    caplog.set_level(logging.DEBUG)
    with mock_server.serve(model="trivial", tokens=(TOKEN,)) as srv:
        ok = connect(f"oip+{srv.url}/digits", token=TOKEN, retry=fast())
        assert ok.classify(plan(1)[0][1]).shape == (6,)
        with pytest.raises(TeacherRequestError, match="HTTP 401") as info:
            connect(f"oip+{srv.url}/digits", retry=fast(), token_env=None).metadata()
        assert "no token was sent" in str(info.value)
        wrong = TOKEN + "x"
        with pytest.raises(TeacherRequestError, match="HTTP 401") as info2:
            connect(f"oip+{srv.url}/digits", token=wrong, retry=fast()).metadata()
        usage = srv.usage()
    for text in (str(info.value), str(info2.value), caplog.text, repr(ok), str(usage)):
        assert TOKEN not in text


def test_uint8_teacher_path_matches_fp32_labels_mostly(reference_labels):
    with mock_server.serve(model="trivial") as srv:
        t = connect(f"oip+{srv.url}/digits", datatype="UINT8", retry=fast())
        client = QueryClient(t)
        labels = torch.cat([lab for _, lab in client.label_batches(plan())])
        assert client.stats.bytes_sent < 60 * 28 * 28 * 1.05 + 10 * 400
        # quantisation moves a few bucket-boundary means at most
        assert (labels == reference_labels).float().mean() > 0.9
