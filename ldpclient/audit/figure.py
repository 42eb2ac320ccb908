"""Small PNG figures for audit reports (Pillow only, no plotting dependency)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence

import torch
from PIL import Image, ImageDraw

from ..io.output import preview_grid

COLOURS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75)]


def reconstruction_grid(rows: Mapping[str, torch.Tensor], path: str | Path, scale: int = 3) -> Path:
    """One row per entry (e.g. original / query / reconstruction), images ``(n, C, H, W)`` in [0, 1]."""
    cells = [[img for img in t] for t in rows.values() if t.shape[0]]
    if not cells:
        raise ValueError("no images for the reconstruction figure")
    img = preview_grid(cells, scale=scale)
    label_w = 120
    canvas = Image.new("RGB", (img.width + label_w, img.height), (255, 255, 255))
    canvas.paste(img, (label_w, 0))
    draw = ImageDraw.Draw(canvas)
    row_h = img.height / len(cells)
    for k, name in enumerate(n for n, t in rows.items() if t.shape[0]):
        draw.text((4, int(k * row_h + row_h / 2 - 5)), name[:19], fill=(0, 0, 0))
    out = Path(path)
    canvas.save(out)
    return out


def line_plot(
    xs: Sequence[float],
    series: Mapping[str, Sequence[float]],
    path: str | Path,
    *,
    title: str = "",
    xlabel: str = "epsilon per element (log scale)",
    ylabel: str = "attack success",
    size: tuple[int, int] = (520, 340),
    log_x: bool = True,
) -> Path:
    """A simple line chart with y in [0, 1] and a legend; one line per series."""
    if not xs:
        raise ValueError("line plot needs at least one x value")
    w, h = size
    left, right, top, bottom = 50, 150, 28, 40
    img = Image.new("RGB", size, (255, 255, 255))
    d = ImageDraw.Draw(img)
    fx = [math.log(x) if log_x else x for x in xs]
    lo, hi = min(fx), max(fx)
    span = (hi - lo) or 1.0

    def px(i: int) -> float:
        return left + (fx[i] - lo) / span * (w - left - right)

    def py(v: float) -> float:
        return top + (1 - max(0.0, min(1.0, v))) * (h - top - bottom)

    d.rectangle([left, top, w - right, h - bottom], outline=(0, 0, 0))
    for v in (0.0, 0.25, 0.5, 0.75, 1.0):
        d.line([left - 3, py(v), left, py(v)], fill=(0, 0, 0))
        d.text((8, py(v) - 6), f"{v:.2f}", fill=(0, 0, 0))
    for i, x in enumerate(xs):
        d.line([px(i), h - bottom, px(i), h - bottom + 3], fill=(0, 0, 0))
        d.text((px(i) - 8, h - bottom + 6), f"{x:g}", fill=(0, 0, 0))
    d.text((left, h - 14), xlabel, fill=(0, 0, 0))
    d.text((left, 8), title or ylabel, fill=(0, 0, 0))
    for k, (name, ys) in enumerate(series.items()):
        c = COLOURS[k % len(COLOURS)]
        pts = [(px(i), py(v)) for i, v in enumerate(ys) if v is not None and math.isfinite(v)]
        if len(pts) > 1:
            d.line(pts, fill=c, width=2)
        for x, y in pts:
            d.ellipse([x - 3, y - 3, x + 3, y + 3], fill=c)
        d.text((w - right + 8, top + 14 * k), name[:22], fill=c)
    out = Path(path)
    img.save(out)
    return out
