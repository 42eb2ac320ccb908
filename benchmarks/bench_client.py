"""Teacher client throughput and overhead against the bundled mock teacher on loopback.

    nice -n 10 .venv/bin/python benchmarks/bench_client.py [--queries 2048] [--batch 128]

Part 1 (trivial teacher, so the client is what is measured): queries/s, request
body bytes per query and client CPU time per query for JSON vs binary bodies
(FP32 and UINT8), one and four workers. The server runs in its own process, so
``time.process_time()`` of this process is the client's CPU time alone.
Part 2 (demo CNN teacher): fraction of wall time the client spends on the CPU
(client CPU time / wall time) - the client is not the bottleneck when this is small.
"""

from __future__ import annotations

import argparse
import time

import torch

import mock_server
from ldpclient.privacy import Domain, Guarantee
from ldpclient.privacy.release import _RELEASE_TOKEN, Release
from ldpclient.teachers import QueryClient, connect


def make_plan(n: int, batch: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    vals = torch.rand(n, 1, 28, 28, generator=g)
    n_el = 28 * 28
    rel = Release(vals, Guarantee("bench", 1.0, 0.0, n_el, 0.0, n_el, Domain()), (1, 28, 28), _token=_RELEASE_TOKEN)
    return [(f"b{k:05d}", rel[s : s + batch]) for k, s in enumerate(range(0, n, batch))]


def run(url: str, plan, *, binary: bool, datatype: str | None, workers: int, batch: int) -> dict:
    teacher = connect(f"oip+{url}/digits", wire="binary" if binary else "json", datatype=datatype)
    client = QueryClient(teacher, workers=workers, batch_size=batch)
    client.metadata()
    list(client.label_batches(plan[:2]))  # warm-up: connections, first requests
    client = QueryClient(teacher, workers=workers, batch_size=batch)
    n = sum(len(q) for _, q in plan)
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in client.label_batches(plan):
        pass
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    teacher.close()
    return {
        "qps": n / wall,
        "bytes_per_query": client.stats.bytes_sent / n,
        "cpu_us_per_query": 1e6 * cpu / n,
        "client_cpu_fraction": cpu / wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--skip-demo", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    plan = make_plan(args.queries, args.batch)
    tensor_bytes = 28 * 28 * 4
    print(f"{args.queries} queries of 1x28x28, batches of {args.batch}; raw FP32 tensor = {tensor_bytes} B/query")
    srv = mock_server.start(subprocess=True, model="trivial", torch_threads=1)
    try:
        print(
            f"{'body':<14}{'workers':>8}{'queries/s':>12}{'B/query':>10}{'vs FP32':>9}{'CPU us/q':>10}{'CPU/wall':>10}"
        )
        for label, binary, dt in (
            ("JSON FP32", False, None),
            ("binary FP32", True, None),
            ("binary UINT8", True, "UINT8"),
        ):
            for workers in (1, 4):
                r = run(srv.url, plan, binary=binary, datatype=dt, workers=workers, batch=args.batch)
                print(
                    f"{label:<14}{workers:>8}{r['qps']:>12.0f}{r['bytes_per_query']:>10.0f}"
                    f"{r['bytes_per_query'] / tensor_bytes:>9.3f}{r['cpu_us_per_query']:>10.1f}"
                    f"{r['client_cpu_fraction']:>10.2f}"
                )
    finally:
        srv.stop()
    if args.skip_demo:
        return
    srv = mock_server.start(subprocess=True, model="digits", torch_threads=1)
    try:
        for workers in (1, 2):
            r = run(srv.url, plan, binary=True, datatype=None, workers=workers, batch=args.batch)
            print(f"demo CNN teacher, binary FP32, {workers} worker(s): {r['qps']:.0f} queries/s, client CPU "
                  f"{r['cpu_us_per_query']:.1f} us/query = {100 * r['client_cpu_fraction']:.1f}% of wall time")
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
