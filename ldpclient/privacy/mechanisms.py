"""LDP mechanisms over batches ``(N, *record_shape)``: Laplace, Gaussian, TLDP, weighted TLDP, discrete TLDP.

Every mechanism follows the same path in :meth:`release`: validate (NaN/inf,
empty, shape), clip to the declared :class:`~ldpclient.privacy.Domain` (counted per
record in ``Release.clipped_elements``), optionally average-pool by the integer
``reduction`` over the last two axes (data-independent, before noise), noise every
released element independently, and return a :class:`~ldpclient.privacy.Release`
whose :class:`~ldpclient.privacy.Guarantee` states epsilon/delta per element and
per record. Values are computed in float64 and released as float32.

Units: ``epsilon`` is per released element (``per="element"``, as the papers use
it) or per record (``per="record"``: the mechanism solves for the per-element
parameter). ``I`` is the number of released elements of one record (after
reduction). Sensitivity is ``Δ = domain.high - domain.low`` per element.

Which randomness path each mechanism uses (see :mod:`ldpclient.privacy.sampling`):

* secure integer path, the default of every factory: ``laplace``, ``gaussian``,
  ``tldp_laplace``, ``tldp_gaussian`` and ``weighted_tldp`` (``secure=True``), and
  ``discrete_tldp`` (always);
* float path: the same factories with ``secure=False`` (benchmarks; open to the
  floating-point attack).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from . import analytic_gaussian as ag
from . import discrete as dsc
from . import zcdp
from .base import Mechanism
from .discrete_gaussian import MAX_VARIANCE_UNITS, discrete_gaussian_sampler
from .guarantee import Domain, Guarantee
from .preprocess import (
    check_delta,
    check_domain,
    check_epsilon,
    check_per,
    check_probability,
    check_reduction,
    check_weights,
    elements,
    prepare,
    released_shape,
)
from .release import _RELEASE_TOKEN, Release
from .sampling import (
    DiscreteLaplaceSampler,
    bernoulli_positions,
    discrete_laplace_sampler,
    gaussian_noise,
    laplace_noise,
    make_generator,
)

#: How each path draws its noise (``Guarantee.params["sampling"]``; reports show it for every run).
FLOAT_SAMPLING = "float64 (not hardened against the floating-point attack)"
SECURE_LAPLACE_SAMPLING = "secure: integer discrete Laplace on a grid"
SECURE_GAUSSIAN_SAMPLING = "secure: integer discrete Gaussian on a grid"

_TINY = math.ulp(0.0)  # 5e-324: reported instead of a positive delta that underflows float64
DEFAULT_DELTA = 1e-5


def _exp_up(log_x: float) -> float:
    """exp(log_x) as a float that never rounds a positive value down to 0."""
    if log_x == -math.inf:
        return 0.0
    return max(math.exp(log_x), _TINY)


def _logaddexp(a: float, b: float) -> float:
    m = max(a, b)
    return m + math.log(math.exp(a - m) + math.exp(b - m))


def _fmt(x: float) -> str:
    return f"{x:.4g}"


@dataclass
class _Plan:
    """Shape-dependent parameters of one mechanism for one record shape."""

    guarantee: Guarantee
    elements: int
    values: dict[str, Any] = field(default_factory=dict)


#: Largest noise scale (domain units) a release can carry: noised values are stored as float32
#: (max about 3.4e38), and a draw may reach about 50 scales. Beyond it the release would hold inf.
MAX_NOISE_SCALE = 1e30
#: Largest grid resolution (bits) of the secure path: a grid of Δ / 2**20.
MAX_GRID_BITS = 20


def _check_noise_scale(name: str, values: dict[str, Any]) -> None:
    """Refuse, before any sampling or charge, a calibration whose noise cannot be represented."""
    for key in ("b", "sigma"):
        scale = values.get(key)
        if scale is not None and not (math.isfinite(float(scale)) and float(scale) <= MAX_NOISE_SCALE):
            raise ValueError(
                f"{name}: this epsilon gives a noise scale {key} = {float(scale):.3g} (domain units), too large for "
                f"a release to hold (limit {MAX_NOISE_SCALE:.0e}); choose a larger --epsilon"
            )


@dataclass(frozen=True)
class _Grid:
    """The secure path's lattice: values ``low + j * gamma`` (j an int), integer noise in grid units.

    ``units``: the per-element sensitivity in grid units (``Δ / gamma``, a power of two);
    ``sampler``: a secure integer sampler (``.sample(shape, generator)`` -> int64).
    """

    low: float
    gamma: float
    units: int
    sampler: Any

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


def _grid_of(values: dict[str, Any]) -> _Grid:
    """The secure grid a plan holds (``values["grid"]``), typed."""
    grid: _Grid = values["grid"]
    return grid


def _check_secure(secure: object) -> bool:
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


def _gaussian_grid(domain: Domain, rho_element: float, name: str) -> tuple[_Grid, float]:
    """Grid and discrete Gaussian sampler giving at most ``rho_element``-zCDP per element; returns (grid, realised rho)."""
    bits = grid_bits_for(1.0 / math.sqrt(2.0 * rho_element))
    units = 1 << bits
    variance = math.ceil(units * units / (2.0 * rho_element))
    if variance > MAX_VARIANCE_UNITS:
        raise ValueError(
            f"{name}: this epsilon needs a noise scale of {math.sqrt(variance) / units:.3g} x the domain width,"
            " beyond the secure discrete Gaussian sampler's range; choose a larger epsilon (or secure=False)"
        )
    grid = _Grid(domain.low, domain.width / units, units, discrete_gaussian_sampler(variance))
    return grid, units * units / (2.0 * variance)


def _laplace_grid(domain: Domain, eps_element: float, grid_bits: int | None) -> _Grid:
    """Grid and secure discrete Laplace sampler of scale ``units / eps_element`` grid units (no fitting).

    ``grid_bits=None``: :func:`grid_bits_for` the scale ``b = Δ / eps_element``.
    """
    units = 1 << (grid_bits if grid_bits is not None else grid_bits_for(1.0 / eps_element))
    return _Grid(domain.low, domain.width / units, units, discrete_laplace_sampler(units / eps_element))


class _Elementwise(Mechanism):
    """Shared release path: validate, clip, reduce, noise each element; float64 inside, float32 out."""

    name = "abstract"

    def __init__(self, *, per: str, domain: Domain, reduction: int) -> None:
        self.per = check_per(per)
        self.domain = check_domain(domain)
        self.reduction = check_reduction(reduction)
        self.round_inputs = False  # integer domains: refuse non-integer floats unless a mechanism opts in
        self._plans: dict[tuple[Any, ...], _Plan] = {}

    # -- subclasses ---------------------------------------------------------------------------
    def _guarantee(
        self,
        eps_e: float,
        delta_e: float,
        eps_r: float,
        delta_r: float,
        n_elem: int,
        params: dict[str, Any],
        notes: Sequence[str],
    ) -> Guarantee:
        """The guarantee of one release: epsilon (nats) and delta per element and per record of ``n_elem``."""
        return Guarantee(
            mechanism=self.name,
            epsilon_element=eps_e,
            delta_element=delta_e,
            epsilon_record=eps_r,
            delta_record=delta_r,
            elements_per_record=n_elem,
            domain=self.domain,
            params=params,
            notes=tuple(notes),
        )

    def _make_plan(
        self, record_shape: tuple[int, ...], rel_shape: tuple[int, ...], n_elem: int, noise_only: bool = False
    ) -> _Plan:
        """Parameters and guarantee for one record shape (``noise_only``: element parameters suffice)."""
        raise NotImplementedError

    def _apply(self, x: torch.Tensor, plan: _Plan, gen: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def _noise(self, shape: tuple[int, ...], plan: _Plan, gen: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def _extra_config(self) -> dict[str, Any]:
        return {}

    # -- Mechanism API ------------------------------------------------------------------------
    def _plan(self, record_shape: Sequence[int]) -> _Plan:
        key = tuple(int(s) for s in record_shape)
        plan = self._plans.get(key)
        if plan is None:
            rel = released_shape(key, self.reduction)
            plan = self._make_plan(key, rel, elements(rel))
            _check_noise_scale(self.name, plan.values)
            self._plans[key] = plan
        return plan

    def guarantee(self, record_shape: Sequence[int]) -> Guarantee:
        """Cost of releasing one record of ``record_shape`` (before reduction) once; no sampling."""
        return self._plan(record_shape).guarantee

    def release(
        self,
        records: torch.Tensor,
        *,
        generator: torch.Generator | None = None,
        public: bool = False,
    ) -> Release:
        """Noise a batch ``(N, *record_shape)`` in the domain's units; returns a float32 Release.

        ``generator=None`` draws from a fresh generator seeded by the OS CSPRNG.
        ``public=True``: same noise, guarantee of a public input (epsilon 0).
        """
        x, clipped, record_shape = prepare(records, self.domain, self.reduction, round_inputs=self.round_inputs)
        plan = self._plan(record_shape)
        gen = make_generator(generator)
        y = self._apply(x, plan, gen)
        g = plan.guarantee.for_public_input() if public else plan.guarantee
        return Release(
            y.to(torch.float32),
            g,
            record_shape,
            reduction=self.reduction,
            clipped_elements=clipped,
            _token=_RELEASE_TOKEN,
        )

    def noise(
        self,
        shape: Sequence[int],
        *,
        generator: torch.Generator | None = None,
        elements_per_record: int | None = None,
    ) -> torch.Tensor:
        """Fresh noise of the noising branch (float32, ``shape`` = ``(Q, *released_shape)``).

        For LDPKiT-Rand (post-processing of a release). With ``per="record"`` the
        per-element scale depends on I, taken as ``prod(shape[1:])`` unless
        ``elements_per_record`` is given (pass it when the rows were upsampled).
        """
        shape = tuple(int(s) for s in shape)
        if len(shape) < 2 or any(s <= 0 for s in shape):
            raise ValueError(f"noise shape must be (Q, *released_shape) with positive sizes, got {shape}")
        n_elem = elements(shape[1:]) if elements_per_record is None else int(elements_per_record)
        if n_elem < 1:
            raise ValueError(f"elements_per_record must be >= 1, got {elements_per_record!r}")
        plan = self._plan_for_elements(n_elem)
        return self._noise(shape, plan, make_generator(generator)).to(torch.float32)

    def _plan_for_elements(self, n_elem: int) -> _Plan:
        # The noising branch depends only on I (not on weights or the spatial layout). Cached:
        # LDPKiT-Rand asks for noise once per query, and calibration (e.g. analytic Gaussian) is costly.
        key = ("noise", n_elem)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._make_plan((n_elem,), (n_elem,), n_elem, noise_only=True)
        return plan

    def config(self) -> dict[str, Any]:
        """JSON-serialisable parameters (ledger key, reports)."""
        cfg = {"name": self.name, "per": self.per, "domain": self.domain.as_dict(), "reduction": self.reduction}
        cfg.update(self._extra_config())
        return cfg

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.config().items() if k != "name")
        return f"{type(self).__name__}({inner})"

    # -- helpers ------------------------------------------------------------------------------
    def _eps_element(self, epsilon: float, n_elem: int) -> float:
        return epsilon if self.per == "element" else epsilon / n_elem

    def _pure_plan(
        self, eps_element: float, n_elem: int, params: dict[str, Any], notes: tuple[str, ...], values: dict[str, Any]
    ) -> _Plan:
        """Plan of a pure-LDP mechanism: delta 0, the record's n_elem elements compose to n_elem x eps."""
        g = Guarantee(
            mechanism=self.name,
            epsilon_element=eps_element,
            delta_element=0.0,
            epsilon_record=n_elem * eps_element,
            delta_record=0.0,
            elements_per_record=n_elem,
            domain=self.domain,
            params=params,
            notes=notes,
        )
        return _Plan(g, n_elem, values)

    def _common_params(self, n_elem: int, rel_shape: tuple[int, ...]) -> dict[str, Any]:
        return {
            "per": self.per,
            "sensitivity": self.domain.width,
            "reduction": self.reduction,
            "released_shape": list(rel_shape),
            "released_elements": n_elem,
        }


# ---------------------------------------------------------------------------------------------
# Laplace
# ---------------------------------------------------------------------------------------------


class LaplaceMechanism(_Elementwise):
    """Laplace noise, scale ``b = Δ / eps_elem`` per element: pure eps_elem-LDP per element,
    ``I * eps_elem`` per record (exact: all I elements may change).

    ``secure=True`` (default) snaps the clipped input to the grid ``gamma = Δ / 2**grid_bits``
    and adds ``gamma`` times discrete Laplace noise of scale ``b / gamma`` drawn on the
    secure integer path; the grid sensitivity is exactly ``2**grid_bits`` units.
    ``grid_bits=None`` (default) picks about 512-1024 grid steps per b (:func:`grid_bits_for`).
    ``secure=False``: float64 inverse-CDF sampling (for benchmarks; open to the floating-point attack).
    """

    name = "laplace"

    def __init__(
        self,
        epsilon: float,
        *,
        per: str = "element",
        domain: Domain = Domain(0.0, 1.0),
        reduction: int = 1,
        secure: bool = True,
        grid_bits: int | None = None,
    ) -> None:
        super().__init__(per=per, domain=domain, reduction=reduction)
        self.epsilon = check_epsilon(epsilon)
        self.secure = _check_secure(secure)
        if grid_bits is not None and (
            isinstance(grid_bits, bool) or not isinstance(grid_bits, int) or not 1 <= grid_bits <= 30
        ):
            raise ValueError(f"grid_bits must be None or an int in [1, 30], got {grid_bits!r}")
        self.grid_bits = grid_bits

    def _extra_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"epsilon": self.epsilon, "secure": self.secure}
        if self.secure:
            cfg["grid_bits"] = self.grid_bits
        return cfg

    def _make_plan(
        self, record_shape: tuple[int, ...], rel_shape: tuple[int, ...], n_elem: int, noise_only: bool = False
    ) -> _Plan:
        delta_w = self.domain.width
        eps_e = self._eps_element(self.epsilon, n_elem)
        params = self._common_params(n_elem, rel_shape)
        notes = [
            f"pure LDP: each released element gets Laplace noise of scale b = {_fmt(delta_w)}/{_fmt(eps_e)};"
            f" the record's {n_elem} elements compose to {n_elem} x {_fmt(eps_e)} (all may change)",
            f"inputs are clipped to the declared domain [{self.domain.low}, {self.domain.high}] before noise",
        ]
        values: dict[str, Any] = {}
        if not self.secure:
            b = delta_w / eps_e
            eps_true = eps_e
            params.update({"b": b, "secure": False, "sampling": FLOAT_SAMPLING})
            values["b"] = b
            notes.append("float sampling path (not hardened against the floating-point attack; secure=True is)")
        else:
            _check_noise_scale(self.name, {"b": delta_w / eps_e})

            def bound(target: float) -> tuple[float, _Grid, float]:
                grid = _laplace_grid(self.domain, target, self.grid_bits)
                return grid.units / grid.sampler.scale + grid.sampler.epsilon_excess(grid.units), grid, target

            eps_bound, grid, _ = _fit_below(eps_e, bound)
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
            values.update({"grid": grid, "b": b})
            notes.append(
                f"secure path: input snapped to a grid of {_fmt(grid.gamma)}, discrete Laplace noise from integer"
                f" tables; table rounding adds at most {excess:.3g} nats per element (included in the figures)"
            )
        return self._pure_plan(eps_true, n_elem, params, tuple(notes), values)

    def _apply(self, x: torch.Tensor, plan: _Plan, gen: torch.Generator) -> torch.Tensor:
        v = plan.values
        if not self.secure:
            return laplace_noise(x.shape, v["b"], gen).add_(x)
        return _grid_of(v).apply(x, gen)

    def _noise(self, shape: tuple[int, ...], plan: _Plan, gen: torch.Generator) -> torch.Tensor:
        v = plan.values
        if not self.secure:
            return laplace_noise(shape, v["b"], gen)
        return _grid_of(v).noise(shape, gen)


def _fit_below(target: float, bound: Callable[[float], tuple[float, Any, float]]) -> tuple[float, Any, float]:
    """Shrink the parameter target until the rigorous bound (ideal + rounding excess) is <= target."""
    t = target
    for _ in range(8):
        eps, obj, used = bound(t)
        if eps <= target:
            return eps, obj, used
        t = t - (eps - target) * 1.5 - target * 1e-15
    raise ValueError(f"could not fit the secure sampler's rounding excess below epsilon={target}")  # pragma: no cover


# ---------------------------------------------------------------------------------------------
# Gaussian
# ---------------------------------------------------------------------------------------------


class GaussianMechanism(_Elementwise):
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

    def __init__(
        self,
        epsilon: float,
        delta: float = DEFAULT_DELTA,
        *,
        per: str = "element",
        domain: Domain = Domain(0.0, 1.0),
        reduction: int = 1,
        secure: bool = True,
        allow_large_delta: bool = False,
    ) -> None:
        super().__init__(per=per, domain=domain, reduction=reduction)
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta, allow_large=allow_large_delta)
        self.secure = _check_secure(secure)

    def _extra_config(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta, "secure": self.secure}

    def _make_plan(
        self, record_shape: tuple[int, ...], rel_shape: tuple[int, ...], n_elem: int, noise_only: bool = False
    ) -> _Plan:
        d = self.domain.width
        l2_rec = d * math.sqrt(n_elem)
        sigma = ag.calibrate_sigma(self.epsilon, self.delta, d if self.per == "element" else l2_rec)
        if not sigma > 0:  # the calibration underflows for absurdly small epsilons: the scale is unrepresentable
            sigma = math.inf
        _check_noise_scale(self.name, {"sigma": sigma})  # the discrete Gaussian needs at least this sigma too
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
            f"Gaussian noise sigma = {_fmt(sigma)} (analytic calibration); per record the whole vector has"
            f" L2 sensitivity {_fmt(d)} x sqrt({n_elem}) = {_fmt(l2_rec)}, giving the exact eps = {_fmt(eps_r)}"
            f" at delta = {self.delta:g}",
            f"basic composition of the {n_elem} per-element guarantees would give the looser"
            f" ({_fmt(n_elem * eps_e)}, {_fmt(min(1.0, n_elem * self.delta))})",
            "float sampling path (not hardened against the floating-point attack; secure=True is)",
        )
        g = self._guarantee(eps_e, self.delta, eps_r, self.delta, n_elem, params, notes)
        return _Plan(g, n_elem, {"sigma": sigma})

    def _secure_plan(self, rel_shape: tuple[int, ...], n_elem: int) -> _Plan:
        """Discrete Gaussian: fit the grid variance so the realised figure (with sampler excess) meets the target."""
        scale = 1 if self.per == "element" else n_elem  # the target is stated for 1 or for all I elements

        def realised(grid: _Grid, rho_e: float, delta_ideal: float) -> tuple[float, float, float, float]:
            excess, tv = grid.sampler.epsilon_excess(grid.units), grid.sampler.tv_bound()
            eps_e = zcdp.epsilon_for(rho_e, delta_ideal) + excess
            eps_r = zcdp.epsilon_for(n_elem * rho_e, delta_ideal) + n_elem * excess
            return eps_e, delta_ideal + tv, eps_r, delta_ideal + n_elem * tv

        delta_ideal = self.delta * (1.0 - 1e-6)
        for _ in range(2):

            def bound(target: float, delta_ideal: float = delta_ideal) -> tuple[float, Any, float]:
                grid, rho_e = _gaussian_grid(self.domain, zcdp.rho_for(target, delta_ideal) / scale, self.name)
                figures = realised(grid, rho_e, delta_ideal)
                return figures[0] if scale == 1 else figures[2], (grid, rho_e), target

            _, (grid, rho_e), _ = _fit_below(self.epsilon, bound)
            eps_e, delta_e, eps_r, delta_r = realised(grid, rho_e, delta_ideal)
            spare = self.delta - (delta_e if scale == 1 else delta_r)
            if spare >= 0:  # the realised figures are at most the target: state the target (an exact claim)
                if scale == 1:
                    eps_e, delta_e = self.epsilon, self.delta
                else:
                    eps_r, delta_r = self.epsilon, self.delta
                break
            delta_ideal += 2.0 * spare  # the sampler's TV did not fit in the 1e-6 margin: make room
            if delta_ideal <= 0:
                tv = grid.sampler.tv_bound() * (1 if scale == 1 else n_elem)
                raise ValueError(
                    f"delta {self.delta:g} is below what the secure Gaussian sampler can guarantee (its own "
                    f"total-variation bound is {tv:.3g}); choose a delta of at least {2 * tv:.3g}, or secure=False (--no-secure)"
                )
        else:  # pragma: no cover - defensive
            raise ValueError(f"{self.name}: could not fit the sampler's rounding below delta={self.delta}")
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
            f"discrete Gaussian noise, sigma = {_fmt(sigma)} ({sampler.s} grid units² on a grid of {_fmt(grid.gamma)});"
            f" {_fmt(rho_e)}-zCDP per element, {_fmt(n_elem * rho_e)}-zCDP per record (L2 sensitivity"
            f" {_fmt(self.domain.width)} x sqrt({n_elem})), converted to (epsilon, delta) by CKS 2020 Cor 13",
            f"secure integer sampling; table rounding adds at most {sampler.epsilon_excess(grid.units):.3g} nats and"
            f" {sampler.tv_bound():.3g} delta per element (included in the figures)",
            f"inputs are clipped to the declared domain [{self.domain.low}, {self.domain.high}] and snapped to the grid",
        )
        g = self._guarantee(eps_e, delta_e, eps_r, delta_r, n_elem, params, notes)
        return _Plan(g, n_elem, {"grid": grid, "sigma": sigma})

    def _apply(self, x: torch.Tensor, plan: _Plan, gen: torch.Generator) -> torch.Tensor:
        if self.secure:
            return _grid_of(plan.values).apply(x, gen)
        return x + gaussian_noise(x.shape, plan.values["sigma"], gen)

    def _noise(self, shape: tuple[int, ...], plan: _Plan, gen: torch.Generator) -> torch.Tensor:
        if self.secure:
            return _grid_of(plan.values).noise(shape, gen)
        return gaussian_noise(shape, plan.values["sigma"], gen)


# ---------------------------------------------------------------------------------------------
# TLDP (published) and weighted TLDP
# ---------------------------------------------------------------------------------------------


class TLDPMechanism(_Elementwise):
    """TLDP exactly as published: keep each element with probability p, else add Laplace/Gaussian noise.

    Laplace base: ``b = Δ/eps``, ``p = e^(eps - IΔ/b) / (2b + e^(eps - IΔ/b))``.
    Gaussian base: ``sigma² = Δ²/(2 eps)``, ``p = e^(eps - IΔ²/(2σ²)) / (σ sqrt(2π) + e^(eps - IΔ²/(2σ²)))``.
    ``eps`` is the paper's per-element epsilon (``per="record"``: eps_record / I).
    With ``weights`` (H, W) in [0, 1] (weighted TLDP) element e keeps with
    ``p_e = p (1 - w_e)``; weights are average-pooled with the record and broadcast
    across channels.

    The guarantee reports the truth, not the paper's pure eps: a kept element is a
    point mass, so per element the Laplace version is ``(Δ/b, p_max)``-LDP and per
    record ``(I Δ/b, 1 - prod_e (1 - p_e))``; the Gaussian version is
    ``(eps_G, p + (1-p) delta)`` per element and ``(eps_G,rec, q + (1-q) delta)`` per
    record, eps_G being the Gaussian epsilon of sigma at ``delta`` (zCDP conversion of the
    discrete Gaussian on the secure path, analytic Gaussian on the float path).
    p is computed in log space (it underflows for real images; ``params["log_p"]``).
    ``p=`` replaces the published keep probability (audits, reproductions); the
    guarantee is recomputed from it. ``weights`` may be given at the record's spatial
    resolution or at the released one (after ``reduction``).

    ``secure=True`` (default): the noise is integer discrete Laplace/Gaussian on a grid
    of about b/1000 or sigma/1000 (:func:`grid_bits_for`), a kept element is
    released snapped to that grid; ``secure=False``: float64 noise (benchmarks).
    """

    def __init__(
        self,
        epsilon: float,
        *,
        base: str = "laplace",
        delta: float = DEFAULT_DELTA,
        weights: object | None = None,
        p: float | None = None,
        per: str = "element",
        domain: Domain = Domain(0.0, 1.0),
        reduction: int = 1,
        secure: bool = True,
        allow_large_delta: bool = False,
    ) -> None:
        super().__init__(per=per, domain=domain, reduction=reduction)
        self.epsilon = check_epsilon(epsilon)
        if base not in ("laplace", "gaussian"):
            raise ValueError(f"TLDP base must be 'laplace' or 'gaussian', got {base!r}")
        self.base = base
        self.delta = check_delta(delta, allow_large=allow_large_delta)
        self.p = None if p is None else check_probability(p, "p")
        self.secure = _check_secure(secure)
        self.weights = None if weights is None else check_weights(weights)
        if self.weights is not None:
            self.name = "tldp-weighted"
        else:
            self.name = f"tldp-{base}"

    def _extra_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"epsilon": self.epsilon, "base": self.base, "secure": self.secure}
        if self.base == "gaussian":
            cfg["delta"] = self.delta
        if self.p is not None:
            cfg["p"] = self.p
        if self.weights is not None:
            w = self.weights.contiguous()
            cfg["weights_shape"] = list(w.shape)
            cfg["weights_sha256"] = hashlib.sha256(w.numpy().tobytes()).hexdigest()
        return cfg

    def _make_plan(
        self, record_shape: tuple[int, ...], rel_shape: tuple[int, ...], n_elem: int, noise_only: bool = False
    ) -> _Plan:
        """Plan of one record shape: noise scale, keep probabilities (log space) and the guarantee (nats, per element/record)."""
        eps_e = self._eps_element(self.epsilon, n_elem)
        log_p, scale, grid, rho_e = self._calibrate(eps_e, n_elem)
        log_p_published = log_p
        if self.p is not None:
            log_p = math.log(self.p) if self.p > 0 else -math.inf
        log_p_max, log_q, thin, w_info = self._keep_probabilities(log_p, record_shape, n_elem, noise_only)
        params, excess, tv = self._plan_params(
            n_elem, rel_shape, eps_e, scale, grid, (log_p, log_p_published, log_p_max, log_q), w_info
        )
        figures = self._figures(n_elem, scale, grid, rho_e, excess, tv, _exp_up(log_p_max), _exp_up(log_q), params)
        eps_elem, delta_elem, eps_rec, delta_rec, mix = figures
        notes = self._plan_notes(n_elem, log_p, log_p_published, log_p_max, grid, excess, mix)
        g = self._guarantee(eps_elem, delta_elem, eps_rec, delta_rec, n_elem, params, notes)
        values: dict[str, Any] = dict(scale)
        values.update({"log_p_max": log_p_max, "thin": thin, "grid": grid})
        return _Plan(g, n_elem, values)

    def _calibrate(self, eps_e: float, n_elem: int) -> tuple[float, dict[str, Any], _Grid | None, float]:
        """Published per-element noise scale and log keep probability (nats); returns (log p, scale, grid, rho_e)."""
        d = self.domain.width
        expo = eps_e - n_elem * eps_e  # eps - I Δ/b (Laplace) = eps - I Δ²/(2σ²) (Gaussian) = eps (1 - I)
        grid: _Grid | None = None
        rho_e = eps_e  # Gaussian base: Δ²/(2σ²) with the published σ² = Δ²/(2 eps)
        if self.base == "laplace":
            b = d / eps_e
            log_p = expo - _logaddexp(math.log(2.0 * b), expo)
            if self.secure:
                _check_noise_scale(self.name, {"b": b})
                grid = _laplace_grid(self.domain, eps_e, None)
                b = grid.sampler.scale * grid.gamma
            scale: dict[str, Any] = {"b": b}
        else:
            sigma = d / math.sqrt(2.0 * eps_e)
            log_p = expo - _logaddexp(math.log(sigma * math.sqrt(2.0 * math.pi)), expo)
            if self.secure:
                _check_noise_scale(self.name, {"sigma": sigma})
                grid, rho_e = _gaussian_grid(self.domain, eps_e, self.name)
                sigma = grid.sampler.sigma * grid.gamma
            scale = {"sigma": sigma}
        return log_p, scale, grid, rho_e

    def _keep_probabilities(
        self, log_p: float, record_shape: tuple[int, ...], n_elem: int, noise_only: bool
    ) -> tuple[float, float, torch.Tensor | None, dict[str, Any]]:
        """Per-element keep probabilities of one released record, log space: (log p_max, log q per record, thin, info)."""
        thin = None
        w_info: dict[str, Any] = {}
        log_q: float | None
        if self.weights is None or noise_only:
            log_p_max = log_p
            log_q = log_p + math.log(n_elem) if log_p + math.log(n_elem) < math.log(1e-8) else None
            sum_log1m = n_elem * math.log1p(-math.exp(log_p))
        else:
            w_rel = check_weights(self.weights, record_shape, self.reduction)
            channels = n_elem // w_rel.numel()
            w_min = float(w_rel.min())
            log_p_max = -math.inf if w_min >= 1.0 else log_p + math.log1p(-w_min)
            one_minus = (1.0 - w_rel).reshape(-1)
            if log_p_max > -math.inf:
                thin = one_minus / (1.0 - w_min)  # period h*w: index % (h*w) is the spatial position
            # sum_e p_e = p * C * sum(1 - w); log space
            s = float(one_minus.sum()) * channels
            log_sum_p = -math.inf if s == 0.0 else log_p + math.log(s)
            log_q = log_sum_p if log_sum_p < math.log(1e-8) else None
            p_lin = math.exp(log_p)
            sum_log1m = channels * float(torch.log1p(-(p_lin * one_minus)).sum())
            w_info = {
                "weights_min": w_min,
                "weights_max": float(w_rel.max()),
                "weights_mean": float(w_rel.mean()),
                "weights_released_shape": list(w_rel.shape),
            }
        if log_q is None:
            # 1 - prod(1 - p_e), representable: compute exactly from sum log1p(-p_e).
            q = -math.expm1(sum_log1m)
            log_q = math.log(q) if q > 0 else -math.inf
        return log_p_max, log_q, thin, w_info

    def _plan_params(
        self,
        n_elem: int,
        rel_shape: tuple[int, ...],
        eps_e: float,
        scale: dict[str, Any],
        grid: _Grid | None,
        log_ps: tuple[float, float, float, float],
        w_info: dict[str, Any],
    ) -> tuple[dict[str, Any], float, float]:
        """Guarantee params (log_ps: log p, published log p, log p_max, log q; per element except q); returns (params, excess nats, tv)."""
        log_p, log_p_published, log_p_max, log_q = log_ps
        params = self._common_params(n_elem, rel_shape)
        params.update(scale)
        params.update(
            {
                "base": self.base,
                "epsilon_paper": eps_e,
                "log_p": log_p,
                "p": math.exp(log_p),
                "p_source": "published formula" if self.p is None else "set explicitly",
                "log_p_published": log_p_published,
                "log_p_max": log_p_max,
                "p_max": math.exp(log_p_max) if log_p_max > -math.inf else 0.0,
                "log_delta_keep_record": log_q,
                "secure": self.secure,
                "sampling": (
                    (SECURE_LAPLACE_SAMPLING if self.base == "laplace" else SECURE_GAUSSIAN_SAMPLING)
                    if self.secure
                    else FLOAT_SAMPLING
                )
                + "; keep decisions from log p",
            }
        )
        params.update(w_info)
        excess, tv = 0.0, 0.0
        if grid is not None:
            excess, tv = grid.sampler.epsilon_excess(grid.units), (grid.sampler.tv_bound() if self.base == "gaussian" else 0.0)
            params.update({"grid": grid.gamma, "epsilon_quantisation_excess": excess, "delta_sampler_tv": tv})
        return params, excess, tv

    def _figures(
        self,
        n_elem: int,
        scale: dict[str, Any],
        grid: _Grid | None,
        rho_e: float,
        excess: float,
        tv: float,
        p_max: float,
        q: float,
        params: dict[str, Any],
    ) -> tuple[float, float, float, float, str]:
        """(eps_elem, delta_elem, eps_rec, delta_rec, note): epsilon in nats, delta a probability; sets params["delta"] (Gaussian)."""
        d = self.domain.width
        if self.base == "laplace":
            b = scale["b"]
            eps_elem, eps_rec = d / b + excess, n_elem * (d / b + excess)
            delta_elem, delta_rec = p_max, q
            mix = (
                f"per record: with probability prod(1 - p_e) every element is noised (pure {_fmt(eps_rec)}),"
                f" otherwise bounded by 1: ({_fmt(eps_rec)}, 1 - prod(1 - p_e) = {q:.3g})"
            )
            return eps_elem, delta_elem, eps_rec, delta_rec, mix
        sigma = scale["sigma"]
        if grid is not None:
            eps_elem = zcdp.epsilon_for(rho_e, self.delta) + excess
            eps_rec = zcdp.epsilon_for(n_elem * rho_e, self.delta) + n_elem * excess
        else:
            eps_elem = ag.epsilon_for_sigma(sigma, self.delta, d)
            eps_rec = ag.epsilon_for_sigma(sigma, self.delta, d * math.sqrt(n_elem))
        delta_elem = min(1.0, p_max + (1.0 - p_max) * (self.delta + tv))
        delta_rec = min(1.0, q + (1.0 - q) * (self.delta + n_elem * tv))
        params["delta"] = self.delta
        mix = (
            f"Gaussian noise sigma = {_fmt(sigma)} (= Δ/sqrt(2 eps)) is (eps_G = {_fmt(eps_elem)}, {self.delta:g})"
            f" per element by the analytic Gaussian mechanism, ({_fmt(eps_rec)}, {self.delta:g}) per record"
            " (L2 sensitivity Δ sqrt(I)); the keep events add their probability to delta"
        )
        return eps_elem, delta_elem, eps_rec, delta_rec, mix

    def _plan_notes(
        self,
        n_elem: int,
        log_p: float,
        log_p_published: float,
        log_p_max: float,
        grid: _Grid | None,
        excess: float,
        mix: str,
    ) -> tuple[str, ...]:
        """Guarantee notes (log p per element; excess in nats per element)."""
        point_mass = (
            "a kept element is released unchanged (a point mass), so the published pure-eps claim does not hold;"
            " the keep probability enters as delta"
        )
        p_txt = f"p = {math.exp(log_p):.3g} (log p = {log_p:.4g})"
        if self.p is not None:
            p_txt += f", set explicitly (the published formula gives log p = {log_p_published:.4g})"
        notes = [point_mass, p_txt, mix]
        if log_p_max < math.log(1e-6):
            notes.append(
                f"with the published formula p is negligible for {n_elem} elements, so this behaves like plain"
                f" per-element {self.base} noise"
            )
        notes.append(f"inputs are clipped to the declared domain [{self.domain.low}, {self.domain.high}] before noise")
        if grid is not None:
            notes.append(
                f"secure integer sampling on a grid of {_fmt(grid.gamma)} (kept elements are snapped to it);"
                f" table rounding adds at most {excess:.3g} nats per element (included in the figures)"
            )
        else:
            notes.append("float sampling path (not hardened against the floating-point attack; secure=True is)")
        return tuple(notes)

    def _base_noise(self, shape: tuple[int, ...], values: dict[str, Any], gen: torch.Generator) -> torch.Tensor:
        if values["grid"] is not None:
            return _grid_of(values).noise(shape, gen)
        if self.base == "laplace":
            return laplace_noise(shape, values["b"], gen)
        return gaussian_noise(shape, values["sigma"], gen)

    def _apply(self, x: torch.Tensor, plan: _Plan, gen: torch.Generator) -> torch.Tensor:
        v = plan.values
        grid: _Grid | None = v["grid"]
        if grid is not None:
            j = grid.snap(x)
            z = grid.sampler.sample(x.shape, gen)
            kept = bernoulli_positions(x.numel(), v["log_p_max"], gen, thin=v["thin"])
            if kept.numel():
                z.view(-1)[kept] = 0  # a kept element is released as its grid value
            return grid.value(j.add_(z))
        x32 = x.to(torch.float32)
        y = self._base_noise(x.shape, v, gen).to(torch.float32).add_(x32)
        kept = bernoulli_positions(x.numel(), v["log_p_max"], gen, thin=v["thin"])
        if kept.numel():
            y.view(-1)[kept] = x32.reshape(-1)[kept]
        return y

    def _noise(self, shape: tuple[int, ...], plan: _Plan, gen: torch.Generator) -> torch.Tensor:
        return self._base_noise(shape, plan.values, gen)


# ---------------------------------------------------------------------------------------------
# Discrete TLDP (secure path)
# ---------------------------------------------------------------------------------------------


class DiscreteTLDPMechanism(_Elementwise):
    """Discrete TLDP on an integer domain: keep with probability p, else add discrete Laplace(b) noise.

    Exact per-element loss ``ln(1 + p/((1-p) c)) + D/b`` (D = high - low,
    ``c = tanh(1/(2b))``), per record ``I`` times that (pure LDP). Give two of
    ``epsilon`` (per element or per record, see ``per``), ``p``, ``b``; the third is
    solved (:func:`ldpclient.privacy.discrete.solve_b` / ``solve_p``). With only
    ``epsilon``, half of it goes to the noise (``b = 2D/eps_elem``) and p is solved.
    Noise comes from the secure integer sampler; outputs are integers (not clipped).
    The reported epsilon also covers the sampler's probability rounding (a bound of
    order 1e-10 nats, ``params["epsilon_quantisation_excess"]``); when epsilon is
    given, the parameters are fitted so the reported figure does not exceed it.
    """

    name = "discrete-tldp"

    def __init__(
        self,
        epsilon: float | None = None,
        *,
        p: float | None = None,
        b: float | None = None,
        per: str = "element",
        domain: Domain = Domain(0, 255, integer=True),
        reduction: int = 1,
        round_inputs: bool = False,
    ) -> None:
        super().__init__(per=per, domain=domain, reduction=reduction)
        if not isinstance(round_inputs, bool):
            raise ValueError(f"round_inputs must be True or False, got {round_inputs!r}")
        self.round_inputs = round_inputs
        if not self.domain.integer:
            raise ValueError("discrete TLDP needs an integer domain, e.g. Domain(0, 255, integer=True)")
        given = [v is not None for v in (epsilon, p, b)]
        if sum(given) == 0:
            raise ValueError("discrete TLDP needs epsilon, or two of epsilon, p and b")
        if sum(given) == 3:
            raise ValueError("discrete TLDP: give at most two of epsilon, p and b (the third is solved)")
        if epsilon is None and per == "record":
            raise ValueError("per='record' needs epsilon (it says how epsilon is counted)")
        self.epsilon = None if epsilon is None else check_epsilon(epsilon)
        self.p = None if p is None else check_probability(p, "p")
        self.b = None if b is None else check_epsilon(b, "b")
        self.sensitivity = dsc.check_sensitivity(self.domain.high - self.domain.low)
        if self.epsilon is None or self.per == "element":
            self._plan_for_elements(1)  # validate now (feasibility, sampler range): independent of I here

    def _extra_config(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "p": self.p, "b": self.b, "round_inputs": self.round_inputs}

    def _solve(self, eps_target: float | None) -> tuple[float, float]:
        d = self.sensitivity
        if eps_target is None:
            return self.p, self.b  # type: ignore[return-value]
        if self.p is not None:
            return self.p, dsc.solve_b(eps_target, self.p, d)
        b = self.b if self.b is not None else 2.0 * d / eps_target
        return dsc.solve_p(eps_target, b, d), b

    def _bound(self, p: float, b: float) -> tuple[float, float, DiscreteLaplaceSampler]:
        """(exact formula, rigorous epsilon of the realised sampler, sampler): formula + table-rounding excess."""
        d = self.sensitivity
        _check_noise_scale(self.name, {"b": b})
        sampler = discrete_laplace_sampler(b, p)
        ideal = dsc.discrete_tldp_epsilon(p, b, d)
        return ideal, ideal + sampler.epsilon_excess(d), sampler

    def _make_plan(
        self, record_shape: tuple[int, ...], rel_shape: tuple[int, ...], n_elem: int, noise_only: bool = False
    ) -> _Plan:
        d = self.sensitivity
        target = None if self.epsilon is None else self._eps_element(self.epsilon, n_elem)
        p, b = self._solve(target)
        eps_ideal, eps_true, sampler = self._bound(p, b)
        if target is not None and eps_true > target:
            t = target
            for _ in range(8):
                t = t - (eps_true - target) * 1.5 - target * 1e-15
                p, b = self._solve(t)
                eps_ideal, eps_true, sampler = self._bound(p, b)
                if eps_true <= target:
                    break
            else:  # pragma: no cover
                raise ValueError(f"could not fit discrete TLDP below epsilon={target}")
        params = self._common_params(n_elem, rel_shape)
        params.update(
            {
                "p": p,
                "b": b,
                "c": dsc.c_of_b(b),
                "integer_sensitivity": d,
                "epsilon_element_formula": eps_ideal,
                "epsilon_quantisation_excess": eps_true - eps_ideal,
                "secure": True,
                "sampling": "integer discrete Laplace tables (secure path)",
                "table_cells": 2 * sampler.k + 1,
            }
        )
        notes = (
            f"pure LDP: keep with p = {p:.4g}, else discrete Laplace noise b = {_fmt(b)};"
            f" per element ln(1 + p/((1-p)c)) + {d}/b = {_fmt(eps_ideal)}, per record {n_elem} x that",
            f"secure integer sampling; table rounding adds at most {eps_true - eps_ideal:.3g} nats per element"
            " (included in the figures)",
            f"inputs are clipped to {{{int(self.domain.low)}..{int(self.domain.high)}}} and rounded to integers"
            " before noise; outputs are integers and are not clipped (clip as post-processing if wanted)",
        )
        return self._pure_plan(eps_true, n_elem, params, notes, {"sampler": sampler, "b": b})

    def _apply(self, x: torch.Tensor, plan: _Plan, gen: torch.Generator) -> torch.Tensor:
        # keep-or-noise in one draw: the offset law is p 1[z=0] + (1-p) c e^(-|z|/b)
        z: torch.Tensor = plan.values["sampler"].sample(x.shape, gen)
        return z.add_(x.to(torch.int64))

    def _noise(self, shape: tuple[int, ...], plan: _Plan, gen: torch.Generator) -> torch.Tensor:
        return discrete_laplace_sampler(plan.values["b"], 0.0).sample(shape, gen).to(torch.float64)


# ---------------------------------------------------------------------------------------------
# Factories
# ---------------------------------------------------------------------------------------------


def laplace(
    epsilon: float,
    *,
    per: str = "element",
    domain: Domain = Domain(0.0, 1.0),
    reduction: int = 1,
    secure: bool = True,
    grid_bits: int | None = None,
) -> LaplaceMechanism:
    """Laplace mechanism, ``b = Δ/eps_elem``. ``epsilon`` is per element, or per record with ``per="record"``."""
    return LaplaceMechanism(epsilon, per=per, domain=domain, reduction=reduction, secure=secure, grid_bits=grid_bits)


def gaussian(
    epsilon: float,
    delta: float = DEFAULT_DELTA,
    *,
    per: str = "element",
    domain: Domain = Domain(0.0, 1.0),
    reduction: int = 1,
    secure: bool = True,
    allow_large_delta: bool = False,
) -> GaussianMechanism:
    """Gaussian mechanism at (epsilon, delta) per element or per record (``per``); discrete and secure by default."""
    return GaussianMechanism(
        epsilon, delta, per=per, domain=domain, reduction=reduction, secure=secure, allow_large_delta=allow_large_delta
    )


def tldp_laplace(
    epsilon: float,
    *,
    p: float | None = None,
    per: str = "element",
    domain: Domain = Domain(0.0, 1.0),
    reduction: int = 1,
    secure: bool = True,
) -> TLDPMechanism:
    """Published TLDP with Laplace noise (``b = Δ/eps``); the guarantee reports the point mass as delta."""
    return TLDPMechanism(epsilon, base="laplace", p=p, per=per, domain=domain, reduction=reduction, secure=secure)


def tldp_gaussian(
    epsilon: float,
    delta: float = DEFAULT_DELTA,
    *,
    p: float | None = None,
    per: str = "element",
    domain: Domain = Domain(0.0, 1.0),
    reduction: int = 1,
    secure: bool = True,
    allow_large_delta: bool = False,
) -> TLDPMechanism:
    """Published TLDP with Gaussian noise (``σ² = Δ²/(2 eps)``); ``delta`` is used to report the true guarantee."""
    return TLDPMechanism(
        epsilon,
        base="gaussian",
        delta=delta,
        p=p,
        per=per,
        domain=domain,
        reduction=reduction,
        secure=secure,
        allow_large_delta=allow_large_delta,
    )


def weighted_tldp(
    epsilon: float,
    weights: object,
    *,
    base: str = "laplace",
    delta: float = DEFAULT_DELTA,
    p: float | None = None,
    per: str = "element",
    domain: Domain = Domain(0.0, 1.0),
    reduction: int = 1,
    secure: bool = True,
    allow_large_delta: bool = False,
) -> TLDPMechanism:
    """Weighted TLDP: keep probability ``p (1 - w)`` with ``weights`` in [0, 1] over the spatial axes.

    ``weights``: ``(H, W)`` at the record's resolution or at the released one (after ``reduction``).
    """
    return TLDPMechanism(
        epsilon,
        base=base,
        delta=delta,
        weights=weights,
        p=p,
        per=per,
        domain=domain,
        reduction=reduction,
        secure=secure,
        allow_large_delta=allow_large_delta,
    )


def discrete_tldp(
    epsilon: float | None = None,
    p: float | None = None,
    b: float | None = None,
    *,
    per: str = "element",
    domain: Domain = Domain(0, 255, integer=True),
    reduction: int = 1,
    round_inputs: bool = False,
) -> DiscreteTLDPMechanism:
    """Discrete TLDP on an integer domain (secure sampling); two of epsilon/p/b, or epsilon alone.

    Float inputs with non-integer values are refused unless ``round_inputs=True``.
    """
    return DiscreteTLDPMechanism(epsilon, p=p, b=b, per=per, domain=domain, reduction=reduction, round_inputs=round_inputs)


MECHANISMS: dict[str, Callable[..., Mechanism]] = {
    "laplace": laplace,
    "gaussian": gaussian,
    "tldp-laplace": tldp_laplace,
    "tldp-gaussian": tldp_gaussian,
    "tldp-weighted": weighted_tldp,
    "discrete-tldp": discrete_tldp,
}


def make_mechanism(name: str, **kwargs: Any) -> Mechanism:
    """Build a mechanism from its CLI name (``laplace|gaussian|tldp-laplace|tldp-gaussian|tldp-weighted|discrete-tldp``).

    Underscores are accepted for dashes. Keyword arguments go to the factory; an
    unknown name or argument raises ``ValueError``.
    """
    key = str(name).strip().lower().replace("_", "-")
    factory = MECHANISMS.get(key)
    if factory is None:
        raise ValueError(f"unknown mechanism {name!r}; choose one of {', '.join(MECHANISMS)}")
    try:
        return factory(**kwargs)
    except TypeError as exc:
        raise ValueError(f"bad arguments for mechanism {key!r}: {exc}") from None
