"""A paid chat API's rate limits and money, against the mock.

Rate limits: how often a chat run meets a 429, and how long it waits: 429s per 1,000 requests against the mock's
request window (``--chat-requests-per-window N --chat-window S``, stated in ``x-ratelimit-*`` headers), with the
pacing from those headers and without it, and against random 429s (``--rate-429 P``), with 1 and 4 requests in
flight.

Booking: what a query is booked at (before any answer, and after the run) against what the mock billed per query,
for a model whose family publishes its image tokens (``gpt-4o``: 85, which the mock bills), for a model no rule
covers (learnt from the answers' usage) and for ``--image-tokens 85``. The mock bills 85 tokens an image whatever the
model is called, so ``gpt-4o-mini`` (2,833 published) shows a booking far above this mock's bill, not a real one.

The mock serves the trivial 8x8 teacher on 127.0.0.1; ``--queries`` grey queries go through a
:class:`~ldpclient.teachers.QueryClient`. Read: ``busy_per_1000`` (429s waited out per 1,000 requests), ``busy_s`` and
``paced_s`` (seconds waited out after a 429, and held back before sending because the headers said the window was
used up), ``warnings`` (log lines at WARNING or above: a run that only meets routine rate limits prints none).

    .venv/bin/python benchmarks/bench_paid_path.py --out benchmarks/results/paid_path.jsonl
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


def _run(case: str, server_options: dict[str, Any], queries: Any, workers: int, *, pacing: bool = True) -> dict:
    counter = _Count()
    logging.getLogger("ldpclient").addHandler(counter)
    try:
        with mock_server.serve(model="trivial", image_size=8, num_classes=4, tokens=[TOKEN], **server_options) as srv:
            with connect(f"openai+{srv.url}/v1", model="digits", class_names=NAMES, input_shape=(1, 8, 8),
                         token=TOKEN, retry=RetryPolicy(max_attempts=20, max_total=120)) as teacher:
                if not pacing:
                    teacher._pacer.update = lambda headers: None  # the headers read as if absent
                client = QueryClient(teacher, workers=workers)
                t0 = time.perf_counter()
                client.label(queries)
                wall = time.perf_counter() - t0
    finally:
        logging.getLogger("ldpclient").removeHandler(counter)
    s = client.stats
    return {"case": case + ("" if pacing else ", no pacing"), "workers": workers, "queries": len(queries),
            "requests": s.requests, "attempts": s.attempts, "busy": s.waits.busy,
            "busy_per_1000": round(1000 * s.waits.busy / max(s.requests, 1), 1), "busy_s": round(s.waits.busy_s, 2),
            "paced_s": round(s.waits.paced_s, 2), "warnings": counter.lines, "wall_s": round(wall, 2)}


def _booking(model: str, options: dict[str, Any], queries: Any) -> dict[str, Any]:
    with mock_server.serve(model="trivial", image_size=8, num_classes=4, tokens=[TOKEN], model_name=model) as srv:
        with connect(f"openai+{srv.url}/v1", model=model, class_names=NAMES, input_shape=(1, 8, 8), token=TOKEN,
                     price_input_tokens=0.15, price_output_tokens=0.6, **options) as teacher:
            first = teacher.most_per_query()
            QueryClient(teacher).label(queries)
            after = teacher.most_per_query()
            source = str(teacher.booking.describe()["image_tokens_from"])
        billed = srv.usage()["total"]["cost"] / len(queries)
    return {"model": model, **options, "image_tokens_from": source[:60], "booked_first_per_billed":
            round(first / billed, 2), "booked_after_per_billed": round(after / billed, 2)}


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
            for pacing in ((True, False) if "window" in case else (True,)):
                rows.append(_run(case, options, queries, workers, pacing=pacing))
                print(json.dumps(rows[-1]), flush=True)
    few = laplace(100.0, per="record").release(values[:100], public=True)
    for model, options in [("gpt-4o", {}), ("my-deployment", {}), ("my-deployment", {"image_tokens": 85}),
                           ("gpt-4o-mini", {})]:
        rows.append(_booking(model, options, few))
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as fh:
            for row in rows:
                fh.write(json.dumps({**row, "when": time.strftime("%Y-%m-%d")}) + "\n")


if __name__ == "__main__":
    main()
