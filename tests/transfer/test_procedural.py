"""Procedural free images: what they are, and that a run sends them without noise, at no cost
and whatever the private images hold."""

from __future__ import annotations

import pytest
import torch

from ldpclient.privacy import laplace
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer.pipeline import KnowledgeTransfer
from ldpclient.transfer.procedural import KINDS, procedural_images
from ldpclient.transfer.settings import PlanSettings, TrainingSettings


@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32), (1, 5, 9)])
def test_images_are_in_the_unit_range_of_every_kind_and_the_same_for_the_same_seed(shape) -> None:
    first = procedural_images(12, shape, torch.Generator().manual_seed(4))
    again = procedural_images(12, shape, torch.Generator().manual_seed(4))
    other = procedural_images(12, shape, torch.Generator().manual_seed(5))
    assert first.shape == (12, *shape) and first.dtype == torch.float32
    assert float(first.min()) >= 0.0 and float(first.max()) <= 1.0
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert bool((first.flatten(1).std(dim=1) > 1e-3).all())  # no flat image
    assert len(KINDS) == 4


def test_the_kinds_differ_as_described() -> None:
    x = procedural_images(400, (3, 32, 32), torch.Generator().manual_seed(0))
    leaves, noise, stripes, blobs = (x[k::4] for k in range(4))
    def distinct(images: torch.Tensor) -> float:  # distinct colours per image, on average
        return sum(len(torch.unique(im.flatten(1), dim=1).T) for im in images) / len(images)
    assert distinct(leaves) < 60 < distinct(noise)  # flat discs against a value in every pixel
    assert float(noise.std(dim=1).mean()) > 0.01  # its colour channels differ
    step = (stripes[:, :, :, 1:] - stripes[:, :, :, :-1]).abs().mean() + (
        stripes[:, :, 1:] - stripes[:, :, :-1]
    ).abs().mean()
    smooth = (blobs[:, :, :, 1:] - blobs[:, :, :, :-1]).abs().mean() + (blobs[:, :, 1:] - blobs[:, :, :-1]).abs().mean()
    assert float(step) > 3 * float(smooth)  # gratings change fast, blobs slowly
    grey = procedural_images(8, (1, 16, 16), torch.Generator().manual_seed(0))
    assert grey.shape == (8, 1, 16, 16)
    with pytest.raises(ValueError, match="shape"):
        procedural_images(2, (16, 16), torch.Generator())


def test_free_images_must_be_a_known_name() -> None:
    with pytest.raises(ValueError, match="free_images must be one of"):
        PlanSettings(free_images="noise")


def _recording_teacher(seen: list[torch.Tensor]) -> LocalTeacher:
    def model(x: torch.Tensor) -> torch.Tensor:
        seen.append(x.clone())
        return (x.mean(dim=(1, 2, 3)) * 4).long().clamp(0, 3)
    return LocalTeacher(model, (1, 8, 8), 4, name="mean")


def test_a_data_free_run_sends_procedural_images_unnoised_and_the_same_for_any_private_images() -> None:
    sent = []
    for seed in (1, 2):
        seen: list[torch.Tensor] = []
        records = torch.rand(20, 1, 8, 8, generator=torch.Generator().manual_seed(seed))
        kt = KnowledgeTransfer(
            _recording_teacher(seen),
            laplace(20.0, per="record"),
            mode="data-free",
            seed=0,
            plan=PlanSettings(num_queries=40, free_images="procedural", postprocess="", augment="sup"),
            training=TrainingSettings(epochs=1, device="cpu", student_kwargs={"width": 8}),
        )
        res = kt.run(records)
        assert res.guarantee.epsilon_record == 0 and res.guarantee.public_input
        sent.append(torch.cat(seen))
    assert torch.equal(sent[0], sent[1])  # nothing of the private images reaches the teacher
    images = procedural_images(20, (1, 8, 8), torch.Generator().manual_seed(17))  # the run's seed 0
    # each Sup query is the average of two procedural images: inside [0, 1] and not noise
    assert float(sent[0].min()) >= 0.0 and float(sent[0].max()) <= 1.0
    pairs = (images.unsqueeze(0) + images.unsqueeze(1)) / 2
    nearest = torch.cdist(sent[0].flatten(1), pairs.flatten(2).flatten(0, 1).flatten(1)).min(dim=1).values
    assert float(nearest.max()) < 8 / 255  # up to the 8-bit rounding of each query on the way


def test_procedural_queries_mixed_into_a_private_run_cost_nothing() -> None:
    seen: list[torch.Tensor] = []
    records = torch.rand(20, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    res = KnowledgeTransfer(
        _recording_teacher(seen),
        laplace(2.0, per="record"),
        seed=0,
        plan=PlanSettings(num_queries=40, blank_fraction=0.5, free_images="procedural", postprocess=""),
        training=TrainingSettings(epochs=1, device="cpu", student_kwargs={"width": 8}),
    ).run(records)
    assert res.guarantee.epsilon_record == pytest.approx(2.0)  # the private release only
    assert res.counts["queries"] == 40
