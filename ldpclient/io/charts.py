"""Charts drawn by matplotlib: bar charts as inline SVG for the pages, line charts as PNG files for the audit.

matplotlib is imported when a chart is drawn (it costs about half a second), and only through its
object-oriented API (a :class:`~matplotlib.figure.Figure` of its own, no pyplot and no global figure),
inside an ``rc_context`` that keeps every text a text: no TeX, no ``$...$`` mathtext (a class name
``$x$`` is drawn as typed), fonts as ``<text>`` elements rather than paths, and no date in the file.
Every name a peer or a file controls goes through :func:`ldpclient.io.text.printable` before it is
drawn (control characters and bidi overrides made visible); matplotlib's SVG writer escapes ``& < >``.
"""

from __future__ import annotations

import io
import math
import re
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence, cast

from .text import printable

if TYPE_CHECKING:
    import torch
    from matplotlib.figure import Figure

#: The pages' text colour and font size (points; the SVG is drawn at 1 pt per CSS pixel).
_INK = "#1b1b1b"
_RC = {
    "text.parse_math": False,
    "text.usetex": False,
    "svg.fonttype": "none",
    "svg.hashsalt": "ldpclient",
    "font.size": 10,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica"],
    "text.color": _INK,
    "axes.edgecolor": "#888888",
    "axes.labelcolor": _INK,
    "xtick.color": _INK,
    "ytick.color": _INK,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
#: Characters of a bar's name drawn under it (the page's table gives the whole name).
NAME_CHARS = 14


def _save_png(fig: "Figure", path: Path, *, dpi: int) -> None:
    """``fig`` as a PNG at ``path``, written atomically."""
    from .output import atomic_write_bytes

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    atomic_write_bytes(path, buffer.getvalue())


@contextmanager
def _figure(width_in: float, height_in: float) -> Iterator["Figure"]:
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(cast(Any, _RC)):  # its stubs type the keys as a Literal of every rcParam
        yield Figure(figsize=(width_in, height_in), layout="constrained")


def bar_chart_svg(counts: Sequence[float], names: Sequence[str], *, ylabel: str, xlabel: str | None = None,
                  colour: str = "#3b6ea8") -> str:
    """One bar per count with its name (shortened to :data:`NAME_CHARS`, made printable) under it, as an ``<svg>``
    element to inline in a page: ``width``/``height`` in CSS pixels, a ``viewBox``, so that the page's style can
    shrink it to its container. The width grows with the number of bars (at most about 700 px); whole counts get
    whole ticks."""
    from matplotlib.ticker import MaxNLocator

    n = max(len(counts), 1)
    width = min(max(2.2 + 0.32 * n, 3.4), 9.7)
    with _figure(width, 2.9) as fig:
        ax = fig.add_subplot()
        positions = list(range(len(counts)))
        shown = [printable(name, max_chars=NAME_CHARS) for name in names]
        # names side by side when they fit under their bars (about 5.5 px per character at 8 pt), slanted otherwise
        slant = max((len(name) for name in shown), default=0) * 5.5 > width * 72 / n * 0.9
        bars = ax.bar(positions, counts, color=colour, width=0.8)
        ax.bar_label(bars, labels=[_count(c) for c in counts], fontsize=8, padding=1)
        ax.set_xticks(positions, shown, rotation=45 if slant else 0, ha="right" if slant else "center",
                      rotation_mode="anchor", fontsize=8)
        ax.set_ylabel(printable(ylabel))
        if xlabel:
            ax.set_xlabel(printable(xlabel))
        if all(float(c).is_integer() for c in counts):
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, max(max(counts, default=0), 1) * 1.15)
        ax.margins(x=0.01)
        return _svg(fig)


def _count(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _svg(fig: "Figure") -> str:
    """The figure as one ``<svg>`` element (no XML prolog, no doctype, no date), its size in CSS pixels."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    document = buffer.getvalue()
    root = re.sub(r"\s*<metadata>.*?</metadata>", "", document[document.index("<svg"):], count=1, flags=re.S)
    return re.sub(r'(width|height)="([\d.]+)pt"', lambda m: f'{m[1]}="{float(m[2]):.0f}"', root, count=2)


def line_chart_png(
    xs: Sequence[float],
    series: Mapping[str, Sequence[float | None]],
    path: str | Path,
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    log_x: bool = True,
    y_range: tuple[float, float] | None = (0.0, 1.0),
) -> Path:
    """One line per series against ``xs`` (missing or non-finite points left out), with a legend beside the axes,
    written to ``path`` as a PNG (100 dpi, 7 x 4 inches); returns ``path``."""
    if not xs:
        raise ValueError("a line chart needs at least one x value")
    with _figure(7.0, 4.0) as fig:
        ax = fig.add_subplot()
        for name, ys in series.items():
            points = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None and math.isfinite(y)]
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=printable(name))
        if log_x:
            ax.set_xscale("log")
        ax.set_xticks(list(xs), [f"{x:g}" for x in xs])
        ax.minorticks_off()
        if y_range is not None:
            ax.set_ylim(*y_range)
        ax.set_xlabel(printable(xlabel))
        ax.set_ylabel(printable(ylabel))
        ax.set_title(printable(title))
        ax.grid(alpha=0.3)
        if series:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        out = Path(path)
        _save_png(fig, out, dpi=100)
        return out


def image_rows_png(rows: "Mapping[str, torch.Tensor | "
                         "Iterable[torch.Tensor]]", path: str | Path, *, scale: int = 3) -> Path:
    """One row of images per entry (an ``(N, C, H, W)`` tensor or ``(C, H, W)`` images, in ``[0, 1]``, e.g.
    originals / queries / reconstructions), the
    entry's name beside its row, written to ``path`` as a PNG at ``scale`` screen pixels per image pixel."""
    from .output import preview_grid

    named = [(name, images) for name, images in ((n, list(i)) for n, i in rows.items()) if images]
    if not named:
        raise ValueError("no images to draw")
    grid = preview_grid([images for _, images in named], scale=scale)
    dpi = 100
    label_in = 1.4
    width_in = grid.width / dpi + label_in
    with _figure(width_in, grid.height / dpi) as fig:
        fig.set_layout_engine("none")
        ax = fig.add_axes((label_in / width_in, 0.0, 1 - label_in / width_in, 1.0))
        ax.imshow(grid, interpolation="nearest")
        row_height = grid.height / len(named)
        ax.set_yticks([row_height * (k + 0.5) for k in range(len(named))],
                      [printable(name, max_chars=20) for name, _ in named])
        ax.set_xticks([])
        ax.tick_params(axis="y", length=0)
        for spine in ax.spines.values():
            spine.set_visible(False)
        out = Path(path)
        _save_png(fig, out, dpi=dpi)
        return out
