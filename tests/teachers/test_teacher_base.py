"""The Teacher base class: its optional hooks' defaults, as_teacher, plain duck-typed teachers."""

import numpy as np
import pytest
import torch

from ldpclient.privacy import Domain, Guarantee
from ldpclient.privacy.release import _RELEASE_TOKEN, Derived, Release
from ldpclient.teachers import (
    CostMeter,
    InferResult,
    LocalTeacher,
    QueryClient,
    Teacher,
    TeacherMetadata,
    as_teacher,
    connect,
)
from ldpclient.teachers.units import ByteUnitsTeacher

META = TeacherMetadata(name="mean-digits", input_shape=(1, 2, 2), datatype="FP32", num_classes=10)


def make_release(values: torch.Tensor) -> Release:
    n_el = int(np.prod(values.shape[1:]))
    g = Guarantee("laplace", 1.0, 0.0, float(n_el), 0.0, n_el, Domain())
    return Release(values, g, tuple(values.shape[1:]), _token=_RELEASE_TOKEN)


def mean_labels(values: torch.Tensor) -> torch.Tensor:
    return torch.round(values.flatten(1).mean(1) * 9).long()


class Minimal(Teacher):
    """Only what a Teacher must implement."""

    def __init__(self):
        self.seen: list[int] = []

    def metadata(self):
        return META

    def classify(self, queries):
        d = queries if isinstance(queries, Derived) else Derived.from_release(queries)
        self.seen.append(len(d))
        return mean_labels(d.values)


class Duck:
    """A third-party teacher that does not subclass Teacher (metadata and classify only)."""

    def __init__(self):
        self.calls = 0

    def metadata(self):
        return META

    def classify(self, queries):
        self.calls += 1
        d = queries if isinstance(queries, Derived) else Derived.from_release(queries)
        return mean_labels(d.values)


class FullDuck(Duck):
    """A duck-typed teacher with every optional hook."""

    journal_scope = "full-duck"

    def __init__(self):
        super().__init__()
        self.request_ids: list[str | None] = []
        self.closed = False

    def requests_for(self, n):
        return n

    def infer(self, queries, *, request_id=None):
        self.request_ids.append(request_id)
        labels = self.classify(queries)
        return InferResult(labels, requests=len(labels), billed=len(labels))

    def close(self):
        self.closed = True


def rows(n=6, seed=0):
    vals = torch.rand(n, 1, 2, 2, generator=torch.Generator().manual_seed(seed))
    return make_release(vals), vals


def test_teacher_is_abstract_in_metadata_and_classify():
    with pytest.raises(TypeError):
        Teacher()  # type: ignore[abstract]

    class NoClassify(Teacher):
        def metadata(self):
            return META

    with pytest.raises(TypeError, match="classify"):
        NoClassify()  # type: ignore[abstract]


def test_defaults_of_the_optional_hooks():
    t = Minimal()
    assert t.journal_scope == "mean-digits"  # default: the metadata name
    t.journal_scope = "elsewhere"
    assert t.journal_scope == "elsewhere"
    assert t.requests_for(1) == 1 and t.requests_for(500) == 1  # one request per infer() call
    rel, vals = rows(5)
    res = t.infer(rel, request_id="b0")
    assert isinstance(res, InferResult) and torch.equal(res.labels, mean_labels(vals))
    assert (res.requests, res.billed, res.attempts) == (1, None, 1)
    assert t.close() is None
    with Minimal() as t2:
        assert isinstance(t2, Minimal)


def test_context_manager_closes():
    class Closing(Minimal):
        closed = 0

        def close(self):
            self.closed += 1

    with Closing() as t:
        pass
    assert t.closed == 1


def test_as_teacher_returns_teachers_unchanged():
    t = Minimal()
    assert as_teacher(t) is t
    local = LocalTeacher(lambda x: mean_labels(x), (1, 2, 2), 10)
    assert as_teacher(local) is local and isinstance(local, Teacher)
    assert as_teacher(ByteUnitsTeacher(local)).metadata().value_range == (0.0, 255.0)


def test_as_teacher_wraps_a_plain_object_with_defaults():
    d = Duck()
    t = as_teacher(d)
    assert isinstance(t, Teacher) and t.wrapped is d and as_teacher(t) is t
    assert t.metadata() is META and t.journal_scope == "mean-digits" and t.requests_for(7) == 1
    rel, vals = rows(3)
    res = t.infer(rel, request_id="x")
    assert torch.equal(res.labels, mean_labels(vals)) and res.requests == 1 and res.billed is None
    t.close()  # the object has no close(): nothing to do
    assert t.calls == 1  # other attributes are the object's


def test_as_teacher_uses_the_hooks_a_plain_object_has():
    d = FullDuck()
    t = as_teacher(d)
    assert t.journal_scope == "full-duck" and t.requests_for(7) == 7
    rel, _ = rows(4)
    assert t.infer(rel, request_id="r1").billed == 4 and d.request_ids == ["r1"]
    t.close()
    assert d.closed


@pytest.mark.parametrize(
    "obj, missing",
    [(object(), "metadata() or classify()"), (type("OnlyMeta", (), {"metadata": lambda self: META})(), "classify()")],
)
def test_non_teachers_are_refused_with_one_line(obj, missing):
    for make in (as_teacher, QueryClient):
        with pytest.raises(TypeError) as info:
            make(obj)
        msg = str(info.value)
        assert "\n" not in msg and f"has no {missing}" in msg and type(obj).__name__ in msg


def test_a_class_is_not_a_teacher():
    with pytest.raises(TypeError, match="Minimal is a class"):
        as_teacher(Minimal)


def test_plain_object_end_to_end_through_query_client(tmp_path):
    d = Duck()
    rel, vals = rows(10)
    with QueryClient(d, batch_size=4, journal=tmp_path / "j.sqlite", cost=CostMeter(price_per_request=1.0)) as client:
        labels = client.label(rel, prefix="duck")
        assert torch.equal(labels, mean_labels(vals))
        assert client.scope == "mean-digits" and client.journal.count("mean-digits") == 3
        assert client.stats.requests == 3 and client.cost.spent_run == pytest.approx(3.0)
    assert d.calls == 3
    # resumed from the journal: nothing sent again
    d2 = Duck()
    with QueryClient(d2, batch_size=4, journal=tmp_path / "j.sqlite") as client:
        assert torch.equal(client.label(rel, prefix="duck"), mean_labels(vals))
    assert d2.calls == 0


def test_plain_object_hooks_through_query_client():
    d = FullDuck()
    rel, vals = rows(6)
    client = QueryClient(d, batch_size=4, cost=CostMeter(price_per_request=1.0))
    assert torch.equal(client.label(rel, prefix="full"), mean_labels(vals))
    assert client.scope == "full-duck" and d.request_ids == ["full-000000", "full-000001"]
    assert client.stats.requests == 6 and client.reconcile().billed_units == 6
    client.close()
    assert d.closed


def test_byte_units_teacher_maps_bytes_back_and_keeps_the_inner_accounting():
    d = FullDuck()
    t = ByteUnitsTeacher(d)
    assert isinstance(t, Teacher) and t.inner.wrapped is d
    assert t.metadata().value_range == (0.0, 255.0) and t.journal_scope == "full-duck"
    assert t.requests_for(5) == 5
    rel, vals = rows(4)
    res = t.infer(make_release(vals * 255), request_id="q")
    assert torch.equal(res.labels, mean_labels(vals)) and res.billed == 4 and d.request_ids == ["q"]
    assert torch.equal(t.classify(make_release(vals * 255)), mean_labels(vals))
    t.close()
    assert d.closed
    plain = ByteUnitsTeacher(Duck())  # defaults of the wrapped object carry through
    assert plain.journal_scope == "mean-digits" and plain.requests_for(5) == 1
    assert plain.infer(make_release(vals * 255)).requests == 1


duck_teacher = Duck()


def test_connect_local_accepts_a_plain_object():
    t = connect(f"local:{__name__}:duck_teacher")
    assert isinstance(t, Teacher) and t.wrapped is duck_teacher
    with pytest.raises(ValueError, match="options"):
        connect(f"local:{__name__}:duck_teacher", num_classes=3)
