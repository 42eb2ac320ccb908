"""TLDP exactly as published (``tldp-laplace``, ``tldp-gaussian``) and weighted TLDP (``tldp-weighted``).

The three CLI names are three factories over one class, :class:`TLDPMechanism`: the base noise
and the weights are what tells them apart. The guarantee each reports is the true one (a kept
element is a point mass, so the paper's pure epsilon does not hold; see the class docstring).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .. import analytic_gaussian as ag
from .. import zcdp
from ..discrete_gaussian import DiscreteGaussianSampler
from ..guarantee import Domain
from ..preprocess import check_delta, check_epsilon, check_probability, check_weights
from ..sampling import bernoulli_positions, gaussian_noise, laplace_noise
from .elementwise import (
    DEFAULT_DELTA,
    FLOAT_SAMPLING,
    SECURE_GAUSSIAN_SAMPLING,
    SECURE_LAPLACE_SAMPLING,
    Elementwise,
    Params,
    Plan,
    PlanValues,
    exp_up,
    fmt,
    logaddexp,
)
from .grid import SecureGrid, check_noise_scale, check_secure, gaussian_grid, laplace_grid
from .registry import register_mechanism

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .elementwise import ReleaseOptions


@dataclass(frozen=True, kw_only=True)
class TLDPValues(PlanValues):
    """``scales``: the base noise's scale by name (``b`` Laplace, ``sigma`` Gaussian; domain units per element);
    ``log_p_max``: the largest keep probability of an element (nats); ``thin``: each position's share of it
    (weighted TLDP; None: every element keeps with ``p_max``)."""

    scales: dict[str, float]
    log_p_max: float
    thin: torch.Tensor | None

    def noise_scales(self) -> dict[str, float]:
        return dict(self.scales)


class TLDPMechanism(Elementwise[TLDPValues]):
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
        per: str | None = None,
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
        self.secure = check_secure(secure)
        self.weights = None if weights is None else check_weights(weights)
        if self.weights is not None:
            self.name = "tldp-weighted"
        else:
            self.name = f"tldp-{base}"

    def _extra_config(self) -> dict[str, object]:
        cfg: dict[str, object] = {"epsilon": self.epsilon, "base": self.base, "secure": self.secure}
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
    ) -> Plan[TLDPValues]:
        """Plan of one record shape: noise scale, keep probabilities (log space) and the guarantee (nats, per
        element/record)."""
        eps_e = self._eps_element(self.epsilon, n_elem)
        log_p, scale, grid, rho_e = self._calibrate(eps_e, n_elem)
        log_p_published = log_p
        if self.p is not None:
            log_p = math.log(self.p) if self.p > 0 else -math.inf
        log_p_max, log_q, thin, w_info = self._keep_probabilities(log_p, record_shape, n_elem, noise_only)
        params, excess, tv = self._plan_params(
            n_elem, rel_shape, eps_e, scale, grid, (log_p, log_p_published, log_p_max, log_q), w_info
        )
        figures = self._figures(n_elem, scale, grid, rho_e, excess, tv, exp_up(log_p_max), exp_up(log_q), params)
        eps_elem, delta_elem, eps_rec, delta_rec, mix = figures
        notes = self._plan_notes(n_elem, log_p, log_p_published, log_p_max, grid, excess, mix)
        g = self._guarantee(eps_elem, delta_elem, eps_rec, delta_rec, n_elem, params, notes)
        return Plan(g, n_elem, TLDPValues(scales=scale, log_p_max=log_p_max, thin=thin, grid=grid))

    def _calibrate(self, eps_e: float, n_elem: int) -> tuple[float, dict[str, float], SecureGrid | None, float]:
        """Published per-element noise scale and log keep probability (nats); returns (log p, scale, grid, rho_e)."""
        d = self.domain.width
        expo = eps_e - n_elem * eps_e  # eps - I Δ/b (Laplace) = eps - I Δ²/(2σ²) (Gaussian) = eps (1 - I)
        grid: SecureGrid | None = None
        rho_e = eps_e  # Gaussian base: Δ²/(2σ²) with the published σ² = Δ²/(2 eps)
        if self.base == "laplace":
            b = d / eps_e
            log_p = expo - logaddexp(math.log(2.0 * b), expo)
            if self.secure:
                check_noise_scale(self.name, {"b": b})
                laplace = laplace_grid(self.domain, eps_e, None)
                grid, b = laplace, laplace.sampler.scale * laplace.gamma
            scale = {"b": b}
        else:
            sigma = d / math.sqrt(2.0 * eps_e)
            log_p = expo - logaddexp(math.log(sigma * math.sqrt(2.0 * math.pi)), expo)
            if self.secure:
                check_noise_scale(self.name, {"sigma": sigma})
                gaussian, rho_e = gaussian_grid(self.domain, eps_e, self.name)
                grid, sigma = gaussian, gaussian.sampler.sigma * gaussian.gamma
            scale = {"sigma": sigma}
        return log_p, scale, grid, rho_e

    def _keep_probabilities(
        self, log_p: float, record_shape: tuple[int, ...], n_elem: int, noise_only: bool
    ) -> tuple[float, float, torch.Tensor | None, Params]:
        """Per-element keep probabilities of one released record, log space: (log p_max, log q per record, thin,
        info)."""
        thin = None
        w_info: Params = {}
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
        scale: dict[str, float],
        grid: SecureGrid | None,
        log_ps: tuple[float, float, float, float],
        w_info: Params,
    ) -> tuple[Params, float, float]:
        """Guarantee params (log_ps: log p, published log p, log p_max, log q; per element except q); returns
        (params, excess nats, tv)."""
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
            excess, tv = (
                grid.sampler.epsilon_excess(grid.units),
                (grid.sampler.tv_bound() if isinstance(grid.sampler, DiscreteGaussianSampler) else 0.0),
            )
            params.update({"grid": grid.gamma, "epsilon_quantisation_excess": excess, "delta_sampler_tv": tv})
        return params, excess, tv

    def _figures(
        self,
        n_elem: int,
        scale: dict[str, float],
        grid: SecureGrid | None,
        rho_e: float,
        excess: float,
        tv: float,
        p_max: float,
        q: float,
        params: Params,
    ) -> tuple[float, float, float, float, str]:
        """(eps_elem, delta_elem, eps_rec, delta_rec, note): epsilon in nats, delta a probability; sets
        params["delta"] (Gaussian)."""
        d = self.domain.width
        if self.base == "laplace":
            b = scale["b"]
            eps_elem, eps_rec = d / b + excess, n_elem * (d / b + excess)
            delta_elem, delta_rec = p_max, q
            mix = (
                f"per record: with probability prod(1 - p_e) every element is noised (pure {fmt(eps_rec)}),"
                f" otherwise bounded by 1: ({fmt(eps_rec)}, 1 - prod(1 - p_e) = {q:.3g})"
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
            f"Gaussian noise sigma = {fmt(sigma)} (= Δ/sqrt(2 eps)) is (eps_G = {fmt(eps_elem)}, {self.delta:g})"
            f" per element by the analytic Gaussian mechanism, ({fmt(eps_rec)}, {self.delta:g}) per record"
            " (L2 sensitivity Δ sqrt(I)); the keep events add their probability to delta"
        )
        return eps_elem, delta_elem, eps_rec, delta_rec, mix

    def _plan_notes(
        self,
        n_elem: int,
        log_p: float,
        log_p_published: float,
        log_p_max: float,
        grid: SecureGrid | None,
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
                f"secure integer sampling on a grid of {fmt(grid.gamma)} (kept elements are snapped to it);"
                f" table rounding adds at most {excess:.3g} nats per element (included in the figures)"
            )
        else:
            notes.append("float sampling path (not hardened against the floating-point attack; secure=True is)")
        return tuple(notes)

    def _base_noise(self, shape: tuple[int, ...], values: TLDPValues, gen: torch.Generator) -> torch.Tensor:
        if values.grid is not None:
            return values.grid.noise(shape, gen)
        if self.base == "laplace":
            return laplace_noise(shape, values.scales["b"], gen)
        return gaussian_noise(shape, values.scales["sigma"], gen)

    def _apply(self, x: torch.Tensor, plan: Plan[TLDPValues], gen: torch.Generator) -> torch.Tensor:
        v = plan.values
        grid = v.grid
        if grid is not None:
            j = grid.snap(x)
            z = grid.sampler.sample(x.shape, gen)
            kept = bernoulli_positions(x.numel(), v.log_p_max, gen, thin=v.thin)
            if kept.numel():
                z.view(-1)[kept] = 0  # a kept element is released as its grid value
            return grid.value(j.add_(z))
        x32 = x.to(torch.float32)
        y = self._base_noise(x.shape, v, gen).to(torch.float32).add_(x32)
        kept = bernoulli_positions(x.numel(), v.log_p_max, gen, thin=v.thin)
        if kept.numel():
            y.view(-1)[kept] = x32.reshape(-1)[kept]
        return y

    def _noise(self, shape: tuple[int, ...], plan: Plan[TLDPValues], gen: torch.Generator) -> torch.Tensor:
        return self._base_noise(shape, plan.values, gen)


@register_mechanism("tldp-laplace", rank=30)
def tldp_laplace(epsilon: float, *, p: float | None = None, **options: Unpack[ReleaseOptions]) -> TLDPMechanism:
    """Published TLDP with Laplace noise (``b = Δ/eps``); the guarantee reports the point mass as delta.

    ``options``: ``per``, ``domain``, ``reduction``, ``secure`` (:class:`~.elementwise.ReleaseOptions`).
    """
    return TLDPMechanism(epsilon, base="laplace", p=p, **options)


@register_mechanism("tldp-gaussian", rank=40)
def tldp_gaussian(
    epsilon: float,
    delta: float = DEFAULT_DELTA,
    *,
    p: float | None = None,
    allow_large_delta: bool = False,
    **options: Unpack[ReleaseOptions],
) -> TLDPMechanism:
    """Published TLDP with Gaussian noise (``σ² = Δ²/(2 eps)``); ``delta`` is used to report the true guarantee."""
    return TLDPMechanism(epsilon, base="gaussian", delta=delta, p=p, allow_large_delta=allow_large_delta, **options)


@register_mechanism("tldp-weighted", rank=50)
def weighted_tldp(
    epsilon: float,
    weights: object,
    *,
    base: str = "laplace",
    delta: float = DEFAULT_DELTA,
    p: float | None = None,
    allow_large_delta: bool = False,
    **options: Unpack[ReleaseOptions],
) -> TLDPMechanism:
    """Weighted TLDP: keep probability ``p (1 - w)`` with ``weights`` in [0, 1] over the spatial axes.

    ``weights``: ``(H, W)`` at the record's resolution or at the released one (after ``reduction``).
    """
    return TLDPMechanism(
        epsilon, base=base, delta=delta, weights=weights, p=p, allow_large_delta=allow_large_delta, **options
    )
