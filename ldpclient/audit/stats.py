"""Small statistics used by the attacks: Clopper-Pearson bounds, ROC AUC, TPR at a fixed FPR.

Pure Python/torch (no scipy at run time): the regularised incomplete beta function
is evaluated with the Lentz continued fraction and inverted by bisection, which is
exact to ~1e-12 for the sample sizes used here.
"""

from __future__ import annotations

import math

import torch


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta function I_x(a, b) for a, b > 0, x in [0, 1]."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def beta_ppf(q: float, a: float, b: float) -> float:
    """Quantile of the Beta(a, b) distribution by bisection on :func:`betainc`."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if betainc(a, b, mid) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    return 0.5 * (lo + hi)


def clopper_pearson(successes: int, trials: int, alpha: float = 0.05) -> tuple[float, float]:
    """Two-sided (1 - alpha) Clopper-Pearson interval for a binomial proportion.

    Each side has level alpha/2. Returns (lower, upper) in [0, 1].
    """
    if trials <= 0:
        raise ValueError(f"trials must be > 0, got {trials}")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be in [0, {trials}], got {successes}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    k, n = successes, trials
    lower = 0.0 if k == 0 else beta_ppf(alpha / 2, k, n - k + 1)
    upper = 1.0 if k == n else beta_ppf(1 - alpha / 2, k + 1, n - k)
    return lower, upper


def roc_auc(scores_pos: torch.Tensor, scores_neg: torch.Tensor) -> float:
    """Area under the ROC curve (probability a positive outscores a negative, ties count 1/2)."""
    pos = scores_pos.double().flatten()
    neg = scores_neg.double().flatten()
    if pos.numel() == 0 or neg.numel() == 0:
        raise ValueError("roc_auc needs at least one positive and one negative score")
    allv = torch.cat([pos, neg])
    order = torch.argsort(allv, stable=True)
    ranks = torch.empty_like(allv)
    ranks[order] = torch.arange(1, allv.numel() + 1, dtype=torch.float64)
    # average ranks over ties
    uniq, inverse, counts = torch.unique(allv, return_inverse=True, return_counts=True)
    if counts.max() > 1:
        sums = torch.zeros(uniq.numel(), dtype=torch.float64).index_add_(0, inverse, ranks)
        ranks = (sums / counts.double())[inverse]
    n_pos, n_neg = pos.numel(), neg.numel()
    u = ranks[:n_pos].sum().item() - n_pos * (n_pos + 1) / 2
    return float(u / (n_pos * n_neg))


def tpr_at_fpr(scores_pos: torch.Tensor, scores_neg: torch.Tensor, fpr: float = 0.01) -> float:
    """Largest true-positive rate over thresholds whose false-positive rate is <= ``fpr``.

    A score above the threshold means "positive". With fewer than 1/fpr negatives the
    only admissible threshold may be the largest negative score (FPR 0).
    """
    if not 0.0 <= fpr <= 1.0:
        raise ValueError(f"fpr must be in [0, 1], got {fpr}")
    pos = scores_pos.double().flatten()
    neg = torch.sort(scores_neg.double().flatten(), descending=True).values
    allowed = int(math.floor(fpr * neg.numel()))  # negatives allowed above the threshold
    threshold = neg[allowed].item() if allowed < neg.numel() else -math.inf
    return float((pos > threshold).double().mean().item())
