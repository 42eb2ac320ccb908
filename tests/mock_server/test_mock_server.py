"""Mock teacher: OIP v2 conformance, errors, keep-alive, auth, billing, quota, query log, shutdown."""

from __future__ import annotations

import hashlib
import http.client
import json
import threading
import time

import numpy as np
import pytest
import requests

from mock_server import ServerConfig, read_query_log, serve, start
from mock_server.teacher import trivial_teacher

SHAPE = (1, 28, 28)


@pytest.fixture(scope="module")
def teacher():
    return trivial_teacher(SHAPE, 10)


@pytest.fixture(scope="module")
def srv(teacher):
    with serve(teacher=teacher, max_batch_size=16, price_per_image=0.25) as s:
        yield s


def infer_json(x: np.ndarray, datatype: str = "FP32", rid: str = "b0", **extra) -> dict:
    doc = {"id": rid, "inputs": [{"name": "input", "shape": list(x.shape), "datatype": datatype,
                                  "data": x.ravel().tolist()}], "outputs": [{"name": "label"}]}
    doc.update(extra)
    return doc


def binary_body(x: np.ndarray, datatype: str, binary_output: bool, rid: str = "bb") -> tuple[bytes, dict]:
    raw = x.astype("<f4" if datatype == "FP32" else "u1").tobytes()
    out = {"name": "label", "parameters": {"binary_data": True}} if binary_output else {"name": "label"}
    head = json.dumps({"id": rid, "inputs": [{"name": "input", "shape": list(x.shape), "datatype": datatype,
                                              "parameters": {"binary_data_size": len(raw)}}],
                       "outputs": [out]}).encode()
    return head + raw, {"Inference-Header-Content-Length": str(len(head)),
                        "Content-Type": "application/octet-stream"}


def labels_of(resp: requests.Response) -> np.ndarray:
    hlen = resp.headers.get("Inference-Header-Content-Length")
    if hlen is None:
        out = resp.json()["outputs"][0]
        return np.asarray(out["data"], dtype=np.int64)
    head = json.loads(resp.content[: int(hlen)])
    size = head["outputs"][0]["parameters"]["binary_data_size"]
    assert len(resp.content) == int(hlen) + size
    return np.frombuffer(resp.content[int(hlen):], dtype="<i8")


def batch(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, *SHAPE), dtype=np.float32)


# --- protocol conformance --------------------------------------------------------------------

def test_health_and_server_metadata(srv):
    assert requests.get(f"{srv.url}/v2/health/live").json() == {"live": True}
    assert requests.get(f"{srv.url}/v2/health/ready").json() == {"ready": True}
    meta = requests.get(f"{srv.url}/v2").json()
    assert "binary_tensor_data" in meta["extensions"]
    assert requests.get(f"{srv.model_url}/ready").json() == {"name": "digits", "ready": True}
    assert srv.url == f"http://127.0.0.1:{srv.port}" and srv.model_name == "digits"


def test_model_metadata_matches_wire_contract(srv):
    meta = requests.get(srv.model_url).json()
    assert meta["name"] == "digits" and meta["versions"] == ["1"]
    assert meta["platform"] in ("pytorch", "pytorch_torchscript")
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 1, 28, 28]}]
    assert meta["outputs"] == [{"name": "label", "datatype": "INT64", "shape": [-1]}]
    p = meta["parameters"]
    assert p["num_classes"] == 10 and p["class_names"] == [str(i) for i in range(10)]
    assert p["max_batch_size"] == 16 and p["value_range"] == [0.0, 1.0]
    assert requests.get(f"{srv.model_url}/versions/1").json() == meta


def test_json_infer_returns_teacher_labels(srv, teacher):
    x = batch(5)
    r = requests.post(f"{srv.model_url}/infer", json=infer_json(x, rid="batch-7"))
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["id"] == "batch-7" and doc["model_name"] == "digits" and doc["model_version"] == "1"
    assert doc["outputs"][0]["name"] == "label" and doc["outputs"][0]["datatype"] == "INT64"
    assert doc["outputs"][0]["shape"] == [5]
    assert doc["parameters"]["billed_images"] == 5 and r.headers["X-Billed-Images"] == "5"
    np.testing.assert_array_equal(labels_of(r), teacher.predict(x))
    # versioned path answers the same
    r2 = requests.post(f"{srv.model_url}/versions/1/infer", json=infer_json(x))
    np.testing.assert_array_equal(labels_of(r2), labels_of(r))


@pytest.mark.parametrize("datatype", ["FP32", "UINT8"])
@pytest.mark.parametrize("binary_output", [True, False])
def test_binary_infer(srv, teacher, datatype, binary_output):
    x = batch(6, seed=1)
    wire = x if datatype == "FP32" else np.round(x * 255)
    body, headers = binary_body(wire, datatype, binary_output)
    r = requests.post(f"{srv.model_url}/infer", data=body, headers=headers)
    assert r.status_code == 200, r.text
    assert ("Inference-Header-Content-Length" in r.headers) == binary_output
    if binary_output:
        assert r.headers["Content-Type"] == "application/octet-stream"
    expected = teacher.predict((wire / 255).astype(np.float32) if datatype == "UINT8" else x)
    np.testing.assert_array_equal(labels_of(r), expected)
    assert r.headers["X-Billed-Images"] == "6"


def test_uint8_json_and_fp32_clipping(srv, teacher):
    x = np.zeros((2, *SHAPE))
    x[1] = 255
    r = requests.post(f"{srv.model_url}/infer", json=infer_json(x.astype(int), datatype="UINT8"))
    assert labels_of(r).tolist() == [0, 9]
    # FP32 values outside [0, 1] are clipped before the model: 7.0 acts like 1.0, -3 like 0
    y = np.stack([np.full(SHAPE, -3.0), np.full(SHAPE, 7.0)]).astype(np.float32)
    assert labels_of(requests.post(f"{srv.model_url}/infer", json=infer_json(y))).tolist() == [0, 9]


def _post_raw(url: str, body: bytes, headers: dict | None = None) -> requests.Response:
    return requests.post(url, data=body, headers={"Content-Type": "application/json", **(headers or {})})


def _req(**inp) -> bytes:
    base = {"name": "input", "shape": [1, 1, 28, 28], "datatype": "FP32", "data": [0.5] * 784}
    base.update(inp)
    return json.dumps({"id": "e", "inputs": [base]}).encode()


@pytest.mark.parametrize("body,status,match", [
    (b"{not json", 400, "not valid JSON"),
    (b"[1, 2]", 400, "JSON object"),
    (json.dumps({"inputs": []}).encode(), 400, "missing input"),
    (json.dumps({"id": "x"}).encode(), 400, "missing input"),
    (_req(name="pixels"), 400, "missing input 'input'"),
    (_req(datatype="FP64"), 400, "unsupported datatype 'FP64'"),
    (_req(shape=[1, 3, 28, 28], data=[0.5] * 2352), 400, r"wrong shape \[1, 3, 28, 28\]"),
    (_req(shape=[1, 784]), 400, "wrong shape"),
    (_req(shape=[1, 1, 28, "28"]), 400, "non-negative ints"),
    (_req(shape=[0, 1, 28, 28], data=[]), 400, "empty batch"),
    (_req(data=[0.5] * 783), 400, "has 783 values"),
    (_req(data=["a"] * 784), 400, "only numbers"),
    (_req(data=[0.5] * 783 + [float("nan")]), 400, "NaN"),
    (_req(datatype="UINT8", data=[300] * 784), 400, "0..255"),
    (_req(datatype="UINT8", data=[0.5] * 784), 400, "0..255"),
    (_req(shape=[17, 1, 28, 28], data=[0.0] * 17 * 784), 413, "max_batch_size 16"),
    (json.dumps({"id": 5, "inputs": []}).encode(), 400, "'id' must be a string"),
    (json.dumps({"inputs": [{"name": "input", "shape": [1, 1, 28, 28], "datatype": "FP32",
                             "data": [0.0] * 784}], "outputs": [{"name": "probabilities"}]}).encode(),
     400, "hard labels only"),
])
def test_malformed_json_requests_get_named_errors(srv, body, status, match):
    r = _post_raw(f"{srv.model_url}/infer", body)
    assert r.status_code == status
    assert r.headers["Content-Type"] == "application/json"
    assert __import__("re").search(match, r.json()["error"]), r.json()
    assert r.headers["X-Billed-Images"] == "0"


def test_binary_request_errors(srv):
    x = batch(2)
    body, headers = binary_body(x, "FP32", True)
    cases = [
        (body[:-4], headers, "binary section holds"),
        (body, {**headers, "Inference-Header-Content-Length": "abc"}, "must be an integer"),
        (body, {**headers, "Inference-Header-Content-Length": str(len(body) + 1)}, "outside the body"),
        (body + b"\0" * 8, headers, "binary section holds"),
    ]
    wrong, wh = binary_body(x, "UINT8", True)
    cases.append((wrong.replace(b'"UINT8"', b'"FP32" '), wh, "binary_data_size"))
    for data, hdrs, match in cases:
        r = requests.post(f"{srv.model_url}/infer", data=data, headers=hdrs)
        assert r.status_code == 400 and match in r.json()["error"], (match, r.text)


def test_unknown_model_path_method_and_body_limit(teacher):
    with serve(teacher=teacher, max_body_bytes=4096) as s:
        r = requests.post(f"{s.url}/v2/models/resnet/infer", json={})
        assert r.status_code == 404 and "unknown model 'resnet'" in r.json()["error"]
        assert requests.get(f"{s.url}/v3/whatever").status_code == 404
        assert requests.get(f"{s.url}/v2/models/digits/versions/2").status_code == 404
        r = requests.get(f"{s.model_url}/infer")
        assert r.status_code == 405 and r.headers["Allow"] == "POST"
        assert requests.delete(s.model_url).status_code == 405
        r = requests.post(f"{s.model_url}/infer", json=infer_json(batch(1)))
        assert r.status_code == 413 and "exceeds the limit of 4096" in r.json()["error"]
        # missing Content-Length
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
        conn.putrequest("POST", "/v2/models/digits/infer")
        conn.endheaders()
        assert conn.getresponse().status == 411
        conn.close()
        assert requests.get(f"{s.url}/v2/health/ready").status_code == 200


def test_keep_alive_reuses_one_connection_across_errors(srv):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    conn.connect()
    sock = conn.sock
    body = json.dumps(infer_json(batch(2))).encode()
    for payload, status in [(body, 200), (b"{", 400), (body, 200)]:
        conn.request("POST", "/v2/models/digits/infer", body=payload, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        assert resp.status == status and resp.getheader("Connection") != "close"
        assert conn.sock is sock
    conn.close()


# --- auth and billing ------------------------------------------------------------------------

def test_bearer_auth_and_key_fingerprints(teacher):
    tokens = ["alpha-token-123", "beta-token-456"]
    with serve(teacher=teacher, tokens=tokens, price_per_image=0.01) as s:
        x = infer_json(batch(3))
        assert requests.get(f"{s.url}/v2/health/ready").status_code == 200  # probes stay open
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic alpha-token-123"},
                        {"Authorization": "Bearer"}):
            r = requests.post(f"{s.model_url}/infer", json=x, headers=headers)
            assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
            assert "error" in r.json()
            assert requests.get(s.model_url, headers=headers).status_code == 401
            assert requests.get(f"{s.url}/usage", headers=headers).status_code == 401
        for tok, n in [(tokens[0], 1), (tokens[1], 2)]:
            for _ in range(n):
                r = requests.post(f"{s.model_url}/infer", json=x, headers={"Authorization": f"Bearer {tok}"})
                assert r.status_code == 200
        r = requests.get(f"{s.url}/usage", headers={"Authorization": f"Bearer {tokens[0]}"})
        usage = r.json()
        assert usage == s.usage()
        ids = [hashlib.sha256(t.encode()).hexdigest()[:12] for t in tokens]
        assert set(usage["keys"]) == set(ids)
        assert usage["keys"][ids[0]]["images"] == 3 and usage["keys"][ids[1]]["images"] == 6
        assert usage["keys"][ids[1]]["cost"] == pytest.approx(0.06)
        assert usage["total"] == {"requests": 3, "images": 9, "cost": pytest.approx(0.09), "rejected": 0}
        assert not any(t in r.text for t in tokens)


def test_billing_is_exact_under_concurrent_clients(teacher):
    tokens = [f"tok-{i}" for i in range(3)]
    with serve(teacher=teacher, tokens=tokens, price_per_image=0.5, max_batch_size=8) as s:
        sent: dict[str, list[int]] = {t: [] for t in tokens}
        errors: list[str] = []
        lock = threading.Lock()

        def client(i: int) -> None:
            tok = tokens[i % len(tokens)]
            rng = np.random.default_rng(i)
            with requests.Session() as sess:
                for j in range(15):
                    n = int(rng.integers(1, 9))
                    if j % 5 == 4:  # a bad request: must be counted as rejected, never billed
                        r = sess.post(f"{s.model_url}/infer", data=b"{", headers={"Authorization": f"Bearer {tok}"})
                        ok = r.status_code == 400
                    else:
                        r = sess.post(f"{s.model_url}/infer", json=infer_json(batch(n, seed=j)),
                                      headers={"Authorization": f"Bearer {tok}"})
                        ok = r.status_code == 200 and len(labels_of(r)) == n
                        if ok:
                            with lock:
                                sent[tok].append(n)
                    if not ok:
                        errors.append(r.text)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(9)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        usage = s.usage()
        for tok in tokens:
            acct = usage["keys"][hashlib.sha256(tok.encode()).hexdigest()[:12]]
            assert acct["requests"] == len(sent[tok]) == 36
            assert acct["images"] == sum(sent[tok])
            assert acct["rejected"] == 9
            assert acct["cost"] == pytest.approx(0.5 * sum(sent[tok]))
        assert usage["total"]["images"] == sum(map(sum, sent.values()))


def test_quota_answers_429_and_is_never_overrun(teacher):
    with serve(teacher=teacher, quota_images=50, retry_after=7) as s:
        x4 = infer_json(batch(4))
        codes: list[int] = []

        def client() -> None:
            with requests.Session() as sess:
                for _ in range(6):
                    r = sess.post(f"{s.model_url}/infer", json=x4)
                    codes.append(r.status_code)
                    if r.status_code == 429:
                        assert r.headers["Retry-After"] == "7" and "quota" in r.json()["error"]

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        usage = s.usage()["keys"]["anonymous"]
        assert codes.count(200) == 12 and codes.count(429) == 12  # 12 x 4 = 48 <= 50 < 52
        assert usage["images"] == 48 and usage["requests"] == 12
        r = requests.post(f"{s.model_url}/infer", json=infer_json(batch(2)))
        assert r.status_code == 200  # the last 2 images of the quota still fit
        assert requests.post(f"{s.model_url}/infer", json=infer_json(batch(1))).status_code == 429


# --- query log -------------------------------------------------------------------------------

def test_query_log_round_trip(teacher, tmp_path):
    log = tmp_path / "queries.jsonl"
    token = "curious-secret"
    with serve(teacher=teacher, tokens=[token], query_log=str(log)) as s:
        auth = {"Authorization": f"Bearer {token}"}
        x = batch(3, seed=5)
        assert requests.post(f"{s.model_url}/infer", json=infer_json(x, rid="q1"), headers=auth).ok
        u8 = np.round(batch(2, seed=6) * 255).astype(np.uint8)
        body, headers = binary_body(u8, "UINT8", True, rid="q2")
        assert requests.post(f"{s.model_url}/infer", data=body, headers={**headers, **auth}).ok
        assert requests.post(f"{s.model_url}/infer", data=b"{", headers=auth).status_code == 400  # not logged
    entries = list(read_query_log(log))
    assert [rec["request_id"] for rec, _ in entries] == ["q1", "q2"]
    (r1, t1), (r2, t2) = entries
    assert r1["datatype"] == "FP32" and t1.dtype == np.float32 and r1["shape"] == [3, 1, 28, 28]
    np.testing.assert_array_equal(t1, x)
    assert r2["datatype"] == "UINT8" and t2.dtype == np.uint8
    np.testing.assert_array_equal(t2, u8)
    assert r1["key_id"] == hashlib.sha256(token.encode()).hexdigest()[:12] and r1["model"] == "digits"
    assert [r1["seq"], r2["seq"]] == [0, 1] and r1["ts"] <= r2["ts"]
    assert token not in log.read_text()
    # a line cut off by a crash is skipped; a garbled complete line is an error naming it
    with open(log, "a") as fh:
        fh.write('{"ts": 1, "data_b64": "AAAA')
    assert len(list(read_query_log(log))) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"datatype": "FP32", "shape": [1], "data_b64": "!!"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        list(read_query_log(bad))


# --- lifecycle -------------------------------------------------------------------------------

def test_graceful_stop_finishes_request_in_flight(teacher):
    s = start(teacher=teacher, latency=0.5)
    result: dict = {}

    def call() -> None:
        result["resp"] = requests.post(f"{s.model_url}/infer", json=infer_json(batch(2)))

    t = threading.Thread(target=call)
    t.start()
    deadline = time.monotonic() + 10
    while not s.fault_stats() and time.monotonic() < deadline:  # wait until it sleeps inside the server
        time.sleep(0.01)
    s.stop()
    t.join(10)
    assert result["resp"].status_code == 200 and len(labels_of(result["resp"])) == 2
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{s.url}/v2/health/live", timeout=2)
    s.stop()  # idempotent


def test_options_are_validated():
    with pytest.raises(ValueError, match="unknown mock server option"):
        ServerConfig.from_kwargs(latncy=1)
    with pytest.raises(ValueError, match="error_rate_500 must be a probability"):
        ServerConfig(error_rate_500=1.5)
    with pytest.raises(ValueError, match="sum to <= 1"):
        ServerConfig(error_rate_500=0.6, drop_rate=0.6)
    with pytest.raises(ValueError, match="fail_status"):
        ServerConfig(fail_status=200)
    with pytest.raises(ValueError, match="needs train_folder"):
        ServerConfig(model="folder")
    with pytest.raises(ValueError, match="malformed_kind"):
        ServerConfig(malformed_kind="weird")
    argv = ServerConfig(model="trivial", drop_rate=0.25, no_cache=True, tokens=("x",)).to_argv()
    assert argv == ["--model", "trivial", "--no-cache", "--drop-rate", "0.25"]
