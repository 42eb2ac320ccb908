"""Child process for the PostgreSQL ledger race: releases overlapping batches to several teachers under one cap.

``python tests/postgres_race_child.py URL KEY_FILE SEED OUT`` (or :func:`main` in a :class:`fast_children.Child`,
which says its lines through a pipe instead of printing them) opens ``Ledger(URL, key_file=KEY_FILE,
cap_epsilon=CAP)`` once the file ``OUT + ".open"`` exists, waits for ``OUT + ".go"`` (so that all children open the
ledger, then release, together), then releases
every (teacher, batch) pair in an order shuffled by SEED: batch ``b`` is records ``STRIDE*b .. STRIDE*b+SIZE-1``
(see :func:`records`), each a deterministic 1x8x8 image, released with ``sources=`` the SHA-256 of its bytes (as a
folder run names files by their bytes). A batch refused by the cap is skipped. Writes to ``OUT`` one JSON line per
(record, teacher) it was given values for, with the SHA-256 of those values, and the number of refusals.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
from typing import Callable

CAP = 10.0
CHARGE = 3.0
TEACHERS = ("t0", "t1", "t2", "t3", "t4", "t5")
STRIDE, SIZE, BATCHES = 10, 20, 10


def records(start: int, stop: int):
    import torch

    return torch.stack([torch.rand((1, 8, 8), generator=torch.Generator().manual_seed(7_000_003 + j))
                        for j in range(start, stop)])


def sources(batch) -> list[bytes]:
    return [hashlib.sha256(r.numpy().tobytes()).digest() for r in batch]


def _wait_for(path: str, timeout: float = 120.0) -> None:
    """Until ``path`` exists; exit (status 3) after ``timeout`` seconds: a parent that failed never makes it."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(3)
        time.sleep(0.01)


def _print(line: object) -> None:
    print(line, flush=True)


def main(url: str, key_file: str, seed: int, out: str, *, say: Callable[[object], None] = _print) -> None:
    import torch

    from ldpclient.privacy import laplace
    from ldpclient.privacy.ledger import BudgetExceeded, Ledger

    torch.set_num_threads(1)
    mech = laplace(CHARGE, per="record")
    pairs = [(t, b) for t in TEACHERS for b in range(BATCHES)]
    random.Random(seed).shuffle(pairs)
    got: dict[tuple[int, str], str] = {}
    refused = 0
    say("loaded")
    _wait_for(out + ".open")  # every child opens the (new) ledger at the same moment
    with Ledger(url, key_file=key_file, cap_epsilon=CAP) as led:
        say("ready")
        _wait_for(out + ".go")
        for teacher, b in pairs:
            batch = records(STRIDE * b, STRIDE * b + SIZE)
            try:
                rel = led.release(mech, batch, scope=teacher, sources=sources(batch))
            except BudgetExceeded:
                refused += 1
                continue
            for j, row in enumerate(rel._values):
                got[(STRIDE * b + j, teacher)] = hashlib.sha256(row.numpy().tobytes()).hexdigest()
    with open(out, "w") as f:
        for (record, teacher), digest in got.items():
            f.write(json.dumps({"record": record, "teacher": teacher, "values": digest}) + "\n")
        f.write(json.dumps({"refused": refused}) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
