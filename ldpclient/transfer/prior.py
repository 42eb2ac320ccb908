"""The label prior: the student learnt its classes in the teacher's answer shares on noised queries, not in the
private records' own.

A teacher answers noise with some classes far more than others (on digits "8", on photos "dog"), so the student
is trained under a label prior that is the teacher's answers to noise as much as the private records' classes,
and it carries that prior into its labels of the clean records. Under label shift (each class's images alike,
their shares differing) the posterior under another prior is the student's re-weighted class by class:
``p'(y | x) ∝ p(y | x) * prior'(y) / prior(y)`` (:func:`reweight`). Without public images the pipeline labels
with the student's outputs re-weighted from the training prior (:func:`training_prior`: the teacher's answers,
counted) to equal class shares (``AdaptationSettings.balance``, on by default). It reads nothing but the
student's outputs and the answers' counts: no privacy cost, nothing sent.

Measured (BENCHMARKS.md, "The label prior"; 3 seeds each): equal shares raised the adapted labels on digits,
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


__all__ = ["EM_ITERATIONS", "EM_TOLERANCE", "PRIOR_PSEUDO_COUNT", "em_prior", "reweight", "training_prior"]
