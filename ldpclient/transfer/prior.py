"""The label prior: the student learnt its classes in the teacher's answer shares on noised queries, not in the
private records' own.

A teacher answers noise with some classes far more than others (on digits "8", on photos "dog"), so the student
is trained under a label prior that is the teacher's answers to noise as much as the private records' classes,
and it carries that prior into its labels of the clean records. Under label shift (each class's images alike,
their shares differing) the posterior under another prior is the student's re-weighted class by class:
``p'(y | x) ∝ p(y | x) * prior'(y) / prior(y)`` (:func:`reweight`). Without public images
(``AdaptationSettings.balance``, on by default) the labels learn equal class shares: adaptation's rounds
pseudo-label from the student's outputs aligned to equal shares (:func:`aligned`: re-weighted from their own
mean over the records, as ReMixMatch's distribution alignment does), and the adapted student's outputs are the
labels; without adaptation, the labels are the student's outputs re-weighted from the training prior
(:func:`training_prior`: the teacher's answers, counted) to equal shares (:func:`balanced`). It reads nothing
but the student's outputs and the answers' counts: no privacy cost, nothing sent.

Why the rounds: re-weighting only the final outputs left the class the teacher seldom answered (MNIST's "9",
0.7 % of the answers) to the seed: self-training had learnt it as "7" in some runs, and the labels of one
release spread 86.4-94.8 % over the student's draws alone. Rounds re-weighted from the training prior fixed
that and overshot elsewhere (a model that learnt re-weighted labels was re-weighted again each round: colour
digits collapsed into one class in one seed of three); alignment reads the bias from the current outputs, so it
does not correct twice.

Measured (3 seeds each): equal shares raised the adapted labels on digits,
MNIST, colour digits and CIFAR-10, with and without private releases, and on private parts whose last class
has a tenth of the first's images (a long tail, which equal shares do not assume away: the student's own
outputs still decide). Beside public images, whose answers teach the student the classes, it changed nothing
on digits and MNIST and lost 3.5 points on colour digits (one seed), so it is off there. :func:`em_prior`, the
records' prior estimated by expectation-maximisation over the student's outputs (Saerens, Latinne &
Decaestecker, Neural Computation 2002), lost up to 8 points on colour digits and CIFAR-10 (it follows the
student's over-confident outputs back to the teacher's bias), so it is kept for comparison and not used. No
re-weighting lifts a collapsed student (one class for every record): its outputs carry nothing to re-weight.
"""

from __future__ import annotations

from typing import Sequence

import torch

#: Pseudo-count added to every class of the training prior (a class the teacher never answered keeps a share).
PRIOR_PSEUDO_COUNT = 1.0
#: A class whose estimated share of the records is below this fraction of an equal share (1 / classes) is taken as
#: absent from them, and adaptation does not align labels towards it (:func:`target_shares`).
PRESENT_SHARE = 0.25
#: EM stops when no class's share moves by more than this between two iterations ...
EM_TOLERANCE = 1e-6
#: ... or after this many iterations.
EM_ITERATIONS = 1000


def training_prior(answer_counts: Sequence[int], classes: int) -> torch.Tensor:
    """The prior the student was trained under: the teacher's answers per class (``answer_counts``, padded to
    ``classes``), each with :data:`PRIOR_PSEUDO_COUNT` added, as shares: float64 ``(classes,)`` summing to 1."""
    counts = torch.zeros(classes, dtype=torch.float64)
    given = torch.as_tensor(list(answer_counts)[:classes], dtype=torch.float64)
    counts[: len(given)] = given
    counts += PRIOR_PSEUDO_COUNT
    return counts / counts.sum()


def reweight(probs: torch.Tensor, prior: torch.Tensor, new_prior: torch.Tensor) -> torch.Tensor:
    """``probs`` (``(N, K)`` rows summing to 1, learnt under ``prior``) as posteriors under ``new_prior``:
    float64 ``(N, K)`` rows summing to 1."""
    q = probs.to(torch.float64) * (new_prior / prior)
    return q / q.sum(1, keepdim=True).clamp(min=1e-300)


def aligned(probs: torch.Tensor, shares: torch.Tensor) -> torch.Tensor:
    """``probs`` (``(N, K)`` outputs on the records) aligned to the class ``shares`` (``(K,)``): re-weighted from
    their own mean over the records to ``shares`` (distribution alignment, Berthelot et al., "ReMixMatch", ICLR
    2020), in ``probs``' dtype. Unlike :func:`balanced` it reads the bias from the outputs themselves, so applied
    again to a model that learnt aligned labels it changes little instead of correcting twice."""
    return reweight(probs, probs.to(torch.float64).mean(0).clamp(min=1e-12), shares.to(torch.float64)).to(probs.dtype)


def target_shares(probs: torch.Tensor, prior: torch.Tensor) -> torch.Tensor:
    """The class shares adaptation's rounds align to: equal shares over the classes present in the records, float64
    ``(K,)`` summing to 1. A class is taken as absent when :func:`record_shares` puts it below
    :data:`PRESENT_SHARE` of an equal share (a folder that holds a few of the teacher's classes); the one-step
    shares themselves are not the target: they leave a class the teacher seldom answered short (MNIST's "9" at
    4 % of the records), which equal shares give back."""
    k = probs.shape[1]
    present = (record_shares(probs, prior) >= PRESENT_SHARE / k).to(torch.float64)
    return present / present.sum()


def record_shares(probs: torch.Tensor, prior: torch.Tensor) -> torch.Tensor:
    """The records' class shares as the outputs ``probs`` (``(N, K)``, learnt under ``prior``) re-weighted to equal
    shares tell them: the mean of :func:`balanced` over the records, float64 ``(K,)`` summing to 1. One step of
    EM from equal shares: a class the teacher seldom answered gets its share back where the student saw it,
    and a class absent from the records keeps the little the student gives it."""
    return balanced(probs.to(torch.float64), prior).mean(0)


def balanced(probs: torch.Tensor, prior: torch.Tensor) -> torch.Tensor:
    """``probs`` (``(N, K)``, learnt under ``prior``) re-weighted to equal class shares, in ``probs``' dtype."""
    return reweight(probs, prior, torch.full_like(prior, 1.0 / len(prior))).to(probs.dtype)


def em_prior(probs: torch.Tensor, prior: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The records' own label prior, estimated by EM from the student's outputs on them ``probs`` (``(N, K)``,
    learnt under ``prior``), and the outputs re-weighted to it: ``(posteriors (N, K), prior (K,))``, float64."""
    current = prior.to(torch.float64)
    for _ in range(EM_ITERATIONS):
        posteriors = reweight(probs, prior, current)
        updated = posteriors.mean(0)
        done = float((updated - current).abs().max()) <= EM_TOLERANCE
        current = updated
        if done:
            break
    return reweight(probs, prior, current), current


__all__ = [
    "EM_ITERATIONS",
    "EM_TOLERANCE",
    "PRESENT_SHARE",
    "PRIOR_PSEUDO_COUNT",
    "aligned",
    "balanced",
    "em_prior",
    "record_shares",
    "reweight",
    "target_shares",
    "training_prior",
]
