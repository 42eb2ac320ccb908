"""The secure path's lattice and the checks every calibration passes before any sampling.

A secure release snaps each clipped value to a grid of step ``gamma = Δ / 2**bits`` (domain
units) and adds integer noise in grid units, so the sensitivity is exactly ``2**bits`` units
and no floating-point sampling is involved.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Generic, Mapping, Protocol, Sequence, TypeVar

import torch

from ..discrete_gaussian import MAX_VARIANCE_UNITS, DiscreteGaussianSampler, discrete_gaussian_sampler
from ..guarantee import Domain
from ..sampling import DiscreteLaplaceSampler, discrete_laplace_sampler

#: Largest noise scale (domain units) a release can carry: noised values are stored as float32
#: (max about 3.4e38), and a draw may reach about 50 scales. Beyond it the release would hold inf.
MAX_NOISE_SCALE = 1e30
#: Largest grid resolution (bits) of the secure path: a grid of Δ / 2**20.
MAX_GRID_BITS = 20


def check_noise_scale(name: str, scales: Mapping[str, float]) -> None:
    """Refuse, before any sampling or charge, a calibration whose noise cannot be represented (``scales``: the
    noise scales by name, ``b`` or ``sigma``, domain units)."""
    for key, scale in scales.items():
        if not (math.isfinite(float(scale)) and float(scale) <= MAX_NOISE_SCALE):
            raise ValueError(
                f"{name}: this epsilon gives a noise scale {key} = {float(scale):.3g} (domain units), too large for "
                f"a release to hold (limit {MAX_NOISE_SCALE:.0e}); choose a larger --epsilon"
            )


class IntegerSampler(Protocol):
    """A secure sampler of integer noise in grid units (the discrete Laplace and discrete Gaussian tables)."""

    def sample(self, shape: Sequence[int], generator: torch.Generator) -> torch.Tensor:
        """int64 noise of ``shape``."""

    def epsilon_excess(self, sensitivity: int) -> float:
        """The epsilon (nats) the tables' rounding adds for a sensitivity of ``sensitivity`` grid units."""


S = TypeVar("S", bound=IntegerSampler, covariant=True)


@dataclass(frozen=True)
class Grid(Generic[S]):
    """The secure path's lattice: values ``low + j * gamma`` (j an int), integer noise in grid units.

    ``units``: the per-element sensitivity in grid units (``Δ / gamma``, a power of two);
    ``sampler``: a secure integer sampler (``.sample(shape, generator)`` -> int64).
    """

    low: float
    gamma: float
    units: int
    sampler: S

    def snap(self, x: torch.Tensor) -> torch.Tensor:
        """Grid index of each (clipped) value: ``round((x - low) / gamma)``, kept in ``0..units`` (int64).

        Computed in the input's float precision: any deterministic snapping of a clipped value
        into ``0..units`` keeps the sensitivity at exactly ``units`` grid steps.
        """
        xf = x if x.is_floating_point() else x.to(torch.float64)
        j = torch.round((xf - self.low) * (1.0 / self.gamma)).to(torch.int64)
        return j.clamp_(0, self.units)

    def value(self, j: torch.Tensor) -> torch.Tensor:
        """Released values ``low + j * gamma`` as float32 (post-processing of the integers j)."""
        return j.to(torch.float32).mul_(self.gamma).add_(self.low)

    def apply(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """Snap ``x`` to the grid and add integer noise; float32 values on the grid."""
        return self.value(self.snap(x).add_(self.sampler.sample(x.shape, gen)))

    def noise(self, shape: Sequence[int], gen: torch.Generator) -> torch.Tensor:
        out: torch.Tensor = self.sampler.sample(shape, gen).to(torch.float32).mul_(self.gamma)
        return out


#: The grid of each secure sampler, and of either.
LaplaceGrid = Grid[DiscreteLaplaceSampler]
GaussianGrid = Grid[DiscreteGaussianSampler]
SecureGrid = Grid[IntegerSampler]


def check_secure(secure: object) -> bool:
    if not isinstance(secure, bool):
        raise ValueError(f"secure must be True or False, got {secure!r}")
    return secure


def grid_bits_for(scale_over_width: float) -> int:
    """Grid resolution for noise of scale ``scale_over_width * Δ`` (Laplace b or Gaussian sigma).

    About 512-1024 grid units per scale, between 1 and :data:`MAX_GRID_BITS` bits: the
    snapping error (half a grid step, at most scale / 1024) is far below the noise, and the
    sampler's table stays small enough to be fast.
    """
    return min(MAX_GRID_BITS, max(1, math.floor(math.log2(1024.0 / scale_over_width))))


def gaussian_grid(domain: Domain, rho_element: float, name: str) -> tuple[GaussianGrid, float]:
    """Grid and discrete Gaussian sampler giving at most ``rho_element``-zCDP per element; returns (grid, realised
    rho)."""
    bits = grid_bits_for(1.0 / math.sqrt(2.0 * rho_element))
    units = 1 << bits
    variance = math.ceil(units * units / (2.0 * rho_element))
    if variance > MAX_VARIANCE_UNITS:
        raise ValueError(
            f"{name}: this epsilon needs a noise scale of {math.sqrt(variance) / units:.3g} x the domain width,"
            " beyond the secure discrete Gaussian sampler's range; choose a larger epsilon (or secure=False)"
        )
    grid = Grid(domain.low, domain.width / units, units, discrete_gaussian_sampler(variance))
    return grid, units * units / (2.0 * variance)


def laplace_grid(domain: Domain, eps_element: float, grid_bits: int | None) -> LaplaceGrid:
    """Grid and secure discrete Laplace sampler of scale ``units / eps_element`` grid units (no fitting).

    ``grid_bits=None``: :func:`grid_bits_for` the scale ``b = Δ / eps_element``.
    """
    units = 1 << (grid_bits if grid_bits is not None else grid_bits_for(1.0 / eps_element))
    return Grid(domain.low, domain.width / units, units, discrete_laplace_sampler(units / eps_element))


T = TypeVar("T")


def fit_below(target: float, bound: Callable[[float], tuple[float, T, float]]) -> tuple[float, T, float]:
    """Shrink the parameter target until the rigorous bound (ideal + rounding excess) is <= target."""
    t = target
    for _ in range(8):
        eps, obj, used = bound(t)
        if eps <= target:
            return eps, obj, used
        t = t - (eps - target) * 1.5 - target * 1e-15
    raise ValueError(f"could not fit the secure sampler's rounding excess below epsilon={target}")  # pragma: no cover
