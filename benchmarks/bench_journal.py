"""What the journal costs per batch, and what the batch claims of a shared journal add (issue 64).

A :class:`~ldpclient.teachers.QueryClient` labels ``--batches`` batches of 8 queries with an in-process teacher that
answers at once, so that what is timed is the client's own work with its journal: looking the batch up, booking the
attempt, recording the answer, and, on a journal runs on several hosts share (PostgreSQL), claiming the batch's lease
before sending it and ending the run's leases after. Each row: one run on a new journal, milliseconds per batch.
The PostgreSQL server is a throwaway one (``tests/postgres_server.py``, fsync on, as a real one).

    .venv/bin/python benchmarks/bench_journal.py --out benchmarks/results/journal.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))


def _plan(batches: int) -> list[tuple[str, Any]]:
    import torch

    from ldpclient.privacy import laplace

    release = laplace(5.0, per="record").release(torch.rand(batches * 8, 1, 28, 28, generator=torch.Generator()
                                                            .manual_seed(0)), public=True)
    return [(f"b{k:06d}", release[8 * k: 8 * k + 8]) for k in range(batches)]


class _Instant:
    """A teacher that answers class 0 at once."""

    def __init__(self) -> None:
        from ldpclient.teachers.base import TeacherMetadata

        self.meta = TeacherMetadata(name="instant", input_shape=(1, 28, 28), datatype="FP32", num_classes=10)

    def metadata(self) -> Any:
        return self.meta

    def classify(self, x: Any) -> Any:
        import torch

        return torch.zeros(len(x), dtype=torch.int64)


def _run(location: str, plan: list[tuple[str, Any]], *, claims: bool) -> float:
    """Seconds per batch of one run on a new journal at ``location``; ``claims`` False: a shared journal's claims
    switched off (what it cost before them)."""
    from ldpclient.teachers import Journal, QueryClient

    with Journal(location) as journal:
        if not claims:
            journal.__class__ = type("Unshared", (Journal,), {"shared": property(lambda self: False)})
        client = QueryClient(_Instant(), journal=journal, scope="instant")
        started = time.perf_counter()
        for _ in client.label_batches(plan):
            pass
        return (time.perf_counter() - started) / len(plan)


def measure(batches: int) -> list[dict[str, Any]]:
    import postgres_server

    plan = _plan(batches)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        rows.append({"journal": "sqlite", "claims": False, "batches": batches,
                     "ms_per_batch": 1000 * _run(str(Path(d) / "journal.sqlite"), plan, claims=False)})
    server = postgres_server.start(fsync=True)
    try:
        for k, claims in enumerate((False, True)):
            rows.append({"journal": "postgresql", "claims": claims, "batches": batches,
                         "ms_per_batch": 1000 * _run(server.database(f"bench{k}"), plan, claims=claims)})
    finally:
        server.stop()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=Path("journal.jsonl"))
    ap.add_argument("--table", action="store_true", help="print the table of --out and stop")
    args = ap.parse_args()
    if not args.table:
        rows = measure(args.batches)
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print("| journal | batch claims | batches | ms per batch |\n|---|---|---|---|")
    for line in args.out.read_text().splitlines():
        r = json.loads(line)
        print(f"| {r['journal']} | {'yes' if r['claims'] else 'no'} | {r['batches']} | {r['ms_per_batch']:.2f} |")


if __name__ == "__main__":
    main()
