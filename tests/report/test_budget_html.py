"""``ldpclient budget --html``: the ledger's spend per image and per teacher, and the images at the cap named
from a folder the user points at (the ledger holds no names)."""

from __future__ import annotations

import html.parser
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

import ldpclient
from ldpclient.cli.commands import app
from ldpclient.privacy import laplace
from ldpclient.privacy.ledger import Ledger, cap_reached
from ldpclient.report.budget_page import BINS, spend_histogram
from ldpclient.teachers.local import LocalTeacher
from support.browser import open_page


def _folder(root: Path, names: list[str], seed: int = 1) -> Path:
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(root / name)
    return root


def _teacher(name: str) -> LocalTeacher:
    return LocalTeacher(lambda x: (x.reshape(len(x), -1).mean(1) > 0.5).long(), (1, 8, 8), 2, name=name)


def _tags(document: str) -> list[str]:
    seen: list[str] = []

    class P(html.parser.HTMLParser):
        def handle_starttag(self, tag: str, attrs: object) -> None:
            seen.append(tag)

    P().feed(document)
    return seen


def test_the_ledger_gives_spend_per_record_per_scope_and_per_source_without_keys(tmp_path: Path) -> None:
    records = torch.rand(5, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    ids = [f"file{k}".encode() for k in range(5)]
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        ledger.release(laplace(2.0, per="element"), records, scope="a", sources=ids)
        ledger.release(laplace(3.0, per="element"), records[:2], scope="b", sources=ids[:2])
        per_record = sorted(ledger.epsilon_per_record())
        by_scope = {k: sorted(v) for k, v in ledger.epsilon_per_record_by_scope().items()}
        spent = ledger.spent_by_source([*ids, b"never-seen"])
        direct = ledger.spent(records, sources=ids).epsilon.tolist()
    g2 = laplace(2.0, per="element").guarantee((1, 4, 4)).epsilon_record
    g3 = laplace(3.0, per="element").guarantee((1, 4, 4)).epsilon_record
    assert per_record == pytest.approx(sorted([g2] * 3 + [g2 + g3] * 2))
    assert by_scope == {"a": pytest.approx([g2] * 5), "b": pytest.approx([g3] * 2)}
    assert spent[:5] == pytest.approx(direct) and spent[5] == 0.0


def test_spend_histogram_puts_the_records_at_the_cap_in_a_bin_of_their_own() -> None:
    counts, names = spend_histogram([0.0, 1.0, 4.99, 5.0, 5.0], 5.0)
    assert len(counts) == BINS + 1 and names[-1] == "at cap 5" and counts[-1] == 2 and sum(counts) == 5
    assert counts[0] == 1 and counts[BINS - 1] == 1  # 0 in the first bin, 4.99 in the last below the cap
    assert cap_reached(5.0 * (1 - 1e-12), 5.0) and not cap_reached(4.9, 5.0) and not cap_reached(9.0, None)
    assert spend_histogram([], None) == ([0], ["0"])
    counts, names = spend_histogram([1.0, 2.0], None)
    assert len(counts) == BINS and counts[-1] == 1


def test_budget_html_names_the_images_at_the_cap_of_a_folder(tmp_path: Path) -> None:
    names = ["<b>bold.png", "a.png", "b.png", "c.png"]
    folder = _folder(tmp_path / "private", names)
    state = tmp_path / "state"
    common = dict(augment="none", state_dir=state, output=tmp_path / "labels.csv")
    ldpclient.label(folder, _teacher("one"), epsilon=30, **common)
    (folder / "c.png").unlink()  # c.png stays at 30, below the cap of 50, and leaves the folder
    ldpclient.label(folder, _teacher("<i>two</i>"), epsilon=20, **common)
    _folder(folder, ["new.png"], seed=2)  # never released: not at the cap
    page_path = tmp_path / "budget.html"
    res = CliRunner().invoke(app, ["budget", "--state-dir", str(state), "--set-cap", "50", "--html",
                                   str(page_path), "--private", str(folder), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["outputs"] == {"html": str(page_path)} and summary["records_at_cap"] == 3
    doc = page_path.read_text(encoding="utf-8")
    assert "&lt;b&gt;bold.png" in doc and "<td>a.png</td>" in doc and "<td>b.png</td>" in doc
    assert "<td>c.png</td>" not in doc and "new.png" not in doc  # c.png is gone from the folder; new.png unspent
    assert "3 images of" in doc and "&lt;i&gt;two&lt;/i&gt;" in doc and "local:one" in doc
    assert not {"script", "b", "i"} & set(_tags(doc))
    visit = open_page(page_path, "JSON.stringify({text: document.body.innerText, svgs: document.querySelectorAll("
                                 "'svg').length})", width=1280, height=900, screenshot=tmp_path / "budget.png")
    seen = json.loads(visit.value)
    assert seen["svgs"] == 3  # all teachers, and each of the two
    assert "<b>bold.png" in seen["text"] and "local:<i>two</i>" in seen["text"]
    assert [u for u in visit.requests if not u.startswith(("data:", "file:"))] == []
    phone = open_page(page_path, "JSON.stringify([document.documentElement.scrollWidth, window.innerWidth])",
                      width=390, height=844, screenshot=tmp_path / "budget-phone.png")
    width, window = json.loads(phone.value)
    assert window <= 390 and width <= window  # on a phone nothing is wider than the screen
    assert (tmp_path / "budget.png").stat().st_size > 10_000 and (tmp_path / "budget-phone.png").stat().st_size > 10_000


def test_budget_html_without_a_folder_counts_and_says_how_to_name(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "private", ["a.png", "b.png"])
    ldpclient.label(folder, _teacher("one"), epsilon=30, augment="none", state_dir=tmp_path / "s",
                    output=tmp_path / "labels.csv")
    page_path = tmp_path / "b.html"
    res = CliRunner().invoke(app, ["budget", "--state-dir", str(tmp_path / "s"), "--set-cap", "30", "--html",
                                   str(page_path)])
    assert res.exit_code == 0, res.output
    assert "page" in res.output and str(page_path) in res.output
    doc = page_path.read_text(encoding="utf-8")
    assert "2 images have no budget left" in doc and "--private FOLDER" in doc and "a.png" not in doc


def test_budget_private_without_html_is_a_one_line_error(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "private", ["a.png"])
    ldpclient.label(folder, _teacher("one"), epsilon=30, augment="none", state_dir=tmp_path / "s",
                    output=tmp_path / "labels.csv")
    res = CliRunner().invoke(app, ["budget", "--state-dir", str(tmp_path / "s"), "--private", str(folder)])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == ["error: --private names the images at the cap on the --html page: "
                                               "give --html FILE too"]
