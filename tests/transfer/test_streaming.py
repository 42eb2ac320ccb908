"""Streaming: records spooled to disk and read in batches, chunked releases, lazy post-processing.

Every streamed path is checked against the in-memory one it replaces: same values, same labels,
same charges; and the spool file leaves nothing on disk.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

import mock_server
from ldpclient.cli.commands import app
from ldpclient.io.folders import load_private_folder, spool_private_folder
from ldpclient.io.records import DiskRecords, TensorRecords, iter_batches
from ldpclient.privacy import laplace
from ldpclient.privacy.ledger import Ledger
from ldpclient.privacy.release import ReleaseBuilder
from ldpclient.report.label_files import iter_label_rows, render_labels, write_labels
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer.adapt import SelfTrainingAdapter
from ldpclient.transfer.augment import QueryPlan
from ldpclient.transfer.pipeline import KnowledgeTransfer
from ldpclient.transfer.postprocess import ReleaseRows, apply_all, parse_postprocess
from ldpclient.transfer.settings import AdaptationSettings, PlanSettings, TrainingSettings
from ldpclient.transfer.stages import release as release_stage
from ldpclient.transfer.student import predict_proba, small_cnn


def _records(n: int, size: int = 8, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 1, size, size, generator=torch.Generator().manual_seed(seed))


def _spool(records: torch.Tensor, directory: Path | None = None, chunk: int = 7) -> DiskRecords:
    spool = DiskRecords(tuple(records.shape[1:]), directory)
    for start in range(0, len(records), chunk):
        spool.append(records[start : start + chunk])
    return spool


def test_disk_records_read_back_exactly_in_any_order_and_leave_no_file(tmp_path: Path) -> None:
    x = _records(23)
    with _spool(x, tmp_path) as spool:
        assert len(spool) == 23 and spool.record_shape == (1, 8, 8)
        assert os.listdir(tmp_path) == []  # an unlinked temporary file: nothing to find, nothing left
        for idx in ([0, 1, 2], [22, 3, 4, 5, 0, 0], [], np.arange(23), np.arange(23)[::-1]):
            assert torch.equal(spool.read(idx), x[torch.tensor(list(idx), dtype=torch.int64)])
        with pytest.raises(IndexError, match="out of range"):
            spool.read([23])
        with pytest.raises(ValueError, match="do not fit"):
            spool.append(torch.zeros(1, 1, 4, 4))
        batches = list(iter_batches(spool, 10))
        assert [len(i) for i, _ in batches] == [10, 10, 3]
        assert torch.equal(torch.cat([b for _, b in batches]), x)


def test_spooling_a_folder_gives_what_loading_it_gives(tmp_path: Path) -> None:
    folder = tmp_path / "private"
    rng = np.random.default_rng(0)
    for k in range(9):
        (folder / f"d{k % 3}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (10, 12), dtype=np.uint8)).save(folder / f"d{k % 3}" / f"{k}.png")
    (folder / "bad.png").write_bytes(b"not an image")
    (tmp_path / "spool").mkdir()
    loaded = load_private_folder(folder, (1, 8, 8))
    spooled = spool_private_folder(folder, (1, 8, 8), convert=lambda r: r * 255, directory=tmp_path / "spool")
    with spooled:
        assert spooled.paths == loaded.paths and spooled.skipped == loaded.skipped
        assert torch.equal(spooled.records.read(np.arange(len(spooled))), loaded.records * 255)
        assert os.listdir(tmp_path / "spool") == []


def test_release_builder_keeps_order_flags_and_refuses_mixed_guarantees() -> None:
    mech = laplace(1.0, per="element")
    a = mech.release(_records(3), generator=torch.Generator().manual_seed(1))
    b = mech.release(_records(2, seed=1), generator=torch.Generator().manual_seed(2))
    builder = ReleaseBuilder(5)
    builder.add(a)
    builder.add(b)
    both = builder.build()
    assert len(both) == 5 and both.guarantee == a.guarantee
    assert torch.equal(both.values, torch.cat([a.values, b.values]))
    assert both.reused.tolist() == [False] * 5
    other = laplace(2.0, per="element").release(_records(2), generator=torch.Generator().manual_seed(3))
    mixed = ReleaseBuilder(5)
    mixed.add(a)
    with pytest.raises(ValueError, match="different guarantees"):
        mixed.add(other)
    with pytest.raises(ValueError, match="at least one record"):
        ReleaseBuilder(0)


def test_lazy_post_processing_equals_post_processing_the_whole_release() -> None:
    mech = laplace(2.0, reduction=2, per="element")
    release = mech.release(_records(12, size=16), generator=torch.Generator().manual_seed(0))
    transforms = parse_postprocess("blur:1.5,clip")
    eager = apply_all(release.upsampled("bilinear"), transforms)
    lazy = ReleaseRows(release, transforms, "bilinear")
    idx = torch.tensor([11, 0, 5, 5])
    rows = lazy.rows(idx)
    assert torch.allclose(rows.values, eager.values[idx], atol=1e-6)
    assert rows.steps == eager.steps and rows.guarantee == eager.guarantee
    for kind, q in (("sup", 40), ("rand", 30), ("identity", None)):
        plan = QueryPlan(kind, 12, num_queries=q, seed=3, batch_size=16)
        for b in range(plan.num_batches):
            ids = plan.batch_ids(b)
            want = plan.queries(eager, ids, mechanism=mech)
            got = plan.queries(lazy, ids, mechanism=mech)
            assert torch.allclose(got.values, want.values, atol=1e-6)
            assert torch.equal(got.sources, want.sources) and got.steps == want.steps


def _teacher() -> LocalTeacher:
    w = torch.randn(64, 4, generator=torch.Generator().manual_seed(5))
    return LocalTeacher(lambda x: x.reshape(len(x), -1) @ w, (1, 8, 8), 4, name="linear")


def _transfer(adapt: bool = True, **transfer) -> KnowledgeTransfer:
    return KnowledgeTransfer(
        _teacher(), laplace(4.0, per="element"), seed=0, release_generator=torch.Generator().manual_seed(7),
        plan=PlanSettings(num_queries=150), adaptation=AdaptationSettings(adapt=adapt),
        training=TrainingSettings(epochs=1, batch_size=32, device="cpu", student_kwargs={"width": 8}), **transfer,
    )


def test_a_spooled_run_labels_exactly_like_an_in_memory_run(tmp_path: Path) -> None:
    x = _records(40)
    in_memory = _transfer().run(x)
    with _spool(x, tmp_path) as spool:
        streamed = _transfer().run(spool)
    assert torch.equal(streamed.labels, in_memory.labels)
    assert torch.equal(streamed.unadapted_labels, in_memory.unadapted_labels)
    assert streamed.counts == in_memory.counts


def test_chunked_releases_charge_each_record_once_and_reuse_across_chunks(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(release_stage, "RELEASE_CHUNK_ELEMENTS", 64 * 6)  # 6 records of 8x8 per chunk
    x = _records(20)
    x[13] = x[2]  # the same image twice, in different chunks: noised and charged once
    with Ledger(tmp_path / "ledger.sqlite") as ledger, _spool(x, tmp_path) as spool:
        result = _transfer(ledger=ledger, adapt=False).run(spool)
        assert result.counts["releases_fresh"] == 19 and result.counts["releases_reused"] == 1
        spent = ledger.spent(spool)
        assert torch.equal(spent.epsilon, ledger.spent(x).epsilon)
        assert spent.epsilon.tolist() == pytest.approx([result.guarantee.epsilon_record] * 20)
        again = _transfer(ledger=ledger, adapt=False).run(spool)
        assert again.counts["releases_fresh"] == 0 and again.counts["releases_reused"] == 20
        assert torch.equal(ledger.spent(spool).epsilon, spent.epsilon)


def test_data_free_releases_blanks_without_reading_the_records() -> None:
    class Unreadable(TensorRecords):
        def read(self, indices):  # noqa: ANN001 - test double
            raise AssertionError("a data-free release must not read the private records")

    # the data-free run reads the clean records only to label them locally at the end, never to release
    context = _transfer(mode="data-free", adapt=False)._context(Unreadable(_records(20)))
    released = release_stage.release_records(context)
    assert len(released.release) == 20 and released.counts["releases_fresh"] == 0
    assert released.release.guarantee.epsilon_record == 0.0


def test_predict_and_adapt_read_a_source_like_a_tensor(tmp_path: Path) -> None:
    x = _records(30)
    model = small_cnn(num_classes=4, image_size=8, width=8)
    with _spool(x, tmp_path) as spool:
        assert torch.equal(predict_proba(model, spool, batch_size=8, device="cpu"),
                           predict_proba(model, x, batch_size=8, device="cpu"))
        hist = SelfTrainingAdapter(schedule=(1.0,), epochs=1, max_per_round=7).adapt(model, spool)
    assert hist.selected == [7]  # the per-round compute bound
    with pytest.raises(ValueError, match="max_per_round"):
        SelfTrainingAdapter(max_per_round=0)


def test_label_files_are_streamed_with_the_same_bytes(tmp_path: Path) -> None:
    rows = list(iter_label_rows(["a.png", "b,c.png"], torch.tensor([1, 0]), torch.tensor([0.5, 0.25]), ["x", "y"]))
    for fmt in ("csv", "jsonl"):
        out = write_labels(tmp_path / f"l.{fmt}", iter(rows), fmt)
        assert out.read_text(encoding="utf-8") == render_labels(rows, fmt)
    assert write_labels(tmp_path / "empty.csv", []).read_text() == "path,label,label_name,confidence\n"
    with pytest.raises(ValueError, match="2 paths, 1 labels"):
        list(iter_label_rows(["a", "b"], [1], [0.5]))


def test_label_leaves_no_spooled_records_in_the_state_directory(tmp_path: Path) -> None:
    folder = tmp_path / "private"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for k in range(10):
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(folder / f"{k}.png")
    state = tmp_path / "state"
    with mock_server.serve(model="trivial", image_size=8, channels=1) as srv:
        result = CliRunner().invoke(app, [
            "label", str(folder), "--teacher", srv.model_url, "--state-dir", str(state), "--queries", "20",
            "--epochs", "1", "--output", str(tmp_path / "labels.csv"), "--quiet", "--max-retry-time", "0",
        ])
    assert result.exit_code == 0, result.output
    leftovers = [p.name for p in state.iterdir() if not p.name.startswith(("ledger.sqlite", "journal.sqlite"))]
    assert sorted(leftovers) == ["lock", "runs.json", "students", "wire.json"], leftovers  # the state, no spool


def test_noise_releases_in_chunks_writes_every_copy_and_reuses_on_rerun(tmp_path: Path, monkeypatch) -> None:
    from ldpclient.run.noise import NoiseOptions, run_noise

    monkeypatch.setattr(release_stage, "RELEASE_CHUNK_ELEMENTS", 64 * 3)  # 3 records of 8x8 per chunk
    folder = tmp_path / "private"
    (folder / "sub").mkdir(parents=True)
    rng = np.random.default_rng(1)
    for k in range(10):
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(
            folder / ("sub" if k % 2 else "") / f"{k}.png"
        )
    opts = NoiseOptions(private_dir=folder, out=tmp_path / "out", size=8, epsilon=50, epsilon_unit="record",
                        state_dir=tmp_path / "state", preview=4)
    first = run_noise(opts)
    assert first["counts"] == {"noised": 10, "fresh": 10, "reused": 0, "skipped": 0}
    written = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.png"))
    assert written == sorted([f"{k}.png" if k % 2 == 0 else f"sub/{k}.png" for k in range(10)] + ["preview.png"])
    assert first["ledger"]["max_spent_epsilon"] == pytest.approx(50.0)
    again = run_noise(opts)
    assert again["counts"]["fresh"] == 0 and again["counts"]["reused"] == 10
    assert again["ledger"]["max_spent_epsilon"] == pytest.approx(50.0)


def test_release_builder_needs_every_record_and_no_more() -> None:
    part = laplace(1.0, per="element").release(_records(3), generator=torch.Generator().manual_seed(1))
    builder = ReleaseBuilder(4)
    builder.add(part)
    with pytest.raises(ValueError, match="3 of 4 records"):
        builder.build()
    with pytest.raises(ValueError, match="6 records added to a release of 4"):
        builder.add(part)
