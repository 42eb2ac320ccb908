"""Self-contained HTML pages for a person to look at: the label run's report and the ledger's spend.

Each page is a Jinja2 template in ``templates/`` (``label.html.j2``, ``budget.html.j2``) that extends one
layout (``layout.html.j2``: the head, the style, an optional warning banner, the title, the summary band)
and draws its tables, image grids and charts with the macros of ``parts.html.j2``; the modules beside
this one only compute what the page says. One page is one file: images are embedded as ``data:`` PNGs,
charts as inline SVG drawn by matplotlib (:mod:`ldpclient.io.charts`), the style is inline, there is no
script, and a Content-Security-Policy forbids fetching anything (no network, no other file), so a page
opens offline and can be mailed as it is.

Autoescaping is on, and every value a template writes goes through :func:`text` first: HTML-escaped,
with control characters and bidirectional overrides made visible (:func:`ldpclient.io.text.printable`),
so no peer or file name (class names, file names, server messages, teacher addresses) can add markup,
run a script or reorder a line. Only :func:`svg` marks text as markup, and only for matplotlib's output.
"""

from __future__ import annotations

import base64
import html
import io
from functools import lru_cache
from typing import TYPE_CHECKING

from markupsafe import Markup

from ..io.text import printable
from ..names import VERDICT_LEVELS

if TYPE_CHECKING:
    import jinja2
    import torch

#: Nothing may be fetched: images only from data: URLs, style only inline, no script, no form, no frame.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def text(value: object) -> str:
    """``value`` as HTML text: control and bidi characters escaped visibly, then ``& < > " '`` escaped."""
    return html.escape(printable(value), quote=True)


def _finalize(value: object) -> object:
    """What a template writes for ``{{ value }}``: markup as it is (the SVG of :func:`svg`), anything else as
    :func:`text`."""
    return value if isinstance(value, Markup) else Markup(text(value))


def level_class(level: object) -> str:
    """The CSS class of a verdict's level (``not worth having`` -> ``not-worth-having``); '' for anything else."""
    return "-".join(level.split()) if isinstance(level, str) and level in VERDICT_LEVELS else ""


@lru_cache(maxsize=1)
def _environment() -> "jinja2.Environment":
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("ldpclient.report", "templates"),
        autoescape=True,
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["level_class"] = level_class
    env.globals["CSP"] = CSP
    return env


def render(template: str, **context: object) -> str:
    """The document ``templates/<template>`` makes of ``context`` (see the module doc)."""
    return _environment().get_template(template).render(**context)


def svg(element: str) -> Markup:
    """An ``<svg>`` element drawn by matplotlib (:mod:`ldpclient.io.charts`), to write into a page as it is."""
    if not element.startswith("<svg"):
        raise ValueError("not an SVG element drawn by matplotlib")
    return Markup(element)


def png_data_uri(image: "torch.Tensor") -> str:
    """A ``(C, H, W)`` tensor with values in ``[0, 1]`` (clipped; C 1 or 3) as a ``data:image/png`` URI."""
    from ..io.folders import to_uint8_image

    buffer = io.BytesIO()
    to_uint8_image(image.detach().float().clamp(0.0, 1.0)).save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def bar_chart(title: str, counts: "list[int] | list[float]", names: "list[str]", *, ylabel: str = "images",
              xlabel: str | None = None, colour: str = "#3b6ea8") -> tuple[str, Markup]:
    """A chart for the ``chart`` macro: its ``title`` and the SVG of one bar per count (see
    :func:`ldpclient.io.charts.bar_chart_svg`)."""
    from ..io.charts import bar_chart_svg

    return title, svg(bar_chart_svg(counts, names, ylabel=ylabel, xlabel=xlabel, colour=colour))
