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
    :class:`DiscreteLaplaceSampler` draws integer noise from
    ``P(z) = p 1[z=0] + (1-p) c exp(-|z|/t)`` (p = 0: discrete Laplace) using
    *integer arithmetic only*: one uniform 62-bit integer per element picks a cell of
    an exactly symmetric table of integer probabilities out of 2**62 (alias method),
    so no float rounding can leak the input. Draws in the two tail cells return
    ``±(K + G)`` with G geometric from :class:`GeometricSampler` (independent
    base-L digits, an exact factorisation of the geometric law, plus a top table
    with a memoryless tail: "landed in the tail: add K and draw again"), so
    nothing is truncated.

    The only deviation from the ideal law is the rounding of table entries to
    multiples of 2**-62 (the tables are computed with 50-digit decimal
    arithmetic). Every table's largest relative rounding error is measured when it
    is built, and :meth:`DiscreteLaplaceSampler.epsilon_excess` turns them into a
    rigorous additive bound on the extra privacy loss (of the order 1e-11 nats;
    reported in each guarantee's params and included in its epsilon).
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
_MAX_CENTRAL = 1 << 16  # cells per side of the one-lookup discrete Laplace table
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


_REFINE = 2.0**-10  # |v| below this is redrawn at float64 resolution (keeps the Laplace tail)


def laplace_noise(
    shape: Sequence[int], scale: float | torch.Tensor, generator: torch.Generator, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Laplace(0, ``scale``) noise (float path): ``sign(v) * (-log|v|) * scale`` for v uniform on (-1, 1).

    v starts as a float32 uniform on the symmetric grid of odd multiples of 2**-24
    (never 0); every |v| < 2**-10 (probability 1/1024) is redrawn as
    ``2**-10 * U`` with U a float64 uniform on (0, 1), so |v| has float64-level
    resolution where the tail is decided: the largest reachable noise is about
    44 * scale (float32 alone would stop at 16.6 * scale). The log is taken in
    float32 (relative error ~1e-7, below the float32 output's resolution).
    """
    v = torch.rand(tuple(shape), dtype=torch.float32, generator=generator)
    v.mul_(2.0).sub_(1.0 - 2.0**-24)  # odd multiples of 2**-24 in (-1, 1), exact in float32
    a = v.abs()
    small = torch.nonzero(a.view(-1) < _REFINE).flatten()
    if small.numel():
        a.view(-1)[small] = (uniform_open((small.numel(),), generator) * _REFINE).to(torch.float32)
    noise = a.log_().copysign_(v).mul_(scale)
    return noise if dtype == torch.float32 else noise.to(dtype)


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


def _lr(r: float) -> float:
    """``ln((1 + r) / (1 - r))``: bounds |ln(1 + e)| for every |e| <= r."""
    return math.log1p(r) - math.log1p(-r)


def _table(probs: list[Decimal], tail: Decimal | None) -> tuple[torch.Tensor, float, float]:
    """Integer CDF of ``probs`` (+ optional tail), and the max relative rounding errors.

    Returns ``(cum, rho_entries, rho_tail)``: ``cum[j]`` = round(2**62 * P(X <= j));
    without a tail the last entry is 2**62. With a tail the last cumulative entry
    is rounded *down* by one extra count, so the realised tail mass is strictly
    larger than the true one (needed for the lower bound ``mass_lower_factor``).
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
    for c, pj in zip(cum, probs, strict=True):
        if c - prev <= 0:
            raise ValueError("secure sampler table has an empty entry (scale out of range)")
        rho = max(rho, abs(Decimal(c - prev) / ONE - pj) / pj)
        prev = c
    rho_tail = 0.0
    if tail is not None:
        realised = Decimal(ONE - cum[-1]) / ONE
        if realised <= tail:  # pragma: no cover - guaranteed by the extra floor count
            raise AssertionError("tail mass must be rounded up")
        rho_tail = float(abs(realised - tail) / tail) * (1 + 1e-9)
    return torch.tensor(cum, dtype=torch.int64), float(rho) * (1 + 1e-9), rho_tail


def _alias_table(cells: list[int]) -> tuple[int, torch.Tensor, torch.Tensor]:
    """Walker/Vose alias table in exact integer arithmetic for integer weights summing to 2**62.

    With n = 2**B buckets of capacity C = 2**(62 - B), bucket i returns cell i when
    the low bits of the draw are < ``threshold[i]``, else ``alias[i]``; then
    P(cell j) = weight_j / 2**62 exactly (same law as the CDF table, O(1) per draw).
    """
    bits = max(1, (len(cells) - 1).bit_length())
    n = 1 << bits
    cap = ONE >> bits
    weight = list(cells) + [0] * (n - len(cells))
    threshold = [cap] * n
    alias = list(range(n))
    small = [j for j in range(n) if weight[j] < cap]
    large = [j for j in range(n) if weight[j] >= cap]
    while small and large:
        s_ = small.pop()
        l_ = large.pop()
        threshold[s_] = weight[s_]
        alias[s_] = l_
        weight[l_] -= cap - weight[s_]
        (small if weight[l_] < cap else large).append(l_)
    for j in small + large:  # exact integers: whatever is left is full
        if weight[j] != cap:  # pragma: no cover
            raise AssertionError("alias table construction lost mass")
        threshold[j] = cap
    return bits, torch.tensor(threshold, dtype=torch.int64), torch.tensor(alias, dtype=torch.int64)


class AliasTable:
    """Integer alias table over cells with integer weights summing to 2**62; one 62-bit draw per sample.

    ``threshold``/``alias`` as built by :func:`_alias_table`; they are packed into one int64
    table ``threshold << B | alias`` so a draw costs a single gather.
    """

    def __init__(self, cells: list[int]) -> None:
        self.cells = torch.tensor(cells, dtype=torch.int64)
        self.bucket_bits, self.threshold, self.alias = _alias_table(cells)
        self._packed = (self.threshold << self.bucket_bits) | self.alias  # threshold <= 2**(62-B): fits in 62 bits

    def draw(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """``n`` cell indices (int64), cell j with probability ``cells[j] / 2**62`` exactly."""
        bits = self.bucket_bits
        u = uniform_int62((n,), generator)
        bucket = u >> (62 - bits)
        entry = torch.index_select(self._packed, 0, bucket)  # much faster than advanced indexing
        low = u.bitwise_and_((1 << (62 - bits)) - 1)
        return torch.where(low < (entry >> bits), bucket, entry.bitwise_and_((1 << bits) - 1))


class GeometricSampler:
    """Geometric variables ``P(G = g) = (1 - q) q**g``, ``q = exp(-1/scale)``, from integer tables.

    G = sum_i w_i D_i + W A, where the digits D_i are independent truncated
    geometrics on {0..L_i-1} (ratio ``q**w_i``; the geometric law factorises
    exactly over this mixed-radix split) and A is geometric with ratio ``q**W``,
    drawn from a K-entry table; landing in its tail adds K and draws again
    (memorylessness), so the support is unbounded and nothing is truncated.
    """

    def __init__(self, scale: float) -> None:
        self.scale = scale
        with localcontext() as ctx:
            ctx.prec = 50
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

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """``n`` independent geometric variables (int64)."""
        g = torch.zeros(n, dtype=torch.int64)
        for weight, cum in self.digits:
            d = torch.searchsorted(cum, uniform_int62((n,), generator), right=True)
            g.add_(d, alpha=weight)
        a = torch.searchsorted(self.top_cum, uniform_int62((n,), generator), right=True)
        pending = torch.nonzero(a == self.top_k).flatten()
        while pending.numel():
            redraw = torch.searchsorted(self.top_cum, uniform_int62((pending.numel(),), generator), right=True)
            a[pending] += redraw  # a redraw of K is the tail again: keep adding
            pending = pending[redraw == self.top_k]
        g.add_(a, alpha=self.top_weight)
        return g

    def log_spread(self, span: int) -> float:
        """Bound on |ln(P'(g)/P(g))| over 0 <= g <= span, and on its change between g, g' with |g - g'| <= span.

        Each digit and the top entry carry a relative error of at most rho; the tail
        factor (rounded up) enters once per redraw, at most ``span // (W K) + 1`` times.
        """
        tails = int(span) // (self.top_weight * self.top_k) + 1
        return sum(_lr(r) for r in self.rho_digits) + _lr(self.rho_top) + tails * _lr(self.rho_tail)

    @property
    def mass_lower_factor(self) -> float:
        """lambda with P'(g) >= lambda P(g) for every g (the tail mass is rounded up)."""
        lam = 1.0 - self.rho_top
        for r in self.rho_digits:
            lam *= 1.0 - r
        return lam


class DiscreteLaplaceSampler:
    """Secure sampler of ``Z`` with ``P(Z = z) = p 1[z = 0] + (1 - p) c e^(-|z|/scale)`` (integers).

    With ``keep_p = 0`` this is the discrete Laplace ("two-sided geometric") law;
    with ``keep_p = p`` it is the *offset* law of discrete TLDP (keep the element
    with probability p, else add discrete Laplace noise), drawn in one step.
    ``scale`` is in integer grid units (>= 0.1), ``c = tanh(1/(2 scale))``.

    One uniform 62-bit integer per element picks a cell of a symmetric integer
    table over z in (-K, K) plus two tail cells, by the alias method in exact
    integer arithmetic (:class:`AliasTable`); a draw in
    a tail cell returns ``±(K + G)`` with G from :class:`GeometricSampler`
    (exact: the law beyond K is K + geometric). Table widths are integers out of
    2**62 computed from 50-digit decimal probabilities; the central cells are
    rounded to nearest, the tail cells up, and the residue goes to z = 0, so the
    table is exactly symmetric. ``rho_central``/``rho_tail`` are the measured
    relative rounding errors; :meth:`epsilon_excess` turns them into a rigorous
    additive bound on the extra privacy loss.
    """

    def __init__(self, scale: float, keep_p: float = 0.0) -> None:
        scale = float(scale)
        if not math.isfinite(scale) or scale < _MIN_SCALE:
            raise ValueError(
                f"discrete Laplace scale must be >= {_MIN_SCALE} grid units, got {scale!r} "
                "(epsilon too large for the secure sampler)"
            )
        keep_p = float(keep_p)
        if not 0.0 <= keep_p < 1.0:
            raise ValueError(f"keep probability must be in [0, 1), got {keep_p!r}")
        self.scale = scale
        self.keep_p = keep_p
        self.geometric = GeometricSampler(scale)
        k = max(1, min(_MAX_CENTRAL, int(math.floor(_SPAN * scale))))
        self.k = k
        with localcontext() as ctx:
            ctx.prec = 50
            q = (Decimal(-1) / Decimal(scale)).exp()
            p = Decimal(keep_p)
            c = (1 - q) / (1 + q)
            side = [Decimal(0)] * k  # side[z] = P(Z = z) for 1 <= z < K
            term = (1 - p) * c
            for z in range(1, k):
                term *= q
                side[z] = term
            tail = (1 - p) * c * q**k / (1 - q)  # P(Z >= K)
            widths = [0] * k
            for z in range(1, k):
                widths[z] = int((side[z] * ONE).to_integral_value(rounding="ROUND_HALF_EVEN"))
            tail_w = int((tail * ONE).to_integral_value(rounding="ROUND_CEILING")) + 1
            zero_w = ONE - 2 * tail_w - 2 * sum(widths[1:])
            zero_p = p + (1 - p) * c
            rho = abs(Decimal(zero_w) / ONE - zero_p) / zero_p
            for z in range(1, k):
                if widths[z] <= 0:  # pragma: no cover - the span keeps every cell above 2**-40
                    raise ValueError("secure sampler table has an empty cell")
                rho = max(rho, abs(Decimal(widths[z]) / ONE - side[z]) / side[z])
            realised_tail = Decimal(tail_w) / ONE
            self.rho_central = float(rho) * (1 + 1e-9)
            self.rho_tail = float((realised_tail - tail) / tail) * (1 + 1e-9)
            self.c = float(c)
        # Cells in order: left tail, z = -(K-1) .. K-1, right tail (2K + 1 cells).
        cells = [tail_w] + widths[:0:-1] + [zero_w] + widths[1:] + [tail_w]
        if sum(cells) != ONE:  # pragma: no cover
            raise AssertionError("secure sampler table does not sum to 2**62")
        self.table = AliasTable(cells)
        self.cells, self.threshold, self.alias = self.table.cells, self.table.threshold, self.table.alias

    def sample(self, shape: Sequence[int], generator: torch.Generator) -> torch.Tensor:
        """Draws of Z with ``shape`` (int64)."""
        shape = tuple(int(s) for s in shape)
        z = self.table.draw(math.prod(shape), generator)
        z.sub_(self.k)  # cell index -> z; -K = left tail, +K = right tail
        tails = torch.nonzero(z.abs() == self.k).flatten()
        if tails.numel():
            z[tails] += torch.sign(z[tails]) * self.geometric.sample(tails.numel(), generator)
        return z.reshape(shape)

    def pmf(self, z: torch.Tensor | int) -> torch.Tensor:
        """Ideal pmf (float64), for tests and reports."""
        z = torch.as_tensor(z, dtype=torch.float64)
        base = (1.0 - self.keep_p) * self.c * torch.exp(-z.abs() / self.scale)
        return torch.where(z == 0, base + self.keep_p, base)

    def epsilon_excess(self, sensitivity: int) -> float:
        """Rigorous additive bound on the privacy loss added by table rounding, at integer ``sensitivity`` D.

        For every pair z, z' with |z - z'| <= D the realised law P' satisfies
        ``ln(P'(z)/P'(z')) <= ln(P(z)/P(z')) + excess``: each probability is
        ``P(z) * err(z)`` with ``|ln err| <= L(rho_central)`` in the table and
        ``<= L(rho_tail) + G.log_spread(D)`` beyond it (``L(r) = ln((1+r)/(1-r))``),
        so the excess is twice the larger of the two.
        """
        d = int(sensitivity)
        return 2.0 * max(_lr(self.rho_central), _lr(self.rho_tail) + self.geometric.log_spread(d))


@lru_cache(maxsize=32)
def discrete_laplace_sampler(scale: float, keep_p: float = 0.0) -> DiscreteLaplaceSampler:
    """Cached :class:`DiscreteLaplaceSampler` (a large table takes up to ~0.2 s to build)."""
    return DiscreteLaplaceSampler(scale, keep_p)
