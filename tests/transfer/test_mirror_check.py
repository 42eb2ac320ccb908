"""The mirror check: whether training mirrors rows, decided by the teacher's answers to copies of public images."""

import numpy as np
import pytest
import torch

from ldpclient.privacy import laplace
from ldpclient.privacy.guarantee import Domain
from ldpclient.privacy.public import public_release
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer import defaults
from ldpclient.transfer.mirror_check import MIRROR_KEEPS_SHARE, MirrorCheck, flip, mirror_check
from ldpclient.transfer.pipeline import KnowledgeTransfer
from ldpclient.transfer.settings import AdaptationSettings, PlanSettings, TrainingSettings

SIDE = 16


def _release(x):
    return public_release(x, Domain(0.0, 1.0))


def _banded(n, seed, side=SIDE):
    """Colour images with a bright red band in one third of the width (which third: the class of the thirds
    teacher), on faint noise."""
    g = torch.Generator().manual_seed(seed)
    x = 0.2 * torch.rand(n, 3, side, side, generator=g)
    third = side // 3
    for i, k in enumerate(torch.randint(0, 3, (n,), generator=g).tolist()):
        x[i, 0, :, k * third:(k + 1) * third] = 1.0
    return x


def _thirds_teacher(side=SIDE):
    """Label = the third of the image (left, middle, right) brightest in red: a mirror swaps left and right."""

    def model(x):
        third = side // 3
        return torch.stack([x[:, 0, :, k * third:(k + 1) * third].mean((1, 2)) for k in range(3)], dim=1)

    return LocalTeacher(model, (3, side, side), 3, name="thirds")


def _channel_teacher(side=SIDE):
    """Label = the brightest colour channel: a mirror keeps it."""
    return LocalTeacher(lambda x: x.mean((2, 3)), (3, side, side), 3, name="channel")


def test_the_rule_compares_the_mirror_with_the_shift():
    assert flip(0.733, 0.735) and flip(0.76, 0.70)  # photos: as often as the shift
    assert not flip(0.33, 0.84) and not flip(0.43, 0.82)  # digits: about half as often
    assert not flip(0.0, 0.0)  # a teacher that changes every answer under a shift: no evidence
    assert defaults.mirror_check_images(5000, 32) == defaults.MIRROR_CHECK_IMAGES
    assert defaults.mirror_check_images(150, 16) == 150
    assert defaults.mirror_check_images(defaults.MIRROR_CHECK_MIN_IMAGES - 1, 32) == 0  # too few to decide on
    assert defaults.mirror_check_images(5000, 8) == 0


def test_the_copies_are_mirrors_and_shifts_of_a_sample_drawn_from_the_seed():
    x = torch.rand(300, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    check = mirror_check(_release(x), seed=7, images=defaults.mirror_check_images(300, 32), shift=4)
    assert check is not None and check.size == defaults.MIRROR_CHECK_IMAGES and check.pad == 4
    assert len(set(check.sample.tolist())) == check.size and check.images.shape == (400, 3, 32, 32)
    sampled = x[torch.from_numpy(check.sample)]
    assert torch.equal(check.images[:200], sampled.flip(-1))
    shifted = check.images[200:]
    padded = torch.nn.functional.pad(sampled, (4, 4, 4, 4), mode="replicate")
    for i in range(0, 200, 37):  # each shifted copy is a 32x32 window of its own image's padded copy
        windows = padded[i].unfold(1, 32, 1).unfold(2, 32, 1)  # (3, 9, 9, 32, 32)
        assert any(torch.equal(windows[:, r, c], shifted[i]) for r in range(9) for c in range(9))
    again = mirror_check(_release(x), seed=7, images=defaults.mirror_check_images(300, 32), shift=4)
    assert again is not None and torch.equal(again.images, check.images)
    other = mirror_check(_release(x), seed=8, images=defaults.mirror_check_images(300, 32), shift=4)
    assert other is not None and not np.array_equal(other.sample, check.sample)
    assert mirror_check(_release(torch.rand(150, 3, 8, 8)), seed=0, images=150, shift=0) is None  # no shift
    assert mirror_check(_release(torch.rand(99, 3, 32, 32)), seed=0, images=0, shift=4) is None  # too few


def test_the_verdict_counts_kept_labels_and_unanswered_queries_as_changes():
    check = MirrorCheck(torch.zeros(8, 3, SIDE, SIDE), np.arange(4), 2)
    v = check.verdict(np.array([0, 1, 2, -1]), np.array([0, 1, 0, -1, 0, 1, 2, -1]))
    assert (v.mirror_agreement, v.shift_agreement, v.images) == (0.5, 0.75, 4)
    assert v.flip is flip(0.5, 0.75)
    assert v.as_dict() == {"mirror_agreement": 0.5, "shift_agreement": 0.75, "images": 4}
    with pytest.raises(ValueError, match="need 4 labels"):
        check.verdict(np.zeros(3), np.zeros(8))


def _kt(teacher, adapt: bool = False, adapter=None, **training):
    return KnowledgeTransfer(
        teacher,
        laplace(50.0, per="element"),
        seed=0,
        release_generator=torch.Generator().manual_seed(5),
        plan=PlanSettings(num_queries=64),
        training=TrainingSettings(epochs=1, batch_size=16, device="cpu", **training),
        adaptation=AdaptationSettings(adapt=adapt, adapter=adapter),
    )


@pytest.fixture()
def seen(monkeypatch):
    """The ``flip`` of every training batch's augmentation, in order."""
    from ldpclient.transfer.stages import train

    flips: list[bool] = []
    real = train.flip_crop
    monkeypatch.setattr(train, "flip_crop",
                        lambda images, pad, *, flip=True, generator=None:
                        flips.append(flip) or real(images, pad, flip=flip, generator=generator))
    return flips


def test_a_teacher_whose_answers_a_mirror_changes_gets_no_mirrored_rows_and_the_same_student(seen):
    x, public = _banded(24, 1), _banded(120, 2)
    res = _kt(_thirds_teacher()).run(x, public=public)
    check = res.training.mirror_check
    assert res.training.flip is False and set(seen) == {False}
    assert check["images"] == 120 and check["shift_agreement"] > 0.9 and check["mirror_agreement"] < 0.6
    assert res.counts["public_queries"] == 120 and res.counts["mirror_check_queries"] == 240
    # the copies' answers decided the flip and nothing else: the same labels and student as --no-flip
    off = _kt(_thirds_teacher(), flip=False).run(x, public=public)
    assert off.counts["mirror_check_queries"] == 0 and off.training.mirror_check is None
    assert torch.equal(res.labels, off.labels)
    for a, b in zip(res.student.state_dict().values(), off.student.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_a_teacher_whose_answers_a_mirror_keeps_gets_mirrored_rows(seen):
    x, public = (
        torch.rand(24, 3, SIDE, SIDE),
        torch.rand(120, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(3)),
    )
    res = _kt(_channel_teacher()).run(x, public=public)
    check = res.training.mirror_check
    assert res.training.flip is True and check is not None and check["mirror_agreement"] == 1.0
    assert seen and set(seen) == {True}
    assert res.summary()["training"]["mirror_check"]["images"] == 120
    forced = _kt(_channel_teacher(), flip=False).run(x, public=public)  # a given flip is never second-guessed
    assert forced.training.flip is False and forced.counts["mirror_check_queries"] == 0


def test_adaptation_shows_the_changes_its_own_student_keeps_whatever_training_decided():
    from ldpclient.names import IMAGE_CHANGES
    from ldpclient.transfer.adapt import SelfTrainingAdapter
    from ldpclient.transfer.mirror_check import MIRROR_KEEPS_SHARE

    x, public = torch.rand(24, 3, SIDE, SIDE), torch.rand(120, 3, SIDE, SIDE)
    res = _kt(_channel_teacher(), adapt=True).run(x, public=public)
    found = res.adaptation.changes if res.adaptation is not None else None
    assert res.training.flip is True and found is not None and found.images == 24
    assert set(found.shares) == set(IMAGE_CHANGES)  # colour images: every change is a candidate
    assert set(found.kept) == {n for n in IMAGE_CHANGES if found.shares[n] >= MIRROR_KEEPS_SHARE * found.shift}
    assert res.summary()["adaptation"]["image_changes"]["kept"] == list(found.kept)
    told = _kt(_channel_teacher(), adapt=True, adapter=SelfTrainingAdapter(seed=0, changes=())).run(x, public=public)
    assert told.adaptation is not None and told.adaptation.changes is not None
    assert told.adaptation.changes.kept == () and told.adaptation.changes.images == 0


def test_no_check_without_public_images_or_on_small_ones():
    res = _kt(_channel_teacher()).run(torch.rand(24, 3, SIDE, SIDE))
    assert res.training.flip is False and res.training.mirror_check is None
    assert "mirror_check_queries" not in res.counts
    small = _kt(_channel_teacher(8)).run(torch.rand(24, 3, 8, 8), public=torch.rand(150, 3, 8, 8))
    assert small.training.flip is False and small.counts["mirror_check_queries"] == 0
    few = _kt(_channel_teacher()).run(torch.rand(24, 3, SIDE, SIDE), public=torch.rand(99, 3, SIDE, SIDE))
    assert few.training.flip is False and few.counts["mirror_check_queries"] == 0


def test_a_label_run_sends_the_copies_as_public_queries_once_and_reports_the_verdict(tmp_path):
    import json

    from PIL import Image
    from typer.testing import CliRunner

    import mock_server
    from ldpclient.cli.commands import app

    rng = np.random.default_rng(3)
    private, public = tmp_path / "private", tmp_path / "public"
    for folder, n in ((private, 12), (public, 100)):
        folder.mkdir()
        for k in range(n):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(folder / f"{folder.name}{k}.png")
    with mock_server.serve(model="trivial", image_size=16, channels=3) as srv:  # mean intensity: mirrors keep it
        result = CliRunner().invoke(app, [
            "label", str(private), "--teacher", srv.model_url, "--state-dir", str(tmp_path / "s"), "--queries", "60",
            "--epochs", "1", "--public", str(public), "--baseline", "--price", "0.01", "--json",
            "--output", str(tmp_path / "labels.csv")])
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        billed = srv.usage()["total"]["images"]
    assert report["counts"]["public_images"] == 100 and report["counts"]["mirror_check_queries"] == 200
    assert report["queries"]["public_sent"] == 300 and report["cost"]["spent_public_run"] == pytest.approx(3.0)
    student = report["student"]
    assert student["flip"] is True and student["mirror_check"]["images"] == 100
    assert student["mirror_check"]["mirror_agreement"] >= MIRROR_KEEPS_SHARE * student["mirror_check"][
        "shift_agreement"]
    # the baseline asked the same public queries and copies: answered by the journal, paid once
    assert billed == 60 + 100 + 200 + report["baseline"]["queries_sent"]
    assert report["run_plan"]["queries"]["public"] == 100 + 200


def test_the_benchmark_reaches_the_verdict_a_label_run_reaches(monkeypatch):
    import sys
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    bench_adapt = __import__("bench_adapt")
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 5), torch.nn.AdaptiveAvgPool2d(2), torch.nn.Flatten(),
                                    torch.nn.Linear(12, 4)).eval()
        public = torch.rand(140, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(4))
        teacher = LocalTeacher(model, (3, SIDE, SIDE), 4, name="conv")
        res = _kt(teacher).run(torch.rand(24, 3, SIDE, SIDE), public=public)
        verdict = bench_adapt.mirror_verdict(model, public)
        assert verdict is not None and verdict.as_dict() == res.training.mirror_check
        assert verdict.flip is res.training.flip
        assert bench_adapt.mirror_verdict(model, None) is None
    finally:
        sys.modules.pop("bench_adapt", None)


def test_the_summary_and_the_page_say_how_training_treated_mirrors_in_one_sentence():
    from ldpclient.transfer.mirror_check import mirror_note

    check = {"mirror_agreement": 0.86, "shift_agreement": 0.785, "images": 200}
    assert mirror_note(True, check) == ("trained on mirrored images too (the teacher kept 86% of 200 public images' "
                                        "labels under a mirror, 78% under a shift)")
    assert mirror_note(False, None) == "not trained on mirrored images"
    assert mirror_note(True, None) == "trained on mirrored images too (--flip)"
