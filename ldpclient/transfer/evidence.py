"""Per-record evidence: fuse the teacher's answers to the pairs a record appears in with the student's belief.

Every LDPKiT-Sup query superimposes the releases of two records ``i`` and ``j``; the
teacher's answer ``a`` to it is evidence about both, at no extra privacy cost (the answers
are already here; this is post-processing). The teacher on a noisy pair is modelled as a
mixture of its confusion on each member (Dawid & Skene 1979, one shared annotator):

    P(a | y_i = c, y_j = c') = 1/2 M[c, a] + 1/2 M[c', a]

with ``M`` (K x K, rows summing to 1) fitted by EM against the current beliefs (student
predictions on the clean records, refined each round), with a Dirichlet prior that pulls
each row towards the teacher's overall answer histogram. Marginalising the partner over its
belief ``b_j`` gives ``1/2 M[c, a] + 1/2 m_j(a)``, ``m_j = b_j M``.

The answers of one record's pairs all share that record's single release, so they are not
independent given its label: the evidence of a record is the *mean* log-likelihood of its
answers (one effective observation, ``weight`` scales it), added to the student's log
probability. The data-free baseline has no such evidence (its pairs are blank records).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class FusionResult:
    """Fused posteriors ``(N, K)`` (float64 rows summing to 1), the confusion ``M`` and the queries used.

    ``informativeness``: mean over classes of ``M[c, c] - pi(c)`` (how much more often the teacher
    names a pair member's class than it answers that class overall; 0 means no evidence).
    """

    posterior: torch.Tensor
    confusion: np.ndarray
    queries: int
    informativeness: float


def _record_loglik(
    confusion: np.ndarray, own: np.ndarray, partner: np.ndarray, answers: np.ndarray, belief: np.ndarray
) -> np.ndarray:
    """``(N, K)`` mean log-likelihood of each record's answers for each candidate label."""
    n, k = belief.shape
    m_partner = (belief[partner] @ confusion)[np.arange(len(answers)), answers]  # (2Q,)
    lik = 0.5 * confusion[:, answers].T + 0.5 * m_partner[:, None]  # (2Q, K)
    total = np.zeros((n, k))
    np.add.at(total, own, np.log(lik))
    count = np.bincount(own, minlength=n).astype(float)
    return total / np.maximum(count, 1.0)[:, None]


def fuse_pair_evidence(
    student_probs: torch.Tensor,
    i: np.ndarray,
    j: np.ndarray,
    answers: np.ndarray,
    *,
    rounds: int = 5,
    weight: float = 1.0,
    prior_strength: float = 10.0,
) -> FusionResult:
    """Posterior labels of ``N`` records from the student's ``(N, K)`` probabilities and Sup pair answers.

    ``i``, ``j``: int arrays ``(Q,)`` of the two records of each query; ``answers``: the
    teacher's labels ``(Q,)`` (``-1``: not answered, ignored). ``weight``: how many effective
    observations one record's answers count for. ``prior_strength``: pseudo-counts per row of
    ``M`` towards the overall answer histogram.
    """
    probs = student_probs.detach().double().clamp_min(1e-9).numpy()
    probs = probs / probs.sum(1, keepdims=True)
    n, k = probs.shape
    ok = (np.asarray(answers) >= 0) & (np.asarray(i) >= 0) & (np.asarray(j) >= 0)
    a = np.asarray(answers)[ok].astype(np.int64)
    own = np.concatenate([np.asarray(i)[ok], np.asarray(j)[ok]]).astype(np.int64)
    partner = np.concatenate([np.asarray(j)[ok], np.asarray(i)[ok]]).astype(np.int64)
    a2 = np.concatenate([a, a])
    pi = (np.bincount(a, minlength=k) + 1.0) / (len(a) + k)
    confusion = np.tile(pi, (k, 1))
    belief = probs
    for _ in range(rounds):
        # E/M: expected (class, answer) counts over both members of every query
        joint_i = belief[np.asarray(i)[ok]] * confusion[:, a].T  # (Q, K): member i produced the answer
        joint_j = belief[np.asarray(j)[ok]] * confusion[:, a].T
        z = (joint_i.sum(1) + joint_j.sum(1))[:, None]
        counts = np.zeros((k, k))
        np.add.at(counts.T, a, (joint_i + joint_j) / z)
        confusion = counts + prior_strength * pi
        confusion /= confusion.sum(1, keepdims=True)
        post = np.log(probs) + weight * _record_loglik(confusion, own, partner, a2, belief)
        post = np.exp(post - post.max(1, keepdims=True))
        belief = post / post.sum(1, keepdims=True)
    informativeness = float(np.mean(np.diag(confusion) - pi))
    return FusionResult(torch.from_numpy(belief), confusion, int(ok.sum()), informativeness)


__all__ = ["FusionResult", "fuse_pair_evidence"]
