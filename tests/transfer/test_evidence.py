"""Pair-evidence fusion (Dawid-Skene mixture over the two pair members): recovers the channel, helps a
noisy student, ignores a teacher bias towards one class, and is neutral without evidence."""

from __future__ import annotations

import numpy as np
import torch

from ldpclient.transfer.evidence import fuse_pair_evidence


def _world(n: int = 400, k: int = 10, q: int = 8000, alpha: float = 0.35, bias: float = 0.0, seed: int = 0):
    """Answers: member i's label w.p. alpha, member j's w.p. alpha, class 8 w.p. bias, else uniform.

    Each record's answers share one noisy "release": with probability 0.3 a record looks like
    another class to the teacher, for all its pairs (the answers are not independent given the label).
    """
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    looks = np.where(rng.random(n) < 0.3, rng.integers(0, k, n), y)
    guess = np.where(rng.random(n) < 0.7, y, rng.integers(0, k, n))  # a student right ~70% of the time
    probs = np.full((n, k), 0.3 / (k - 1))
    probs[np.arange(n), guess] = 0.7
    i = rng.integers(0, n, q)
    j = (i + rng.integers(1, n, q)) % n
    u = rng.random(q)
    other = np.where(rng.random(q) < bias / max(1e-9, 1 - 2 * alpha), 8, rng.integers(0, k, q))
    answers = np.where(u < alpha, looks[i], np.where(u < 2 * alpha, looks[j], other))
    return y, torch.from_numpy(probs).float(), i, j, answers


def _acc(labels: torch.Tensor, y: np.ndarray) -> float:
    return float((labels.numpy() == y).mean())


def test_fusion_helps_a_noisy_student_and_reports_informative_answers() -> None:
    y, probs, i, j, answers = _world()
    res = fuse_pair_evidence(probs, i, j, answers, weight=10.0)
    assert _acc(res.posterior.argmax(1), y) > _acc(probs.argmax(1), y) + 0.03
    assert res.informativeness > 0.1
    weak = fuse_pair_evidence(probs, i, j, answers)  # one effective observation: the student mostly stands
    assert (weak.posterior.argmax(1) == probs.argmax(1)).float().mean() > 0.9
    assert torch.allclose(res.posterior.sum(1), torch.ones(len(y), dtype=torch.float64))
    assert res.queries == len(answers) and res.confusion.shape == (10, 10)


def test_a_teacher_that_favours_one_class_does_not_drag_records_to_it() -> None:
    y, probs, i, j, answers = _world(alpha=0.2, bias=0.4)
    res = fuse_pair_evidence(probs, i, j, answers, weight=10.0)
    fused = res.posterior.argmax(1).numpy()
    assert (fused == 8).mean() < (y == 8).mean() + 0.05
    assert _acc(res.posterior.argmax(1), y) >= _acc(probs.argmax(1), y)


def test_uninformative_answers_leave_the_student_alone_and_unanswered_queries_are_ignored() -> None:
    y, probs, i, j, _ = _world(alpha=0.0)
    noise = np.random.default_rng(3).integers(0, 10, len(i))
    noise[:100] = -1  # not answered
    res = fuse_pair_evidence(probs, i, j, noise)
    assert res.queries == len(i) - 100 and abs(res.informativeness) < 0.02
    assert (res.posterior.argmax(1) == probs.argmax(1)).float().mean() > 0.97
