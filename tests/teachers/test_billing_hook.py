"""The billing hook is passed explicitly: QueryClient -> teacher.infer(billing=) -> HttpTransport.call(billing=).

Every adapter that sends billable requests hands it on, so an attempt that may have been billed
without an answer is counted; a third-party ``infer`` without the parameter still works.
"""

from __future__ import annotations

import json

import pytest
import requests
import responses
import torch

from ldpclient.privacy import Domain, Guarantee
from ldpclient.privacy.release import _RELEASE_TOKEN, Release
from ldpclient.teachers import CostMeter, InferResult, QueryClient, Teacher, TeacherMetadata, connect
from ldpclient.teachers.billing import billed_attempt, takes_billing
from ldpclient.teachers.errors import MalformedResponse, RequestNotSent, TeacherRequestError, TransientTeacherError
from ldpclient.teachers.http import HttpTransport, RetryPolicy

TS = "https://ts.test:8080"
HF_EP = "https://hf.test/models"


class Guard:
    def __init__(self):
        self.events: list[tuple[str, int]] = []

    def before_attempt(self, units):
        self.events.append(("before", units))

    def after_attempt(self, outcome, units):
        self.events.append((outcome, units))


def release(n: int) -> Release:
    x = torch.arange(n).float().div(9).view(n, 1, 1, 1).expand(n, 1, 6, 5).contiguous()
    g = Guarantee("laplace", 1.0, 0.0, 30.0, 0.0, 30, Domain())
    return Release(x, g, (1, 6, 5), _token=_RELEASE_TOKEN)


def fast() -> RetryPolicy:
    return RetryPolicy(initial_wait=0.0, max_wait=0.0, jitter=0.0, sleep=lambda s: None)


@pytest.mark.parametrize(
    "error, outcome",
    [
        (None, "answered"),
        (RequestNotSent("refused connection"), "refused"),
        (TransientTeacherError("HTTP 503", status=503), "refused"),
        (TransientTeacherError("connection reset"), "lost"),
        (MalformedResponse("not JSON"), "lost"),
        (TeacherRequestError("HTTP 400", status=400), "refused"),
    ],
)
def test_each_way_an_attempt_ends_is_reported_once(error, outcome):
    guard = Guard()

    def send(on_start):
        if error is not None:
            raise error
        return "labels"

    if error is None:
        assert billed_attempt(guard, 4, send, lambda: 0) == "labels"
    else:
        with pytest.raises(type(error)):
            billed_attempt(guard, 4, send, lambda: 0)
    assert guard.events == [("before", 4), (outcome, 4)]


def test_a_failed_attempt_the_server_billed_is_lost_for_what_it_billed():
    guard, billed = Guard(), [0]

    def send(on_start):
        billed[0] = 3  # X-Billed-Images: 3 on an error answer
        raise TransientTeacherError("HTTP 503", status=503)

    with pytest.raises(TransientTeacherError):
        billed_attempt(guard, 4, send, lambda: billed[0])
    assert guard.events == [("before", 4), ("lost", 3)]


def test_takes_billing_reads_the_signature():
    assert takes_billing(lambda queries, *, request_id=None, billing=None: None)
    assert takes_billing(lambda queries, **kwargs: None)
    assert not takes_billing(lambda queries, *, request_id=None: None)


def test_the_transport_hears_nothing_without_units_or_a_hook():
    guard = Guard()
    with responses.RequestsMock() as mock:
        mock.add(responses.GET, f"{TS}/ping", json={"status": "Healthy"})
        HttpTransport(retry=fast()).call("GET", f"{TS}/ping", parse=lambda r: r.json(), billing=guard)
        HttpTransport(retry=fast()).call("GET", f"{TS}/ping", parse=lambda r: r.json(), units=2)
    assert guard.events == []


@pytest.mark.parametrize("adapter", ["torchserve", "hf"])
def test_a_lost_attempt_of_torchserve_or_hugging_face_is_counted_as_spent(adapter):
    """First POST: the connection drops after the request was sent (maybe billed); the retry answers."""
    calls = [0]

    def answer(req):
        calls[0] += 1
        if calls[0] == 1:
            raise requests.exceptions.ConnectionError("connection reset by peer")
        if adapter == "hf":
            return 200, {}, json.dumps([{"label": "3", "score": 0.9}])
        return 200, {}, json.dumps({"3": 0.9})

    with responses.RequestsMock() as mock:
        if adapter == "hf":
            url = f"{HF_EP}/acme/digits"
            mock.add_callback(responses.POST, url, callback=answer)
            teacher = connect("hf:acme/digits", endpoint=HF_EP, class_names=[str(i) for i in range(10)],
                              input_shape=(1, 6, 5), retry=fast(), token="hf_test")
        else:
            mock.add(responses.GET, f"{TS}/ping", json={"status": "Healthy"})
            mock.add_callback(responses.POST, f"{TS}/predictions/digits", callback=answer)
            teacher = connect(f"torchserve+{TS}/digits", class_names=[str(i) for i in range(10)],
                              input_shape=(1, 6, 5), retry=fast())
        cost = CostMeter(price_per_query=1.0)
        client = QueryClient(teacher, cost=cost, journal=None, batch_size=1)
        labels = client.label(release(1))
    assert labels.tolist() == [3] and calls[0] == 2
    assert cost.unconfirmed == pytest.approx(1.0)  # the dropped attempt may have been billed: counted


class NoBillingTeacher(Teacher):
    """A third-party teacher written before the hook: its infer() has no billing parameter."""

    def metadata(self):
        return TeacherMetadata(name="plain", input_shape=(1, 6, 5), datatype="FP32", num_classes=10)

    def classify(self, queries):
        return torch.full((len(queries),), 7, dtype=torch.int64)

    def infer(self, queries, *, request_id=None):
        return InferResult(labels=self.classify(queries), requests=1, billed=None)


def test_a_teacher_whose_infer_takes_no_billing_is_called_without_it():
    client = QueryClient(NoBillingTeacher(), journal=None)
    assert client.label(release(3)).tolist() == [7, 7, 7]
