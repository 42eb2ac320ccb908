"""The analytic Gaussian mechanism (Balle & Wang, ICML 2018): exact (epsilon, delta) for Gaussian noise.

Adding N(0, sigma^2) noise to a query of L2 sensitivity ``Delta`` is (epsilon, delta)-DP
exactly when ``delta >= delta(epsilon; sigma)`` where the privacy profile is

    delta(eps; sigma) = Phi(Delta/(2 sigma) - eps sigma/Delta) - e^eps Phi(-Delta/(2 sigma) - eps sigma/Delta)

(Balle & Wang 2018, Theorem 8). :func:`calibrate_sigma` is their Algorithm 1 (the
smallest sigma for a given (eps, delta)), :func:`epsilon_for_sigma` the inverse
(the smallest eps for a given sigma and delta). Unlike the classical
``sigma = Delta sqrt(2 ln(1.25/delta))/eps`` these are valid for every eps > 0.

Phi is computed from ``math.erfc`` (with an asymptotic series deep in the lower
tail), in log space where it matters, so no SciPy is needed at run time.
"""

from __future__ import annotations

import math
from typing import Callable

from .preprocess import check_delta, check_epsilon

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def log_phi(x: float) -> float:
    """``log Phi(x)`` for the standard normal CDF, accurate deep in the lower tail."""
    if x > 5.0:
        return math.log1p(-0.5 * math.erfc(x / math.sqrt(2.0)))
    if x > -30.0:
        return math.log(0.5 * math.erfc(-x / math.sqrt(2.0)))
    # Asymptotic series: Phi(x) = phi(x)/|x| * (1 - 1/x^2 + 3/x^4 - 15/x^6 + ...); error < 1e-13 for x < -30.
    z = 1.0 / (x * x)
    series = 1.0 - z * (1.0 - 3.0 * z * (1.0 - 5.0 * z * (1.0 - 7.0 * z * (1.0 - 9.0 * z * (1.0 - 11.0 * z)))))
    return -0.5 * x * x - math.log(-x) - _LOG_SQRT_2PI + math.log(series)


def phi(x: float) -> float:
    """Standard normal CDF."""
    return math.exp(log_phi(x))


def _profile_terms(epsilon: float, a: float, b: float) -> float:
    """``Phi(a) - e^eps Phi(b)`` computed without catastrophic cancellation (>= 0 clamp)."""
    la = log_phi(a)
    lb = epsilon + log_phi(b)
    if lb >= la:
        return 0.0
    return math.exp(la) * -math.expm1(lb - la)


def delta_for_epsilon(epsilon: float, sigma: float, l2_sensitivity: float = 1.0) -> float:
    """The exact delta of the Gaussian mechanism at ``epsilon`` (privacy profile, Theorem 8).

    ``sigma``: noise standard deviation; ``l2_sensitivity``: L2 norm of the largest
    change of the released vector (both in the data's units). ``epsilon >= 0``.
    """
    if not (math.isfinite(epsilon) and epsilon >= 0.0):
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon!r}")
    sigma = check_epsilon(sigma, "sigma")
    sens = check_epsilon(l2_sensitivity, "l2_sensitivity")
    r = sens / sigma
    return _profile_terms(epsilon, r / 2.0 - epsilon / r, -r / 2.0 - epsilon / r)


def _b_plus(v: float, epsilon: float) -> float:
    return _profile_terms(epsilon, math.sqrt(epsilon * v), -math.sqrt(epsilon * (v + 2.0)))


def _b_minus(u: float, epsilon: float) -> float:
    return _profile_terms(epsilon, -math.sqrt(epsilon * u), -math.sqrt(epsilon * (u + 2.0)))


def _bisect(f: Callable[[float], float], target: float, increasing: bool) -> float:
    """Root of the monotone ``f(v) = target`` on ``v >= 0`` (f(0) on the right side of target)."""
    lo, hi = 0.0, 1.0
    # Bracket: for increasing f, grow hi until f(hi) > target; for decreasing, until f(hi) < target.
    for _ in range(2000):
        if (f(hi) > target) if increasing else (f(hi) < target):
            break
        lo, hi = hi, hi * 2.0
    else:  # pragma: no cover - unreachable for valid inputs
        raise ValueError("analytic Gaussian calibration failed to bracket the root")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if (f(mid) <= target) if increasing else (f(mid) > target):
            lo = mid
        else:
            hi = mid
    return hi if not increasing else lo


def calibrate_sigma(epsilon: float, delta: float, l2_sensitivity: float = 1.0) -> float:
    """Smallest sigma such that N(0, sigma^2) noise is (epsilon, delta)-DP (Balle & Wang, Algorithm 1).

    ``l2_sensitivity`` is the L2 sensitivity Delta of the released vector (for one
    element of range [low, high] it is ``high - low``; for a record of I such
    elements it is ``(high - low) * sqrt(I)``). Returns sigma in the data's units.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    sens = check_epsilon(l2_sensitivity, "l2_sensitivity")
    delta0 = _b_plus(0.0, epsilon)  # = Phi(0) - e^eps Phi(-sqrt(2 eps)): profile at alpha = 1
    if delta >= delta0:
        v = _bisect(lambda v: _b_plus(v, epsilon), delta, increasing=True)  # sup{v: B+(v) <= delta}
        alpha = math.sqrt(1.0 + v / 2.0) - math.sqrt(v / 2.0)
    else:
        u = _bisect(lambda u: _b_minus(u, epsilon), delta, increasing=False)  # inf{u: B-(u) <= delta}
        alpha = math.sqrt(1.0 + u / 2.0) + math.sqrt(u / 2.0)
    return alpha * sens / math.sqrt(2.0 * epsilon)


def epsilon_for_sigma(sigma: float, delta: float, l2_sensitivity: float = 1.0) -> float:
    """Smallest epsilon such that N(0, sigma^2) noise at L2 sensitivity Delta is (epsilon, delta)-DP.

    The inverse of :func:`calibrate_sigma`. Returns 0.0 when delta already covers
    the whole privacy loss (delta >= delta(0; sigma), the total variation distance).
    """
    sigma = check_epsilon(sigma, "sigma")
    delta = check_delta(delta)
    sens = check_epsilon(l2_sensitivity, "l2_sensitivity")
    if delta_for_epsilon(0.0, sigma, sens) <= delta:
        return 0.0
    f = lambda e: delta_for_epsilon(e, sigma, sens)  # noqa: E731 - decreasing in e
    return _bisect(f, delta, increasing=False)


def classical_sigma(epsilon: float, delta: float, l2_sensitivity: float = 1.0) -> float:
    """The classical ``Delta sqrt(2 ln(1.25/delta)) / eps`` (valid only for eps < 1); for comparison."""
    return l2_sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
