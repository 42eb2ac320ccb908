"""`ldpclient demo` end to end, shrunk: 1-epoch mock teacher, 120 queries, 1 student epoch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ldpclient.cli.commands import app


def test_demo_runs_and_reports_every_method(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["demo", "--workdir", str(tmp_path), "--queries", "120", "--epochs", "1", "--teacher-epochs", "1", "--json"],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    methods = [r["method"] for r in doc["rows"]]
    assert methods == [
        "LDPKiT-Sup, adapted", "LDPKiT-Sup, unadapted", "SIDP",
        "LDPKiT-Sup, adapted, digits 0 and 1 only", "data-free baseline, adapted, digits 0 and 1 only",
        "teacher on clean images",
    ]
    assert doc["records"] == 150  # the first of the digits the teacher never trained on
    for row in doc["rows"]:
        assert 0.0 <= row["accuracy"] <= 1.0
    rows = {r["method"]: r for r in doc["rows"]}
    sup, sup_raw, sidp = rows["LDPKiT-Sup, adapted"], rows["LDPKiT-Sup, unadapted"], rows["SIDP"]
    # the default: 100 per record (the label default) on the 64 DCT coefficients of the default basis (one
    # record-level release: a single coefficient may carry the whole sensitivity, so per element reads 100 too)
    assert sup["epsilon_record"] == pytest.approx(100.0) and sup["epsilon_element"] == pytest.approx(100.0)
    assert any("64 low-frequency DCT coefficients" in note for note in doc["notes"])
    assert sup_raw["epsilon_record"] == sidp["epsilon_record"] == sup["epsilon_record"]
    assert sup["queries"] == sup_raw["queries"] == 120 and sidp["queries"] == 150
    # SIDP sends a release of every image: Sup's, and (120 pairs use only some of the 150) the ones it made now
    note = next(note for note in doc["notes"] if note.startswith("privacy:"))
    assert "noised again" not in note or "0 images noised again" in note
    assert "SIDP reused the stored releases" in note or "its queries did not use" in note
    private = tmp_path / "private"
    assert len(list(private.glob("*.png"))) == 150
    # the labels written by the label flow match the folder, and carry no truth
    header = (tmp_path / "labels_sup.csv").read_text().splitlines()[0]
    assert header == "path,label,label_name,confidence"
    # the check set: the true digits of 100 of the images beside the folder, scored by the label run's verdict
    check = (tmp_path / "check.csv").read_text().splitlines()
    assert check[0] == "file,label" and len(check) == 101 and check[1].startswith("record_00000.png,")
    verdict = json.loads((tmp_path / "labels_sup.report.json").read_text())["verdict"]
    assert verdict["check"]["images"] == 100 and verdict["check"]["baseline"] is None  # no data-free run here
    assert doc["notes"][0] == f"verdict on the LDPKiT-Sup labels (what every label run says): {verdict['headline']}"
    assert any(f"--check {tmp_path / 'check.csv'}" in note for note in doc["notes"])  # the next step
    # one figure per quantity, named: which accuracy is which, and the one money total with its parts
    assert doc["notes"][1].startswith("accuracy: the table's is against the true digits of all 150 private images")
    assert "estimated from the 100 hand-labelled images of the check set" in doc["notes"][1]
    money = next(note for note in doc["notes"] if note.startswith("money:"))
    total = float(money.split()[1])
    parts = [float(part.rsplit(" ", 1)[1]) for part in money.split(": ", 2)[2].rstrip(".").split("; ")]
    assert total == pytest.approx(sum(r["money"] for r in doc["rows"])) and total == pytest.approx(sum(parts))
    assert "data-free baseline, adapted, digits 0 and 1 only" in money and "unadapted" not in money
    # the second case: a folder of every digit 0 and 1 the teacher never trained on, beside its data-free run
    few_dir = tmp_path / "two-digits"
    few = json.loads((tmp_path / "labels_few.report.json").read_text())
    assert few["counts"]["labelled"] == len(list((few_dir / "private").glob("*.png"))) == 134
    shared = sum(1 for path in private.iterdir()  # the first folder's images that are in the second one too
                 if any((few_dir / "private" / name).read_bytes() == path.read_bytes()
                        for name in (p.name for p in (few_dir / "private").iterdir())))
    led = few["ledger"]  # 120 queries leave some images unreleased; the rest are the first folder's or noised now
    assert 0 < led["reused"] <= shared and led["reused"] + led["fresh"] + led["not_released"] == 134
    assert few["verdict"]["check"]["images"] == 100 and few["verdict"]["check"]["baseline"]["images"] == 100
    truth = dict(line.split(",") for line in (few_dir / "check.csv").read_text().splitlines()[1:])
    assert set(truth.values()) == {"0", "1"}
    case = "digits 0 and 1 only"
    paid, free = rows[f"LDPKiT-Sup, adapted, {case}"], rows[f"data-free baseline, adapted, {case}"]
    assert paid["epsilon_record"] == sup["epsilon_record"] and free["epsilon_record"] == 0.0
    assert doc["notes"][2] == f"verdict on the labels of the folder of the {case}: {few['verdict']['headline']}"
    gain = next(note for note in doc["notes"] if note.startswith("what the privacy bought on the folder"))
    assert f"{100 * (paid['accuracy'] - free['accuracy']):+.1f} points" in gain and "privacy pays" in gain
    assert "--baseline" in gain
    assert f"reused the releases of {led['reused']} images it shares with the first folder and noised " \
           f"{led['fresh']} others once each" in note


def test_demo_writes_its_page_out_of_its_temporary_folder_and_says_where(tmp_path: Path) -> None:
    page = tmp_path / "out" / "demo.html"
    result = CliRunner().invoke(
        app, ["demo", "--queries", "120", "--epochs", "1", "--teacher-epochs", "1", "--no-two-digits", "--html",
              str(page)], env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert f"page: {page}" in result.output
    doc = page.read_text(encoding="utf-8")
    assert "This page holds PRIVATE images" in doc and "What the teacher was sent" in doc
    assert doc.count("<img ") == 3 * 16  # the clean digits, their releases, the queries


def test_a_label_runs_money_is_one_total_with_its_parts(tmp_path: Path) -> None:
    """The summary's money line and the page's band: this run's total, then what it went on."""
    import re

    from support.cli_runs import label_args, mock_teacher, private_folder

    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        res = CliRunner().invoke(app, label_args(folder, srv.model_url, tmp_path, "--baseline", "--html"))
    assert res.exit_code == 0, res.output
    line = next(line for line in res.stderr.splitlines() if line.strip().startswith("money"))
    m = re.search(r"([\d.]+) this run \(private queries ([\d.]+), data-free baseline ([\d.]+)\)", line)
    assert m, line
    total, private, baseline = (float(g) for g in m.groups())
    assert total == pytest.approx(private + baseline) and private == pytest.approx(0.24)  # 24 queries at 0.01
    page = (tmp_path / "out" / "labels.html").read_text(encoding="utf-8")
    assert f"{total:.4g} (private queries {private:.4g}, data-free baseline {baseline:.4g})" in page
    assert "of it, the data-free baseline&#x27;s queries" in page
