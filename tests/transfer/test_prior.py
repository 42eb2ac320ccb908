"""The label prior: labels in equal class shares, not the teacher's answer shares."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ldpclient.transfer.adapt import AdaptHistory, SelfTrainingAdapter
from ldpclient.transfer.prior import (
    PRIOR_PSEUDO_COUNT,
    aligned,
    em_prior,
    record_shares,
    reweight,
    target_shares,
    training_prior,
)
from ldpclient.transfer.student import predict_proba
from support.transfers import quadrant_records, quadrant_transfer


def test_the_training_prior_counts_the_answers_with_a_pseudo_count_for_every_class() -> None:
    prior = training_prior([6, 0, 2], 4)  # a class never answered, and one beyond the counts
    expected = torch.tensor([6, 0, 2, 0], dtype=torch.float64) + PRIOR_PSEUDO_COUNT
    assert torch.allclose(prior, expected / expected.sum())
    assert float(training_prior([], 3).sum()) == pytest.approx(1.0)


def test_reweighting_is_bayes_rule_under_another_prior() -> None:
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.3, 0.3, 0.4]])
    prior = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    uniform = torch.full((3,), 1 / 3, dtype=torch.float64)
    out = reweight(probs, prior, uniform)
    raw = probs.double() / prior
    assert torch.allclose(out, raw / raw.sum(1, keepdim=True))
    assert torch.allclose(out.sum(1), torch.ones(2, dtype=torch.float64))
    assert out[1].argmax() == 2 and out[0].argmax() == 0  # a class the training prior favoured loses ties
    assert torch.allclose(reweight(probs, prior, prior), probs.double())  # the same prior changes nothing


def test_alignment_reads_the_bias_from_the_outputs_and_does_not_correct_twice() -> None:
    """Outputs that favour class 0 (mean shares 0.7 / 0.3) aligned to equal shares: their mean moves to about
    equal shares, and aligning the aligned outputs again moves them far less than the first time (a fixed prior
    would move them as far again)."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2_000, 2, generator=g) + torch.tensor([0.9, 0.0])
    probs = torch.softmax(logits, 1)
    assert float(probs.mean(0)[0]) > 0.6
    equal = torch.tensor([0.5, 0.5])
    once = aligned(probs, equal)
    assert once.dtype == probs.dtype and torch.allclose(once.sum(1), torch.ones(2_000))
    assert abs(float(once.mean(0)[0]) - 0.5) < 0.05
    twice = aligned(once, equal)
    assert float((twice - once).abs().max()) < 0.4 * float((once - probs).abs().max())
    assert torch.equal(aligned(probs, probs.double().mean(0)).argmax(1), probs.argmax(1))  # its own mean: unchanged


def test_record_shares_give_a_seldom_answered_class_its_share_back_and_an_absent_one_none_to_align_to() -> None:
    """Records of classes 0 and 1 alike, none of class 2; the teacher answered class 1 a tenth as often as class 0
    and class 2 as often as class 1, so the student under-rates class 1 and gives class 2 a little."""
    g = torch.Generator().manual_seed(2)
    y = torch.arange(3_000) % 2
    logits = torch.randn(3_000, 3, generator=g) * 0.5
    logits[torch.arange(3_000), y] += 3.0
    logits += torch.log(torch.tensor([0.84, 0.08, 0.08]))  # the training prior, learnt
    probs = torch.softmax(logits, 1)
    prior = torch.tensor([0.84, 0.08, 0.08], dtype=torch.float64)
    shares = record_shares(probs, prior)
    assert float(shares.sum()) == pytest.approx(1.0)
    assert float(probs.mean(0)[1]) < 0.4 < float(shares[1])  # class 1's share back ...
    assert float(shares[2]) < 0.1  # ... and the absent class not lifted to a third
    # adaptation aligns to equal shares over the classes present: the absent one gets none
    assert target_shares(probs, prior).tolist() == pytest.approx([0.5, 0.5, 0.0])
    assert target_shares(probs, torch.full((3,), 1 / 3, dtype=torch.float64)).tolist() == pytest.approx([0.5, 0.5, 0.0])


def test_em_finds_the_records_prior_from_calibrated_outputs() -> None:
    """Records drawn 70/30 from two classes, outputs calibrated under a 50/50 training prior: EM finds 70/30."""
    g = torch.Generator().manual_seed(0)
    y = (torch.rand(20_000, generator=g) < 0.3).long()
    score = torch.randn(20_000, generator=g) + 1.5 * (2 * y - 1)  # a score with a class-dependent mean
    p1 = torch.sigmoid(3.0 * score)  # the exact posterior under equal priors for unit-variance means +-1.5
    probs = torch.stack([1 - p1, p1], 1)
    prior = torch.tensor([0.5, 0.5], dtype=torch.float64)
    posteriors, estimate = em_prior(probs, prior)
    assert estimate.tolist() == pytest.approx([0.7, 0.3], abs=0.01)
    assert torch.allclose(posteriors, reweight(probs, prior, estimate))


class _Recording(SelfTrainingAdapter):
    """The library's adapter, keeping the ``prior`` each run gave it."""

    def __init__(self) -> None:
        super().__init__(seed=0)
        self.priors: list[torch.Tensor | None] = []

    def adapt(self, *args: Any, prior: torch.Tensor | None = None, **kwargs: Any) -> AdaptHistory:
        self.priors.append(prior)
        return super().adapt(*args, prior=prior, **kwargs)


def test_adaptation_is_given_the_training_prior_and_its_outputs_are_the_labels() -> None:
    """With ``balance`` the adapter is given the prior the student learnt (its rounds learn the records' shares)
    and the adapted outputs are the labels, not re-weighted after; without it, neither."""
    x, _ = quadrant_records(60)
    adapter = _Recording()
    balanced = quadrant_transfer(adaptation=dict(adapter=adapter)).run(x)
    prior = training_prior(balanced.teacher_label_histogram, 4)
    assert float(prior.max() - prior.min()) > 0.01  # the teacher did not answer every class alike
    assert adapter.priors[-1] is not None and torch.equal(adapter.priors[-1], prior)
    assert torch.equal(balanced.labels, balanced.adaptation.probs.argmax(1))
    assert torch.allclose(balanced.confidences, balanced.adaptation.probs.max(1).values)
    plain = quadrant_transfer(adaptation=dict(balance=False, adapter=adapter)).run(x)
    assert adapter.priors[-1] is None
    assert torch.equal(plain.labels, plain.adaptation.probs.argmax(1))


def test_without_adaptation_the_labels_are_the_students_outputs_re_weighted() -> None:
    x, _ = quadrant_records(60)
    res = quadrant_transfer(adaptation=dict(adapt=False)).run(x)
    assert res.adaptation is None and res.student is not None
    prior = training_prior(res.teacher_label_histogram, 4)
    expected = reweight(predict_proba(res.student, x), prior, torch.full((4,), 0.25, dtype=torch.float64)).float()
    assert torch.equal(res.labels, expected.argmax(1))
    assert torch.allclose(res.confidences, expected.max(1).values.float())


def test_beside_public_images_the_labels_are_the_outputs_as_trained() -> None:
    """Re-weighting did not win beside public images (their answers teach the classes): it is off there."""
    x, _ = quadrant_records(60)
    public, _ = quadrant_records(40, seed=5)
    adapter = _Recording()
    res = quadrant_transfer(adaptation=dict(adapter=adapter)).run(x, public=public)
    assert res.counts["public_queries"] == 40
    assert torch.equal(res.labels, res.adaptation.probs.argmax(1))
    assert adapter.priors == [None]  # the rounds pseudo-label from the outputs as they are too
