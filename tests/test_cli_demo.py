"""`ldpclient demo` end to end, shrunk: 1-epoch mock teacher, 120 queries, 1 student epoch."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ldpclient.cli import app


def test_demo_runs_and_reports_every_method(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["demo", "--workdir", str(tmp_path), "--queries", "120", "--epochs", "1", "--teacher-epochs", "1", "--json"],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    methods = [r["method"] for r in doc["rows"]]
    assert methods == ["LDPKiT-Sup", "SIDP", "data-free baseline", "teacher on clean images"]
    assert doc["records"] == 359  # the 20% of the digits the teacher never trained on
    for row in doc["rows"]:
        assert 0.0 <= row["accuracy"] <= 1.0
    sup, sidp, base, _ = doc["rows"]
    assert sup["epsilon_element"] == 2.0 and sup["epsilon_record"] == 98.0  # 7x7 released elements
    assert sidp["epsilon_record"] == sup["epsilon_record"] and base["epsilon_record"] == 0.0
    assert sup["queries"] == 120 and sidp["queries"] == 359 and base["queries"] == 120
    assert any("0 images noised again" in note for note in doc["notes"])  # SIDP reused the releases
    private = tmp_path / "private"
    assert len(list(private.glob("*.png"))) == 359
    # the labels written by the label flow match the folder, and carry no truth
    header = (tmp_path / "labels_sup.csv").read_text().splitlines()[0]
    assert header == "path,label,label_name,confidence"
