"""Folders of synthetic images for the tests that run the CLI on a private folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def random_png_folder(folder: Path, *, seed: int, n: int = 12, size: int = 8) -> Path:
    """Create ``folder`` with ``n`` grey ``size`` x ``size`` PNGs of uniform random pixels 0..255 drawn from
    ``seed``, named ``img00.png``, ``img01.png``, ...; returns ``folder``."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for k in range(n):
        Image.fromarray(rng.integers(0, 256, (size, size), dtype=np.uint8)).save(folder / f"img{k:02d}.png")
    return folder
