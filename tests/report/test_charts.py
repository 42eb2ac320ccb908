"""Charts from matplotlib: the pages' bar charts as inline SVG, the audit's figures as PNG files; names a
peer controls drawn as text, never as markup or mathtext; and no page or chart assembled by hand in the package."""

from __future__ import annotations

import re
from pathlib import Path
from xml.etree import ElementTree

import torch
from PIL import Image

import ldpclient
from ldpclient.audit.report import write_report
from ldpclient.io.charts import bar_chart_svg, image_rows_png, line_chart_png
from ldpclient.io.output import preview_grid

HOSTILE = ["<script>alert(1)</script>", "$\\frac{1}{0}$", "a&b \u202eevil\x1b[2J", "plain"]
SVG = "{http://www.w3.org/2000/svg}"


def _texts(svg: str) -> list[str]:
    return ["".join(t.itertext()) for t in ElementTree.fromstring(svg).iter(f"{SVG}text")]


def test_a_bar_chart_is_one_svg_element_with_its_names_as_text() -> None:
    svg = bar_chart_svg([3, 0, 12, 5], HOSTILE, ylabel="images")
    root = ElementTree.fromstring(svg)  # well-formed XML: every name escaped by matplotlib's writer
    assert root.tag == f"{SVG}svg" and svg.startswith("<svg")
    assert re.fullmatch(r"\d+", root.get("width") or "") and re.fullmatch(r"\d+", root.get("height") or "")
    assert root.get("viewBox")  # the page's style may shrink it to its container
    texts = _texts(svg)
    assert "<script>ale..." in texts  # shortened to 14 characters, drawn as text
    assert "$\\frac{1}{0}$" in texts  # no mathtext: drawn as typed
    assert "a&b \\u202ee..." in texts  # the bidi override made visible (then shortened)
    assert {"3", "0", "12", "5"} <= set(texts) and "images" in texts  # the bar values and the axis label
    assert "<script" not in svg and "\u202e" not in svg and "\x1b" not in svg
    assert not root.findall(f".//{SVG}script") and "metadata" not in svg and "Date" not in svg


def test_a_chart_is_the_same_for_the_same_counts() -> None:
    assert bar_chart_svg([1, 2], ["a", "b"], ylabel="images") == bar_chart_svg([1, 2], ["a", "b"], ylabel="images")


def test_many_bars_make_a_wider_chart_with_slanted_names() -> None:
    names = [f"{k / 20:.3g}-{(k + 1) / 20:.3g}" for k in range(21)]
    few = ElementTree.fromstring(bar_chart_svg([1, 2], ["0", "1"], ylabel="images"))
    many = bar_chart_svg([1] * 21, names, ylabel="images")
    assert int(ElementTree.fromstring(many).get("width") or 0) > int(few.get("width") or 0)
    assert "rotate(-45" in many and "rotate(-45" not in ElementTree.tostring(few, encoding="unicode")


def test_the_audit_draws_its_curves_and_reconstructions_with_matplotlib(tmp_path: Path) -> None:
    rows = [{"epsilon_element": e, "augment": augment, "linkage_top1": min(1.0, e / 10), "recon_ssim": min(1.0, e / 20)}
            for e in (0.5, 2.0, 8.0) for augment in ("none", "rand", "sup")]
    examples = {"original": torch.rand(4, 1, 8, 8), "query (SIDP)": torch.rand(4, 1, 8, 8),
                "reconstruction": torch.rand(4, 3, 8, 8)}
    files = write_report({"summary": rows}, tmp_path, examples)
    with Image.open(files["vs_epsilon_png"]) as curves:
        assert curves.size == (700, 400)
        # lines, markers and text, not a blank canvas
        assert len(curves.convert("RGB").getcolors(maxcolors=100_000) or []) > 20
    mosaic = preview_grid([list(images) for images in examples.values()], scale=3)
    with Image.open(files["reconstructions_png"]) as grid:
        # the images at 3 px per pixel, and 1.4 inches (140 px) for the rows' names beside them
        assert grid.size == (mosaic.width + 140, mosaic.height)


def test_a_line_chart_leaves_out_missing_points_and_refuses_no_x(tmp_path: Path) -> None:
    out = line_chart_png([1.0, 10.0], {"a": [0.2, None], "b": [0.1, float("nan")]}, tmp_path / "c.png",
                         title="t", xlabel="x", ylabel="y")
    assert out.is_file()
    try:
        line_chart_png([], {}, tmp_path / "d.png", title="t", xlabel="x", ylabel="y")
    except ValueError as err:
        assert "at least one x" in str(err)
    else:
        raise AssertionError("no x values accepted")
    try:
        image_rows_png({"empty": torch.zeros(0, 1, 4, 4)}, tmp_path / "e.png")
    except ValueError as err:
        assert "no images" in str(err)
    else:
        raise AssertionError("no images accepted")


def test_no_page_or_chart_is_assembled_by_hand_in_the_package() -> None:
    """HTML lives in the templates (report/templates/), charts come from matplotlib: no markup in Python strings
    (a tag named in a docstring's ``code`` is not markup), no drawing on a Pillow canvas."""
    package = Path(ldpclient.__file__).parent
    markup = re.compile(r"""["'][^"'\n`]*(?<!\?P)<(div|p|table|tr|td|th|section|h[1-6]|figure|dl|dt|dd|svg|rect|img|"""
                        r"""text|span|html|body|style)[ >/]""")
    found = []
    for path in package.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        found += [f"{path.relative_to(package)}: {m.group(0)}" for m in markup.finditer(source)]
        if "ImageDraw" in source:
            found.append(f"{path.relative_to(package)}: ImageDraw")
    assert found == []
    templates = sorted(p.name for p in (package / "report" / "templates").iterdir())
    assert templates == ["budget.html.j2", "label.html.j2", "layout.html.j2", "parts.html.j2", "style.css"]
