"""Self-contained HTML pages for a person to look at: the label run's report and the ledger's spend.

One page is one file: images are embedded as ``data:`` PNGs, the style is inline, there is no
script, and a Content-Security-Policy forbids fetching anything (no network, no other file), so a
page opens offline and can be mailed as it is. Every text that did not come from ldpclient itself
(class names, file names, server messages, teacher addresses) goes through :func:`text`: HTML-escaped,
with control characters and bidirectional overrides made visible (:func:`ldpclient.io.text.printable`),
so no peer or file name can add markup, run a script or reorder a line.

A leaf module like :mod:`ldpclient.io.output`: torch and Pillow are imported when an image is drawn.
"""

from __future__ import annotations

import base64
import html
import io
from typing import TYPE_CHECKING, Iterable, Sequence

from ..io.text import printable

if TYPE_CHECKING:
    import torch

#: Nothing may be fetched: images only from data: URLs, style only inline, no script, no form, no frame.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

_STYLE = """
body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1100px;padding:1em 1.5em;
color:#1b1b1b;background:#fff}
h1{font-size:1.5em;margin:.2em 0 .4em}h2{font-size:1.15em;margin:1.6em 0 .5em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.3em 0 .8em}td,th{padding:.2em .8em .2em 0;text-align:left;vertical-align:top}
th{font-weight:600;color:#444}td.n{text-align:right;font-variant-numeric:tabular-nums}
.banner{background:#fff3cd;border:2px solid #d39e00;padding:.6em 1em;margin:.5em 0 1em;font-weight:600}
.verdict{padding:.6em 1em;margin:.5em 0 .8em;font-weight:600;font-size:1.1em;border:2px solid}
.usable{background:#e6f4ea;border-color:#2e7d32}.doubtful{background:#fff3cd;border-color:#d39e00}
.not-worth-having{background:#fde7e9;border-color:#c62828}
.note{color:#555;font-size:.92em}.grid{display:flex;flex-wrap:wrap;gap:8px;margin:.3em 0 1em}
figure{margin:0;text-align:center;font-size:.75em;color:#333;width:120px}
figure img{width:96px;height:96px;image-rendering:pixelated;border:1px solid #ccc;display:block;margin:0 auto}
figcaption{overflow-wrap:anywhere}.bars{display:flex;flex-wrap:wrap;gap:18px}
figure.chart{width:auto;text-align:left;margin:.4em 0;max-width:100%}svg text{font:11px system-ui,sans-serif}
svg{max-width:100%;height:auto}.wide{overflow-x:auto;max-width:100%}td{overflow-wrap:anywhere}
.summary{display:flex;flex-wrap:wrap;gap:.4em 1.6em;padding:.6em 1em;margin:.5em 0 1em;border-width:2px;border-style:solid}
.summary div{min-width:7em}.summary dt{font-size:.8em;color:#444}.summary dd{margin:0;font-weight:600;font-size:1.1em}
@media (max-width:600px){body{padding:.6em .8em;font-size:14px}td,th{padding:.2em .5em .2em 0}}
"""


def text(value: object) -> str:
    """``value`` as HTML text: control and bidi characters escaped visibly, then ``& < > " '`` escaped."""
    return html.escape(printable(value), quote=True)


def png_data_uri(image: "torch.Tensor") -> str:
    """A ``(C, H, W)`` tensor with values in ``[0, 1]`` (clipped; C 1 or 3) as a ``data:image/png`` URI."""
    from ..io.folders import to_uint8_image

    buffer = io.BytesIO()
    to_uint8_image(image.detach().float().clamp(0.0, 1.0)).save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def image_grid(cells: Iterable[tuple["torch.Tensor", str]]) -> str:
    """A row of images (``(C, H, W)`` in ``[0, 1]``), each with its caption (escaped)."""
    figures = "".join(
        f'<figure><img src="{png_data_uri(image)}" alt="{text(caption)}"><figcaption>{text(caption)}</figcaption>'
        "</figure>"
        for image, caption in cells
    )
    return f'<div class="grid">{figures}</div>'


def table(rows: Iterable[Sequence[object]], header: Sequence[str] | None = None) -> str:
    """A table of escaped cells; numbers are right-aligned."""
    head = "<tr>" + "".join(f"<th>{text(h)}</th>" for h in header) + "</tr>" if header else ""
    body = "".join(
        "<tr>" + "".join(
            f'<td class="n">{text(c)}</td>' if isinstance(c, (int, float)) and not isinstance(c, bool)
            else f"<td>{text(c)}</td>" for c in row
        ) + "</tr>"
        for row in rows
    )
    return f'<div class="wide"><table>{head}{body}</table></div>'


def bar_chart(title: str, counts: Sequence[float], names: Sequence[str], *, colour: str = "#3b6ea8") -> str:
    """A bar chart as inline SVG: one bar per count, its name (escaped) and value beneath/above it."""
    n = max(len(counts), 1)
    bar, gap, height, label_h = max(10, min(40, 480 // n)), 4, 120, 46
    width = n * (bar + gap) + gap
    top = max(max(counts, default=0), 1)
    parts = []
    for k, (count, name) in enumerate(zip(counts, names, strict=True)):
        x = gap + k * (bar + gap)
        h = round(height * count / top)
        value = f"{count:g}" if isinstance(count, float) else str(count)
        parts.append(
            f'<rect x="{x}" y="{14 + height - h}" width="{bar}" height="{h}" fill="{colour}">'
            f"<title>{text(name)}: {text(value)}</title></rect>"
            f'<text x="{x + bar / 2}" y="{12 + height - h}" text-anchor="middle">{text(value)}</text>'
            f'<text transform="translate({x + bar / 2},{height + 26}) rotate(45)">{text(printable(name, max_chars=14))}'
            "</text>"
        )
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 60}" height="{height + 14 + label_h}" '
           f'viewBox="0 0 {width + 60} {height + 14 + label_h}" role="img" aria-label="{text(title)}">'
           f'{"".join(parts)}</svg>')
    return f'<figure class="chart"><figcaption><strong>{text(title)}</strong></figcaption>{svg}</figure>'


def page(title: str, body: str, *, banner: str | None = None) -> str:
    """The whole document: ``title`` (escaped), an optional warning ``banner`` (escaped) on top, ``body``
    (already-built HTML from the functions above)."""
    top = f'<div class="banner">{text(banner)}</div>' if banner else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="referrer" content="no-referrer"><meta name="viewport" content="width=device-width">'
        f"<title>{text(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{top}<h1>{text(title)}</h1>{body}</body></html>\n"
    )


def _level_class(level: str | None) -> str:
    """The CSS class of a verdict's level (``not worth having`` -> ``not-worth-having``); '' for anything else."""
    return "-".join(level.split()) if level in ("usable", "doubtful", "not worth having") else ""


def verdict_band(level: str, headline: str) -> str:
    """A coloured band with the verdict on a run's labels (``level``: usable, doubtful, not worth having)."""
    css = _level_class(level) or "doubtful"
    return f'<div class="verdict {css}">{text(headline)}</div>'


def summary_band(level: str | None, items: Sequence[tuple[str, str]]) -> str:
    """The band a page opens with: the run's key figures (``(name, value)``, both escaped), framed in the colour of
    the verdict's ``level`` (usable, doubtful, not worth having; None: neutral)."""
    css = _level_class(level)
    cells = "".join(f"<div><dt>{text(name)}</dt><dd>{text(value)}</dd></div>" for name, value in items)
    return f'<dl class="summary {css}">{cells}</dl>'


def section(heading: str, *parts: str) -> str:
    """A titled section: ``heading`` (escaped) then the already-built ``parts``."""
    return f"<section><h2>{text(heading)}</h2>{''.join(parts)}</section>"


def paragraph(words: str, *, note: bool = False) -> str:
    """A paragraph of plain words (escaped); ``note``: smaller, grey."""
    return f'<p class="note">{text(words)}</p>' if note else f"<p>{text(words)}</p>"
