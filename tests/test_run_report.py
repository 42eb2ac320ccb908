"""`RunReport`: the typed report of `ldpclient label`, read back from the JSON it writes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from test_cli import _args, _private, _run, _server

from ldpclient.run.run_report import SCHEMA, CountsSection, RunReport
from ldpclient.run.ui import UI


@pytest.fixture(scope="module")
def label_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """One real `ldpclient label --json` run against the mock teacher: (stdout report, report file)."""
    tmp_path = tmp_path_factory.mktemp("run_report")
    folder = _private(tmp_path, n=6)
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with _server() as srv:
        result = _run(_args(folder, srv.model_url, tmp_path, "--json", "--seed", "3", "--queries", "12"))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), tmp_path / "out" / "labels.report.json"


def test_round_trip_of_a_real_report(label_run: tuple[dict[str, Any], Path]) -> None:
    stdout_report, _ = label_run
    report = RunReport.from_dict(stdout_report)
    assert report.schema == SCHEMA == stdout_report["schema"]
    assert isinstance(report.counts, CountsSection) and report.counts.skipped == 1
    assert report.queries.sent + report.queries.from_journal == report.queries.planned
    assert report.teacher.input_shape == [1, 8, 8]
    assert RunReport.from_dict(report.to_dict()) == report
    assert report.to_dict() == stdout_report
    assert list(report.to_dict()) == list(stdout_report)  # same key order: same bytes on disk


def test_report_file_reads_back_to_the_same_document(label_run: tuple[dict[str, Any], Path]) -> None:
    stdout_report, path = label_run
    text = path.read_text()
    on_disk = json.loads(text)
    assert RunReport.from_dict(on_disk).to_dict() == on_disk == stdout_report
    again = json.dumps(RunReport.from_dict(on_disk).to_dict(), indent=2)
    assert again == json.dumps(on_disk, indent=2)


def test_from_dict_refuses_another_schema(label_run: tuple[dict[str, Any], Path]) -> None:
    doc = {**label_run[0], "schema": SCHEMA + 1}
    with pytest.raises(ValueError, match="schema") as err:
        RunReport.from_dict(doc)
    assert "\n" not in str(err.value)
    no_schema = {k: v for k, v in label_run[0].items() if k != "schema"}
    with pytest.raises(ValueError, match="schema") as err:
        RunReport.from_dict(no_schema)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("section", ["counts", "ledger", "timings"])
def test_from_dict_refuses_a_missing_section(label_run: tuple[dict[str, Any], Path], section: str) -> None:
    doc = {k: v for k, v in label_run[0].items() if k != section}
    with pytest.raises(ValueError, match=section) as err:
        RunReport.from_dict(doc)
    assert "\n" not in str(err.value)


def test_from_dict_refuses_a_section_missing_a_key(label_run: tuple[dict[str, Any], Path]) -> None:
    doc = dict(label_run[0])
    doc["queries"] = {k: v for k, v in doc["queries"].items() if k != "sent"}
    with pytest.raises(ValueError, match="'queries'.*'sent'") as err:
        RunReport.from_dict(doc)
    assert "\n" not in str(err.value)


def test_summary_reads_a_run_report_or_its_dict(
    label_run: tuple[dict[str, Any], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    report = RunReport.from_dict(label_run[0])
    UI().summary(report)
    typed = capsys.readouterr().err
    UI().summary(report.to_dict())
    assert capsys.readouterr().err == typed
    assert "ldpclient label: done" in typed and f"{report.queries.sent} sent" in typed
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.ok = False  # type: ignore[misc]
