"""``ldpclient label --student-weights FILE`` against the real mock teacher: a run whose student starts from a file
made here names the file in its report and page; a file that cannot start the student ends the run in one line
before anything is noised, charged or sent."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from ldpclient.cli.errors import EXIT_USAGE
from support.cli_runs import invoke, label_args, mock_teacher, private_folder
from support.weights_files import FixedSize, script_file


def test_a_run_from_a_weights_file_names_it_in_the_report_and_on_the_page(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    weights = script_file(tmp_path / "extractor.ts")
    with mock_teacher() as srv:
        result = invoke(label_args(folder, srv.model_url, tmp_path, "--student-weights", str(weights), "--json",
                                   "--html"))
    assert result.exit_code == 0, result.output
    student = json.loads(result.stdout)["student"]
    assert student["model"] == "torchscript"
    assert student["weights"]["name"] == "extractor.ts"
    assert student["weights"]["sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    page = (tmp_path / "out" / "labels.html").read_text()
    assert "extractor.ts" in page and student["weights"]["sha256"][:16] in page


@pytest.mark.parametrize("case, needle", [
    ("missing", "no such file"),
    ("corrupt", "is not a PyTorch file"),
    ("architecture", "not mobilenet_v2 weights"),
    ("input size", "failed on RGB input (2, 3, 24, 24)"),
    ("student", "--student-weights starts a resnet18, mobilenet_v2 or torchscript student, not small_cnn"),
    ("sidp", "--student-weights starts a student: --augment none (SIDP) has none"),
])
def test_a_weights_file_that_cannot_start_the_student_ends_the_run_before_anything_is_sent(
        tmp_path: Path, case: str, needle: str) -> None:
    folder = private_folder(tmp_path)
    path = tmp_path / "weights.pt"
    extra: list[str] = []
    if case == "corrupt":
        path.write_bytes(b"\x00" * 4096)
    elif case == "architecture":
        script_file(path)
        torch.save(nn.Linear(3, 2).state_dict(), path)
        extra = ["--student", "mobilenet_v2"]
    elif case == "input size":
        script_file(path, FixedSize(), meta={"input_size": 24})
    elif case == "student":
        script_file(path)
        extra = ["--student", "small_cnn"]
    elif case == "sidp":
        script_file(path)
        extra = ["--augment", "none"]
    with mock_teacher() as srv:
        result = invoke(label_args(folder, srv.model_url, tmp_path, "--student-weights", str(path), *extra))
        assert srv.usage()["total"]["images"] == 0
    assert result.exit_code == EXIT_USAGE, result.output
    assert needle in result.stderr and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "state" / "ledger.sqlite").exists() or invoke(
        ["budget", "--state-dir", str(tmp_path / "state"), "--json"]).stdout.count('"records": 0') == 1


def test_the_dry_run_names_the_file_the_student_would_start_from(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    weights = script_file(tmp_path / "extractor.ts")
    with mock_teacher() as srv:
        result = invoke(label_args(folder, srv.model_url, tmp_path, "--student-weights", str(weights), "--dry-run"))
        assert srv.usage()["total"]["images"] == 0
    assert result.exit_code == 0, result.output
    assert "torchscript, 1 epochs" in result.output and "started from extractor.ts (SHA-256" in result.output


def test_the_front_door_takes_the_same_file_and_refuses_a_bad_one_in_one_line(tmp_path: Path) -> None:
    import ldpclient

    folder = private_folder(tmp_path)
    weights = script_file(tmp_path / "extractor.ts")
    options = dict(state_dir=tmp_path / "state", epsilon=4.0, epsilon_unit="element", reduce=2, queries=24,
                   batch_size=8, epochs=1)
    with mock_teacher() as srv:
        result = ldpclient.label(folder, srv.model_url, student_weights=weights, **options)
        with pytest.raises(ValueError, match="^student weights nope.pt: no such file") as err:
            ldpclient.label(folder, srv.model_url, student_weights=tmp_path / "nope.pt", **options)
        assert srv.usage()["total"]["images"] == 24  # the first run's queries; the refused run sent none
    assert "\n" not in str(err.value)
    assert result.report["student"]["weights"]["name"] == "extractor.ts"
