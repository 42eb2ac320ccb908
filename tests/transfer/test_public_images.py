"""``label --public DIR`` (API ``public=``): images the user states are not private, sent as they are beside the
private releases. Checked against what the mock teacher logged it received."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

import ldpclient
import mock_server
from ldpclient.cli.commands import app
from ldpclient.io.querylog import read_query_log
from ldpclient.privacy import Domain, Ledger
from ldpclient.privacy.public import public_release
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer.settings import AdaptationSettings, PlanSettings, TrainingSettings


def _folder(root: Path, n: int, seed: int, prefix: str = "img") -> Path:
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for k in range(n):
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(root / f"{prefix}{k:02d}.png")
    return root


def _recording(monkeypatch: pytest.MonkeyPatch, seen: list[np.ndarray], epoch: int | None = None) -> None:
    """Append to ``seen`` the query ids of every batch a run trains on (or anchors the adaptation with), in epoch
    ``epoch`` only when given."""
    from ldpclient.transfer.query_book import QueryBook

    original = QueryBook.epoch_batches

    def recording(self, at, seed):  # type: ignore[no-untyped-def]
        for ids, values in original(self, at, seed):
            if epoch is None or at == epoch:
                seen.append(ids)
            yield ids, values

    monkeypatch.setattr(QueryBook, "epoch_batches", recording)


def _grey(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path), dtype=np.float32) / 255.0


def test_a_public_release_is_the_images_as_they_are_at_no_cost() -> None:
    x = torch.rand(3, 1, 4, 4, generator=torch.Generator().manual_seed(0)) * 1.2 - 0.1
    release = public_release(x, Domain(0.0, 1.0))
    assert torch.equal(release.values, x.clamp(0, 1))  # no noise; clipped to the declared domain like any input
    g = release.guarantee
    assert g.public_input and g.epsilon_record == 0 and g.epsilon_element == 0 and g.delta_record == 0
    with pytest.raises(ValueError, match="finite"):
        public_release(torch.full((1, 1, 2, 2), float("nan")), Domain(0.0, 1.0))


def test_public_images_are_sent_once_as_they_are_counted_and_billed_apart(tmp_path: Path) -> None:
    private = _folder(tmp_path / "private", 20, seed=0)
    public = _folder(tmp_path / "public", 12, seed=1, prefix="pub")
    log = tmp_path / "queries.jsonl"
    state = tmp_path / "state"
    with mock_server.serve(model="trivial", image_size=8, channels=1, price_per_image=0.01,
                           query_log=str(log)) as srv:
        res = CliRunner().invoke(app, [
            "label", str(private), "--teacher", srv.model_url, "--public", str(public), "--epsilon", "50",
            "--queries", "100", "--epochs", "1", "--price", "0.01", "--money-cap", "10", "--baseline",
            "--state-dir", str(state), "--output", str(tmp_path / "labels.csv"),
        ], env={"COLUMNS": "200"})
        billed = srv.usage()["total"]["images"]
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "labels.report.json").read_text())
    assert report["counts"]["public_images"] == 12 and report["counts"]["records"] == 20
    q = report["queries"]
    assert q["public_sent"] == 12 and q["public_from_journal"] == 0
    assert report["baseline"]["queries_sent"] == 100  # its public images came from the journal: not paid twice
    assert billed == 100 + 12 + 100
    assert report["cost"]["spent_public_run"] == pytest.approx(0.12)
    assert re.search(r"of them 12 and 0 public: 12 images sent as they are", res.output)
    # what the teacher received: every public image exactly once, as it is; no private image un-noised
    sent = np.concatenate([t.reshape(len(t), -1) for _, t in read_query_log(log)])
    public_rows = np.stack([_grey(p).reshape(-1) for p in sorted(public.iterdir())])
    private_rows = np.stack([_grey(p).reshape(-1) for p in sorted(private.iterdir())])

    def count(row: np.ndarray) -> int:
        return int(np.all(np.abs(sent - row) < 1e-6, axis=1).sum())

    assert [count(row) for row in public_rows] == [1] * 12
    assert [count(row) for row in private_rows] == [0] * 20
    # the ledger charged the private images alone
    with Ledger(state / "ledger.sqlite") as ledger:
        assert ledger.summary()["records"] == 20


def test_a_public_image_that_is_also_private_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    private = _folder(tmp_path / "private", 10, seed=0)
    public = _folder(tmp_path / "public", 4, seed=1, prefix="pub")
    (public / "copy.png").write_bytes((private / "img03.png").read_bytes())
    with mock_server.serve(model="trivial", image_size=8, channels=1) as srv:
        res = CliRunner().invoke(app, ["label", str(private), "--teacher", srv.model_url, "--public", str(public),
                                       "--state-dir", str(tmp_path / "state"), "--output",
                                       str(tmp_path / "labels.csv")])
        billed = srv.usage()["total"]["images"]
    assert res.exit_code == 2 and billed == 0
    assert res.output.strip().splitlines()[-1] == (
        f"error: --public {str(public)!r}: 1 image(s) are also in the private images (e.g. 'copy.png'); an image "
        "cannot be both public and private: remove it from one of them")
    assert not (tmp_path / "state" / "ledger.sqlite").exists() or \
        Ledger(tmp_path / "state" / "ledger.sqlite").summary()["records"] == 0


def test_public_tensors_in_the_library_are_checked_by_value_and_refused_with_sidp(tmp_path: Path) -> None:
    teacher = LocalTeacher(lambda x: (x.reshape(len(x), -1).mean(1) > 0.5).long(), (1, 4, 4), 2, name="t")
    x = torch.rand(10, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    others = torch.rand(6, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    result = ldpclient.label(x, teacher, public=others, epsilon=20, queries=40, epochs=1, state_dir=tmp_path / "a")
    assert result.counts["public_images"] == 6 and result.report["queries"]["public_sent"] == 6
    with pytest.raises(ValueError, match="also in the private images"):
        ldpclient.label(x, teacher, public=torch.cat([others, x[2:3]]), epsilon=20, state_dir=tmp_path / "b")
    with pytest.raises(ValueError, match="SIDP"):
        ldpclient.label(x, teacher, public=others, augment="none", epsilon=20, state_dir=tmp_path / "c")
    with pytest.raises(TypeError, match="public must be"):
        ldpclient.label(x, teacher, public=[1, 2], epsilon=20, state_dir=tmp_path / "d")


def test_a_second_run_answers_the_public_images_from_the_journal(tmp_path: Path) -> None:
    private = _folder(tmp_path / "private", 12, seed=0)
    public = _folder(tmp_path / "public", 5, seed=1, prefix="pub")
    with mock_server.serve(model="trivial", image_size=8, channels=1, price_per_image=0.01) as srv:
        common = dict(public=public, epsilon=30, queries=60, epochs=1, price=0.01, state_dir=tmp_path / "state")
        first = ldpclient.label(private, srv.model_url, **common)
        again = ldpclient.label(private, srv.model_url, **common)
        billed = srv.usage()["total"]["images"]
    assert first.report["queries"]["public_sent"] == 5
    assert again.report["queries"]["public_sent"] == 0 and again.report["queries"]["public_from_journal"] == 5
    assert again.report["cost"]["spent_public_run"] == 0.0 and billed == 60 + 5
    # the kept result's adaptation comes back whole, its check of image changes too
    assert again.report["adaptation"]["image_changes"] == first.report["adaptation"]["image_changes"] is not None


def test_the_same_picture_in_another_file_is_refused_too(tmp_path: Path) -> None:
    private = _folder(tmp_path / "private", 6, seed=0)
    public = _folder(tmp_path / "public", 3, seed=1, prefix="pub")
    Image.open(private / "img02.png").save(public / "same.bmp")  # other bytes, same pixels
    teacher = LocalTeacher(lambda x: (x.reshape(len(x), -1).mean(1) > 0.5).long(), (1, 8, 8), 2, name="t")
    with pytest.raises(ValueError, match=r"1 image\(s\) are also in the private images \(e.g. 'same.bmp'\)"):
        ldpclient.label(private, teacher, public=public, epsilon=20, state_dir=tmp_path / "s")


def test_training_sees_each_public_image_repeats_times_per_epoch_and_the_report_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ldpclient.privacy import laplace
    from ldpclient.transfer import defaults
    from ldpclient.transfer.pipeline import KnowledgeTransfer

    assert defaults.public_repeats(20_000, 5_000) == 12 and defaults.public_repeats(100, 400) == 1
    with pytest.raises(ValueError, match="n_public"):
        defaults.public_repeats(10, 0)
    teacher = LocalTeacher(lambda x: (x.reshape(len(x), -1).mean(1) > 0.5).long(), (1, 4, 4), 2, name="t")
    x = torch.rand(10, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    others = torch.rand(6, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    seen: list[np.ndarray] = []
    _recording(monkeypatch, seen, epoch=0)
    kt = KnowledgeTransfer(
        teacher,
        laplace(20, per="record"),
        plan=PlanSettings(num_queries=40),
        training=TrainingSettings(epochs=1, val_fraction=0.0),
        adaptation=AdaptationSettings(adapt=False),
    )
    result = kt.run(x, public=others)
    ids = np.concatenate(seen)
    assert result.counts["public_repeats"] == 20  # round(3 x 40 queries / 6 public images)
    assert np.bincount(ids[ids >= 40] - 40).tolist() == [20] * 6 and np.bincount(ids[ids < 40]).tolist() == [1] * 40
    once = KnowledgeTransfer(
        teacher,
        laplace(20, per="record"),
        plan=PlanSettings(num_queries=40),
        training=TrainingSettings(epochs=1, val_fraction=0.0, public_repeats=1),
        adaptation=AdaptationSettings(adapt=False),
    )
    seen.clear()
    assert once.run(x, public=others).counts["public_repeats"] == 1
    assert len(np.concatenate(seen)) == 46
    report = ldpclient.label(x, teacher, public=others, epsilon=20, queries=40, epochs=1,
                             state_dir=tmp_path / "a").report
    assert report["student"]["public_repeats"] == 20


def test_a_tenth_of_the_public_images_is_held_out_of_training_and_scores_the_student(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held-out public images as evidence. 120 public images: 12 are never trained on (nor anchor the
    adaptation), and the final student's agreement with the teacher on them is in the verdict."""
    from ldpclient.privacy import laplace
    from ldpclient.transfer import defaults
    from ldpclient.transfer.pipeline import KnowledgeTransfer

    assert [defaults.public_held_out(n) for n in (99, 100, 1_000, 5_000, 50_000)] == [0, 10, 100, 500, 500]
    teacher = LocalTeacher(lambda x: (x.reshape(len(x), -1).mean(1) > 0.5).long(), (1, 4, 4), 2, name="t")
    x = torch.rand(10, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    others = torch.rand(120, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    seen: list[np.ndarray] = []
    _recording(monkeypatch, seen)
    kt = KnowledgeTransfer(
        teacher,
        laplace(20, per="record"),
        plan=PlanSettings(num_queries=40),
        training=TrainingSettings(epochs=2, val_fraction=0.0),
    )
    result = kt.run(x, public=others)
    trained = set(np.concatenate(seen).tolist())  # training and the adaptation's anchors
    public_trained = {i - 40 for i in trained if i >= 40}
    assert len(public_trained) == 108 and result.public_held_out is not None
    assert result.public_held_out["images"] == 12 and 0 <= result.public_held_out["agree"] <= 12
    again = KnowledgeTransfer(
        teacher,
        laplace(20, per="record"),
        seed=5,
        plan=PlanSettings(num_queries=40),
        training=TrainingSettings(epochs=1, val_fraction=0.0),
    )
    seen.clear()
    again.run(x, public=others)
    assert {i - 40 for i in np.concatenate(seen).tolist() if i >= 40} == public_trained  # from the images alone
    verdict = ldpclient.label(x, teacher, public=others, epsilon=20, queries=40, epochs=1,
                              state_dir=tmp_path / "a").verdict
    assert verdict.public_held_out is not None and verdict.public_held_out["images"] == 12
    assert any("public images held out of training" in why for why in verdict.reasons)
