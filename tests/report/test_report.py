"""Label files, JSON reports, timers and preview grids (ldpclient.report.label_files)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from ldpclient.io.output import preview_grid, to_json, versions, write_json
from ldpclient.report.label_files import (
    LabelRow,
    StageTimer,
    label_format_for,
    label_rows,
    read_labels,
    render_labels,
    write_labels,
)


def test_label_format_from_extension_or_option() -> None:
    assert label_format_for("labels.csv") == "csv"
    assert label_format_for("labels.txt") == "csv"
    assert label_format_for("labels.JSONL") == "jsonl"
    assert label_format_for("labels.json") == "jsonl"
    assert label_format_for("labels.csv", "jsonl") == "jsonl"
    with pytest.raises(ValueError, match="--format"):
        label_format_for("x.csv", "xml")


def test_rows_round_trip_in_both_formats(tmp_path: Path) -> None:
    rows = label_rows(
        ["a/1.png", "b,with comma.png", "c.png"],
        torch.tensor([2, 0, 7]),
        torch.tensor([0.5, 0.25, 1.0]),
        class_names=["zero", "one", "two"],
    )
    assert rows[0] == LabelRow("a/1.png", 2, "two", 0.5)
    assert rows[2].label_name is None  # index beyond the known names
    for name in ("labels.csv", "labels.jsonl"):
        out = write_labels(tmp_path / name, rows)
        assert read_labels(out) == rows
    text = render_labels(rows, "csv")
    assert text.splitlines()[0] == "path,label,label_name,confidence"
    assert '"b,with comma.png",0,zero,0.25' in text
    first = json.loads(render_labels(rows, "jsonl").splitlines()[0])
    assert first == {"path": "a/1.png", "label": 2, "label_name": "two", "confidence": 0.5}


def test_rows_length_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="2 paths, 1 labels"):
        label_rows(["a", "b"], [1], [0.5, 0.5])


def test_json_reports_refuse_pixels_and_scrub_secrets(tmp_path: Path) -> None:
    report = {"eps": torch.tensor(3.5), "inf": math.inf, "nan": math.nan, "p": Path("x"), "note": "tok-123 leaked"}
    text = to_json(report, secrets=["tok-123", None, ""])
    d = json.loads(text)
    assert d == {"eps": 3.5, "inf": "inf", "nan": None, "p": "x", "note": "*** leaked"}
    with pytest.raises(TypeError, match="no pixels"):
        to_json({"image": torch.zeros(2, 2)})
    with pytest.raises(TypeError):
        to_json({"obj": object()})
    out = write_json(tmp_path / "sub" / "report.json", {"secret": "tok-123"}, secrets=["tok-123"])
    assert "tok-123" not in out.read_text()
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".tmp")]


def test_versions_and_timer() -> None:
    v = versions()
    assert {"ldpclient", "python", "torch"} <= set(v)
    timer = StageTimer()
    with timer.stage("a"):
        pass
    with pytest.raises(RuntimeError):
        with timer.stage("a"):
            raise RuntimeError("boom")
    assert set(timer.as_dict()) == {"a"} and timer.seconds["a"] >= 0


def test_preview_grid_layout() -> None:
    grey = torch.zeros(1, 4, 4)
    colour = torch.ones(3, 4, 4)
    img = preview_grid([[grey, grey], [colour]], scale=2, pad=1)
    assert img.size == (2 * (8 + 1) + 1, 2 * (8 + 1) + 1)
    assert img.getpixel((1, 1)) == (0, 0, 0)
    assert img.getpixel((1, 10)) == (255, 255, 255)
    with pytest.raises(ValueError):
        preview_grid([])
    with pytest.raises(ValueError):
        preview_grid([[torch.zeros(2, 4, 4)]])
