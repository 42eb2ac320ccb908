"""Discrete TLDP: the exact privacy loss and the solvers for its parameters.

On an integer domain {low..high} (the largest change of one element is
``D = high - low``, i.e. the domain {0..Δ-1} has D = Δ-1), each element is kept unchanged with
probability p, otherwise discrete Laplace noise ``P(k) = c e^(-|k|/b)`` with
``c = (1 - e^(-1/b)) / (1 + e^(-1/b))`` is added. The worst output is the kept
input itself, which gives the exact per-element loss

    eps_elem(p, b) = ln(1 + p / ((1 - p) c)) + D / b.

Per record (I released elements, all may change) the loss composes exactly to
``I * eps_elem`` (pure LDP): the worst case is attained elementwise at once.
"""

from __future__ import annotations

import math

from .preprocess import check_epsilon, check_probability


def c_of_b(b: float) -> float:
    """``P(Z = 0)`` of the discrete Laplace with scale b: ``(1 - e^(-1/b)) / (1 + e^(-1/b)) = tanh(1/(2b))``."""
    return math.tanh(0.5 / b)


def check_sensitivity(sensitivity: float) -> int:
    if isinstance(sensitivity, bool) or int(sensitivity) != sensitivity or sensitivity < 1:
        raise ValueError(f"integer sensitivity D = high - low must be an int >= 1, got {sensitivity!r}")
    return int(sensitivity)


def discrete_tldp_epsilon(p: float, b: float, sensitivity: int) -> float:
    """Exact per-element epsilon of discrete TLDP (nats) for keep probability p and scale b.

    ``sensitivity`` is D = high - low of the integer domain (255 for uint8 pixels).
    """
    p = check_probability(p, "p")
    b = check_epsilon(b, "b")
    d = check_sensitivity(sensitivity)
    return math.log1p(p / ((1.0 - p) * c_of_b(b))) + d / b


def solve_p(epsilon: float, b: float, sensitivity: int) -> float:
    """Keep probability p giving exactly ``epsilon`` per element at scale b (closed form).

    From ``p / ((1-p) c) = e^(eps - D/b) - 1 =: A``: ``p = A c / (1 + A c)``.
    Infeasible (``ValueError``) when ``D / b >= epsilon``: the noise alone already
    spends the whole budget.
    """
    epsilon = check_epsilon(epsilon)
    b = check_epsilon(b, "b")
    d = check_sensitivity(sensitivity)
    if d / b >= epsilon:
        raise ValueError(
            f"infeasible discrete TLDP: noise scale b={b:.6g} alone costs D/b = {d / b:.6g} >= epsilon = "
            f"{epsilon:.6g} per element; use b > {d / epsilon:.6g}"
        )
    a = math.expm1(epsilon - d / b)
    ac = a * c_of_b(b)
    return ac / (1.0 + ac)


def _minimising_b(p: float, d: int) -> float:
    """The b minimising eps_elem(p, b) (the loss is convex-shaped in log b: D/b falls, the keep term rises)."""

    def f(lb: float) -> float:
        return discrete_tldp_epsilon(p, math.exp(lb), d)

    lo, hi = math.log(1e-3), math.log(1e9)
    phi = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(200):  # golden-section search on log b
        m1 = hi - phi * (hi - lo)
        m2 = lo + phi * (hi - lo)
        if f(m1) <= f(m2):
            hi = m2
        else:
            lo = m1
    return math.exp(0.5 * (lo + hi))


def solve_b(epsilon: float, p: float, sensitivity: int) -> float:
    """Smallest noise scale b giving ``epsilon`` per element at keep probability p.

    eps_elem(p, b) is not monotone in b (D/b falls, the keep term rises as the
    noise spreads), so a target can have two solutions; the smaller b (less noise
    for the same loss) is returned. ``p = 0`` gives plain discrete Laplace,
    ``b = D / epsilon``. Infeasible targets (below the minimum over b for this p)
    raise ``ValueError`` stating the smallest achievable epsilon.
    """
    epsilon = check_epsilon(epsilon)
    p = check_probability(p, "p")
    d = check_sensitivity(sensitivity)
    if p == 0.0:
        return d / epsilon
    b_star = _minimising_b(p, d)
    eps_min = discrete_tldp_epsilon(p, b_star, d)
    if eps_min > epsilon:
        raise ValueError(
            f"infeasible discrete TLDP: with keep probability p={p:.6g} and D={d} the per-element epsilon is "
            f"at least {eps_min:.6g} (at b={b_star:.6g}); asked for {epsilon:.6g}. Lower p or raise epsilon."
        )
    lo, hi = d / epsilon, b_star  # eps(lo) >= D/lo = epsilon; eps(hi) = eps_min <= epsilon
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if discrete_tldp_epsilon(p, mid, d) > epsilon:
            lo = mid
        else:
            hi = mid
    return hi  # eps(hi) <= epsilon
