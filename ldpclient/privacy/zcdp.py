"""Zero-concentrated DP (zCDP) accounting for the discrete Gaussian.

The discrete Gaussian ``N_Z(0, s)`` (variance parameter ``s = sigma**2`` in integer
grid units²) added to an integer vector of L2 sensitivity ``Δ₂`` satisfies
``rho``-zCDP with ``rho = Δ₂² / (2 s)`` exactly as the continuous Gaussian does
(Canonne, Kamath & Steinke 2020, Theorem 4 and Corollary 9 for independent
coordinates). :func:`delta_for` converts ``rho``-zCDP to ``(epsilon, delta)``-DP with
their Corollary 13::

    delta = inf_{alpha > 1} exp((alpha - 1)(alpha rho - epsilon)) / (alpha - 1) * (1 - 1/alpha)**alpha

which is tighter than the classic ``epsilon = rho + 2 sqrt(rho ln(1/delta))``. All
figures are in nats.
"""

from __future__ import annotations

import math

from .preprocess import check_delta, check_epsilon


def _log_delta_at(alpha: float, rho: float, epsilon: float) -> float:
    return (alpha - 1.0) * (alpha * rho - epsilon) - math.log(alpha - 1.0) + alpha * math.log1p(-1.0 / alpha)


def log_delta_for(rho: float, epsilon: float) -> float:
    """``ln delta`` of the CKS conversion of ``rho``-zCDP at ``epsilon`` (minimised over the Rényi order)."""
    rho = check_epsilon(rho, "rho")
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    # The objective is unimodal in ln(alpha - 1): golden-section search on that axis.
    lo, hi = math.log(1e-12), math.log(max(1e6, 10.0 * (epsilon + 1.0) / rho))
    phi = (math.sqrt(5.0) - 1.0) / 2.0

    def f(u: float) -> float:
        return _log_delta_at(1.0 + math.exp(u), rho, epsilon)

    a, b = lo, hi
    c, d = b - phi * (b - a), a + phi * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(90):  # 0.618**90 ~ 1e-19 of the initial width
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - phi * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + phi * (b - a)
            fd = f(d)
    return min(0.0, fc, fd)


def delta_for(rho: float, epsilon: float) -> float:
    """Delta of ``rho``-zCDP at ``epsilon`` (CKS 2020, Corollary 13), capped at 1."""
    return math.exp(log_delta_for(rho, epsilon))


def epsilon_for(rho: float, delta: float) -> float:
    """Smallest epsilon (to 1e-12 relative) with :func:`delta_for` ``(rho, epsilon) <= delta``."""
    rho = check_epsilon(rho, "rho")
    log_target = math.log(check_delta(delta))
    hi = rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))  # classic bound: always feasible
    lo = 0.0
    if log_delta_for(rho, lo) <= log_target:
        return lo
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if log_delta_for(rho, mid) <= log_target:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-12 * hi:
            break
    return hi


def rho_for(epsilon: float, delta: float) -> float:
    """Largest ``rho`` (to 1e-12 relative) whose conversion gives ``(epsilon, delta)``-DP."""
    epsilon = check_epsilon(epsilon)
    check_delta(delta)
    lo, hi = 0.0, epsilon  # rho = epsilon always gives more than epsilon at delta < 1
    while epsilon_for(hi, delta) <= epsilon:  # pragma: no cover - defensive
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid > 0 and epsilon_for(mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    if lo <= 0:  # pragma: no cover - defensive
        raise ValueError(f"no rho reaches epsilon={epsilon} at delta={delta}")
    return lo


__all__ = ["delta_for", "epsilon_for", "log_delta_for", "rho_for"]
