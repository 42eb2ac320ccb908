"""Randomness for the mechanisms: CSPRNG-seeded generators, float noise, and the secure integer path.

Generators
    :func:`make_generator` returns the caller's generator, a generator seeded with
    the caller's explicit seed (tests), or by default a fresh ``torch.Generator``
    seeded with 63 bits from the OS CSPRNG (``secrets.randbits``).

Float path (Laplace, Gaussian, TLDP-Laplace/Gaussian, weighted TLDP)
    Continuous noise computed in float64 by inverse CDF / Box-Muller. Like every
    textbook float implementation it is, in principle, open to Mironov's (2012)
    floating-point attack: the set of reachable output floats depends on the input.

Secure path (discrete TLDP always; Laplace with ``secure=True``)
    :class:`DiscreteLaplaceSampler` draws two-sided geometric ("discrete Laplace")
    noise ``P(Z = z) ∝ exp(-|z|/t)`` using *integer arithmetic only*: uniform 62-bit
    integers are compared against integer CDF tables (probabilities rounded to
    integers out of 2**62). The output is an integer, so no float rounding can
    leak the input. A geometric variable is split into independent base-L digits
    (a truncated geometric each, exact factorisation of the geometric law) plus an
    unbounded top part drawn from a table with a memoryless tail ("landed in the
    tail: add K and draw again"), so nothing is truncated.

    The only deviation from the ideal law is the rounding of table entries to
    multiples of 2**-62 (the tables themselves are computed with 60-digit decimal
    arithmetic). Every table's largest relative rounding error ``rho`` is measured
    when the table is built, and :meth:`DiscreteLaplaceSampler.epsilon_excess`
    turns them into a rigorous additive bound on the extra privacy loss (of the
    order 1e-10 nats; the exact figure is reported in each guarantee's params).
"""

from __future__ import annotations

import math
import secrets
from decimal import Decimal, localcontext
from functools import lru_cache
from typing import Sequence

import torch

ONE = 1 << 62  # probabilities are integers out of 2**62
_SPAN = 12.0  # ln(largest/smallest entry) allowed inside one table (keeps rounding error tiny)
_MAX_TABLE = 256  # entries per table
_MIN_SCALE = 0.1  # smallest discrete Laplace scale (in grid units) the secure sampler accepts


def make_generator(generator: torch.Generator | None = None, seed: int | None = None) -> torch.Generator:
    """The generator to draw from.

    ``generator`` given: used as is. ``seed`` given: a new generator seeded with it
    (reproducible; for tests only). Neither: a new generator seeded from the OS
    CSPRNG (``secrets.randbits(63)``).
    """
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        return generator
    g = torch.Generator()
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {seed!r}")
        g.manual_seed(seed)
    else:
        g.manual_seed(secrets.randbits(63))
    return g


# ---------------------------------------------------------------------------------------------
# Float path
# ---------------------------------------------------------------------------------------------


def uniform_open(shape: Sequence[int], generator: torch.Generator) -> torch.Tensor:
    """Float64 uniform on the open interval (0, 1), symmetric about 1/2: ``(k + 1/2) / 2**53``."""
    u = torch.rand(tuple(shape), dtype=torch.float64, generator=generator)
    return u.add_(2.0**-54)


def laplace_noise(shape: Sequence[int], scale: float | torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Float64 Laplace(0, ``scale``) noise by inverse CDF (float path)."""
    v = uniform_open(shape, generator).sub_(0.5)
    # -scale * sign(v) * log(1 - 2|v|); |v| < 1/2 strictly, so the log is finite.
    mag = torch.log1p(v.abs().mul_(-2.0))
    return mag.mul_(torch.sign(v)).mul_(-1.0).mul_(scale)


def gaussian_noise(shape: Sequence[int], sigma: float, generator: torch.Generator) -> torch.Tensor:
    """Float64 N(0, ``sigma``**2) noise (float path)."""
    return torch.randn(tuple(shape), dtype=torch.float64, generator=generator).mul_(sigma)


def bernoulli_positions(
    n: int,
    log_p_max: float,
    generator: torch.Generator,
    thin: torch.Tensor | None = None,
    *,
    dense_threshold: float = 1e-3,
) -> torch.Tensor:
    """Indices in ``range(n)`` selected independently, index ``i`` with probability ``p_max * thin[i % m]``.

    ``log_p_max``: log of the largest selection probability (``-inf`` for 0);
    ``thin``: optional float64 ``(m,)`` factors in [0, 1] repeating with period m
    (m divides n; e.g. one record's weights). Probabilities are taken
    exactly from their logs: for ``p_max >= dense_threshold`` one uniform per index
    is compared with p; for smaller p the gaps between selected indices are drawn
    as geometric variables (``floor(log U / log(1 - p))``), so a p of 1e-300 costs
    one draw instead of n, and a p that underflows float64 is never selected.
    """
    if n <= 0 or log_p_max == -math.inf:
        return torch.zeros(0, dtype=torch.int64)
    p_max = math.exp(log_p_max)
    if p_max >= dense_threshold:
        u = torch.rand(n, dtype=torch.float64, generator=generator)
        if thin is None:
            return torch.nonzero(u < p_max).flatten()
        p = (thin * p_max).repeat(n // thin.numel())
        return torch.nonzero(u < p).flatten()
    if p_max == 0.0:
        return torch.zeros(0, dtype=torch.int64)
    log_q = math.log1p(-p_max)  # < 0
    expected = n * p_max
    chunk = int(expected + 10.0 * math.sqrt(expected) + 16)
    positions: list[torch.Tensor] = []
    start = -1.0  # position of the previous success
    while True:
        u = uniform_open((chunk,), generator)
        gaps = torch.floor(torch.log(u) / log_q)  # failures before the next success, float64
        pos = torch.cumsum(gaps + 1.0, dim=0) + start
        inside = pos < n
        positions.append(pos[inside].to(torch.int64))
        if not bool(inside.all()):
            break
        start = float(pos[-1])
    idx = torch.cat(positions)
    if thin is not None and idx.numel():
        keep = torch.rand(idx.numel(), dtype=torch.float64, generator=generator) < thin[idx % thin.numel()]
        idx = idx[keep]
    return idx


# ---------------------------------------------------------------------------------------------
# Secure integer path
# ---------------------------------------------------------------------------------------------


def uniform_int62(shape: Sequence[int], generator: torch.Generator) -> torch.Tensor:
    """Uniform integers in [0, 2**62) (int64). torch reduces a 64-bit draw modulo 2**62: unbiased."""
    return torch.randint(0, ONE, tuple(shape), dtype=torch.int64, generator=generator)


def bernoulli_int(shape: Sequence[int], threshold: int, generator: torch.Generator) -> torch.Tensor:
    """Exact Bernoulli(threshold / 2**62) as a bool tensor (integer comparison)."""
    if threshold <= 0:
        return torch.zeros(tuple(shape), dtype=torch.bool)
    return uniform_int62(shape, generator) < threshold


def probability_threshold(p: float) -> int:
    """Largest integer threshold with threshold / 2**62 <= p (so the realised p never exceeds p)."""
    return int(math.floor(Decimal(p) * ONE))


def _table(probs: list[Decimal], tail: Decimal | None) -> tuple[torch.Tensor, float, float]:
    """Integer CDF of ``probs`` (+ optional tail), and the max relative rounding errors.

    Returns ``(cum, rho_entries, rho_tail)``: ``cum[j]`` = round(2**62 * P(X <= j));
    without a tail the last entry is 2**62. With a tail the last cumulative entry
    is rounded *down* by one extra count, so the realised tail mass is strictly
    larger than the true one (needed for the lower bound in
    :meth:`DiscreteLaplaceSampler.epsilon_excess`).
    """
    cum: list[int] = []
    acc = Decimal(0)
    for j, pj in enumerate(probs):
        acc += pj
        if tail is None and j == len(probs) - 1:
            cum.append(ONE)
        elif tail is not None and j == len(probs) - 1:
            cum.append(int((acc * ONE).to_integral_value(rounding="ROUND_FLOOR")) - 1)
        else:
            cum.append(int((acc * ONE).to_integral_value(rounding="ROUND_HALF_EVEN")))
    rho = Decimal(0)
    prev = 0
    for c, pj in zip(cum, probs):
        if c - prev <= 0:
            raise ValueError("secure sampler table has an empty entry (scale out of range)")
        rho = max(rho, abs(Decimal(c - prev) / ONE - pj) / pj)
        prev = c
    rho_tail = 0.0
    if tail is not None:
        realised = Decimal(ONE - cum[-1]) / ONE
        if realised <= tail:  # pragma: no cover - guaranteed by the extra floor count
            raise AssertionError("tail mass must be rounded up")
        rho_tail = float(abs(realised - tail) / tail) * (1 + 1e-12)
    return torch.tensor(cum, dtype=torch.int64), float(rho) * (1 + 1e-12), rho_tail


class DiscreteLaplaceSampler:
    """Exact-by-construction sampler of the discrete Laplace law ``P(Z = z) ∝ exp(-|z| / scale)``.

    ``scale`` is in integer grid units (>= 0.1). ``Z = G1 - G2`` with G1, G2
    independent geometric variables ``P(G = g) = (1 - q) q**g``, ``q = exp(-1/scale)``.
    Each G = sum_i w_i D_i + W A where the digits D_i are independent truncated
    geometrics on {0..L_i-1} (ratio ``q**w_i``) and A is geometric with ratio
    ``q**W``, drawn from a K-entry table; landing in its tail adds K and redraws
    (memorylessness), so the support is unbounded. All draws are uniform 62-bit
    integers compared against integer CDF tables.
    """

    def __init__(self, scale: float) -> None:
        scale = float(scale)
        if not math.isfinite(scale) or scale < _MIN_SCALE:
            raise ValueError(
                f"discrete Laplace scale must be >= {_MIN_SCALE} grid units, got {scale!r} "
                "(epsilon too large for the secure sampler)"
            )
        self.scale = scale
        with localcontext() as ctx:
            ctx.prec = 60
            q = (Decimal(-1) / Decimal(scale)).exp()
            self.digits: list[tuple[int, torch.Tensor]] = []
            self.rho_digits: list[float] = []
            weight = 1
            # Add base-L digits while the top table would need more than _MAX_TABLE entries.
            while weight / scale < _SPAN / _MAX_TABLE:
                size = min(_MAX_TABLE, int(math.floor(_SPAN * scale / weight)) + 1)
                r = q**weight
                norm = (1 - r) / (1 - r**size)
                probs = [norm * r**j for j in range(size)]
                cum, rho, _ = _table(probs, None)
                self.digits.append((weight, cum))
                self.rho_digits.append(rho)
                weight *= size
            self.top_weight = weight
            big_r = q**weight
            k = max(1, min(_MAX_TABLE, int(math.floor(_SPAN * scale / weight))))
            probs = [(1 - big_r) * big_r**j for j in range(k)]
            self.top_cum, self.rho_top, self.rho_tail = _table(probs, big_r**k)
            self.top_k = k
            self.tail_mass = float(big_r**k)
            self.c = float((1 - q) / (1 + q))  # P(Z = 0) of the ideal law

    @property
    def lookups_per_draw(self) -> int:
        """Table lookups per discrete Laplace draw (two geometric variables)."""
        return 2 * (len(self.digits) + 1)

    def geometric(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """``n`` independent geometric variables ``P(G = g) = (1-q) q**g`` (int64)."""
        g = torch.zeros(n, dtype=torch.int64)
        for weight, cum in self.digits:
            d = torch.searchsorted(cum, uniform_int62((n,), generator), right=True)
            g.add_(d, alpha=weight) if weight != 1 else g.add_(d)
        a = torch.searchsorted(self.top_cum, uniform_int62((n,), generator), right=True)
        pending = torch.nonzero(a == self.top_k).flatten()
        while pending.numel():
            redraw = torch.searchsorted(self.top_cum, uniform_int62((pending.numel(),), generator), right=True)
            a[pending] += redraw  # redraw == K means the tail again: keep adding
            pending = pending[redraw == self.top_k]
        g.add_(a, alpha=self.top_weight)
        return g

    def sample(self, shape: Sequence[int], generator: torch.Generator) -> torch.Tensor:
        """Discrete Laplace noise of ``shape`` (int64)."""
        shape = tuple(int(s) for s in shape)
        n = math.prod(shape)
        both = self.geometric(2 * n, generator)
        return (both[:n] - both[n:]).reshape(shape)

    def epsilon_excess(self, sensitivity: int) -> float:
        """Additive bound on the extra privacy loss from table rounding, at integer ``sensitivity``.

        For all z and |d| <= sensitivity the realised law satisfies
        ``P'(z) / P'(z + d) <= exp(|d| / scale + excess)`` where
        ``excess = sum_i L(rho_i) + L(rho_top) + (floor(D / (W K)) + 1) L(rho_tail)``,
        ``L(r) = ln((1 + r) / (1 - r))``: each digit and the top entry of G carry a
        relative error of at most rho, and at most ``floor(D/(WK)) + 1`` tail
        factors differ between g and g + d. The bound carries over from G to
        Z = G1 - G2 (ratio of sums of positive terms, and Z is symmetric).
        """
        d = int(sensitivity)

        def lr(r: float) -> float:
            return math.log1p(r) - math.log1p(-r)

        tails = d // (self.top_weight * self.top_k) + 1
        return sum(lr(r) for r in self.rho_digits) + lr(self.rho_top) + tails * lr(self.rho_tail)

    @property
    def mass_lower_factor(self) -> float:
        """lambda with P'(g) >= lambda * P(g) for every g (tail mass is rounded up)."""
        lam = 1.0 - self.rho_top
        for r in self.rho_digits:
            lam *= 1.0 - r
        return lam

    def pmf(self, z: torch.Tensor | int) -> torch.Tensor:
        """Ideal pmf ``c * exp(-|z|/scale)`` (float64), for tests and reports."""
        z = torch.as_tensor(z, dtype=torch.float64)
        return self.c * torch.exp(-z.abs() / self.scale)


@lru_cache(maxsize=64)
def discrete_laplace_sampler(scale: float) -> DiscreteLaplaceSampler:
    """Cached :class:`DiscreteLaplaceSampler` for ``scale`` (tables take a few ms to build)."""
    return DiscreteLaplaceSampler(scale)
