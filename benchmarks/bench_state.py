"""The ledger's throughput in PostgreSQL against SQLite (issue 48): records released and charged per second, by 1
and by 8 writer processes.

Each writer is a process with its own :class:`~ldpclient.privacy.ledger.Ledger` on one shared state (the same key
file), releasing its share of ``--records`` 28x28 images (distinct images: a folder split between workers) in
chunks of :func:`~ldpclient.transfer.stages.release.release_chunk` with Laplace at epsilon 100 per image, under a
cap, as
``label`` does. What is timed is the releases alone (wall time from the moment every writer has its ledger open to
the last commit), so the figure is the state's: SQLite serialises writers on the file's lock; PostgreSQL locks the
spend rows a chunk charges. The PostgreSQL server is a throwaway one (``tests/postgres_server.py``: ``initdb`` in a
temp folder, fsync on, as a real one) unless ``--url`` names one.

    .venv/bin/python benchmarks/bench_state.py --records 40000 --out benchmarks/results/state.jsonl
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))


def _writer(location: str, key: str, start: int, stop: int, ready: Any, go: Any, done: Any) -> None:
    import torch

    from ldpclient.privacy import laplace
    from ldpclient.privacy.ledger import Ledger
    from ldpclient.transfer.stages.release import release_chunk

    torch.set_num_threads(1)
    mech = laplace(100.0, per="record")
    chunk = release_chunk((1, 28, 28))
    g = torch.Generator().manual_seed(start)
    images = torch.rand((stop - start, 1, 28, 28), generator=g)
    sources = [f"image-{i}" for i in range(start, stop)]
    with Ledger(location, key_file=key, cap_epsilon=1000.0) as led:
        mech.release(images[:2], public=True)  # the sampler's tables, before the clock
        ready.put(1)
        go.wait()
        for s in range(0, len(images), chunk):
            led.release(mech, images[s:s + chunk], scope="teacher", sources=sources[s:s + chunk])
    done.put(time.perf_counter())


def measure(location: str, key: str, records: int, writers: int) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    ready, done, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    share = records // writers
    procs = [ctx.Process(target=_writer, args=(location, key, w * share, (w + 1) * share, ready, go, done))
             for w in range(writers)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=600)
    start = time.perf_counter()
    go.set()
    ends = [done.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
        assert p.exitcode == 0, f"a writer failed ({p.exitcode})"
    seconds = max(ends) - start
    return {"records": share * writers, "writers": writers, "seconds": round(seconds, 3),
            "records_per_s": round(share * writers / seconds)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=40000)
    ap.add_argument("--writers", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--url", default=None, help="a PostgreSQL database to use (default: a throwaway server)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    server = None
    if a.url is None:
        import postgres_server

        server = postgres_server.start(fsync=True)
    rows = []
    try:
        for writers in a.writers:
            for engine in ("sqlite", "postgresql"):
                tmp = Path(tempfile.mkdtemp(prefix="bench-state-"))
                if engine == "sqlite":
                    location = str(tmp / "ledger.sqlite")
                elif server is not None:
                    location = server.database(f"bench_{writers}_{int(time.time())}")
                else:
                    location = a.url
                row = {"engine": engine, **measure(location, str(tmp / "ledger.key"), a.records, writers)}
                print(json.dumps(row), flush=True)
                rows.append(row)
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if server is not None:
            server.stop()
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
