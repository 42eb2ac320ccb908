"""The release path every built-in mechanism shares: validate, clip, reduce, noise each element.

``Elementwise`` does the work of :meth:`Mechanism.release` and :meth:`Mechanism.noise`; a
mechanism supplies its plan (``_make_plan``: calibration and guarantee for one record shape)
and its sampling (``_apply`` / ``_noise``). Values are computed in float64 (or on the integer
grid of the secure path) and released as float32.

Laplace and Gaussian also release in the ``dct`` basis (:mod:`ldpclient.privacy.basis`) and in a ``pca`` basis
fitted on public images (:mod:`ldpclient.privacy.pca`): one record-level vector of clipped coefficients,
calibrated by ``_make_coefficient_plan`` and noised by ``_release_coefficients``.

Units: ``epsilon`` is per released element (``per="element"``) or per record
(``per="record"``); ``I`` (``n_elem``) is the number of released elements of one record,
after reduction. Sensitivity is ``Δ = domain.high - domain.low`` per element.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Generic, Sequence, TypedDict, TypeVar

import torch

from ..base import Mechanism
from ..basis import CoefficientLayout, check_basis, check_clip_norm, check_coefficients, dct_layout, snap_into_ball
from ..guarantee import Domain, Guarantee
from ..pca import PcaBasis
from ..preprocess import check_domain, check_per, check_reduction, elements, prepare, released_shape
from ..release import _RELEASE_TOKEN, Release
from ..sampling import make_generator
from .grid import SecureGrid, check_noise_scale

#: How each path draws its noise (``Guarantee.params["sampling"]``; reports show it for every run).
FLOAT_SAMPLING = "float64 (not hardened against the floating-point attack)"
SECURE_LAPLACE_SAMPLING = "secure: integer discrete Laplace on a grid"
SECURE_GAUSSIAN_SAMPLING = "secure: integer discrete Gaussian on a grid"

_TINY = math.ulp(0.0)  # 5e-324: reported instead of a positive delta that underflows float64
#: The delta of every mechanism with one unless told otherwise (``ldpclient.privacy.defaults.delta``).
DEFAULT_DELTA = 1e-5


class ReleaseOptions(TypedDict, total=False):
    """The options every element-wise mechanism takes beside its own parameters.

    ``per``: ``"element"`` or ``"record"`` (what epsilon counts); ``domain``: the value range of
    the inputs (clipped to it); ``reduction``: average-pooling factor over the last two axes
    before noise; ``secure``: the integer grid path (``True``, the default) or float64.
    """

    per: str | None
    domain: Domain
    reduction: int
    secure: bool


def exp_up(log_x: float) -> float:
    """exp(log_x) as a float that never rounds a positive value down to 0."""
    if log_x == -math.inf:
        return 0.0
    return max(math.exp(log_x), _TINY)


def logaddexp(a: float, b: float) -> float:
    m = max(a, b)
    return m + math.log(math.exp(a - m) + math.exp(b - m))


def fmt(x: float) -> str:
    return f"{x:.4g}"


#: A guarantee's parameters as reports state them (JSON values: numbers, strings, lists).
Params = dict[str, object]


@dataclass(frozen=True, kw_only=True)
class PlanValues:
    """What a mechanism samples with for one record shape, beside its guarantee.

    ``layout``: the coefficient layout of a ``dct`` or ``pca`` release (None: pixels); ``grid``: the secure path's
    lattice (None: the float path). Each mechanism adds its own noise's values (domain units) in a subclass.
    """

    layout: CoefficientLayout | None = None
    grid: SecureGrid | None = None

    def noise_scales(self) -> dict[str, float]:
        """The noise scales by name (``b``, ``sigma``; domain units) that must be representable."""
        return {}

    @property
    def coefficient_layout(self) -> CoefficientLayout:
        """The layout of a release in a basis; a pixel plan has none."""
        if self.layout is None:
            raise TypeError("a pixel release has no coefficient layout")
        return self.layout

    @property
    def secure_grid(self) -> SecureGrid:
        """The grid of a secure release; a float-path plan has none."""
        if self.grid is None:
            raise TypeError("a float-path release has no grid")
        return self.grid


V = TypeVar("V", bound=PlanValues)


@dataclass(frozen=True)
class Plan(Generic[V]):
    """Shape-dependent parameters of one mechanism for one record shape."""

    guarantee: Guarantee
    elements: int
    values: V


class Elementwise(Mechanism, Generic[V]):
    """Shared release path: validate, clip, reduce, noise each element; float64 inside, float32 out."""

    name = "abstract"
    #: The norm a record-level basis release (``dct`` or ``pca``) clips its coefficients in: that of the noise's
    #: sensitivity (``"l1"`` Laplace, ``"l2"`` Gaussian); None: the mechanism releases pixels only.
    coefficient_norm: ClassVar[str | None] = None

    def __init__(
        self,
        *,
        per: str | None,
        domain: Domain,
        reduction: int,
        basis: str | PcaBasis = "pool",
        coefficients: int | None = None,
        clip_norm: float | None = None,
    ) -> None:
        self.per = check_per(per)
        self.domain = check_domain(domain)
        self.reduction = check_reduction(reduction)
        self.pca = basis if isinstance(basis, PcaBasis) else None
        self.basis = "pca" if self.pca is not None else check_basis(basis)
        self.coefficients = check_coefficients(coefficients)
        self.clip_norm = check_clip_norm(clip_norm)
        if self.basis == "pool" and (coefficients is not None or clip_norm is not None):
            raise ValueError("coefficients and clip_norm apply to basis dct and pca only")
        if self.basis == "pca":
            if self.pca is None:
                raise ValueError("basis pca is fitted on public images: pass basis=fit_pca(images, domain)")
            if coefficients is not None:
                raise ValueError("basis pca keeps the components it was fitted with: give them to fit_pca")
            self.coefficients = self.pca.luminance_coefficients
        if self.basis != "pool":
            if self.coefficient_norm is None:
                raise ValueError(f"{self.name} releases pixels only; basis {self.basis} takes laplace or gaussian")
            if self.reduction != 1:
                raise ValueError(f"basis {self.basis} replaces the average pooling: give reduction 1 (--reduce 1)")
            if self.per != "record":
                raise ValueError(
                    f"basis {self.basis} releases one record-level vector: its epsilon is per record "
                    "(per='record', --epsilon-unit record)"
                )
        self.round_inputs = False  # integer domains: refuse non-integer floats unless a mechanism opts in
        self._plans: dict[tuple[int | str, ...], Plan[V]] = {}

    # -- subclasses ---------------------------------------------------------------------------
    def _guarantee(
        self,
        eps_e: float,
        delta_e: float,
        eps_r: float,
        delta_r: float,
        n_elem: int,
        params: Params,
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
    ) -> Plan[V]:
        """Parameters and guarantee for one record shape (``noise_only``: element parameters suffice)."""
        raise NotImplementedError

    def _apply(self, x: torch.Tensor, plan: Plan[V], gen: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def _noise(self, shape: tuple[int, ...], plan: Plan[V], gen: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def _extra_config(self) -> dict[str, object]:
        return {}

    def _make_coefficient_plan(self, record_shape: tuple[int, ...], layout: CoefficientLayout) -> Plan[V]:
        """Calibration and guarantee of a record-level release of ``layout``'s coefficient vector
        (sensitivity ``2 * layout.clip_norm`` in ``layout.norm``); mechanisms with a ``coefficient_norm``."""
        raise NotImplementedError

    # -- Mechanism API ------------------------------------------------------------------------
    def _plan(self, record_shape: Sequence[int]) -> Plan[V]:
        key = tuple(int(s) for s in record_shape)
        plan = self._plans.get(key)
        if plan is None:
            if self.basis != "pool":
                plan = self._make_coefficient_plan(key, self._layout(key))
            else:
                rel = released_shape(key, self.reduction)
                plan = self._make_plan(key, rel, elements(rel))
            check_noise_scale(self.name, plan.values.noise_scales())
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
        y = self._release_coefficients(x, plan, gen) if self.basis != "pool" else self._apply(x, plan, gen)
        g = plan.guarantee.for_public_input() if public else plan.guarantee
        return Release(
            y.to(torch.float32),
            g,
            record_shape,
            reduction=self.reduction,
            clipped_elements=clipped,
            basis=plan.values.layout,
            _token=_RELEASE_TOKEN,
        )

    def _layout(self, record_shape: tuple[int, ...]) -> CoefficientLayout:
        norm = str(self.coefficient_norm)
        if self.pca is not None:
            return self.pca.layout(record_shape, self.domain, norm, self.clip_norm)
        return dct_layout(record_shape, self.domain, norm, self.coefficients, self.clip_norm)

    def reconstruction(self, record_shape: Sequence[int]) -> CoefficientLayout | None:
        """The coefficient layout of a ``dct`` or ``pca`` release of records of ``record_shape``; None for pixels."""
        return self._plan(record_shape).values.layout if self.basis != "pool" else None

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
        if self.basis != "pool":  # noise on the coefficients of records of shape[1:], mapped to pixels
            plan = self._plan(shape[1:])
            layout = plan.values.coefficient_layout
            coef_noise = self._noise((shape[0], layout.coefficients), plan, make_generator(generator))
            return layout.inverse(coef_noise.to(torch.float64), origin=False).to(torch.float32)
        n_elem = elements(shape[1:]) if elements_per_record is None else int(elements_per_record)
        if n_elem < 1:
            raise ValueError(f"elements_per_record must be >= 1, got {elements_per_record!r}")
        plan = self._plan_for_elements(n_elem)
        return self._noise(shape, plan, make_generator(generator)).to(torch.float32)

    def _release_coefficients(self, x: torch.Tensor, plan: Plan[V], gen: torch.Generator) -> torch.Tensor:
        """Basis ``dct`` or ``pca``: transform, clip each record's vector into the norm ball, noise it: ``(N, K)``
        float64 (the release's :meth:`~ldpclient.privacy.Release.upsampled` rebuilds the records).

        Secure path: the clipped coefficients are snapped toward zero onto the grid (their integer norm checked,
        :func:`~ldpclient.privacy.basis.snap_into_ball`) and get integer noise in grid units.
        """
        layout = plan.values.coefficient_layout
        coef, _ = layout.clip(layout.forward(x))
        grid = plan.values.grid
        if grid is not None:
            j = snap_into_ball(coef, grid.gamma, grid.units // 2, layout.norm)
            noisy = j.add_(grid.sampler.sample(j.shape, gen)).to(torch.float64).mul_(grid.gamma)
        else:
            noisy = coef + self._noise(tuple(coef.shape), plan, gen).to(torch.float64)
        return noisy

    def _plan_for_elements(self, n_elem: int) -> Plan[V]:
        # The noising branch depends only on I (not on weights or the spatial layout). Cached:
        # LDPKiT-Rand asks for noise once per query, and calibration (e.g. analytic Gaussian) is costly.
        key = ("noise", n_elem)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._make_plan((n_elem,), (n_elem,), n_elem, noise_only=True)
        return plan

    def config(self) -> dict[str, object]:
        """JSON-serialisable parameters (ledger key, reports)."""
        cfg: dict[str, object] = {"name": self.name, "per": self.per, "domain": self.domain.as_dict(),
                                  "reduction": self.reduction}
        if self.basis != "pool":  # pooled configs keep their old keys: a ledger's stored releases still match
            cfg.update({"basis": self.basis, "coefficients": self.coefficients, "clip_norm": self.clip_norm})
        if self.pca is not None:
            cfg["basis_digest"] = self.pca.digest or None  # None: planned, not fitted yet
        cfg.update(self._extra_config())
        return cfg

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.config().items() if k != "name")
        return f"{type(self).__name__}({inner})"

    # -- helpers ------------------------------------------------------------------------------
    def _eps_element(self, epsilon: float, n_elem: int) -> float:
        return epsilon if self.per == "element" else epsilon / n_elem

    def _pure_plan(
        self, eps_element: float, n_elem: int, params: Params, notes: tuple[str, ...], values: V
    ) -> Plan[V]:
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
        return Plan(g, n_elem, values)

    def _coefficient_params(self, layout: CoefficientLayout) -> Params:
        """The guarantee's parameters every release in a basis states (sensitivity: record level, 2C)."""
        return {
            "per": "record",
            "basis": self.basis,
            "coefficients": layout.coefficients,
            "luminance_coefficients": layout.luminance_coefficients,
            "clip_norm": layout.clip_norm,
            "clip_norm_kind": layout.norm.upper(),
            "sensitivity": 2.0 * layout.clip_norm,
            "reduction": 1,
            "released_shape": [layout.coefficients],
            "released_elements": layout.coefficients,
        }

    def _coefficient_notes(self, layout: CoefficientLayout) -> list[str]:
        return [
            f"record-level release: {layout.describe()}, clipped to {layout.norm.upper()} norm"
            f" {fmt(layout.clip_norm)}, so two records differ by at most"
            f" {fmt(2 * layout.clip_norm)} (replacement); the noise is calibrated to that; rebuilding the image by"
            " the inverse transform (Release.upsampled) is post-processing",
            f"inputs are clipped to the declared domain [{self.domain.low}, {self.domain.high}] before the transform;"
            " one coefficient may carry the whole sensitivity, so the per-element figures equal the per-record ones",
        ]

    def _common_params(self, n_elem: int, rel_shape: tuple[int, ...]) -> Params:
        return {
            "per": self.per,
            "sensitivity": self.domain.width,
            "reduction": self.reduction,
            "released_shape": list(rel_shape),
            "released_elements": n_elem,
        }
