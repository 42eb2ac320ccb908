"""Several students learn from the same answers and the labels come from their mean output."""

from __future__ import annotations

import pytest
import torch

from ldpclient.privacy import laplace
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer import defaults
from ldpclient.transfer.pipeline import KnowledgeTransfer
from ldpclient.transfer.settings import AdaptationSettings, PlanSettings, TrainingSettings


def _teacher() -> LocalTeacher:
    """Three classes by the image's mean brightness (8x8 grey images in [0, 1])."""
    return LocalTeacher(lambda x: torch.bucketize(x.reshape(len(x), -1).mean(1), torch.tensor([0.45, 0.55])),
                        (1, 8, 8), 3, name="bright")


def _images() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    level = torch.tensor([0.2, 0.5, 0.8]).repeat(10)
    return (level.view(-1, 1, 1, 1) + 0.1 * torch.randn(30, 1, 8, 8, generator=g)).clamp(0, 1)


def _run(**training: object) -> tuple[torch.Tensor, torch.Tensor | None, object]:
    """One run of the same plan and release (seed 3): its labels, the adapted outputs and the result."""
    kt = KnowledgeTransfer(_teacher(), laplace(50, per="record"), seed=3,
                           release_generator=torch.Generator().manual_seed(5), plan=PlanSettings(num_queries=90),
                           adaptation=AdaptationSettings(),
                           training=TrainingSettings(epochs=2, **training))  # type: ignore[arg-type]
    result = kt.run(_images())
    assert result.adaptation is not None
    return result.labels, result.adaptation.probs, result


def test_the_labels_are_the_argmax_of_the_members_mean_output_each_member_the_run_with_its_seed() -> None:
    first_labels, first, one = _run(student_seed=11)
    _, second, _ = _run(student_seed=defaults.member_seed(11, 1))
    labels, _, both = _run(student_seed=11, students=2)
    assert first is not None and second is not None
    assert torch.equal(labels, ((first + second) / 2).argmax(1))
    assert one.training.students == 1 and both.training.students == 2  # type: ignore[attr-defined]
    # member 0 is the one student of students=1: its adaptation history and model come back
    assert both.adaptation.probs is not None and torch.equal(both.adaptation.probs, first)  # type: ignore[attr-defined]
    assert torch.equal(_run(student_seed=11, students=1)[0], first_labels)


def test_the_result_and_the_checkpoint_hold_every_student_read_as_their_mean(tmp_path) -> None:
    from ldpclient.transfer.student import StudentMean, load_checkpoint, predict_proba

    _, first, _ = _run(student_seed=11)
    _, second, _ = _run(student_seed=defaults.member_seed(11, 1))
    _, _, both = _run(student_seed=11, students=2, checkpoint=tmp_path / "students.pt")
    assert first is not None and second is not None
    student = both.student  # type: ignore[attr-defined]
    assert isinstance(student, StudentMean) and len(student.members) == 2
    mean = predict_proba(student, _images(), device="cpu")
    assert torch.allclose(mean, (first + second) / 2, atol=1e-5)
    loaded, info = load_checkpoint(tmp_path / "students.pt")
    assert isinstance(loaded, StudentMean) and info["extra"]["labels_from"] == "the mean output of these 2 students"
    assert torch.allclose(predict_proba(loaded, _images(), device="cpu"), mean, atol=1e-6)


def test_the_member_seeds_start_at_the_students_own_and_stay_in_range() -> None:
    assert defaults.member_seed(11, 0) == 11
    assert defaults.member_seed(11, 1) != 11
    assert 0 <= defaults.member_seed(defaults.MAX_SEED - 1, 3) < defaults.MAX_SEED
    assert defaults.students() == 1


@pytest.mark.parametrize("students", [0, defaults.MAX_STUDENTS + 1])
def test_a_count_out_of_range_is_refused(students: int) -> None:
    with pytest.raises(ValueError, match="students must be from 1 to"):
        TrainingSettings(students=students)


def test_label_takes_students_and_its_dry_run_summary_report_and_page_say_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    import numpy as np
    from PIL import Image
    from typer.testing import CliRunner

    import mock_server
    from ldpclient.cli.commands import app

    rng = np.random.default_rng(7)
    private = tmp_path / "private"
    private.mkdir()
    for k in range(10):
        Image.fromarray(rng.integers(0, 256, (16, 16), dtype=np.uint8)).save(private / f"p{k}.png")
    with mock_server.serve(model="trivial", image_size=16, channels=1) as srv:
        args = ["label", str(private), "--teacher", srv.model_url, "--state-dir", str(tmp_path / "s"),
                "--queries", "40", "--epochs", "1", "--output", str(tmp_path / "labels.csv")]
        planned = CliRunner().invoke(app, [*args, "--dry-run", "--students", "2"])
        assert planned.exit_code == 0 and "2 of them (labels from their mean output)" in planned.output
        result = CliRunner().invoke(app, [*args, "--json", "--students", "2", "--html"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["student"]["students"] == 2
        assert "2 of them, each with draws of its own" in (tmp_path / "labels.html").read_text()
        summary = CliRunner().invoke(app, [*args, "--students", "2"])  # the journal answers: nothing sent again
        assert summary.exit_code == 0 and "2 of them (labels from their mean output" in " ".join(summary.output.split())
        refused = CliRunner().invoke(app, [*args, "--students", "0"])
    assert refused.exit_code == 2 and "--students" in refused.output
