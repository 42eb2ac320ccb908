"""60,000 Fashion-MNIST train images for the benchmarks (not a dependency of ldpclient, never a test's).

The file is ``../shared/data/fashion-mnist-train-60k.npz`` beside the repository (``images`` uint8
``(60000, 28, 28)`` grey, ``labels``, ``classes``; its README says where it comes from), or the path in
``$LDPCLIENT_FASHION``. It is the data set of the LDPKiT paper's headline table. :func:`split` makes the fixed
split, from one seeded permutation: private 1,000 / teacher 16,000 / public 5,000 / held out 3,000 (as
``cifar10.py`` splits its photos; the public images are in neither the teacher's nor the private part).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from cifar10 import PARTS, seeded_split

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "fashion-mnist-train-60k.npz"
SPLIT_SEED = 11


def load() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(images uint8 (60000, 1, 28, 28), labels int64 (60000,), class names)`` in the file's order."""
    path = Path(os.environ.get("LDPCLIENT_FASHION", DEFAULT))
    if not path.exists():
        raise SystemExit(f"no Fashion-MNIST file at {path} (set LDPCLIENT_FASHION)")
    with np.load(path) as data:
        return (data["images"][:, None].copy(), data["labels"].astype(np.int64), [str(c) for c in data["classes"]])


def split() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The fixed split (seeded): ``private`` 1,000, ``teacher`` 16,000, ``public`` 5,000, ``held_out`` 3,000."""
    x, y, _ = load()
    return seeded_split(x, y, SPLIT_SEED, PARTS)
