"""Fuzzed bodies and raw HTTP bytes against the mock teacher: always a clean 4xx, never a 500 or a dead server."""

from __future__ import annotations

import json
import random
import socket

import numpy as np
import pytest
import requests

from mock_server import serve
from mock_server.teacher import trivial_teacher

SHAPE = (1, 8, 8)
ALLOWED = {200, 400, 404, 405, 411, 413, 414, 431, 501, 505}


@pytest.fixture(scope="module")
def srv():
    with serve(teacher=trivial_teacher(SHAPE, 10), max_batch_size=8, max_body_bytes=20000,
               request_timeout=5) as s:
        yield s


def _valid_json(rng: random.Random) -> dict:
    n = rng.randint(1, 3)
    return {"id": "f", "inputs": [{"name": "input", "shape": [n, *SHAPE], "datatype": "FP32",
                                   "data": [round(rng.random(), 3) for _ in range(n * 64)]}],
            "outputs": [{"name": "label"}]}


_WEIRD = [None, True, -1, 0, 2**70, 1e308, "x", "", [], {}, [[]], [-1, 1, 8, 8], ["a"], {"name": "input"},
          [{"name": "input"}], "FP32", "UINT8", "BYTES", [1.5] * 3, {"binary_data": True}, "\u0000\ud800"[:1]]


def _mutate_doc(doc: dict, rng: random.Random) -> dict:
    target = rng.choice(["top", "input", "output"])
    if target == "top":
        doc[rng.choice(["id", "inputs", "outputs", "parameters", "extra"])] = rng.choice(_WEIRD)
    elif target == "input" and isinstance(doc.get("inputs"), list) and doc["inputs"]:
        doc["inputs"][0][rng.choice(["name", "shape", "datatype", "data", "parameters"])] = rng.choice(_WEIRD)
    else:
        doc["outputs"] = [rng.choice(_WEIRD)]
    return doc


def _mutate_bytes(raw: bytes, rng: random.Random) -> bytes:
    b = bytearray(raw)
    op = rng.randrange(4)
    if op == 0 and b:
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif op == 1:
        b = b[: rng.randrange(len(b) + 1)]
    elif op == 2:
        pos = rng.randrange(len(b) + 1)
        b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 20)))
    else:
        b = b.replace(b"[", b"[[", rng.randint(1, 3))
    return bytes(b)


def _check(r: requests.Response) -> None:
    assert r.status_code in ALLOWED, (r.status_code, r.text[:200])
    if r.status_code != 200:
        assert isinstance(r.json()["error"], str) and r.json()["error"]


def test_fuzzed_bodies_get_clean_answers(srv):
    rng = random.Random(1234)
    url = f"{srv.model_url}/infer"
    seen = set()
    with requests.Session() as sess:
        for i in range(250):
            doc = _valid_json(rng)
            if i % 3 == 0:
                body = json.dumps(_mutate_doc(doc, rng)).encode()
                headers = {}
            elif i % 3 == 1:
                body = _mutate_bytes(json.dumps(doc).encode(), rng)
                headers = {}
            else:  # binary extension with mangled header length / payload
                n = doc["inputs"][0]["shape"][0]
                raw = np.asarray(doc["inputs"][0].pop("data"), dtype="<f4").tobytes()
                doc["inputs"][0]["parameters"] = {"binary_data_size": len(raw)}
                head = json.dumps(doc).encode()
                hl = rng.choice([len(head), len(head) + rng.randint(-5, 5), 0, -3, "x", n * 10**9])
                body = _mutate_bytes(head + raw, rng) if rng.random() < 0.5 else head + raw
                headers = {"Inference-Header-Content-Length": str(hl)}
            r = sess.post(url, data=body, headers={"Content-Type": "application/json", **headers})
            _check(r)
            seen.add(r.status_code)
    assert {200, 400} <= seen  # the fuzzer reached both the happy path and the validators
    assert requests.get(f"{srv.url}/v2/health/ready").json() == {"ready": True}


def _raw_exchange(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may close early (e.g. 413 on a huge Content-Length)
        chunks = []
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except (ConnectionResetError, TimeoutError):
            pass
    return b"".join(chunks)


def test_fuzzed_raw_http_never_breaks_the_server(srv):
    rng = random.Random(99)
    body = json.dumps(_valid_json(rng)).encode()
    base = (b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    specials = [
        base.replace(b"Content-Length: ", b"Content-Length: -"),
        base.replace(b"Content-Length: ", b"Content-Length: 99999999999999999999"),
        base.replace(b"Content-Length: ", b"Content-Length: 5\r\nContent-Length: "),
        base.replace(b"Content-Length: ", b"Content-Length: 1_0"),
        base.replace(b"Content-Length: ", b"Transfer-Encoding: chunked\r\nX: "),
        base.replace(b"HTTP/1.1", b"HTTP/9.9"),
        base.replace(b"POST", b"BREW"),
        b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nX: " + b"b" * 70000 + b"\r\n\r\n",
        b"GET / HTTP/1.1\r\n" + b"H: v\r\n" * 150 + b"\r\n",
        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",  # a TLS ClientHello on the plain port
        b"",
        b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n" * 3,  # pipelined keep-alive requests
    ]
    payloads = specials + [_mutate_bytes(base, rng) for _ in range(60)]
    for payload in payloads:
        reply = _raw_exchange(srv.port, payload)
        if reply:
            assert reply.startswith(b"HTTP/1."), reply[:80]
            status = int(reply.split(b" ", 2)[1])
            assert status in ALLOWED, (status, payload[:120], reply[:300])
    assert _raw_exchange(srv.port, payloads[-len(payloads) + len(specials) - 1]).count(b"HTTP/1.1 200") == 3
    assert requests.get(f"{srv.url}/v2/health/live").json() == {"live": True}
    ok = requests.post(f"{srv.model_url}/infer", json=_valid_json(random.Random(0)))
    assert ok.status_code == 200


def test_fuzzed_auth_headers_are_401_or_200():
    rng = random.Random(7)
    token = "fuzz-token-0123"
    alphabet = "abcXYZ019 -_=:;,.\t\"'\\/%" + "".join(chr(c) for c in range(0xA0, 0xB0))
    with serve(teacher=trivial_teacher(SHAPE, 10), tokens=[token]) as s, requests.Session() as sess:
        body = _valid_json(rng)
        seen = set()
        for _ in range(80):
            value = rng.choice([
                "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))),
                "Bearer " + token[: rng.randint(0, len(token))],
                rng.choice(["Bearer", "bearer ", "Basic ", "Bearer  "]) + token + rng.choice(["", "x", " "]),
            ]).lstrip(" \t")  # requests refuses header values with leading whitespace
            r = sess.post(f"{s.model_url}/infer", json=body, headers={"Authorization": value.encode("latin-1")})
            assert r.status_code in (200, 401), (r.status_code, value)
            seen.add(r.status_code)
            # exactly the valid forms pass: scheme "bearer" (any case), the token, optional surrounding spaces
            scheme, _, rest = value.partition(" ")
            assert (r.status_code == 200) == (scheme.lower() == "bearer" and rest.strip() == token), value
        assert seen == {200, 401}
        assert token not in json.dumps(s.usage())


def test_a_client_that_hangs_up_before_its_answer_leaves_no_traceback(srv, capsys):
    """A TLS client hello sent to the plain-HTTP mock gets a 400 that the client may have hung up on already
    (a race): that is no error of the server's, and it prints nothing. Any other failure is reported as before."""
    server = srv.server
    assert server is not None  # in process
    for gone in (ConnectionResetError(104, "Connection reset by peer"), BrokenPipeError(32, "Broken pipe")):
        try:
            raise gone
        except OSError:
            server.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == ""
    try:
        raise ValueError("a real bug")
    except ValueError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert "ValueError: a real bug" in capsys.readouterr().err
