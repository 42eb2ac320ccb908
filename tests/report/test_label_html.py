"""``label --html``: the page beside the labels, built from a real run against the mock teacher and
an in-process teacher with hostile class names, checked as HTML and in a real headless Chromium."""

from __future__ import annotations

import html.parser
import http.server
import json
import re
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

import ldpclient
import mock_server
from ldpclient.cli.commands import app
from ldpclient.report.html import CSP, png_data_uri, render, text
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer.result import SAMPLE_SIZE
from support.browser import open_page


class _Tags(html.parser.HTMLParser):
    """Every start tag of a document with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(document: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(document)
    return parser.tags


def _folder(root: Path, n: int = 30, size: int = 8, names: list[str] | None = None) -> Path:
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for k in range(n):
        name = names[k] if names and k < len(names) else f"img{k:02d}.png"
        Image.fromarray(rng.integers(0, 256, (size, size), dtype=np.uint8)).save(root / name)
    return root


def _clean_uris(folder: Path) -> set[str]:
    """The data URIs the page would use for the folder's clean images (8-bit grey PNGs, [0, 1] units)."""
    out = set()
    for path in sorted(folder.iterdir()):
        grey = torch.from_numpy(np.asarray(Image.open(path), dtype=np.float32) / 255.0)[None]
        out.add(png_data_uri(grey))
    return out


def test_text_escapes_markup_controls_and_bidi_overrides() -> None:
    assert text('<script>alert("x")</script>') == "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"
    assert text("a\x1b[2Jb\u202ec") == "a\\x1b[2Jb\\u202ec"
    assert text("it's & more") == "it&#x27;s &amp; more"


def test_a_page_fetches_nothing_and_holds_no_script() -> None:
    doc = render("layout.html.j2", title="<b>title</b>", banner="<i>warning</i>", summary=None)
    tags = _tags(doc)
    assert ("meta", {"http-equiv": "Content-Security-Policy", "content": CSP}) in tags
    assert "default-src 'none'" in CSP and "img-src data:" in CSP
    assert not [t for t, _ in tags if t in ("script", "b", "i", "iframe", "link", "object")]
    assert "&lt;b&gt;title&lt;/b&gt;" in doc and "&lt;i&gt;warning&lt;/i&gt;" in doc


def test_png_data_uri_is_the_image_at_its_size() -> None:
    import base64
    import io

    image = torch.zeros(3, 5, 7)
    image[0] = 1.0
    uri = png_data_uri(image)
    assert uri.startswith("data:image/png;base64,")
    decoded = Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))
    assert decoded.size == (7, 5) and decoded.getpixel((3, 2)) == (255, 0, 0)


def test_label_html_writes_the_page_beside_the_labels_without_clean_images(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "private")
    out = tmp_path / "out" / "labels.csv"
    with mock_server.serve(model="trivial", image_size=8, channels=1, price_per_image=0.01) as srv:
        res = CliRunner().invoke(app, [
            "label", str(folder), "--teacher", srv.model_url, "--epsilon", "50", "--html", "--baseline",
            "--price", "0.01", "--money-cap", "100", "--queries", "200", "--epochs", "1",
            "--state-dir", str(tmp_path / "state"), "--output", str(out),
        ], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    page_path = tmp_path / "out" / "labels.html"
    assert page_path.exists() and re.search(rf"page\s+{re.escape(str(page_path))}", res.output)  # the summary names it
    report = json.loads((tmp_path / "out" / "labels.report.json").read_text())
    assert report["outputs"]["html"] == str(page_path)
    doc = page_path.read_text(encoding="utf-8")
    tags = _tags(doc)
    images = [a["src"] for t, a in tags if t == "img"]
    assert len(images) == 2 * SAMPLE_SIZE  # releases and queries; no clean image
    assert all(src and src.startswith("data:image/png;base64,") for src in images)
    assert not set(images) & _clean_uris(folder)
    assert "PRIVATE" not in doc and "img00.png" not in doc  # no file name without --html-private
    assert not [t for t, _ in tags if t == "script"]
    for words in ("per image (record)", "epsilon 50", "queries sent (paid)", "data-free baseline",
                  "Its student (small_cnn)", "the teacher&#x27;s answers to the queries", "Time per stage",
                  "money cap"):
        assert words in doc, words
    assert report["queries"]["answers_histogram"] is not None and sum(report["queries"]["answers_histogram"]) == 200
    assert sum(report["baseline"]["label_histogram"]) == 30
    assert sum(report["adaptation"]["unadapted_label_histogram"]) == 30
    # the stages under the names the progress bars use; a part of one shown as such, no internal name
    assert {"adapting", "adapting_predict"} <= set(report["timings"]) and "adapt_predict" not in doc
    assert "<td>  of which predict</td>" in doc


def test_html_private_shows_the_clean_images_and_says_so_on_top(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "private")
    with mock_server.serve(model="trivial", image_size=8, channels=1) as srv:
        result = ldpclient.label(folder, srv.model_url, epsilon=50, queries=200, epochs=1, html_private=True,
                                 state_dir=tmp_path / "state", output=tmp_path / "labels.csv")
    doc = Path(result.report["outputs"]["html"]).read_text(encoding="utf-8")
    body = doc.split("<body>", 1)[1]
    assert body.startswith('<div class="banner">This page holds PRIVATE images')
    images = {a["src"] for t, a in _tags(doc) if t == "img"}
    first = {png_data_uri(torch.from_numpy(np.asarray(Image.open(folder / f"img{k:02d}.png"),
                                                      dtype=np.float32)[None] / 255.0)) for k in range(SAMPLE_SIZE)}
    assert first <= images  # the clean images of the releases shown
    assert "img00.png" in doc


def test_html_needs_a_labels_file_in_the_library(tmp_path: Path) -> None:
    teacher = LocalTeacher(lambda x: torch.zeros(len(x), dtype=torch.long), (1, 4, 4), 2)
    with pytest.raises(ValueError, match="--html writes its page beside the labels"):
        ldpclient.label(torch.rand(4, 1, 4, 4), teacher, html=True, state_dir=tmp_path / "s")


class _Canary(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        _Canary.hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def canary():
    """A server on 127.0.0.1 that records every request: a page that fetches anything would hit it."""
    _Canary.hits = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Canary)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _hostile_run(tmp_path: Path, canary: str) -> tuple[Path, list[str], Path]:
    """A run whose class names and file names are markup aimed at the page (and at the canary)."""
    # the teacher answers 0 or 1 by the first pixel: both hostile names are among its answers
    classes = ["<script>alert(1)</script>", f'<img src="{canary}/leak-class">', "a&b \u202eevil", "plain"]
    names = ['<img src=x onerror="alert(2)">.png', "<b>bold.png"]
    folder = _folder(tmp_path / "private", n=24, size=8, names=names)

    def first_pixel(x: torch.Tensor) -> torch.Tensor:
        return (x.reshape(len(x), -1)[:, 0] > 0.5).long()

    teacher = LocalTeacher(first_pixel, (1, 8, 8), 4, class_names=classes, name="hostile")
    result = ldpclient.label(folder, teacher, epsilon=50, queries=200, epochs=1, html_private=True, baseline=True,
                             state_dir=tmp_path / "state", output=tmp_path / "labels.csv")
    return Path(result.report["outputs"]["html"]), classes, folder


def test_hostile_class_and_file_names_are_text_in_the_page(tmp_path: Path, canary: str) -> None:
    page_path, classes, _ = _hostile_run(tmp_path, canary)
    doc = page_path.read_text(encoding="utf-8")
    tags = _tags(doc)
    assert not [t for t, _ in tags if t in ("script", "b", "iframe", "link", "object")]
    assert all((a.get("src") or "").startswith("data:image/png;base64,") for t, a in tags if t == "img")
    assert not [a for _, a in tags if "onerror" in a]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in doc and "a&amp;b \\u202eevil" in doc
    assert "&lt;img src=x onerror=&quot;alert(2)&quot;&gt;.png" in doc


def test_the_page_renders_in_a_real_browser_with_its_images_and_fetches_nothing(tmp_path: Path, canary: str) -> None:
    page_path, classes, _ = _hostile_run(tmp_path, canary)
    expression = """JSON.stringify({
        images: Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]),
        scripts: document.scripts.length,
        text: document.body.innerText,
        headings: Array.from(document.querySelectorAll('h2')).map(h => h.textContent),
        bannerTop: document.body.firstElementChild.className,
        width: document.documentElement.scrollWidth,
        summary: [document.querySelector('dl.summary').className, document.querySelector('dl.summary').innerText],
        charts: Array.from(document.querySelectorAll('figure.chart svg')).map(
            s => [s.getBoundingClientRect().width, s.getBoundingClientRect().height,
            s.querySelectorAll('text').length]),
    })"""
    visit = open_page(page_path, expression, width=1280, height=900, screenshot=tmp_path / "page.png")
    seen = json.loads(visit.value)
    assert len(seen["images"]) == 3 * SAMPLE_SIZE  # clean, releases, queries
    assert all(done and w == 8 and h == 8 for done, w, h in seen["images"]), seen["images"]
    assert seen["scripts"] == 0
    assert "<script>alert(1)</script>" in seen["text"]  # shown as text, not run
    assert '<img src=x onerror="alert(2)">.png' in seen["text"]
    assert seen["bannerTop"] == "banner" and "This page holds PRIVATE images" in seen["text"]
    assert seen["text"].index("epsilon per image") < seen["text"].index("What the labels are worth")
    assert seen["headings"][:4] == ["What the labels are worth", "The guarantee, in plain words",
                                    "What the teacher was sent", "Counts and money"]
    assert [u for u in visit.requests if not u.startswith(("data:", "file:"))] == []
    assert visit.requests[0] == page_path.resolve().as_uri()
    assert _Canary.hits == [] and visit.failed == []
    assert (tmp_path / "page.png").stat().st_size > 10_000
    assert seen["summary"][0].split() in (
        ["summary", "usable"],
        ["summary", "doubtful"],
        ["summary", "not-worth-having"],
    )
    assert "epsilon per image" in seen["summary"][1] and "money this run" in seen["summary"][1]
    assert seen["width"] <= 1280  # nothing wider than the window
    # four charts drawn by matplotlib (labels written, before adaptation, data-free, the teacher's answers), each
    # with its names and values as text
    assert len(seen["charts"]) == 4 and all(w > 150 and h > 100 and n > 10 for w, h, n in seen["charts"]), seen[
        "charts"
    ]


#: In the page: the words of table cells and of the summary band that a line break cut in two (a word is cut when
#: its text spans two line boxes; a line may end after a hyphen, as in print, so the parts of ``low-frequency``
#: count as words), but for words longer than 24 characters (file names), which may have to be.
_BROKEN_WORDS = """Array.from(document.querySelectorAll('td, th, dl.summary dd, dl.summary dt')).flatMap(cell => {
    const broken = [];
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (const m of node.data.matchAll(/[^\\s-]+/g)) {
            if (m[0].length > 24) continue;
            const range = document.createRange();
            range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
            const tops = new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top)));
            if (tops.size > 1) broken.push(m[0]);
        }
    }
    return broken;
})"""


@pytest.mark.parametrize("width", [390, 1280])
def test_the_page_reads_on_a_phone_and_on_a_desktop(tmp_path: Path, canary: str, width: int) -> None:
    """At 390 px (a phone) and 1280 px nothing is wider than the screen (tables scroll inside their box, charts
    shrink), no word or number of a table or of the summary band is broken inside, and the thumbnails fill the
    width (less than one column left empty)."""
    page_path, _, _ = _hostile_run(tmp_path, canary)
    expression = """JSON.stringify({
        width: document.documentElement.scrollWidth, window: window.innerWidth,
        wide: Array.from(document.querySelectorAll('body > *, section > *')).filter(
            e => e.getBoundingClientRect().right > window.innerWidth + 1).map(e => e.tagName + '.' + e.className),
        summary: document.querySelector('dl.summary').getBoundingClientRect().width,
        charts: Array.from(document.querySelectorAll('figure.chart svg')).map(s => s.getBoundingClientRect().right),
        broken: BROKEN,
        grids: Array.from(document.querySelectorAll('.grid')).map(g => {
            const box = g.getBoundingClientRect();
            const figures = Array.from(g.children).map(f => f.getBoundingClientRect());
            return [box.right - Math.max(...figures.map(f => f.right)), figures[0].width, figures.length];
        }),
    })""".replace("BROKEN", _BROKEN_WORDS)
    visit = open_page(page_path, expression, width=width, height=844, screenshot=tmp_path / "page.png")
    seen = json.loads(visit.value)
    assert seen["window"] <= width and seen["width"] <= seen["window"], seen
    assert seen["wide"] == [] and 0 < seen["summary"] <= seen["window"]
    assert len(seen["charts"]) == 4 and max(seen["charts"]) <= seen["window"]  # each chart shrunk to the screen
    assert seen["broken"] == [], seen["broken"]
    assert seen["grids"] and all(empty < figure for empty, figure, _ in seen["grids"]), seen["grids"]
    assert (tmp_path / "page.png").stat().st_size > 10_000
