"""End-to-end knowledge transfer on a small synthetic task with an in-process teacher."""

import dataclasses

import numpy as np
import pytest
import torch

from ldpclient.privacy import laplace
from ldpclient.privacy.ledger import Ledger
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer.pipeline import KnowledgeTransfer
from ldpclient.transfer.result import TrainingSummary
from ldpclient.transfer.settings import AdaptationSettings, PlanSettings, TrainingSettings
from support.transfers import SIZE, quadrant_records, quadrant_teacher, quadrant_transfer


def test_sup_beats_sidp_end_to_end():
    x, y = quadrant_records()
    sidp = quadrant_transfer("sidp", "none").run(x)
    sup = quadrant_transfer("ldpkit", "sup", plan=dict(postprocess="blur:1,clip")).run(x)
    acc_sidp = (sidp.labels == y).float().mean().item()
    acc_sup = (sup.labels == y).float().mean().item()
    assert acc_sup >= acc_sidp + 0.15, (acc_sidp, acc_sup)
    assert acc_sup >= 0.8
    assert sidp.student is None and sidp.confidences is None
    assert sup.confidences.shape == (60,) and sup.student is not None
    assert sup.counts["queries"] == 1200 and sup.counts["batches"] == 5
    assert sidp.counts["queries"] == 60
    assert sup.guarantee.epsilon_element == pytest.approx(0.5)
    assert sup.guarantee.epsilon_record == pytest.approx(0.5 * SIZE * SIZE)
    assert set(sup.timings) >= {"release", "postprocess", "label", "train", "predict"}
    assert sum(sup.teacher_label_histogram) == 1200


def test_data_free_costs_nothing_and_uses_blank_queries():
    x, _ = quadrant_records(30)
    seen = []
    teacher = quadrant_teacher()
    orig = teacher.classify
    teacher.classify = lambda q: (seen.append(q.values.mean().item()), orig(q))[1]
    releases = []
    kt = KnowledgeTransfer(
        teacher,
        laplace(50.0, per="element"),
        mode="data-free",
        seed=0,
        progress=lambda stage, done, total, _: releases.append((done, total)) if stage == "release" else None,
        plan=PlanSettings(num_queries=100),
        training=TrainingSettings(epochs=1, device="cpu", student_kwargs={"width": 8}),
    )
    res = kt.run(x)
    assert releases[0] == (0, 30) and releases[-1] == (30, 30)  # its noising bar ends, as a private run's does
    assert res.guarantee.epsilon_record == 0 and res.guarantee.public_input
    assert res.counts["releases_fresh"] == 0
    assert max(seen) < 0.1  # near-noiseless blank records: the private images never reach the teacher
    assert res.labels.shape == (30,)


def test_blank_queries_mixed_into_a_private_run_take_their_own_noise_level_and_cost_nothing(tmp_path):
    x, _ = quadrant_records(30)
    quiet, loud = laplace(1e6, per="record"), laplace(0.5, per="record")  # noise scale ~0 vs ~128 per element
    spreads = []
    teacher = quadrant_teacher()
    orig = teacher.classify
    teacher.classify = lambda q: (spreads.append(q.values.std(dim=(1, 2, 3))), orig(q))[1]
    ledger = Ledger(tmp_path / "ledger.db")
    kt = KnowledgeTransfer(
        teacher,
        loud,
        ledger=ledger,
        seed=0,
        release_generator=torch.Generator().manual_seed(3),
        plan=PlanSettings(num_queries=120, blank_fraction=0.5, blank_mechanism=quiet, postprocess="",
                          clip_queries=False),
        training=TrainingSettings(epochs=1, device="cpu", student_kwargs={"width": 8}),
    )
    res = kt.run(x)
    spread = torch.cat(spreads)
    flat = spread < 1e-3  # the blank pairs at the quiet level: constant images
    assert int(flat.sum()) == 60 and bool((spread[~flat] > 10).all())  # half, and the private half is loud
    assert res.guarantee.epsilon_record == pytest.approx(0.5)  # the private release's cost, nothing for blanks
    assert ledger.spent(x).epsilon[0] == pytest.approx(0.5) and res.counts["releases_fresh"] == 30
    ledger.close()


def test_ledger_charges_once_then_reuses(tmp_path):
    x, _ = quadrant_records(20)
    ledger = Ledger(tmp_path / "ledger.db")
    progress = []
    first = quadrant_transfer(
        ledger=ledger,
        progress=lambda *a: progress.append(a[0]),
        plan=dict(num_queries=100),
        training=dict(epochs=1),
    ).run(x)
    again = quadrant_transfer(ledger=ledger, plan=dict(num_queries=100), training=dict(epochs=1)).run(x)
    assert first.counts["releases_fresh"] == 20 and first.counts["releases_reused"] == 0
    assert again.counts["releases_fresh"] == 0 and again.counts["releases_reused"] == 20
    assert ledger.spent(x).epsilon[0] == pytest.approx(first.guarantee.epsilon_record)
    assert {"release", "label", "train", "epoch", "predict"} <= set(progress)
    ledger.close()


def test_rand_and_reduction_and_checkpoint(tmp_path):
    x, y = quadrant_records(40)
    ck = tmp_path / "student.pt"
    res = KnowledgeTransfer(
        quadrant_teacher(),
        laplace(1.0, reduction=2, per="element"),
        seed=1,
        release_generator=torch.Generator().manual_seed(0),
        plan=PlanSettings(augment="rand", num_queries=400),
        training=TrainingSettings(epochs=2, device="cpu", student_kwargs={"width": 8}, checkpoint=ck),
    ).run(x)
    assert res.guarantee.elements_per_record == (SIZE // 2) ** 2
    assert res.guarantee.epsilon_record == pytest.approx(16.0)
    assert res.plan.kind == "rand" and res.counts["queries"] == 400
    assert ck.is_file()


def test_client_path_uses_label_batches():
    x, _ = quadrant_records(20)
    teacher = quadrant_teacher()
    sent = []

    class FakeClient:
        def label_batches(self, batches):
            for bid, d in batches:
                sent.append(bid)
                yield bid, teacher.classify(d)

    res = quadrant_transfer(
        client=FakeClient(),
        plan=dict(num_queries=150, query_batch_size=64),
        training=dict(epochs=1),
    ).run(x)
    assert len(sent) == 3 and res.counts["batches"] == 3
    assert all(b.startswith(res.plan.fingerprint + ":") for b in sent)


def test_bad_inputs():
    with pytest.raises(ValueError, match="mode"):
        quadrant_transfer(mode="magic")
    with pytest.raises(ValueError, match="augment must be one of"):
        quadrant_transfer(aug="mixup")
    with pytest.raises(ValueError, match="unknown student"):
        quadrant_transfer(training=dict(student="vgg99"))
    with pytest.raises(ValueError, match="expects"):
        quadrant_transfer().run(torch.rand(5, 1, 6, 6))
    with pytest.raises(ValueError, match="distinct Sup pairs"):
        quadrant_transfer(plan=dict(num_queries=1000)).run(quadrant_records(10)[0])


def test_the_pipeline_leaves_the_callers_global_rng_alone():
    """Training seeds generators of its own: the caller's global RNG is left as it was."""
    x, _ = quadrant_records(n=20)
    torch.manual_seed(1234)
    before = torch.random.get_rng_state().clone()
    quadrant_transfer("ldpkit", "sup", plan=dict(num_queries=100), training=dict(epochs=1)).run(x)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_settings_objects_and_one_teacher():
    """KnowledgeTransfer takes the teacher or its QueryClient; its settings are small frozen objects (the one way
    to give them), and a client talking to another teacher is refused."""
    from ldpclient.teachers import QueryClient

    x, _ = quadrant_records(20)
    teacher = quadrant_teacher()
    client = QueryClient(teacher)
    mech = laplace(1.0, per="record")
    kt = KnowledgeTransfer(client, mech, plan=PlanSettings(num_queries=120, query_batch_size=64),
                           training=TrainingSettings(epochs=1), adaptation=AdaptationSettings(adapt=False))
    assert kt.teacher is teacher and kt.client is client and kt.resolved(x).queries == 120 and not kt.resolved(x).adapt
    assert len(kt.run(x).labels) == 20 and client.stats.queries_sent == 120
    # the settings are taken in their objects only: a field given as a plain keyword is refused, by name
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_queries'"):
        KnowledgeTransfer(teacher, mech, num_queries=90)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="another teacher"):
        KnowledgeTransfer(quadrant_teacher(), mech, client=client)
    with pytest.raises(ValueError, match="num_queries must be >= 1"):
        PlanSettings(num_queries=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        PlanSettings().num_queries = 3  # type: ignore[misc]


@pytest.mark.parametrize("aug", ["sup", "rand"])
def test_training_reads_the_batches_kept_from_sending_them_and_learns_the_same(monkeypatch, aug):
    """The batches built for the teacher are kept for the epochs: same student, same labels as building them again."""
    from ldpclient.transfer import augment, query_book

    x, _ = quadrant_records()
    built: list[int] = []  # the queries built, by id
    original = augment.QueryPlan.queries

    def counting(self, releases, ids, **kwargs):
        built.extend(np.asarray(ids).tolist())
        return original(self, releases, ids, **kwargs)

    monkeypatch.setattr(augment.QueryPlan, "queries", counting)
    kept = quadrant_transfer("ldpkit", aug, adaptation=dict(adapt=True)).run(x)
    kept_built = sorted(built)
    built.clear()
    monkeypatch.setattr(query_book, "QUERY_CACHE_BYTES", 0)  # nothing kept: every epoch builds its batches
    rebuilt = quadrant_transfer("ldpkit", aug, adaptation=dict(adapt=True)).run(x)
    assert kept_built == list(range(1200))  # each built once, to send it; epochs and anchors read the kept batches
    assert len(built) > 1200
    assert torch.equal(kept.labels, rebuilt.labels) and torch.equal(kept.confidences, rebuilt.confidences)
    for a, b in zip(kept.student.state_dict().values(), rebuilt.student.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_above_the_selection_sample_only_the_final_pass_reads_every_record():
    from ldpclient.transfer.adapt import SelfTrainingAdapter

    x, _ = quadrant_records()
    small = quadrant_transfer(
        "ldpkit",
        "sup",
        adaptation=dict(adapt=True, adapter=SelfTrainingAdapter(seed=0, selection_sample=20)),
    ).run(x)
    assert small.unadapted_labels is None  # would cost a pass over every record: not computed above the sample
    # rounds 0-2 on the sample + final
    assert small.adaptation is not None and small.adaptation.predicted == 3 * 20 + len(x)
    assert len(small.labels) == len(x)
    # at or below the sample: the unadapted labels are there
    whole = quadrant_transfer("ldpkit", "sup", adaptation=dict(adapt=True)).run(x)
    assert whole.unadapted_labels is not None and len(whole.unadapted_labels) == len(x)


def _colour_teacher(side: int):
    """Label = which third of a colour image is brightest in red (3 classes)."""

    def model(x):
        thirds = (slice(0, side // 3), slice(side // 3, 2 * side // 3), slice(2 * side // 3, side))
        return torch.stack([x[:, 0, :, cols].mean((1, 2)) for cols in thirds], dim=1)

    return LocalTeacher(model, (3, side, side), 3, name="thirds")


def test_beside_public_colour_images_of_16_px_the_residual_student_trains_on_shifted_rows(monkeypatch):
    from ldpclient.transfer.stages import train

    seen: list[tuple[int, bool]] = []
    real = train.flip_crop

    def spy(images, pad, *, flip=True, generator=None):
        seen.append((pad, flip))
        return real(images, pad, flip=flip, generator=generator)

    monkeypatch.setattr(train, "flip_crop", spy)
    x = torch.rand(24, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    public = torch.rand(8, 3, 16, 16, generator=torch.Generator().manual_seed(2))

    def kt(**training):
        return KnowledgeTransfer(
            _colour_teacher(16),
            laplace(50.0, per="element"),
            seed=0,
            plan=PlanSettings(num_queries=64),
            training=TrainingSettings(epochs=1, batch_size=16, device="cpu", **training),
            adaptation=AdaptationSettings(adapt=False),
        )

    res = kt(flip=False).run(x, public=public)
    assert res.training.as_dict() == {
        "student": "small_resnet",
        "crop_pixels": 2,
        "flip": False,
        "warmup_epochs": 0,
        "students": 1,
        "mirror_check": None,
    }
    assert res.summary()["training"]["student"] == "small_resnet"
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in res.student.modules())
    assert len(seen) >= 4 and set(seen) == {(2, False)}  # every optimiser step's batch
    seen.clear()
    alone = kt().run(x)  # the noised queries alone: the small CNN on the rows as they are
    assert alone.training.as_dict() == {
        "student": "small_cnn",
        "crop_pixels": 0,
        "flip": False,
        "warmup_epochs": 0,
        "students": 1,
        "mirror_check": None,
    }
    assert not seen
    given = kt(student="small_resnet", crop=3, flip=True).run(x)
    assert given.training.as_dict() == {
        "student": "small_resnet",
        "crop_pixels": 3,
        "flip": True,
        "warmup_epochs": 0,
        "students": 1,
        "mirror_check": None,
    }
    assert seen and set(seen) == {(3, True)}


def test_grey_and_small_images_keep_the_small_cnn_and_small_ones_are_not_shifted():
    x, _ = quadrant_records(n=20)
    res = quadrant_transfer(
        plan=dict(num_queries=60),
        training=dict(epochs=1),
        adaptation=dict(adapt=False),
    ).run(x)  # 8x8 grey
    assert res.training == TrainingSummary(student="small_cnn", crop_pixels=0, flip=False, warmup_epochs=0,
                                           students=1, mirror_check=None)
    with pytest.raises(ValueError, match="crop"):
        quadrant_transfer(training=dict(crop=-1))


def test_student_seed_draws_the_students_side_alone() -> None:
    """``student_seed`` learns from the same plan, releases and answers with other draws; left out, it is ``seed``."""
    x, _ = quadrant_records(60)
    base = quadrant_transfer(training=dict(epochs=1), adaptation=dict(adapt=False)).run(x)
    same = quadrant_transfer(training=dict(epochs=1, student_seed=0), adaptation=dict(adapt=False)).run(x)
    other = quadrant_transfer(training=dict(epochs=1, student_seed=1), adaptation=dict(adapt=False)).run(x)
    assert torch.equal(base.labels, same.labels) and torch.equal(base.confidences, same.confidences)
    assert other.plan.fingerprint == base.plan.fingerprint
    assert other.teacher_label_histogram == base.teacher_label_histogram
    assert not torch.equal(other.confidences, base.confidences)
    with pytest.raises(ValueError, match="student_seed must be an integer from 0"):
        TrainingSettings(student_seed=-1)


@pytest.mark.parametrize("with_public", [False, True])
def test_the_student_is_the_same_whatever_batch_size_the_teacher_takes(with_public: bool) -> None:
    """The same seed and the same answers train the same student, whether the teacher took 16 queries a request
    (Cloud Vision's limit) or 256: the training epochs read fixed chunks of ids, not the teacher's batches."""
    x, _ = quadrant_records(60)
    public = quadrant_records(40, seed=5)[0] if with_public else None
    runs = [
        quadrant_transfer(plan=dict(num_queries=700, query_batch_size=size), training=dict(epochs=2)).run(x, public)
        for size in (16, 100, 256)
    ]
    assert [r.counts["batches"] for r in runs] == [44, 7, 3]
    for r in runs[1:]:
        assert torch.equal(r.labels, runs[0].labels) and torch.equal(r.confidences, runs[0].confidences)
