"""How often a chat run meets a rate limit, and how long it waits: 429s per 1,000 requests against the mock's request
window (``--chat-requests-per-window N --chat-window S``, stated in ``x-ratelimit-*`` headers) and against random
429s (``--rate-429 P``), with 1 and 4 requests in flight.

The mock serves the trivial 8x8 teacher on 127.0.0.1; ``--queries`` grey queries go through a
:class:`~ldpclient.teachers.QueryClient`. Read: ``busy_per_1000`` (429s waited out per 1,000 requests), ``busy_s`` and
``paced_s`` (seconds waited out after a 429, and held back before sending because the headers said the window was
used up), ``warnings`` (log lines at WARNING or above: a run that only meets routine rate limits prints none).

    .venv/bin/python benchmarks/bench_rate_limits.py --out benchmarks/results/rate_limits.jsonl
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import torch

import mock_server
from ldpclient.privacy import laplace
from ldpclient.teachers import QueryClient, connect
from ldpclient.teachers.http import RetryPolicy

TOKEN = "sk-bench-rate-limits"
NAMES = ["0", "1", "2", "3"]


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.lines += 1


def _run(case: str, server_options: dict[str, Any], queries: Any, workers: int) -> dict[str, Any]:
    counter = _Count()
    logging.getLogger("ldpclient").addHandler(counter)
    try:
        with mock_server.serve(model="trivial", image_size=8, num_classes=4, tokens=[TOKEN], **server_options) as srv:
            with connect(f"openai+{srv.url}/v1", model="digits", class_names=NAMES, input_shape=(1, 8, 8),
                         token=TOKEN, retry=RetryPolicy(max_attempts=20, max_total=120)) as teacher:
                client = QueryClient(teacher, workers=workers)
                t0 = time.perf_counter()
                client.label(queries)
                wall = time.perf_counter() - t0
    finally:
        logging.getLogger("ldpclient").removeHandler(counter)
    s = client.stats
    return {"case": case, "workers": workers, "queries": len(queries), "requests": s.requests,
            "attempts": s.attempts, "busy": s.busy, "busy_per_1000": round(1000 * s.busy / max(s.requests, 1), 1),
            "busy_s": round(s.busy_s, 2), "paced_s": round(s.paced_s, 2), "warnings": counter.lines,
            "wall_s": round(wall, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    values = torch.rand(args.queries, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    queries = laplace(100.0, per="record").release(values, public=True)
    cases = {
        "window 50/s": {"chat_requests_per_window": 50, "chat_window": 1.0},
        "one in thirty": {"rate_429": 1 / 30, "retry_after": 0, "fault_seed": 3},
    }
    rows = []
    for case, options in cases.items():
        for workers in (1, 4):
            row = _run(case, options, queries, workers)
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as fh:
            for row in rows:
                fh.write(json.dumps({**row, "when": time.strftime("%Y-%m-%d")}) + "\n")


if __name__ == "__main__":
    main()
