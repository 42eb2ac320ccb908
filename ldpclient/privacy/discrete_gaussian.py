"""Secure discrete Gaussian sampling (the distribution of Canonne, Kamath & Steinke 2020).

``Z`` with ``P(Z = z) ∝ exp(-z² / (2 s))`` over the integers, ``s = sigma**2`` an
integer variance in grid units², drawn with integer arithmetic only.

:class:`DiscreteGaussianSampler` (the mechanisms' sampler)
    One uniform 62-bit integer per element picks a cell of an exactly symmetric
    integer table over ``|z| < K`` plus two tail cells (alias method, as the secure
    discrete Laplace sampler of :mod:`ldpclient.privacy.sampling`), ``K`` chosen so
    the table spans a probability ratio of at most ``e**12`` (so table rounding stays
    tiny). A draw in a tail cell returns ``±(K + g)`` with ``g`` from the exact
    conditional tail law ``∝ exp(-(K + g)² / (2 s))``: ``g`` is proposed from the
    secure geometric sampler with ratio ``exp(-K / s)`` and accepted with probability
    ``exp(-g² / (2 s))``, decided exactly by :func:`bernoulli_exp`. Nothing is truncated.

:class:`CKSDiscreteGaussianSampler` (reference)
    CKS Algorithm 3 end to end: discrete Laplace proposal of scale ``floor(sigma) + 1``
    and an exact acceptance test. Same law, about 4x slower; used to cross-check.

How the rounding enters a guarantee (all bounds computed when a sampler is built):

* :meth:`~DiscreteGaussianSampler.epsilon_excess`: the largest amount by which the
  realised privacy loss between two outputs at distance <= D can exceed the ideal
  one; added to epsilon (of the order 1e-10 nats per element);
* :meth:`~DiscreteGaussianSampler.tv_bound`: total variation between the realised
  and the ideal law; added to delta (of the order 1e-13 per element).
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from functools import lru_cache
from typing import Sequence

import torch

from .sampling import (
    _SPAN,
    ONE,
    AliasTable,
    DiscreteLaplaceSampler,
    GeometricSampler,
    _lr,
    discrete_laplace_sampler,
    uniform_int62,
)

#: Largest variance parameter s (grid units²) the sampler accepts: keeps every
#: intermediate of the exact acceptance test inside int64.
MAX_VARIANCE_UNITS = 1 << 24
_PRODUCT_LIMIT = 1 << 31  # |Y| t beyond this is rejected outright (ideal acceptance < exp(-120))


def bernoulli_ratio(num: torch.Tensor, den: int, generator: torch.Generator) -> torch.Tensor:
    """Exact ``Bernoulli(num / den)`` per element (bool), ``0 <= num <= den``, ``1 <= den <= 2**62``.

    With ``q = 2**62 // den``, a uniform 62-bit integer ``u`` is kept when ``u < q den``
    (redrawn otherwise, probability below ``den / 2**62``); then ``u // q`` is uniform on
    ``[0, den)``, so ``u < num q`` has probability exactly ``num / den`` (no division, no overflow).
    """
    if not 1 <= den <= ONE:
        raise ValueError(f"den must be in [1, 2**62], got {den}")
    q = ONE // den
    limit = q * den
    u = uniform_int62((num.numel(),), generator)
    if limit < ONE:
        redo = torch.nonzero(u >= limit).flatten()
        while redo.numel():
            fresh = uniform_int62((redo.numel(),), generator)
            u[redo] = fresh
            redo = redo[fresh >= limit]
    return u < num.reshape(-1) * q


def _bernoulli_exp_fraction(num: torch.Tensor, den: int, generator: torch.Generator) -> torch.Tensor:
    """Exact ``Bernoulli(exp(-num/den))`` for ``0 <= num <= den`` (CKS Algorithm 1).

    K = 1; loop: A ~ Bernoulli(gamma / K), drawn as Bernoulli(gamma) and Bernoulli(1/K);
    stop at the first A = 0; the answer is ``K odd``.
    """
    n = num.numel()
    out = torch.zeros(n, dtype=torch.bool)
    alive = torch.arange(n)
    k = 1
    while alive.numel():
        a = bernoulli_ratio(num[alive], den, generator)
        if k > 1:
            a &= bernoulli_ratio(torch.ones(alive.numel(), dtype=torch.int64), k, generator)
        if k % 2 == 1:
            out[alive[~a]] = True
        alive = alive[a]
        k += 1
    return out


def bernoulli_exp(num: torch.Tensor, den: int, generator: torch.Generator) -> torch.Tensor:
    """Exact ``Bernoulli(exp(-num/den))`` per element (bool), ``num`` int64 ``>= 0``, ``1 <= den <= 2**62``.

    ``exp(-gamma) = exp(-1)**floor(gamma) * exp(-frac(gamma))`` (CKS Algorithm 2): the
    whole-number part is ``floor(gamma)`` independent ``Bernoulli(exp(-1))`` that must all
    succeed (drawn only while an element still survives), then one fractional draw.
    """
    num = num.reshape(-1).to(torch.int64)
    whole = torch.div(num, den, rounding_mode="floor")
    frac = num - whole * den
    ok = torch.ones(num.numel(), dtype=torch.bool)
    need = torch.nonzero(whole > 0).flatten()
    i = 1
    while need.numel():  # every element in need has whole >= i and has survived so far
        survived = _bernoulli_exp_fraction(torch.ones(need.numel(), dtype=torch.int64), 1, generator)
        ok[need[~survived]] = False
        need = need[survived]
        i += 1
        need = need[whole[need] >= i]
    left = torch.nonzero(ok).flatten()
    if left.numel():
        ok[left] = _bernoulli_exp_fraction(frac[left], den, generator)
    return ok


def _check_variance(variance_units: object) -> None:
    if isinstance(variance_units, bool) or not isinstance(variance_units, int):
        raise ValueError(f"variance must be an int (grid units²), got {variance_units!r}")
    if not 1 <= variance_units <= MAX_VARIANCE_UNITS:
        raise ValueError(
            f"discrete Gaussian variance must be in [1, {MAX_VARIANCE_UNITS}] grid units², got {variance_units}"
        )


class CKSDiscreteGaussianSampler:
    """Reference sampler: CKS Algorithm 3 end to end (about 10x slower than :class:`DiscreteGaussianSampler`).

    ``sigma = sqrt(s)`` grid units; proposal: discrete Laplace of scale
    ``t = isqrt(s) + 1`` (CKS use ``floor(sigma) + 1``). ``acceptance`` is the ideal
    acceptance rate of one proposal (computed by summation).
    """

    def __init__(self, variance_units: int) -> None:
        _check_variance(variance_units)
        self.s = variance_units
        self.sigma = math.sqrt(variance_units)
        self.t = math.isqrt(variance_units) + 1
        self.proposal: DiscreteLaplaceSampler = discrete_laplace_sampler(float(self.t))
        self.den = 2 * self.s * self.t * self.t
        self.acceptance = self._acceptance()

    def _acceptance(self) -> float:
        """Ideal ``P(accept) = sum_y L(y) exp(-(|y| - s/t)² / (2 s))`` (float64 sum over |y| <= 60 t)."""
        t, s = float(self.t), float(self.s)
        y = torch.arange(0, int(60 * t) + 1, dtype=torch.float64)
        c = math.tanh(0.5 / t)
        lap = c * torch.exp(-y / t) * torch.where(y == 0, 1.0, 2.0)
        acc = torch.exp(-((y - s / t) ** 2) / (2.0 * s))
        return float((lap * acc).sum())

    def sample(self, shape: Sequence[int], generator: torch.Generator) -> torch.Tensor:
        """Draws with ``shape`` (int64)."""
        shape = tuple(int(v) for v in shape)
        n = math.prod(shape)
        out = torch.empty(n, dtype=torch.int64)
        pending = torch.arange(n)
        while pending.numel():
            m = pending.numel()
            y = self.proposal.sample((m,), generator)
            prod = y.abs() * self.t
            inside = prod < _PRODUCT_LIMIT
            num = torch.where(inside, (prod - self.s) ** 2, torch.zeros_like(prod))
            accept = bernoulli_exp(num, self.den, generator) & inside
            out[pending[accept]] = y[accept]
            pending = pending[~accept]
        return out.reshape(shape)

    def pmf(self, z: torch.Tensor | int) -> torch.Tensor:
        """Ideal pmf (float64), normalised by summation over ``|z| <= 40 sigma + 40``; for tests."""
        return _ideal_pmf(self.s, z)

    def epsilon_excess(self, sensitivity: int) -> float:
        """Bound on how far the realised privacy loss between outputs at distance <= ``sensitivity`` can exceed the
        ideal.

        The acceptance test is exact and the normaliser cancels in a ratio, so the
        excess is the proposal's (:meth:`DiscreteLaplaceSampler.epsilon_excess`).
        """
        return self.proposal.epsilon_excess(int(sensitivity))

    def tv_bound(self) -> float:
        """Bound on the total variation between the realised and the ideal law (enters delta).

        The proposal's TV is at most ``(2K + 4) 2**-62`` (table cells, rounded to
        nearest, plus the residue and the two tail cells) plus ``1 - lambda`` for its
        geometric tail (whose realised law is at least lambda times the ideal); the
        rejection of ``|Y| t >= 2**31`` moves at most ``exp(-(2**31/t² - 1))``. With
        ideal acceptance A, rejection maps a proposal TV of tau to at most
        ``2 tau / (A - 2 tau)``.
        """
        tau = (2 * self.proposal.k + 4) / ONE + (1.0 - self.proposal.geometric.mass_lower_factor)
        tau += 2.0 * math.exp(-(_PRODUCT_LIMIT / self.t**2 - 1.0))
        return 2.0 * tau / (self.acceptance - 2.0 * tau)


class DiscreteGaussianSampler:
    """Secure table sampler of the discrete Gaussian ``N_Z(0, s)``, ``s`` an int variance in grid units², 1..2**24.

    See the module docstring for the method. ``k``: table half-width K (cells
    ``-(K-1)..K-1`` plus the tails); ``tail_mass``: ideal ``P(|Z| >= K)``;
    ``rho_central``/``rho_tail``: measured relative rounding errors of the cells.
    """

    def __init__(self, variance_units: int) -> None:
        _check_variance(variance_units)
        s = self.s = variance_units
        self.sigma = math.sqrt(s)
        k = self.k = max(1, math.isqrt(int(2 * _SPAN * s)))  # P(K) / P(0) >= e**-12
        with localcontext() as ctx:
            ctx.prec = 50
            b = (Decimal(-1) / Decimal(s)).exp()  # exp(-1/s)
            f = (Decimal(-1) / Decimal(2 * s)).exp()  # exp(-(2z+1)/(2s)) at z = 0: term(z+1) = term(z) * f * b**z
            weights = [Decimal(1)]  # unnormalised exp(-z²/(2s)), z = 0..K-1
            term = Decimal(1)
            for _ in range(1, k):
                term *= f
                f *= b
                weights.append(term)
            tail = Decimal(0)  # sum_{z >= K} exp(-z²/(2s)), until the terms stop mattering at 50 digits
            while True:
                term *= f
                f *= b
                tail += term
                if term < tail * Decimal(10) ** -45:
                    break
            norm = weights[0] + 2 * sum(weights[1:]) + 2 * tail
            probs = [w / norm for w in weights]
            tail_p = tail / norm
            widths = [int((p * ONE).to_integral_value(rounding="ROUND_HALF_EVEN")) for p in probs]
            tail_w = int((tail_p * ONE).to_integral_value(rounding="ROUND_CEILING")) + 1
            widths[0] = ONE - 2 * tail_w - 2 * sum(widths[1:])
            rho = max(abs(Decimal(w) / ONE - p) / p for w, p in zip(widths, probs, strict=True))
            self.rho_central = float(rho) * (1 + 1e-9)
            self.rho_tail = float((Decimal(tail_w) / ONE - tail_p) / tail_p) * (1 + 1e-9)
            self.tail_mass = float(2 * tail_p)
        if min(widths) <= 0:  # pragma: no cover - the span keeps every cell above 2**-40
            raise ValueError("discrete Gaussian table has an empty cell")
        cells = [tail_w] + widths[:0:-1] + widths + [tail_w]
        if sum(cells) != ONE:  # pragma: no cover
            raise AssertionError("discrete Gaussian table does not sum to 2**62")
        self.table = AliasTable(cells)
        # Conditional tail: g >= 0 with P(g) ∝ exp(-K g / s) exp(-g² / (2 s)).
        self.geometric = GeometricSampler(s / k)
        q = math.exp(-k / s)
        # Jensen: E[exp(-g²/2s)] >= exp(-E[g²]/2s), E[g²] = q(1+q)/(1-q)² for the geometric proposal.
        self.tail_acceptance_lower = math.exp(-(q * (1 + q) / (1 - q) ** 2) / (2 * s))

    def sample(self, shape: Sequence[int], generator: torch.Generator) -> torch.Tensor:
        """Draws with ``shape`` (int64)."""
        shape = tuple(int(v) for v in shape)
        z = self.table.draw(math.prod(shape), generator)
        z.sub_(self.k)  # cell index -> z; -K = left tail, +K = right tail
        tails = torch.nonzero(z.abs() == self.k).flatten()
        if tails.numel():
            z[tails] += torch.sign(z[tails]) * self._tail_offsets(tails.numel(), generator)
        return z.reshape(shape)

    def _tail_offsets(self, n: int, generator: torch.Generator) -> torch.Tensor:
        out = torch.empty(n, dtype=torch.int64)
        pending = torch.arange(n)
        while pending.numel():
            g = self.geometric.sample(pending.numel(), generator)
            inside = g < _PRODUCT_LIMIT  # g² stays in int64; beyond, the ideal acceptance is below exp(-2**60/s)
            accept = bernoulli_exp(torch.where(inside, g * g, torch.zeros_like(g)), 2 * self.s, generator) & inside
            out[pending[accept]] = g[accept]
            pending = pending[~accept]
        return out

    def pmf(self, z: torch.Tensor | int) -> torch.Tensor:
        """Ideal pmf (float64), normalised by summation over ``|z| <= 40 sigma + 40``; for tests."""
        return _ideal_pmf(self.s, z)

    def _normaliser_excess(self) -> float:
        """Bound on ``|ln(Z'/Z)|`` for the tail's acceptance normaliser (realised vs ideal proposal).

        The realised geometric is at least lambda times the ideal pointwise, so
        ``Z' >= lambda Z`` and ``Z' <= Z + (1 - lambda)`` (their TV is at most 1 - lambda).
        """
        lam = self.geometric.mass_lower_factor
        return max(-math.log(lam), (1.0 - lam) / self.tail_acceptance_lower)

    def epsilon_excess(self, sensitivity: int) -> float:
        """Bound on how far the realised privacy loss between outputs at distance <= ``sensitivity`` exceeds the ideal.

        Each realised probability is the ideal one times an error factor with
        ``|ln err| <= L(rho_central)`` in the table and ``<= L(rho_tail) +
        G.log_spread(D) + normaliser`` in the tails up to distance D (L(r) = ln((1+r)/(1-r))),
        and two tail points within D differ by at most ``G.log_spread(D)``: the excess is
        twice the larger of the two.
        """
        d = int(sensitivity)
        tail = _lr(self.rho_tail) + self.geometric.log_spread(d) + self._normaliser_excess()
        return 2.0 * max(_lr(self.rho_central), tail)

    def tv_bound(self) -> float:
        """Bound on the total variation between the realised and the ideal law (enters delta).

        Table cells (rounded to nearest, the residue at 0, the tails rounded up) move
        at most ``(2K + 4) 2**-62`` in all; the conditional tail law moves at most
        ``2 (1 - lambda) / A`` (rejection with ideal acceptance at least A from a
        proposal within TV 1 - lambda), plus the rejected ``g >= 2**31``, weighted by the tail mass.
        """
        lam = self.geometric.mass_lower_factor
        tail_tv = 2.0 * (1.0 - lam) / self.tail_acceptance_lower + math.exp(-_PRODUCT_LIMIT * self.k / self.s)
        return (2 * self.k + 4) / ONE + (self.tail_mass * (1 + self.rho_tail)) * min(1.0, tail_tv)


def _ideal_pmf(s: int, z: torch.Tensor | int) -> torch.Tensor:
    z = torch.as_tensor(z, dtype=torch.float64)
    r = int(40 * math.sqrt(s)) + 40
    grid = torch.arange(-r, r + 1, dtype=torch.float64)
    norm = torch.exp(-(grid**2) / (2.0 * s)).sum()
    return torch.exp(-(z**2) / (2.0 * s)) / norm


@lru_cache(maxsize=32)
def discrete_gaussian_sampler(variance_units: int) -> DiscreteGaussianSampler:
    """Cached :class:`DiscreteGaussianSampler` (a large table takes up to ~0.5 s to build)."""
    return DiscreteGaussianSampler(variance_units)


__all__ = [
    "MAX_VARIANCE_UNITS",
    "CKSDiscreteGaussianSampler",
    "DiscreteGaussianSampler",
    "bernoulli_exp",
    "bernoulli_ratio",
    "discrete_gaussian_sampler",
]
