"""The Laplace mechanism (``--mechanism laplace``): pure LDP, scale ``b = Δ / eps_elem`` per element."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..basis import CoefficientLayout
from ..guarantee import Domain
from ..pca import PcaBasis
from ..preprocess import check_epsilon
from ..sampling import laplace_noise
from .elementwise import FLOAT_SAMPLING, SECURE_LAPLACE_SAMPLING, Elementwise, Plan, PlanValues, fmt
from .grid import LaplaceGrid, check_noise_scale, check_secure, fit_below, laplace_grid
from .registry import register_mechanism


@dataclass(frozen=True, kw_only=True)
class LaplaceValues(PlanValues):
    """``b``: the Laplace scale of each element's (coefficient's) noise, domain units."""

    b: float

    def noise_scales(self) -> dict[str, float]:
        return {"b": self.b}


@register_mechanism("laplace", rank=10)
class LaplaceMechanism(Elementwise[LaplaceValues]):
    """Laplace noise, scale ``b = Δ / eps_elem`` per element: pure eps_elem-LDP per element,
    ``I * eps_elem`` per record (exact: all I elements may change).

    ``secure=True`` (default) snaps the clipped input to the grid ``gamma = Δ / 2**grid_bits``
    and adds ``gamma`` times discrete Laplace noise of scale ``b / gamma`` drawn on the
    secure integer path; the grid sensitivity is exactly ``2**grid_bits`` units.
    ``grid_bits=None`` (default) picks about 512-1024 grid steps per b (:func:`grid_bits_for`).
    ``secure=False``: float64 inverse-CDF sampling (for benchmarks; open to the floating-point attack).
    """

    name = "laplace"
    coefficient_norm = "l1"

    def __init__(
        self,
        epsilon: float,
        *,
        per: str | None = None,
        domain: Domain = Domain(0.0, 1.0),
        reduction: int = 1,
        secure: bool = True,
        grid_bits: int | None = None,
        basis: str | PcaBasis = "pool",
        coefficients: int | None = None,
        clip_norm: float | None = None,
    ) -> None:
        super().__init__(per=per, domain=domain, reduction=reduction, basis=basis, coefficients=coefficients,
                         clip_norm=clip_norm)
        self.epsilon = check_epsilon(epsilon)
        self.secure = check_secure(secure)
        if grid_bits is not None and (
            isinstance(grid_bits, bool) or not isinstance(grid_bits, int) or not 1 <= grid_bits <= 30
        ):
            raise ValueError(f"grid_bits must be None or an int in [1, 30], got {grid_bits!r}")
        self.grid_bits = grid_bits

    def _extra_config(self) -> dict[str, object]:
        cfg: dict[str, object] = {"epsilon": self.epsilon, "secure": self.secure}
        if self.secure:
            cfg["grid_bits"] = self.grid_bits
        return cfg

    def _make_plan(
        self, record_shape: tuple[int, ...], rel_shape: tuple[int, ...], n_elem: int, noise_only: bool = False
    ) -> Plan[LaplaceValues]:
        delta_w = self.domain.width
        eps_e = self._eps_element(self.epsilon, n_elem)
        params = self._common_params(n_elem, rel_shape)
        notes = [
            f"pure LDP: each released element gets Laplace noise of scale b = {fmt(delta_w)}/{fmt(eps_e)};"
            f" the record's {n_elem} elements compose to {n_elem} x {fmt(eps_e)} (all may change)",
            f"inputs are clipped to the declared domain [{self.domain.low}, {self.domain.high}] before noise",
        ]
        if not self.secure:
            b = delta_w / eps_e
            eps_true = eps_e
            params.update({"b": b, "secure": False, "sampling": FLOAT_SAMPLING})
            values = LaplaceValues(b=b)
            notes.append("float sampling path (not hardened against the floating-point attack; secure=True is)")
        else:
            check_noise_scale(self.name, {"b": delta_w / eps_e})

            def bound(target: float) -> tuple[float, LaplaceGrid, float]:
                grid = laplace_grid(self.domain, target, self.grid_bits)
                return grid.units / grid.sampler.scale + grid.sampler.epsilon_excess(grid.units), grid, target

            eps_bound, grid, _ = fit_below(eps_e, bound)
            eps_true = eps_e  # the realised bound is at most the target: the target is the (exact) claim
            excess = grid.sampler.epsilon_excess(grid.units)
            b = grid.sampler.scale * grid.gamma
            params.update(
                {
                    "b": b,
                    "epsilon_element_bound": eps_bound,
                    "secure": True,
                    "grid": grid.gamma,
                    "grid_bits": grid.units.bit_length() - 1,
                    "scale_grid_units": grid.sampler.scale,
                    "epsilon_quantisation_excess": excess,
                    "sampling": SECURE_LAPLACE_SAMPLING,
                }
            )
            values = LaplaceValues(grid=grid, b=b)
            notes.append(
                f"secure path: input snapped to a grid of {fmt(grid.gamma)}, discrete Laplace noise from integer"
                f" tables; table rounding adds at most {excess:.2g} to the per-element epsilon (included in the "
                "figures)"
            )
        return self._pure_plan(eps_true, n_elem, params, tuple(notes), values)

    def _make_coefficient_plan(self, record_shape: tuple[int, ...], layout: CoefficientLayout) -> Plan[LaplaceValues]:
        """Basis ``dct`` or ``pca``: Laplace noise of scale ``b = 2C / epsilon`` on each of the K coefficients of a
        vector clipped to L1 norm C: pure epsilon-LDP per record (L1 sensitivity 2C)."""
        k, c = layout.coefficients, layout.clip_norm
        ball = Domain(-c, c)  # the grid's width 2C is the L1 sensitivity
        params = self._coefficient_params(layout)
        notes = self._coefficient_notes(layout)
        if not self.secure:
            b = 2.0 * c / self.epsilon
            params.update({"b": b, "secure": False, "sampling": FLOAT_SAMPLING})
            values = LaplaceValues(layout=layout, b=b)
            notes.append("float sampling path (not hardened against the floating-point attack; secure=True is)")
        else:
            check_noise_scale(self.name, {"b": 2.0 * c / self.epsilon})

            def bound(target: float) -> tuple[float, LaplaceGrid, float]:
                grid = laplace_grid(ball, target, self.grid_bits)
                excess = k * grid.sampler.epsilon_excess(grid.units)  # each of the K coefficients may differ
                return grid.units / grid.sampler.scale + excess, grid, target

            eps_bound, grid, _ = fit_below(self.epsilon, bound)
            b = grid.sampler.scale * grid.gamma
            excess = grid.sampler.epsilon_excess(grid.units)
            params.update({"b": b, "epsilon_record_bound": eps_bound, "secure": True, "grid": grid.gamma,
                           "grid_bits": grid.units.bit_length() - 1, "scale_grid_units": grid.sampler.scale,
                           "epsilon_quantisation_excess": k * excess, "sampling": SECURE_LAPLACE_SAMPLING})
            values = LaplaceValues(layout=layout, grid=grid, b=b)
            notes.append(
                f"secure path: coefficients snapped toward zero onto a grid of {fmt(grid.gamma)} (their integer L1 norm"
                f" checked), discrete Laplace noise from integer tables; table rounding adds at most {k * excess:.2g}"
                " to the per-record epsilon (included in the figures)"
            )
        notes.append(f"Laplace noise of scale b = {fmt(values.b)} on each coefficient: pure LDP, epsilon"
                     f" {fmt(self.epsilon)} per record")
        g = self._guarantee(self.epsilon, 0.0, self.epsilon, 0.0, k, params, notes)
        return Plan(g, k, values)

    def _apply(self, x: torch.Tensor, plan: Plan[LaplaceValues], gen: torch.Generator) -> torch.Tensor:
        v = plan.values
        if not self.secure:
            return laplace_noise(x.shape, v.b, gen).add_(x)
        return v.secure_grid.apply(x, gen)

    def _noise(self, shape: tuple[int, ...], plan: Plan[LaplaceValues], gen: torch.Generator) -> torch.Tensor:
        v = plan.values
        if not self.secure:
            return laplace_noise(shape, v.b, gen)
        return v.secure_grid.noise(shape, gen)


#: The factory by its CLI name: ``laplace(epsilon, per=..., domain=..., reduction=..., secure=..., grid_bits=...)``.
laplace = LaplaceMechanism
