"""How many threads the command-line runs compute with.

torch picks its intra-op thread count from the machine's physical cores, which overcounts where a
process may run on fewer (a container's CPU set, ``taskset``) and then oversubscribes them. The
commands set it to the cores this process may actually use, unless the user chose with
``OMP_NUM_THREADS``. A library call (``ldpclient.label``) lowers it to those cores for the call only, where it is
above them, and restores the application's setting afterwards: 8 threads on 2 cores made the same run 1.7 times
slower than 2 (77 s against 45 s, the README's example on the demo's folder).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

import torch

from ..io.folders import available_cores


def use_available_cores() -> int:
    """Set torch's intra-op threads to :func:`~ldpclient.io.folders.available_cores` (unless ``OMP_NUM_THREADS``
    is set); returns the count in use."""
    if not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(available_cores())
    return torch.get_num_threads()


@contextmanager
def within_available_cores() -> Iterator[int]:
    """For one library call: torch's intra-op threads lowered to :func:`~ldpclient.io.folders.available_cores` where
    they are above it (unless ``OMP_NUM_THREADS`` is set), the caller's count restored on leaving; yields the count
    in use."""
    before = torch.get_num_threads()
    cores = available_cores()
    if not os.environ.get("OMP_NUM_THREADS") and before > cores:
        torch.set_num_threads(cores)
    try:
        yield torch.get_num_threads()
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


__all__ = ["use_available_cores", "within_available_cores"]
