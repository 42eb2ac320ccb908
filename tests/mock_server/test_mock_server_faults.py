"""Mock teacher fault injection (seeded, deterministic), rate limit, and the OIP client adapter against it."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import requests
import torch

from mock_server import serve
from mock_server.config import ServerConfig
from mock_server.faults import FaultInjector, RateLimiter
from mock_server.teacher import trivial_teacher

SHAPE = (1, 28, 28)


@pytest.fixture(scope="module")
def teacher():
    return trivial_teacher(SHAPE, 10)


def body(n: int = 3, seed: int = 0) -> dict:
    x = np.random.default_rng(seed).random((n, *SHAPE), dtype=np.float32)
    return {"id": f"b{seed}", "inputs": [{"name": "input", "shape": [n, *SHAPE], "datatype": "FP32",
                                          "data": x.ravel().tolist()}]}


def statuses(url: str, count: int) -> list[int]:
    with requests.Session() as s:
        return [s.post(f"{url}/infer", json=body()).status_code for _ in range(count)]


def test_fail_first_n_then_succeed(teacher):
    with serve(teacher=teacher, fail_first=3, fail_status=503, retry_after=0) as srv:
        r = requests.post(f"{srv.model_url}/infer", json=body())
        assert r.status_code == 503 and r.headers["Retry-After"] == "0" and "error" in r.json()
        assert statuses(srv.model_url, 4) == [503, 503, 200, 200]
        usage = srv.usage()["keys"]["anonymous"]
        assert usage == {"requests": 2, "images": 6, "cost": pytest.approx(0.006), "rejected": 3}
        assert srv.fault_stats() == {"status_503": 3, "ok": 2}
        # health and metadata are never faulted
        assert requests.get(srv.model_url).status_code == 200


def test_error_rates_are_seeded_and_deterministic(teacher):
    opts = dict(teacher=teacher, error_rate_500=0.2, error_rate_503=0.2, rate_429=0.1)
    runs = []
    for seed in (11, 11, 12):
        with serve(fault_seed=seed, **opts) as srv:
            runs.append(statuses(srv.model_url, 60))
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    counts = {code: runs[0].count(code) for code in (200, 500, 503, 429)}
    assert sum(counts.values()) == 60 and all(counts[c] > 0 for c in counts)
    assert 15 <= counts[200] <= 45  # rate 0.5 of 60 (a fixed seed: this cannot flake)
    # the injector draws per request index, independently of timing
    a, b = (
        FaultInjector(ServerConfig(drop_rate=0.5, fault_seed=3)),
        FaultInjector(ServerConfig(drop_rate=0.5, fault_seed=3)),
    )
    assert [a.decide() for _ in range(20)] == [b.decide() for _ in range(20)]


def test_injected_429_carries_retry_after(teacher):
    with serve(teacher=teacher, rate_429=1.0, retry_after=3) as srv:
        r = requests.post(f"{srv.model_url}/infer", json=body())
        assert r.status_code == 429 and r.headers["Retry-After"] == "3"
        assert r.headers["X-Billed-Images"] == "0"


def test_latency_fixed_and_random(teacher):
    with serve(teacher=teacher, latency=0.3) as srv:
        t0 = time.perf_counter()
        assert requests.post(f"{srv.model_url}/infer", json=body()).ok
        assert time.perf_counter() - t0 >= 0.29  # injected delay is a lower bound, not a benchmark
    inj = FaultInjector(ServerConfig(latency=0.1, latency_jitter=0.2, fault_seed=5))
    lat = [inj.decide().latency for _ in range(50)]
    assert all(0.1 <= v <= 0.3 for v in lat) and len(set(lat)) == 50


def test_dropped_connection_mid_response(teacher):
    with serve(teacher=teacher, drop_rate=1.0) as srv:
        with pytest.raises((requests.ConnectionError, requests.exceptions.ChunkedEncodingError)):
            requests.post(f"{srv.model_url}/infer", json=body())
        # billed: the server answered, the network lost it (as a real paid API would)
        assert srv.usage()["total"]["images"] == 3
        assert requests.get(f"{srv.url}/v2/health/ready").status_code == 200


@pytest.mark.parametrize("kind", ["truncated", "not_json", "wrong_count", "out_of_range"])
def test_malformed_bodies(teacher, kind):
    with serve(teacher=teacher, malformed_rate=1.0, malformed_kind=kind) as srv:
        r = requests.post(f"{srv.model_url}/infer", json=body(4))
        assert r.status_code == 200 and r.headers["X-Billed-Images"] == "4"
        if kind in ("truncated", "not_json"):
            with pytest.raises(ValueError):
                json.loads(r.content)
        else:
            out = r.json()["outputs"][0]
            if kind == "wrong_count":
                assert len(out["data"]) == 3 and out["shape"] == [3]
            else:
                assert len(out["data"]) == 4 and min(out["data"]) >= 10


def test_malformed_kind_random_choice_is_seeded():
    inj = FaultInjector(ServerConfig(malformed_rate=1.0, fault_seed=1))
    kinds = {inj.decide().malformed_kind for _ in range(40)}
    assert kinds == {"truncated", "not_json", "wrong_count", "out_of_range"}


def test_slow_body_trickles_but_arrives_intact(teacher):
    with serve(teacher=teacher, slow_rate=1.0, slow_body_seconds=0.4) as srv:
        t0 = time.perf_counter()
        r = requests.post(f"{srv.model_url}/infer", json=body(5))
        assert time.perf_counter() - t0 >= 0.35
        assert r.status_code == 200 and len(r.json()["outputs"][0]["data"]) == 5
        # a client with a short read timeout gives up (requests reports a body read timeout as ConnectionError)
        with pytest.raises((requests.exceptions.ReadTimeout, requests.ConnectionError)):
            requests.post(f"{srv.model_url}/infer", json=body(5), timeout=(2, 0.01))


def test_rate_limit_per_key(teacher):
    with serve(teacher=teacher, rate_limit=1.0, rate_burst=2, tokens=["a", "b"]) as srv:
        codes_a = [requests.post(f"{srv.model_url}/infer", json=body(), headers={"Authorization": "Bearer a"})
                   for _ in range(4)]
        r_b = requests.post(f"{srv.model_url}/infer", json=body(), headers={"Authorization": "Bearer b"})
        assert r_b.status_code == 200  # buckets are per key
        limited = [r for r in codes_a if r.status_code == 429]
        assert codes_a[0].status_code == 200 and codes_a[1].status_code == 200 and limited
        assert all(int(r.headers["Retry-After"]) >= 1 and "rate limit" in r.json()["error"] for r in limited)


def test_token_bucket_arithmetic():
    now = [0.0]
    rl = RateLimiter(2.0, burst=2, clock=lambda: now[0])
    assert [rl.acquire("k") for _ in range(2)] == [0.0, 0.0]
    assert rl.acquire("k") == pytest.approx(0.5)
    now[0] = 0.5
    assert rl.acquire("k") == 0.0
    assert rl.acquire("other") == 0.0


# --- the client adapter (ldpclient.teachers) against the real server -----------------------------

def _release(n: int, seed: int):
    from ldpclient.privacy import laplace

    clean = torch.rand((n, *SHAPE), generator=torch.Generator().manual_seed(seed))
    return laplace(2.0, per="element").release(clean, generator=torch.Generator().manual_seed(seed + 1))


@pytest.mark.parametrize("binary", [True, False])
def test_oip_adapter_round_trip(teacher, binary):
    from ldpclient.teachers.oip import OIPTeacher

    with serve(teacher=teacher, tokens=["adapter-token"], max_batch_size=32) as srv:
        t = OIPTeacher(srv.url, srv.model_name, wire="binary" if binary else "json", token="adapter-token")
        meta = t.metadata()
        assert meta.input_shape == SHAPE and meta.num_classes == 10 and meta.max_batch_size == 32
        rel = _release(70, seed=3)
        labels = t.classify(rel)  # 70 queries -> 3 requests of <= 32
        expected = teacher.predict(np.clip(rel.values.numpy(), 0, 1))
        assert labels.dtype == torch.int64
        np.testing.assert_array_equal(labels.numpy(), expected)
        assert srv.usage()["total"] == {"requests": 3, "images": 70, "cost": pytest.approx(0.07), "rejected": 0}
        t.close()


def test_oip_adapter_retries_through_injected_faults(teacher):
    from ldpclient.teachers.http import RetryPolicy
    from ldpclient.teachers.oip import OIPTeacher

    policy = RetryPolicy(max_attempts=5, initial_wait=0.01, max_wait=0.02, jitter=0.0)
    with serve(teacher=teacher, fail_first=2, fail_status=503, retry_after=0) as srv:
        t = OIPTeacher(srv.url, srv.model_name, retry=policy)
        rel = _release(5, seed=8)
        np.testing.assert_array_equal(t.classify(rel).numpy(), teacher.predict(np.clip(rel.values.numpy(), 0, 1)))
        assert srv.fault_stats() == {"status_503": 2, "ok": 1}
        assert srv.usage()["total"]["images"] == 5  # failed attempts are not billed
        t.close()
