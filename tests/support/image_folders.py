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


def plan_folders(root: Path) -> tuple[Path, Path]:
    """``root/private`` (30 random grey 12x12 PNGs) and ``root/public`` (6 more), drawn from seed 3."""
    rng = np.random.default_rng(3)
    private, public = root / "private", root / "public"
    private.mkdir(parents=True)
    public.mkdir()
    for k in range(30):
        Image.fromarray(rng.integers(0, 256, (12, 12), dtype=np.uint8)).save(private / f"p{k:02d}.png")
    for k in range(6):
        Image.fromarray(rng.integers(0, 256, (12, 12), dtype=np.uint8)).save(public / f"q{k}.png")
    return private, public
