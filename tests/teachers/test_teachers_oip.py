"""OIP v2 adapter against `responses` mocks: metadata, JSON/binary bodies, outputs, retries, auth."""

import json
import logging
import struct

import numpy as np
import pytest
import requests
import responses
import torch

from ldpclient.privacy import Domain, Guarantee
from ldpclient.privacy.release import _RELEASE_TOKEN, Release
from ldpclient.teachers import (
    MalformedResponse,
    QueryClient,
    RetriesExhausted,
    TeacherError,
    TeacherRequestError,
    connect,
)
from ldpclient.teachers.http import RetryPolicy, parse_retry_after
from ldpclient.teachers.oip import HEADER_LENGTH, OIPTeacher

BASE = "https://teacher.test:8000"
MODEL_URL = f"{BASE}/v2/models/digits"
INFER = f"{MODEL_URL}/infer"
TOKEN = "sk-test-SECRET-0123456789abcdef"


def make_release(values):
    n_el = int(np.prod(values.shape[1:]))
    g = Guarantee("laplace", 1.0, 0.0, float(n_el), 0.0, n_el, Domain())
    return Release(values, g, tuple(values.shape[1:]), _token=_RELEASE_TOKEN)


def metadata(datatype="FP32", out_dt="INT64", out_shape=(-1,), params=None, shape=(-1, 1, 28, 28)):
    p = {
        "num_classes": 10,
        "class_names": [str(i) for i in range(10)],
        "max_batch_size": 256,
        "value_range": [0.0, 1.0],
    }
    if params is not None:
        p = params
    return {
        "name": "digits", "versions": ["1"], "platform": "pytorch",
        "inputs": [{"name": "input", "datatype": datatype, "shape": list(shape)}],
        "outputs": [{"name": "label", "datatype": out_dt, "shape": list(out_shape)}],
        "parameters": p,
    }


class Recorder:
    """Sleep stand-in: records requested waits, sleeps nothing."""

    def __init__(self):
        self.waits = []

    def __call__(self, s):
        self.waits.append(s)


def fast_policy(**kw):
    kw.setdefault("sleep", Recorder())
    kw.setdefault("initial_wait", 0.001)
    kw.setdefault("max_wait", 0.004)
    kw.setdefault("jitter", 0.001)
    return RetryPolicy(**kw)


def add_meta(rsps, **kw):
    rsps.add(responses.GET, f"{BASE}/v2/health/ready", json={"ready": True})
    rsps.add(responses.GET, MODEL_URL, json=metadata(**kw))


def parse_request(req):
    """(header dict, tensor bytes) of a JSON or binary OIP request."""
    body = req.body if isinstance(req.body, bytes) else req.body.encode()
    hl = req.headers.get(HEADER_LENGTH)
    if hl is None:
        return json.loads(body), b""
    return json.loads(body[: int(hl)]), body[int(hl) :]


def label_reply(labels, binary=False, billed=None, rid=None, dt="INT64"):
    """Callback body for an infer request."""

    def cb(req):
        header, _ = parse_request(req)
        n = header["inputs"][0]["shape"][0]
        lab = np.asarray(labels(n) if callable(labels) else labels, dtype=np.int64)
        out = {"name": "label", "shape": [len(lab)], "datatype": dt}
        doc = {"id": rid if rid is not None else header.get("id"), "model_name": "digits", "outputs": [out]}
        hdrs = {"X-Billed-Images": str(billed if billed is not None else n)}
        if binary:
            raw = lab.astype("<i8").tobytes()
            out["parameters"] = {"binary_data_size": len(raw)}
            head = json.dumps(doc).encode()
            hdrs[HEADER_LENGTH] = str(len(head))
            return 200, hdrs, head + raw
        out["data"] = lab.tolist()
        return 200, hdrs, json.dumps(doc)

    return cb


def queries(n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return make_release(torch.rand(n, 1, 28, 28, generator=g))


@responses.activate
def test_metadata_and_url_forms():
    add_meta(responses)
    t = connect(f"oip+{BASE}/digits", retry=fast_policy())
    m = t.metadata()
    assert (m.input_shape, m.datatype, m.num_classes, m.max_batch_size) == ((1, 28, 28), "FP32", 10, 256)
    assert m.class_names[3] == "3" and m.value_range == (0.0, 1.0)
    for url in (f"{BASE}/v2/models/digits", "https://teacher.test:8000/digits"):
        tt = connect(url)
        assert isinstance(tt, OIPTeacher) and tt.model_url == MODEL_URL
    v = OIPTeacher.from_url(f"{BASE}/v2/models/digits/versions/3")
    assert v.model_url == f"{MODEL_URL}/versions/3"
    p = OIPTeacher.from_url("https://h.example/prefix/mnist")
    assert p.model_url == "https://h.example/prefix/v2/models/mnist"
    with pytest.raises(ValueError, match="no model name"):
        connect("oip+https://teacher.test:8000")


@responses.activate
@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("datatype", ["FP32", "UINT8"])
def test_infer_json_and_binary_bodies(binary, datatype):
    add_meta(responses, datatype=datatype)
    responses.add_callback(responses.POST, INFER, callback=label_reply(lambda n: np.arange(n) % 10, binary=binary))
    t = OIPTeacher(BASE, "digits", wire="binary" if binary else "json", retry=fast_policy())
    q = queries(5)
    res = t.infer(q, request_id="batch-7")
    assert res.labels.tolist() == [0, 1, 2, 3, 4] and res.billed == 5 and res.attempts == 1
    header, raw = parse_request(responses.calls[-1].request)
    inp = header["inputs"][0]
    assert header["id"] == "batch-7" and inp["shape"] == [5, 1, 28, 28] and inp["datatype"] == datatype
    vals = q.values.clamp(0, 1)
    if binary:
        dt = "<f4" if datatype == "FP32" else "u1"
        arr = np.frombuffer(raw, dtype=dt).reshape(5, 1, 28, 28)
        assert inp["parameters"]["binary_data_size"] == len(raw) and "data" not in inp
        assert header["outputs"][0]["parameters"] == {"binary_data": True}
    else:
        arr = np.asarray(inp["data"]).reshape(5, 1, 28, 28)
    if datatype == "FP32":
        assert np.allclose(arr, vals.numpy())
    else:
        assert np.array_equal(arr, torch.round(vals * 255).numpy().astype(np.uint8))


@responses.activate
def test_binary_body_is_within_5_percent_of_tensor_bytes():
    add_meta(responses)
    responses.add_callback(responses.POST, INFER, callback=label_reply(lambda n: np.zeros(n), binary=True))
    t = OIPTeacher(BASE, "digits", retry=fast_policy())
    res = t.infer(queries(16), request_id="b-000001")
    tensor_bytes = 16 * 28 * 28 * 4
    ratio = res.bytes_sent / tensor_bytes
    assert len(responses.calls[-1].request.body) == res.bytes_sent
    assert 1.0 < ratio <= 1.05, ratio


@responses.activate
def test_score_outputs_argmax_and_classification_extension():
    add_meta(responses, out_dt="FP32", out_shape=(-1, 10), params={})
    responses.add(
        responses.GET, f"{BASE}/v2", json={"name": "triton", "extensions": ["classification", "binary_tensor_data"]}
    )
    responses.add(responses.GET, f"{MODEL_URL}/config", json={"max_batch_size": 8})

    def cb(req):
        header, _ = parse_request(req)
        assert header["outputs"][0]["parameters"] == {"classification": 1}
        n = header["inputs"][0]["shape"][0]
        data = [f"0.9{i}:{(i * 3) % 10}:label{i}" for i in range(n)]
        return 200, {}, json.dumps({"outputs": [{"name": "label", "datatype": "BYTES", "shape": [n, 1], "data": data}]})

    responses.add_callback(responses.POST, INFER, callback=cb)
    t = OIPTeacher(BASE, "digits", retry=fast_policy())
    m = t.metadata()
    assert m.num_classes == 10 and m.max_batch_size == 8 and t.use_classification
    res = t.infer(queries(10))
    assert res.labels.tolist() == [(i * 3) % 10 for i in range(8)] + [0, 3] and res.requests == 2
    assert res.billed is None  # the server did not report billing

    # the same model without the extension: FP32 scores, argmax locally (binary scores)
    responses.replace(responses.GET, f"{BASE}/v2", json={"name": "kserve", "extensions": []})
    scores = np.random.default_rng(0).normal(size=(3, 10)).astype("<f4")

    def cb2(req):
        head = json.dumps({"outputs": [{"name": "label", "datatype": "FP32", "shape": [3, 10],
                                        "parameters": {"binary_data_size": scores.nbytes}}]}).encode()
        return 200, {HEADER_LENGTH: str(len(head))}, head + scores.tobytes()

    responses.remove(responses.POST, INFER)
    responses.add_callback(responses.POST, INFER, callback=cb2)
    t2 = OIPTeacher(BASE, "digits", retry=fast_policy())
    assert t2.classify(queries(3)).tolist() == scores.argmax(1).tolist() and not t2.use_classification


@responses.activate
def test_binary_bytes_classification_layout():
    add_meta(responses, out_dt="FP32", out_shape=(-1, 10))
    items = [b"0.8:7:seven", b"0.6:2"]
    raw = b"".join(struct.pack("<I", len(s)) + s for s in items)

    def cb(req):
        head = json.dumps({"outputs": [{"name": "label", "datatype": "BYTES", "shape": [2, 1],
                                        "parameters": {"binary_data_size": len(raw)}}]}).encode()
        return 200, {HEADER_LENGTH: str(len(head))}, head + raw

    responses.add_callback(responses.POST, INFER, callback=cb)
    t = OIPTeacher(BASE, "digits", classification=True, retry=fast_policy())
    assert t.classify(queries(2)).tolist() == [7, 2]


@responses.activate
@pytest.mark.parametrize(
    "reply, match, calls",
    [
        (label_reply([1, 2, 3]), "3 label", 2),  # wrong count: transient, retried once
        (label_reply([1, 2, 3, 11]), r"outside \[0, 10\)", 2),  # impossible label: could be corruption
        (label_reply([1, 2, 3, 4], dt="INT32"), "metadata declares INT64", 1),
        (lambda req: (200, {}, "{not json"), "unparseable", 2),
        (
            lambda req: (
                200,
                {},
                json.dumps({"outputs": [{"name": "probs", "datatype": "INT64", "shape": [4], "data": [0] * 4}]}),
            ),
            "lacks output 'label'",
            2,
        ),
    ],
)
def test_malformed_answers_are_errors_never_labels(reply, match, calls):
    add_meta(responses)
    responses.add_callback(responses.POST, INFER, callback=reply)
    t = OIPTeacher(BASE, "digits", wire="json", retry=fast_policy())
    with pytest.raises(MalformedResponse, match=match):
        t.infer(queries(4), request_id="b1")
    assert len([c for c in responses.calls if c.request.method == "POST"]) == calls


@responses.activate
def test_a_fresh_response_id_is_accepted_and_logged_once(caplog):
    """KServe's examples answer with their own id: the answer is judged on its content, not its id."""
    add_meta(responses)
    responses.add_callback(responses.POST, INFER, callback=label_reply([1, 2, 3, 4], rid="server-made-id"))
    t = OIPTeacher(BASE, "digits", wire="json", retry=fast_policy())
    caplog.set_level(logging.INFO, logger="ldpclient")
    assert t.infer(queries(4), request_id="b1").labels.tolist() == [1, 2, 3, 4]
    assert t.infer(queries(4), request_id="b2").labels.tolist() == [1, 2, 3, 4]
    assert len([c for c in responses.calls if c.request.method == "POST"]) == 2  # never resent for it
    assert sum("own response ids" in r.getMessage() for r in caplog.records) == 1


@responses.activate
def test_malformed_then_good_answer_is_recovered():
    add_meta(responses)
    responses.add(responses.POST, INFER, body="truncated{", status=200)
    responses.add_callback(responses.POST, INFER, callback=label_reply([4, 4]))
    t = OIPTeacher(BASE, "digits", wire="json", retry=fast_policy())
    res = t.infer(queries(2))
    assert res.labels.tolist() == [4, 4] and res.attempts == 2


@responses.activate
@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_transient_statuses_are_retried_with_backoff(status):
    add_meta(responses)
    responses.add(responses.POST, INFER, json={"error": "busy"}, status=status)
    responses.add(responses.POST, INFER, json={"error": "busy"}, status=status)
    responses.add_callback(responses.POST, INFER, callback=label_reply([1, 1]))
    sleep = Recorder()
    t = OIPTeacher(BASE, "digits", wire="json", retry=fast_policy(sleep=sleep))
    res = t.infer(queries(2))
    assert res.labels.tolist() == [1, 1] and res.attempts == 3
    assert len(sleep.waits) == 2 and all(0 < w <= 0.005 for w in sleep.waits)


@responses.activate
def test_retry_after_seconds_and_http_date_are_honoured():
    add_meta(responses)
    responses.add(responses.POST, INFER, json={"error": "quota"}, status=429, headers={"Retry-After": "3"})
    responses.add(responses.POST, INFER, json={"error": "down"}, status=503,
                  headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})  # in the past: no wait
    responses.add_callback(responses.POST, INFER, callback=label_reply([2]))
    sleep = Recorder()
    t = OIPTeacher(BASE, "digits", wire="json", retry=fast_policy(sleep=sleep))
    assert t.classify(queries(1)).tolist() == [2]
    assert sleep.waits == [3.0, 0.0]
    assert parse_retry_after("Fri, 01 Jan 2100 00:00:10 GMT", now=4102444800.0) == pytest.approx(10.0)
    assert parse_retry_after("soon") is None


@responses.activate
def test_retry_after_beyond_budget_gives_up_at_once():
    add_meta(responses)
    responses.add(
        responses.POST, INFER, json={"error": "come back tomorrow"}, status=429, headers={"Retry-After": "86400"}
    )
    sleep = Recorder()
    t = OIPTeacher(BASE, "digits", wire="json", retry=fast_policy(sleep=sleep, max_total=60))
    with pytest.raises(RetriesExhausted, match="asked to wait 86400 s.*come back tomorrow"):
        t.classify(queries(1))
    assert sleep.waits == [] and len(responses.calls) == 3


@responses.activate
def test_attempts_are_bounded():
    add_meta(responses)
    responses.add(responses.POST, INFER, json={"error": "boom"}, status=500)
    t = OIPTeacher(BASE, "digits", retry=fast_policy(max_attempts=4))
    with pytest.raises(RetriesExhausted, match="4 attempt.*HTTP 500.*boom") as info:
        t.classify(queries(1))
    assert info.value.attempts == 4


@responses.activate
def test_connection_errors_are_retried():
    add_meta(responses)
    responses.add(responses.POST, INFER, body=requests.exceptions.ConnectionError("connection reset by peer"))
    responses.add(responses.POST, INFER, body=requests.exceptions.ReadTimeout("read timed out"))
    responses.add_callback(responses.POST, INFER, callback=label_reply([5]))
    t = OIPTeacher(BASE, "digits", wire="json", retry=fast_policy())
    res = t.infer(queries(1))
    assert res.labels.tolist() == [5] and res.attempts == 3


@responses.activate
@pytest.mark.parametrize("status", [400, 404, 413])
def test_other_4xx_fail_fast_with_server_text(status):
    add_meta(responses)
    responses.add(responses.POST, INFER, json={"error": f"problem {status}: input shape [2, 1, 28, 28] "
                                                        "refused"}, status=status)
    t = OIPTeacher(BASE, "digits", wire="json", retry=fast_policy())
    with pytest.raises(TeacherRequestError, match=f"HTTP {status}.*problem {status}: input shape") as info:
        t.classify(queries(2))
    assert info.value.status == status
    assert len([c for c in responses.calls if c.request.method == "POST"]) == 1


@responses.activate
def test_token_is_sent_but_never_shown(caplog, monkeypatch):
    add_meta(responses)
    # a hostile server echoing the token back in its error text and in a 500
    responses.add(responses.POST, INFER, json={"error": f"bad key Bearer {TOKEN}"}, status=500)
    responses.add(responses.POST, INFER, json={"error": f"invalid token {TOKEN}"}, status=401)
    caplog.set_level(logging.DEBUG)
    t = connect(f"oip+{BASE}/digits", token=TOKEN, retry=fast_policy())
    with pytest.raises(TeacherRequestError) as info:
        t.classify(queries(1))
    for call in responses.calls:
        assert call.request.headers["Authorization"] == f"Bearer {TOKEN}"
    shown = [str(info.value), repr(info.value), repr(t), repr(t.http), caplog.text, str(info.value.server_message)]
    client = QueryClient(t)
    shown += [repr(client), json.dumps(client.report())]
    assert "check the token" in str(info.value)
    for text in shown:
        assert TOKEN not in text and TOKEN[:12] not in text
    # environment variable
    monkeypatch.setenv("LDPCLIENT_TOKEN", TOKEN)
    t2 = OIPTeacher(BASE, "digits")
    assert t2.http.session().headers["Authorization"] == f"Bearer {TOKEN}" and TOKEN not in repr(t2)


def test_tls_options(tmp_path):
    t = OIPTeacher("https://teacher.example", "digits")
    assert t.http.session().verify is True
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    assert OIPTeacher("https://teacher.example", "digits", verify=str(ca)).http.session().verify == str(ca)
    with pytest.raises(ValueError, match="does not exist"):
        OIPTeacher("https://teacher.example", "digits", verify=str(tmp_path / "missing.pem"))


@responses.activate
def test_metadata_errors_are_clear():
    responses.add(responses.GET, f"{BASE}/v2/health/ready", json={"ready": True})
    responses.add(responses.GET, MODEL_URL, json={"error": "unknown model digits"}, status=404)
    with pytest.raises(TeacherRequestError, match="HTTP 404.*unknown model digits"):
        OIPTeacher(BASE, "digits", retry=fast_policy()).metadata()
    responses.replace(responses.GET, MODEL_URL, json=metadata(params={}))
    with pytest.raises(Exception, match="pass num_classes="):
        OIPTeacher(BASE, "digits", retry=fast_policy()).metadata()
    assert OIPTeacher(BASE, "digits", num_classes=4, retry=fast_policy()).metadata().num_classes == 4


@responses.activate
def test_a_named_input_among_malformed_entries_is_a_teacher_error():
    """With input_name given, non-dict entries in the metadata are a teacher error, not an AttributeError."""
    doc = metadata()
    doc["inputs"] = [1, "x", {"name": "other", "datatype": "FP32", "shape": [-1, 1, 28, 28]}]
    responses.add(responses.GET, f"{BASE}/v2/health/ready", json={"ready": True})
    responses.add(responses.GET, MODEL_URL, json=doc)
    t = connect(MODEL_URL, input_name="input", retry=fast_policy())
    with pytest.raises(TeacherError, match="has no input named 'input'"):
        t.metadata()
