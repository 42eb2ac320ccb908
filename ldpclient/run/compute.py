"""How many threads the command-line runs compute with.

torch picks its intra-op thread count from the machine's physical cores, which overcounts where a
process may run on fewer (a container's CPU set, ``taskset``) and then oversubscribes them. The
commands set it to the cores this process may actually use, unless the user chose with
``OMP_NUM_THREADS``. A library call (``ldpclient.label``) leaves the application's setting alone.
"""

from __future__ import annotations

import os

import torch

from ..io.folders import available_cores


def use_available_cores() -> int:
    """Set torch's intra-op threads to :func:`~ldpclient.io.folders.available_cores` (unless ``OMP_NUM_THREADS``
    is set); returns the count in use."""
    if not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(available_cores())
    return torch.get_num_threads()


__all__ = ["use_available_cores"]
