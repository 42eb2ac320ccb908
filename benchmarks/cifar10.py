"""25,000 CIFAR-10 train photos for the benchmarks (not a dependency of ldpclient, never a test's).

The file is ``../shared/data/cifar10-train-25k.npz`` beside the repository (``images`` uint8
``(25000, 32, 32, 3)`` RGB, ``labels``, ``classes``; its README says where it comes from), or the path
in ``$LDPCLIENT_CIFAR10``. :func:`split` makes the fixed split the photo tables use, from one seeded
permutation: private 1,000 / teacher 16,000 / public 5,000 / held out 3,000 (the public photos are in
neither the teacher's nor the private part).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10-train-25k.npz"
SPLIT_SEED = 7
PARTS = (("private", 1_000), ("teacher", 16_000), ("public", 5_000), ("held_out", 3_000))


def load() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(images uint8 (25000, 3, 32, 32), labels int64 (25000,), class names)`` in the file's order."""
    path = Path(os.environ.get("LDPCLIENT_CIFAR10", DEFAULT))
    if not path.exists():
        raise SystemExit(f"no CIFAR-10 file at {path} (set LDPCLIENT_CIFAR10)")
    with np.load(path) as data:
        return (data["images"].transpose(0, 3, 1, 2).copy(), data["labels"].astype(np.int64),
                [str(c) for c in data["classes"]])


def split() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The fixed split (seeded): ``private`` 1,000, ``teacher`` 16,000, ``public`` 5,000, ``held_out`` 3,000."""
    x, y, _ = load()
    return seeded_split(x, y, SPLIT_SEED, PARTS)


def seeded_split(x: np.ndarray, y: np.ndarray, seed: int,
                 parts: tuple[tuple[str, int], ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``x``, ``y`` cut into ``parts`` (name, size), in that order, from one permutation seeded by ``seed``."""
    order = np.random.default_rng(seed).permutation(len(y))
    out, start = {}, 0
    for name, size in parts:
        idx = order[start : start + size]
        out[name] = (x[idx], y[idx])
        start += size
    return out
