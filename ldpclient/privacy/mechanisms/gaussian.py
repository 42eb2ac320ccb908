"""The Gaussian mechanism (``--mechanism gaussian``): (epsilon, delta) per element or per record,
the discrete Gaussian on a grid by default."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import analytic_gaussian as ag
from .. import zcdp
from ..basis import CoefficientLayout
from ..guarantee import Domain
from ..pca import PcaBasis
from ..preprocess import check_delta, check_epsilon
from ..sampling import gaussian_noise
from .elementwise import DEFAULT_DELTA, FLOAT_SAMPLING, SECURE_GAUSSIAN_SAMPLING, Elementwise, Plan, PlanValues, fmt
from .grid import GaussianGrid, check_noise_scale, check_secure, fit_below, gaussian_grid
from .registry import register_mechanism


@dataclass(frozen=True, kw_only=True)
class GaussianValues(PlanValues):
    """``sigma``: the standard deviation of each element's (coefficient's) noise, domain units."""

    sigma: float

    def noise_scales(self) -> dict[str, float]:
        return {"sigma": self.sigma}


@register_mechanism("gaussian", rank=20)
class GaussianMechanism(Elementwise[GaussianValues]):
    """Gaussian noise at (epsilon, delta) per element or per record.

    ``secure=True`` (default): the discrete Gaussian on a grid (Canonne, Kamath &
    Steinke 2020), sampled with integer arithmetic only
    (:mod:`ldpclient.privacy.discrete_gaussian`). Accounting: an integer vector of L2
    sensitivity ``Δ₂`` (grid units) plus independent ``N_Z(0, s)`` is
    ``Δ₂²/(2s)``-zCDP exactly; converted to (epsilon, delta) by CKS Corollary 13
    (:mod:`ldpclient.privacy.zcdp`). The sampler's measured rounding is added (to
    epsilon, about 1e-10 nats per element, and to delta, about 1e-14).

    ``secure=False``: float64 normal noise calibrated with the analytic Gaussian
    mechanism (Balle & Wang 2018), for benchmarks.

    Either way ``per="element"`` calibrates one element of sensitivity Δ and states
    the whole record at L2 sensitivity ``Δ sqrt(I)`` and the same delta (much
    tighter than basic composition); ``per="record"`` calibrates for ``Δ sqrt(I)``.
    """

    name = "gaussian"
    coefficient_norm = "l2"

    def __init__(
        self,
        epsilon: float,
        delta: float = DEFAULT_DELTA,
        *,
        per: str | None = None,
        domain: Domain = Domain(0.0, 1.0),
        reduction: int = 1,
        secure: bool = True,
        allow_large_delta: bool = False,
        basis: str | PcaBasis = "pool",
        coefficients: int | None = None,
        clip_norm: float | None = None,
    ) -> None:
        super().__init__(per=per, domain=domain, reduction=reduction, basis=basis, coefficients=coefficients,
                         clip_norm=clip_norm)
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta, allow_large=allow_large_delta)
        self.secure = check_secure(secure)

    def _extra_config(self) -> dict[str, object]:
        return {"epsilon": self.epsilon, "delta": self.delta, "secure": self.secure}

    def _make_plan(
        self, record_shape: tuple[int, ...], rel_shape: tuple[int, ...], n_elem: int, noise_only: bool = False
    ) -> Plan[GaussianValues]:
        d = self.domain.width
        l2_rec = d * math.sqrt(n_elem)
        sigma = ag.calibrate_sigma(self.epsilon, self.delta, d if self.per == "element" else l2_rec)
        if not sigma > 0:  # the calibration underflows for absurdly small epsilons: the scale is unrepresentable
            sigma = math.inf
        check_noise_scale(self.name, {"sigma": sigma})  # the discrete Gaussian needs at least this sigma too
        if self.secure:
            return self._secure_plan(rel_shape, n_elem)
        if self.per == "element":
            eps_e = self.epsilon
            eps_r = ag.epsilon_for_sigma(sigma, self.delta, l2_rec)
        else:
            eps_r = self.epsilon
            eps_e = ag.epsilon_for_sigma(sigma, self.delta, d)
        params = self._common_params(n_elem, rel_shape)
        params.update(
            {
                "sigma": sigma,
                "delta": self.delta,
                "l2_sensitivity_record": l2_rec,
                "calibration": "analytic Gaussian (Balle & Wang 2018)",
                "secure": False,
                "sampling": FLOAT_SAMPLING,
                "basic_composition_epsilon_record": n_elem * eps_e,
                "basic_composition_delta_record": min(1.0, n_elem * self.delta),
            }
        )
        notes = (
            f"Gaussian noise sigma = {fmt(sigma)} (analytic calibration); per record the whole vector has"
            f" L2 sensitivity {fmt(d)} x sqrt({n_elem}) = {fmt(l2_rec)}, giving the exact eps = {fmt(eps_r)}"
            f" at delta = {self.delta:g}",
            f"basic composition of the {n_elem} per-element guarantees would give the looser"
            f" ({fmt(n_elem * eps_e)}, {fmt(min(1.0, n_elem * self.delta))})",
            "float sampling path (not hardened against the floating-point attack; secure=True is)",
        )
        g = self._guarantee(eps_e, self.delta, eps_r, self.delta, n_elem, params, notes)
        return Plan(g, n_elem, GaussianValues(sigma=sigma))

    def _fit_discrete_gaussian(self, domain: Domain, rho_scale: int, copies: int) -> tuple[GaussianGrid, float, float]:
        """The grid (on ``domain``) and the zCDP ``rho`` of one grid-sensitivity unit such that ``rho_scale`` of
        them, plus the sampler's rounding on ``copies`` coordinates, meet (epsilon, delta): the realised
        ``epsilon_for(rho_scale * rho, delta_ideal) + copies * excess`` and ``delta_ideal + copies * tv`` are at
        most the target. Returns ``(grid, rho, delta_ideal)``; a delta below the sampler's own bound is refused.
        """
        delta_ideal = self.delta * (1.0 - 1e-6)
        for _ in range(2):

            def bound(
                target: float, delta_ideal: float = delta_ideal
            ) -> tuple[float, tuple[GaussianGrid, float], float]:
                grid, rho = gaussian_grid(domain, zcdp.rho_for(target, delta_ideal) / rho_scale, self.name)
                eps = zcdp.epsilon_for(rho_scale * rho, delta_ideal) + copies * grid.sampler.epsilon_excess(grid.units)
                return eps, (grid, rho), target

            _, (grid, rho), _ = fit_below(self.epsilon, bound)
            spare = self.delta - (delta_ideal + copies * grid.sampler.tv_bound())
            if spare >= 0:
                return grid, rho, delta_ideal
            delta_ideal += 2.0 * spare  # the sampler's TV did not fit in the 1e-6 margin: make room
            if delta_ideal <= 0:
                tv = grid.sampler.tv_bound() * copies
                raise ValueError(
                    f"delta {self.delta:g} is below what the secure Gaussian sampler can guarantee (its own "
                    f"total-variation bound is {tv:.3g}); choose a delta of at least {2 * tv:.3g}, or secure=False "
                    "(--no-secure)"
                )
        # pragma: no cover
        raise ValueError(f"{self.name}: could not fit the sampler's rounding below delta={self.delta}")

    def _secure_plan(self, rel_shape: tuple[int, ...], n_elem: int) -> Plan[GaussianValues]:
        """Discrete Gaussian: fit the grid variance so the realised figure (with sampler excess) meets the target."""
        scale = 1 if self.per == "element" else n_elem  # the target is stated for 1 or for all I elements

        def realised(grid: GaussianGrid, rho_e: float, delta_ideal: float) -> tuple[float, float, float, float]:
            excess, tv = grid.sampler.epsilon_excess(grid.units), grid.sampler.tv_bound()
            eps_e = zcdp.epsilon_for(rho_e, delta_ideal) + excess
            eps_r = zcdp.epsilon_for(n_elem * rho_e, delta_ideal) + n_elem * excess
            return eps_e, delta_ideal + tv, eps_r, delta_ideal + n_elem * tv

        grid, rho_e, delta_ideal = self._fit_discrete_gaussian(self.domain, scale, scale)
        eps_e, delta_e, eps_r, delta_r = realised(grid, rho_e, delta_ideal)
        # the realised figures are at most the target: state the target (an exact claim)
        if scale == 1:
            eps_e, delta_e = self.epsilon, self.delta
        else:
            eps_r, delta_r = self.epsilon, self.delta
        sampler = grid.sampler
        sigma = sampler.sigma * grid.gamma
        params = self._common_params(n_elem, rel_shape)
        params.update(
            {
                "sigma": sigma,
                "delta": self.delta,
                "l2_sensitivity_record": self.domain.width * math.sqrt(n_elem),
                "calibration": "discrete Gaussian, zCDP (CKS 2020 Thm 4) converted by CKS Cor 13",
                "rho_element": rho_e,
                "rho_record": n_elem * rho_e,
                "secure": True,
                "grid": grid.gamma,
                "grid_bits": int(grid.units).bit_length() - 1,
                "variance_grid_units": sampler.s,
                "epsilon_quantisation_excess": sampler.epsilon_excess(grid.units),
                "delta_sampler_tv": sampler.tv_bound(),
                "sampling": SECURE_GAUSSIAN_SAMPLING,
            }
        )
        notes = (
            f"discrete Gaussian noise, sigma = {fmt(sigma)} ({sampler.s} grid units² on a grid of {fmt(grid.gamma)});"
            f" {fmt(rho_e)}-zCDP per element, {fmt(n_elem * rho_e)}-zCDP per record (L2 sensitivity"
            f" {fmt(self.domain.width)} x sqrt({n_elem})), converted to (epsilon, delta) by CKS 2020 Cor 13",
            f"secure integer sampling; table rounding adds at most {sampler.epsilon_excess(grid.units):.3g} nats and"
            f" {sampler.tv_bound():.3g} delta per element (included in the figures)",
            f"inputs are clipped to the declared domain [{self.domain.low}, {self.domain.high}] and snapped to the "
            "grid",
        )
        g = self._guarantee(eps_e, delta_e, eps_r, delta_r, n_elem, params, notes)
        return Plan(g, n_elem, GaussianValues(grid=grid, sigma=sigma))

    def _make_coefficient_plan(self, record_shape: tuple[int, ...], layout: CoefficientLayout) -> Plan[GaussianValues]:
        """Basis ``dct`` or ``pca``: Gaussian noise on each of the K coefficients of a vector clipped to L2 norm C, at
        (epsilon, delta) per record for the L2 sensitivity 2C (secure: discrete Gaussian, zCDP, CKS Cor 13)."""
        k, c = layout.coefficients, layout.clip_norm
        params = self._coefficient_params(layout)
        notes = self._coefficient_notes(layout)
        params["delta"] = self.delta
        sigma = ag.calibrate_sigma(self.epsilon, self.delta, 2.0 * c)
        check_noise_scale(self.name, {"sigma": sigma if sigma > 0 else math.inf})
        if not self.secure:
            params.update({"sigma": sigma, "calibration": "analytic Gaussian (Balle & Wang 2018)", "secure": False,
                           "sampling": FLOAT_SAMPLING})
            notes.append(f"Gaussian noise sigma = {fmt(sigma)} on each coefficient (analytic calibration to L2"
                         f" sensitivity {fmt(2 * c)})")
            notes.append("float sampling path (not hardened against the floating-point attack; secure=True is)")
            g = self._guarantee(self.epsilon, self.delta, self.epsilon, self.delta, k, params, notes)
            return Plan(g, k, GaussianValues(layout=layout, sigma=sigma))
        ball = Domain(-c, c)  # the grid's width 2C is the L2 sensitivity, in grid units ``grid.units``
        grid, rho, delta_ideal = self._fit_discrete_gaussian(ball, 1, k)  # each of the K coefficients may differ
        eps_bound = zcdp.epsilon_for(rho, delta_ideal) + k * grid.sampler.epsilon_excess(grid.units)
        delta_bound = delta_ideal + k * grid.sampler.tv_bound()
        sampler = grid.sampler
        sigma = sampler.sigma * grid.gamma
        params.update(
            {
                "sigma": sigma,
                "calibration": "discrete Gaussian, zCDP (CKS 2020 Thm 4) converted by CKS Cor 13",
                "rho_record": rho,
                "epsilon_record_bound": eps_bound,
                "delta_record_bound": delta_bound,
                "secure": True,
                "grid": grid.gamma,
                "grid_bits": int(grid.units).bit_length() - 1,
                "variance_grid_units": sampler.s,
                "epsilon_quantisation_excess": k * sampler.epsilon_excess(grid.units),
                "delta_sampler_tv": k * sampler.tv_bound(),
                "sampling": SECURE_GAUSSIAN_SAMPLING,
            }
        )
        notes.append(
            f"discrete Gaussian noise, sigma = {fmt(sigma)} on each coefficient (snapped toward zero onto a grid of"
            f" {fmt(grid.gamma)}, integer L2 norm checked): {fmt(rho)}-zCDP per record, converted to (epsilon, delta)"
            f" by CKS 2020 Cor 13; the sampler's rounding over {k} coefficients is included"
        )
        g = self._guarantee(self.epsilon, self.delta, self.epsilon, self.delta, k, params, notes)
        return Plan(g, k, GaussianValues(layout=layout, grid=grid, sigma=sigma))

    def _apply(self, x: torch.Tensor, plan: Plan[GaussianValues], gen: torch.Generator) -> torch.Tensor:
        if self.secure:
            return plan.values.secure_grid.apply(x, gen)
        return x + gaussian_noise(x.shape, plan.values.sigma, gen)

    def _noise(self, shape: tuple[int, ...], plan: Plan[GaussianValues], gen: torch.Generator) -> torch.Tensor:
        if self.secure:
            return plan.values.secure_grid.noise(shape, gen)
        return gaussian_noise(shape, plan.values.sigma, gen)


#: The factory by its CLI name: ``gaussian(epsilon, delta=1e-5, per=..., domain=..., reduction=..., secure=...)``.
gaussian = GaussianMechanism
