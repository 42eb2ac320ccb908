"""The labels scored on the check set, and the statistics the verdict reads: the Wilson interval of a share, the
exact sign test of the labels against the data-free run's, the accuracy that counts as chance. Shares and
accuracies in ``[0, 1]``; counts are images.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from . import check_estimate
from .check_file import CheckSet, check_indices

#: z of a two-sided 95 % interval.
Z95 = 1.959963984540054


def wilson_interval(hits: int, total: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial share ``hits / total`` (95 % by default); ``(0, 1)`` for none."""
    return check_estimate.wilson_interval(hits, total, z)


def sign_test_p(wins: int, losses: int) -> float:
    """Two-sided exact sign test: the chance of a split at least as uneven as ``wins``/``losses`` at 50/50."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def informative_floor(num_classes: int) -> float:
    """The accuracy below which labels count as at chance: chance plus 10 % of the way to 100 %."""
    chance = 1 / max(1, num_classes)
    return chance + 0.1 * (1 - chance)


@dataclass(frozen=True)
class Score:
    """The labels scored on the check set: ``correct`` of ``images`` right; ``accuracy``, the estimated share of
    right labels among all of them, with its 95 % interval ``[low, high]``, ``effective_images`` and ``method``
    (:mod:`ldpclient.run.check_estimate`: the check set's share alone, or adjusted by the confidences of all
    labels)."""

    images: int
    correct: int
    accuracy: float
    low: float
    high: float
    effective_images: float = 0.0
    method: str = check_estimate.SHARE_ALONE

    @classmethod
    def of(cls, predicted: Sequence[int], truth: Sequence[int], check_confidences: Sequence[float] | None = None,
           all_confidences: Sequence[float] | None = None) -> "Score":
        """Score ``predicted`` against ``truth`` (one per check image); with the confidences of the check images'
        labels and of all labels, the estimate is adjusted by them."""
        right = [int(p) == int(t) for p, t in zip(predicted, truth, strict=True)]
        e = check_estimate.estimate_accuracy(right, check_confidences, all_confidences, Z95)
        return cls(len(right), sum(right), e.accuracy, e.low, e.high, e.effective_images, e.method)

    def images_for(self, half_width: float) -> int:
        """About how many check images (of the same kind: adjusted or not) would make the 95 % interval
        ``half_width`` either side of the estimate: ``z**2 p (1 - p) / half_width**2`` at the interval's middle
        ``p``, less the adjustment's gain (``effective_images / images``)."""
        middle = (self.low + self.high) / 2
        plain = Z95 * Z95 * middle * (1 - middle) / (half_width * half_width)
        gain = self.effective_images / self.images if self.images and self.effective_images else 1.0
        return max(1, math.ceil(plain / gain))

    @property
    def words(self) -> str:
        """How the accuracy was found, in words: ``79 of 100 hand-labelled images`` and, when adjusted, by
        what."""
        counted = f"{self.correct} of {self.images} hand-labelled images"
        if self.method != check_estimate.CONFIDENCE_ADJUSTED:
            return counted
        return (f"{counted}, adjusted by the confidences of all labels: as precise as {self.effective_images:.0f} "
                "check images alone")


@dataclass(frozen=True)
class CheckEvidence:
    """What the check set says: the labels' score, the data-free run's on the same images (None without
    ``--baseline``), and the images where exactly one of the two is right (``wins``: the labels only)."""

    score: Score
    baseline: Score | None = None
    wins: int = 0
    losses: int = 0
    missing: int = 0


def check_evidence(
    check: CheckSet, names: Sequence[str], labels: Sequence[int], baseline: Sequence[int] | None = None,
    confidences: Sequence[float] | None = None, baseline_confidences: Sequence[float] | None = None,
) -> CheckEvidence | None:
    """Score ``labels`` (and the data-free run's ``baseline`` labels) on the check set, each adjusted by its
    ``confidences`` (one per label, in ``[0, 1]``; None: the check set's share alone); None when none of its
    images is among ``names``."""
    idx, truth, missing = check_indices(check, names)
    if not idx:
        return None

    def score(predicted: list[int], conf: Sequence[float] | None) -> Score:
        return Score.of(predicted, truth, [float(conf[k]) for k in idx] if conf else None, conf)

    mine = [int(labels[k]) for k in idx]
    ev = CheckEvidence(score(mine, confidences), missing=len(missing))
    if baseline is None:
        return ev
    free = [int(baseline[k]) for k in idx]
    wins = sum(m == t != f for m, f, t in zip(mine, free, truth, strict=True))
    losses = sum(f == t != m for m, f, t in zip(mine, free, truth, strict=True))
    return CheckEvidence(ev.score, score(free, baseline_confidences), wins, losses, len(missing))


__all__ = ["Z95", "CheckEvidence", "Score", "check_evidence", "informative_floor", "sign_test_p", "wilson_interval"]
