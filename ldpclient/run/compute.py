"""How the command-line runs compute: with how many threads, and denormal floats flushed to zero.

torch picks its intra-op thread count from the machine's physical cores, which overcounts where a
process may run on fewer (a container's CPU set, ``taskset``) and then oversubscribes them. The
commands set it to the cores this process may actually use, unless the user chose with
``OMP_NUM_THREADS``. A library call (``ldpclient.label``) lowers it to those cores for the call only, where it is
above them, and restores the application's setting afterwards: 8 threads on 2 cores made the same run 1.7 times
slower than 2 (77 s against 45 s, the README's example on the demo's folder).

The commands also flush denormal floats (magnitudes below 1.2e-38) to zero, as TensorFlow's compute threads do: a
student's optimiser state holds such values once a unit stops learning (a moment decaying by 0.9 a step), and the
CPU computes with them many times slower. The default run of 1,000 28x28 images trained in 0.90-0.97 of the time
with them flushed and, with ``--seed``, wrote the same labels file byte for byte (a value that small is lost in any
sum with a weight). The setting belongs to each thread, which copies it from the thread that starts it, so only a
command, which owns its process and sets it before torch starts its worker threads, sets it; a library call leaves
it to the application (``torch.set_flush_denormal(True)`` before any torch work gives the command's speed).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

import torch

from ..io.folders import available_cores


def set_up_command_compute() -> int:
    """For a command, before its first torch computation: torch's intra-op threads set to
    :func:`~ldpclient.io.folders.available_cores` (unless ``OMP_NUM_THREADS`` is set) and denormal floats flushed to
    zero in this thread and the threads it starts; returns the thread count in use."""
    torch.set_flush_denormal(True)
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


__all__ = ["set_up_command_compute", "within_available_cores"]
