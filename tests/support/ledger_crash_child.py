"""Child process for the ledger crash tests: loops releasing overlapping batches until done or killed.

Batch ``i`` is records ``4*i .. 4*i + 7`` (each batch shares 4 records with the previous
one; record ``j`` is a deterministic random 1x8x8 image, see :func:`records`), released first to scope "A" with a
per-record epsilon of ``EPS_A``, then to
scope "B" with ``EPS_B``: two transactions per batch. Run as a script
(``python tests/ledger_crash_child.py DB [--kill-stage STAGE --kill-batch K --kill-scope S --key-file F]``,
prints ``ready`` once the ledger is open) or call :func:`run` in a forked process.
With ``--kill-stage`` the process SIGKILLs itself at that ledger stage ("checked",
"sampled" = noise drawn but not committed, "committed" = committed but not yet
returned) of batch K / scope S.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Callable

STRIDE = 4
SIZE = 8
N_BATCHES = 10**6  # effectively endless: the parent kills the child
EPS_A = 1.0
EPS_B = 0.5


def records(start: int, stop: int):
    """Records ``start .. stop-1``: record j is ``rand(1, 8, 8)`` from a generator seeded with j."""
    import torch

    return torch.stack(
        [torch.rand((1, 8, 8), generator=torch.Generator().manual_seed(1_000_003 + j)) for j in range(start, stop)]
    )


def batch(i: int):
    return records(STRIDE * i, STRIDE * i + SIZE)


def prev_prefix(m: int) -> int:
    """Stored-prefix length before the last batch that made the prefix ``m`` long."""
    return 0 if m <= SIZE else m - STRIDE


def mechanisms():
    from support.ledger_support import make_mechanism

    return {"A": make_mechanism(EPS_A), "B": make_mechanism(EPS_B)}


def run(
    path: str,
    ready: Callable[[], None],
    kill_stage: str | None = None,
    kill_batch: int = -1,
    kill_scope: str = "A",
    key_file: str | None = None,
) -> None:
    import torch

    from ldpclient.privacy.ledger import Ledger

    torch.set_num_threads(1)
    mechs = mechanisms()
    for m in mechs.values():  # build the secure samplers' tables now, so the random kill lands in the releases
        m.release(batch(0), public=True)
    with Ledger(path, key_file=key_file) as led:
        current = {"batch": -1, "scope": ""}

        def hook(stage: str) -> None:
            if stage == kill_stage and current["batch"] == kill_batch and current["scope"] == kill_scope:
                os.kill(os.getpid(), signal.SIGKILL)

        led._fault_hook = hook
        ready()
        for i in range(N_BATCHES):
            for scope in ("A", "B"):
                current.update(batch=i, scope=scope)
                led.release(mechs[scope], batch(i), scope=scope)


def run_quietly(path: str, kill_stage: str | None, kill_batch: int, kill_scope: str, key_file: str | None, *,
                say: Callable[[object], None]) -> None:
    """:func:`run` in a :class:`fast_children.Child` (which passes ``say``): says ``ready`` once the ledger is open."""
    run(path, lambda: say("ready"), kill_stage, kill_batch, kill_scope, key_file)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("--kill-stage", default=None)
    ap.add_argument("--kill-batch", type=int, default=-1)
    ap.add_argument("--kill-scope", default="A")
    ap.add_argument("--key-file", default=None)
    a = ap.parse_args(argv)

    def ready() -> None:
        print("ready", flush=True)

    run(a.db, ready, a.kill_stage, a.kill_batch, a.kill_scope, a.key_file)
    print("done", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
