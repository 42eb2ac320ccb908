"""Throughput of the bundled mock teacher on loopback: requests/s and images/s.

Trivial model (mean-intensity rule: measures the HTTP/OIP layer) and the demo
teacher (small CNN on 28x28 digits), JSON vs binary tensor bodies, batch 1 and 64,
1 and 4 keep-alive clients. The server runs as a separate process
(``python -m mock_server --torch-threads 1``) so it does not share the client's GIL;
request bodies are encoded once up front, so figures are server + transport cost.
Also reports the demo teacher's training time and its cached start-up time.

    nice -n 10 .venv/bin/python benchmarks/bench_mock_server.py [--requests 120]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mock_server import ServerConfig, build_teacher, serve  # noqa: E402

SHAPE = (1, 28, 28)


def encode(n: int, binary: bool, seed: int = 0) -> tuple[bytes, dict[str, str]]:
    x = np.random.default_rng(seed).random((n, *SHAPE), dtype=np.float32)
    if not binary:
        doc = {"id": "bench", "inputs": [{"name": "input", "shape": [n, *SHAPE], "datatype": "FP32",
                                          "data": x.ravel().tolist()}]}
        return json.dumps(doc).encode(), {"Content-Type": "application/json"}
    raw = x.tobytes()
    head = json.dumps({"id": "bench", "inputs": [{"name": "input", "shape": [n, *SHAPE], "datatype": "FP32",
                                                  "parameters": {"binary_data_size": len(raw)}}],
                       "outputs": [{"name": "label", "parameters": {"binary_data": True}}]}).encode()
    return head + raw, {"Content-Type": "application/octet-stream",
                        "Inference-Header-Content-Length": str(len(head))}


def run(url: str, body: bytes, headers: dict[str, str], total: int, clients: int) -> float:
    """Seconds to send ``total`` requests over ``clients`` keep-alive sessions (after a warm-up)."""
    per = total // clients
    barrier = threading.Barrier(clients + 1)
    failures: list[int] = []

    def client() -> None:
        with requests.Session() as s:
            for _ in range(3):
                s.post(url, data=body, headers=headers)
            barrier.wait()
            for _ in range(per):
                r = s.post(url, data=body, headers=headers)
                if r.status_code != 200:
                    failures.append(r.status_code)
            barrier.wait()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    barrier.wait()
    seconds = time.perf_counter() - t0
    for t in threads:
        t.join()
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed: {failures[:5]}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=120, help="requests per configuration (batch 1)")
    args = ap.parse_args()
    state = tempfile.mkdtemp(prefix="bench-mock-state-")

    t0 = time.perf_counter()
    teacher = build_teacher(ServerConfig(state_dir=state))
    train_s = time.perf_counter() - t0
    print(f"demo teacher: {teacher.summary()}; first start (training) {train_s:.1f} s")

    rows = []
    for kind, opts in [("trivial", {"model": "trivial"}), ("demo CNN", {"state_dir": state})]:
        t0 = time.perf_counter()
        with serve(subprocess=True, torch_threads=1, max_batch_size=256, **opts) as srv:
            startup = time.perf_counter() - t0
            print(f"{kind}: subprocess start-up {startup:.1f} s "
                  f"({'cached weights' if kind != 'trivial' else 'no model'})")
            url = f"{srv.model_url}/infer"
            for batch in (1, 64):
                total = args.requests if batch == 1 else max(8, args.requests // 4)
                for clients in (1, 4):
                    per_mode = {}
                    for binary in (False, True):
                        body, headers = encode(batch, binary)
                        sec = run(url, body, headers, total, clients)
                        n = (total // clients) * clients
                        per_mode[binary] = (n / sec, n * batch / sec, len(body))
                    for binary in (False, True):
                        rps, ips, size = per_mode[binary]
                        rows.append((kind, "binary" if binary else "JSON", batch, clients, size, rps, ips,
                                     per_mode[True][1] / per_mode[False][1]))
    print()
    print("| teacher | body | batch | clients | body bytes | requests/s | images/s | binary/JSON images/s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for kind, mode, batch, clients, size, rps, ips, ratio in rows:
        print(f"| {kind} | {mode} | {batch} | {clients} | {size:,} | {rps:,.0f} | {ips:,.0f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
