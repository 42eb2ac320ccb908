"""The label prior (issue 44): the student's outputs re-weighted from the teacher's answer shares."""

from __future__ import annotations

import pytest
import torch
from test_pipeline import _kt, _records

from ldpclient.transfer.prior import PRIOR_PSEUDO_COUNT, em_prior, reweight, training_prior


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


def test_the_pipeline_labels_with_balanced_outputs_unless_told_not_to() -> None:
    x, _ = _records(60)
    balanced = _kt().run(x)
    plain = _kt(balance=False).run(x)
    assert torch.equal(plain.labels, plain.adaptation.probs.argmax(1))
    prior = training_prior(balanced.teacher_label_histogram, 4)
    assert float(prior.max() - prior.min()) > 0.01  # the teacher did not answer every class alike
    expected = reweight(balanced.adaptation.probs, prior, torch.full((4,), 0.25, dtype=torch.float64)).float()
    assert torch.equal(balanced.labels, expected.argmax(1))
    assert torch.allclose(balanced.confidences, expected.max(1).values.float())


def test_beside_public_images_the_labels_are_the_outputs_as_trained() -> None:
    """Re-weighting did not win beside public images (their answers teach the classes): it is off there."""
    x, _ = _records(60)
    public, _ = _records(40, seed=5)
    res = _kt().run(x, public=public)
    assert res.counts["public_queries"] == 40
    assert torch.equal(res.labels, res.adaptation.probs.argmax(1))
