"""`RunReport`: the typed report of `ldpclient label`, read back from the JSON it writes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from ldpclient.report.run_report import SCHEMA, CountsSection, RunReport
from ldpclient.run.ui import UI
from support.cli_runs import invoke, label_args, mock_teacher, private_folder


@pytest.fixture(scope="module")
def label_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """One real `ldpclient label --json` run against the mock teacher: (stdout report, report file)."""
    tmp_path = tmp_path_factory.mktemp("run_report")
    folder = private_folder(tmp_path, n=6)
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with mock_teacher() as srv:
        result = invoke(label_args(folder, srv.model_url, tmp_path, "--json", "--seed", "3", "--queries", "12"))
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


@pytest.mark.parametrize(("where", "key", "value", "message"), [
    (None, "label_histogram", "12", "key 'label_histogram' must be list"),
    (None, "guarantee", [1, 2], "key 'guarantee' must be dict"),
    ("counts", "labelled", "6", "section 'counts': key 'labelled' must be int"),
    ("counts", "labelled", True, "section 'counts': key 'labelled' must be int"),
    ("cost", "cap", "none", "section 'cost': key 'cap' must be float | None"),
    ("queries", "answers_histogram", [1, "x"], "section 'queries': key 'answers_histogram'"),
])
def test_from_dict_refuses_a_value_of_another_type_naming_its_key(
    label_run: tuple[dict[str, Any], Path], where: str | None, key: str, value: object, message: str
) -> None:
    """A report is read typed: each value is checked against its field's type, so a hand-edited or damaged report
    is one line naming the key, not a crash later in whatever reads it."""
    doc = json.loads(json.dumps(label_run[0]))
    (doc if where is None else doc[where])[key] = value
    with pytest.raises(ValueError) as err:
        RunReport.from_dict(doc)
    assert message in str(err.value) and "\n" not in str(err.value)


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


def _stop_report() -> dict[str, Any]:
    """The shape `label` writes when a run stops at a cap (`_write_stop_report`)."""
    return {
        "schema": SCHEMA, "command": "label", "ok": False,
        "stopped": {"reason": "money cap", "message": "money cap reached: 0.08 spent, the next batch would cost 0.08"},
        "private_dir": "private", "teacher": {"address": "http://127.0.0.1:1/v2/models/m"},
        "queries": {"sent": 8, "from_journal": 0, "requests": 1},
        "cost": {"price_per_query": 0.01, "cap": 0.1, "spent_run": 0.08, "spent_total": 0.08,
                 "spent_unconfirmed": 0.0, "billing": None},
        "ledger": {"path": "state/ledger.sqlite", "max_spent_epsilon": 64.0, "cap_epsilon": None},
        "outputs": {"report": "out/labels.report.json"}, "versions": {},
    }


def test_read_gives_the_report_of_a_finished_run(label_run: tuple[dict[str, Any], Path]) -> None:
    stdout_report, path = label_run
    report = RunReport.read(path)
    assert report.to_dict() == stdout_report
    assert RunReport.read(str(path)) == report
    assert report.plan is not None and report.plan["n"] == report.counts.records


@pytest.mark.parametrize("content,match", [
    (None, "does not exist"),
    ("", "is not JSON"),
    ('{"a": 1}\n{"a": 2}\n', "is not JSON"),  # a JSONL file (e.g. the query log) by mistake
    (b"\xff\xfe{}", "cannot read"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({"schema": SCHEMA + 1}), "schema 2 is not supported"),
    (json.dumps({"schema": SCHEMA, "command": "budget", "ok": True}), "command 'budget' is not a label run"),
    (json.dumps({"schema": SCHEMA, "command": "label", "ok": True}), "missing key"),
])
def test_read_refuses_in_one_line_naming_the_file(tmp_path: Path, content: Any, match: str) -> None:
    path = tmp_path / "labels.report.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=match) as err:
        RunReport.read(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_read_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read") as err:
        RunReport.read(tmp_path)
    assert "\n" not in str(err.value)


def test_the_stop_report_of_a_capped_run_is_refused_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "labels.report.json"
    path.write_text(json.dumps(_stop_report()))
    with pytest.raises(ValueError, match="stopped early") as err:
        RunReport.read(path)
    msg = str(err.value)
    assert "money cap reached: 0.08 spent" in msg and str(path) in msg and "\n" not in msg
    with pytest.raises(ValueError, match=r"^run report: the run stopped early \(money cap: "):
        RunReport.from_dict(_stop_report())
    with pytest.raises(ValueError, match=r"stopped early \(no reason recorded\)"):
        RunReport.from_dict({k: v for k, v in _stop_report().items() if k != "stopped"})


def test_noise_and_stop_reports_are_typed_with_the_documents_key_order() -> None:
    from ldpclient.report.run_report import (
        NoiseCountsSection,
        NoiseLedgerSection,
        NoiseReport,
        StopLedgerSection,
        StoppedSection,
        StopQueriesSection,
        StopReport,
    )

    noise = NoiseReport("noise", True, "p", "oip:http://h/v2/models/m", {}, NoiseCountsSection(3, 2, 1, 0),
                        NoiseLedgerSection(2, 1, 4.0, None), [], {"dir": "o"}, {}).to_dict()
    assert list(noise) == ["schema", "command", "ok", "private_dir", "scope", "guarantee", "counts", "ledger",
                           "skipped", "outputs", "versions", "decoding", "public_skipped"]
    assert noise["counts"] == {"noised": 3, "fresh": 2, "reused": 1, "skipped": 0} and noise["schema"] == SCHEMA
    stop = StopReport("label", False, StoppedSection("money cap", "m"), "p", {"address": "a"},
                      StopQueriesSection(1, 2, 3), {}, StopLedgerSection("l", 1.0, None), {}, {}).to_dict()
    assert list(stop) == ["schema", "command", "ok", "stopped", "private_dir", "teacher", "queries", "cost", "ledger",
                          "outputs", "versions"]
    with pytest.raises(ValueError, match="stopped early .money cap: m."):
        RunReport.from_dict(stop)


def test_the_report_names_how_predictions_ran_and_older_reports_without_it_still_read(
    label_run: tuple[dict[str, Any], Path],
) -> None:
    doc, _ = label_run
    assert doc["student"]["inference"].startswith("channels_last, ")
    older = json.loads(json.dumps(doc))
    del older["student"]["inference"]  # reports written before the field existed
    assert RunReport.from_dict(older).student.inference is None
