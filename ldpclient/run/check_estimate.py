"""The accuracy of the labels written, estimated from the check set and the confidences of every label.

A check set of ``n`` hand-labelled private images estimates the share of right labels among all ``N`` by its own
share of right ones, whose standard deviation at 100 images is 3-5 points. The student's confidence is known for
every image, and it goes with being right (correlation 0.4-0.5 at the defaults on digits, MNIST and colour digits), so
the estimate here also uses it, as a control variate (the
regression or difference estimator of survey sampling; in machine learning, prediction-powered inference with
power tuning, Angelopoulos et al., "PPI++", 2023)::

    estimate = share right on the check set + w * (mean confidence of all N - mean confidence of the n)
    variance = var(right - w * confidence over the n) / n + w**2 * var(confidence over all N) / N
    w        = cov(right, confidence over the n) / ((1 + n / N) * var(confidence over all N))

It is unbiased whatever the confidences mean (``w`` only weighs them; a confidence unrelated to being right gets
``w`` near 0), apart from the small bias of fitting ``w`` on the same ``n`` images. Its 95 % interval is Wilson's
at ``estimate * (1 - estimate) / variance`` images (the count whose binomial variance at the estimate is
``variance``). What the adjustment is worth, ``effective_images``, is the number of check images whose share alone
would have the adjusted variance, ``n * (share * (1 - share) / n) / variance`` (the effective sample size of PPI++):
the ratio of the two variances, both at the check set's share, so it exceeds ``n`` exactly when the adjustment
narrows the estimate. (At the estimate's own accuracy instead, an estimate moved away from one half would count
fewer images than ``n`` for a variance below the share's.) The check set's share alone (with its Wilson interval)
is kept where the adjustment cannot help or cannot be trusted:

* fewer than :data:`MIN_ADJUSTED` check images (fitting ``w`` on 10 or 20 images biased the estimate by +0.5 to
  +2 points in the calibration);
* no confidences, or all alike; an estimate at 0 or 1;
* an adjusted variance not below the share's own ``share * (1 - share) / n``.

The effective number is at most :data:`MAX_GAIN` times the check set's size. Units: shares in ``[0, 1]``;
confidences in ``[0, 1]`` (the student's softmax maximum of each label, ``LabelResult.confidences``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

#: Check images below which the estimate is the check set's share alone.
MIN_ADJUSTED = 30
#: The adjusted estimate never counts the check set as more than this many times its size.
MAX_GAIN = 4.0
#: ``Estimate.method`` of the check set's share alone and of the confidence-adjusted estimate.
SHARE_ALONE, CONFIDENCE_ADJUSTED = "check set alone", "confidence-adjusted"


@dataclass(frozen=True)
class Estimate:
    """An estimate of the share of right labels among all of them: ``accuracy`` in ``[0, 1]``, its 95 % interval
    ``[low, high]``, ``effective_images`` (the check images it is worth: those whose share alone would be as
    precise; ``images`` for the share alone) and
    ``method`` (:data:`SHARE_ALONE` or :data:`CONFIDENCE_ADJUSTED`)."""

    accuracy: float
    low: float
    high: float
    effective_images: float
    method: str


def wilson_interval(hits: float, total: float, z: float) -> tuple[float, float]:
    """The Wilson score interval of a share ``hits / total`` at ``z`` (``total`` may be an effective count);
    ``(0, 1)`` for none."""
    if total <= 0:
        return 0.0, 1.0
    p = hits / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population variance."""
    mean = math.fsum(values) / len(values)
    return mean, math.fsum((v - mean) ** 2 for v in values) / len(values)


def estimate_accuracy(right: Sequence[bool], check_confidences: Sequence[float] | None,
                      all_confidences: Sequence[float] | None, z: float) -> Estimate:
    """The share of right labels among all, from ``right`` (one per check image: its label is right) and the
    confidences of the check images and of all labels (None: the share alone); ``z``: the interval's z."""
    n = len(right)
    hits = sum(bool(r) for r in right)
    share = hits / n if n else float("nan")
    alone = Estimate(share, *wilson_interval(hits, n, z), float(n), SHARE_ALONE)
    if (n < MIN_ADJUSTED or check_confidences is None or not all_confidences
            or len(check_confidences) != n or not all(map(math.isfinite, all_confidences))):
        return alone
    big_n = len(all_confidences)
    mean_all, var_all = _mean_var(all_confidences)
    mean_check, var_check = _mean_var(check_confidences)
    if var_all <= 0 or var_check <= 0:
        return alone
    y = [float(bool(r)) for r in right]
    cov = math.fsum((a - share) * (c - mean_check) for a, c in zip(y, check_confidences, strict=True)) / (n - 1)
    w = cov / ((1 + n / big_n) * var_all)
    residual = [a - w * c for a, c in zip(y, check_confidences, strict=True)]
    residual_mean = math.fsum(residual) / n
    variance = (math.fsum((r - residual_mean) ** 2 for r in residual) / (n - 1) / n + w * w * var_all / big_n)
    accuracy = share + w * (mean_all - mean_check)
    share_variance = share * (1 - share) / n
    if not 0 < accuracy < 1 or variance >= share_variance:
        return alone
    interval_images = min(accuracy * (1 - accuracy) / variance, MAX_GAIN * n)
    worth = min(n * share_variance / variance, MAX_GAIN * n)
    return Estimate(accuracy, *wilson_interval(accuracy * interval_images, interval_images, z), worth,
                    CONFIDENCE_ADJUSTED)


__all__ = ["CONFIDENCE_ADJUSTED", "Estimate", "MAX_GAIN", "MIN_ADJUSTED", "SHARE_ALONE", "estimate_accuracy",
           "wilson_interval"]
