"""What a query costs through the chat and Vision adapters against the mock, beside the same model over the Open
Inference Protocol: requests, tokens and wall time per query (one run, one machine, the ratios are what to read).
The chat model is asked twice: a request per query, and through the Batch API (one file and one job for all the
queries, answered by the mock on its first look at the job: the wall time is the client's and the mock's work, not
the hours a real service may take).

The mock serves its digits CNN (28x28) on 127.0.0.1; ``--queries`` noised digits go through a
:class:`~ldpclient.teachers.QueryClient` with ``--workers`` requests in flight, once per adapter. Tokens are the
mock's count (85 per low-detail image, one per four characters of text), the prompt the adapter's for ten classes.

    .venv/bin/python benchmarks/bench_cloud_teachers.py --out benchmarks/results/cloud_teachers.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

import mock_server
from ldpclient.privacy import laplace
from ldpclient.teachers import QueryClient, connect


def _queries(n: int) -> Any:
    from ldpclient.io.datasets import load_digits_images

    x, _ = load_digits_images(28)
    picked = x[torch.arange(n) % len(x)]
    return laplace(100.0, per="record").release(picked, public=True)


def _run(name: str, address: str, options: dict[str, Any], queries: Any, workers: int) -> dict[str, Any]:
    with connect(address, **options) as teacher:
        client = QueryClient(teacher, workers=workers)
        t0 = time.perf_counter()
        client.label(queries)
        wall = time.perf_counter() - t0
    s, n = client.stats, len(queries)
    return {"adapter": name, "queries": n, "workers": workers, "requests_per_query": s.requests / n,
            "input_tokens_per_query": s.input_tokens / n, "output_tokens_per_query": s.output_tokens / n,
            "prompt_tokens_beyond_image": s.input_tokens / n - 85 if s.input_tokens else 0.0,
            "declined": s.abstained, "wall_s": round(wall, 3), "queries_per_s": round(n / wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    queries = _queries(args.queries)
    names = [str(d) for d in range(10)]
    facts = {"class_names": names, "input_shape": (1, 28, 28)}
    rows = []
    with mock_server.serve(model="digits", image_size=28) as srv:
        rows.append(_run("oip (binary tensors)", srv.model_url, {}, queries, args.workers))
        rows.append(_run("openai chat", f"openai+{srv.url}/v1", {"model": "digits", **facts}, queries, args.workers))
        rows.append(_run("openai batch api (--batch)", f"openai+{srv.url}/v1", {"model": "digits", "batch": True,
                                                                               **facts}, queries, args.workers))
        rows.append(_run("cloud vision", f"vision+{srv.url}/v1",
                         {"label_map": {c: [f"/m/mock_{c}"] for c in names}, **facts}, queries, args.workers))
    base = rows[0]["wall_s"]
    for row in rows:
        row["wall_vs_oip"] = round(row["wall_s"] / base, 2)
        print(json.dumps(row))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
