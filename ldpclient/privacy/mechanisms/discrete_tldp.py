"""Discrete TLDP (``--mechanism discrete-tldp``) on an integer domain, always on the secure integer path."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import discrete as dsc
from ..guarantee import Domain
from ..preprocess import check_epsilon, check_probability
from ..sampling import DiscreteLaplaceSampler, discrete_laplace_sampler
from .elementwise import Elementwise, Plan, PlanValues, fmt
from .grid import check_noise_scale
from .registry import register_mechanism


@dataclass(frozen=True, kw_only=True)
class DiscreteTLDPValues(PlanValues):
    """``sampler``: keep-or-noise offsets in one integer draw; ``b``: the discrete Laplace scale (integer units)."""

    sampler: DiscreteLaplaceSampler
    b: float

    def noise_scales(self) -> dict[str, float]:
        return {"b": self.b}


@register_mechanism("discrete-tldp", rank=60)
class DiscreteTLDPMechanism(Elementwise[DiscreteTLDPValues]):
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
        p: float | None = None,
        b: float | None = None,
        *,
        per: str | None = None,
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

    def _extra_config(self) -> dict[str, object]:
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
        check_noise_scale(self.name, {"b": b})
        sampler = discrete_laplace_sampler(b, p)
        ideal = dsc.discrete_tldp_epsilon(p, b, d)
        return ideal, ideal + sampler.epsilon_excess(d), sampler

    def _make_plan(
        self, record_shape: tuple[int, ...], rel_shape: tuple[int, ...], n_elem: int, noise_only: bool = False
    ) -> Plan[DiscreteTLDPValues]:
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
            f"pure LDP: keep with p = {p:.4g}, else discrete Laplace noise b = {fmt(b)};"
            f" per element ln(1 + p/((1-p)c)) + {d}/b = {fmt(eps_ideal)}, per record {n_elem} x that",
            f"secure integer sampling; table rounding adds at most {eps_true - eps_ideal:.3g} nats per element"
            " (included in the figures)",
            f"inputs are clipped to {{{int(self.domain.low)}..{int(self.domain.high)}}} and rounded to integers"
            " before noise; outputs are integers and are not clipped (clip as post-processing if wanted)",
        )
        return self._pure_plan(eps_true, n_elem, params, notes, DiscreteTLDPValues(sampler=sampler, b=b))

    def _apply(self, x: torch.Tensor, plan: Plan[DiscreteTLDPValues], gen: torch.Generator) -> torch.Tensor:
        # keep-or-noise in one draw: the offset law is p 1[z=0] + (1-p) c e^(-|z|/b)
        z = plan.values.sampler.sample(x.shape, gen)
        return z.add_(x.to(torch.int64))

    def _noise(self, shape: tuple[int, ...], plan: Plan[DiscreteTLDPValues], gen: torch.Generator) -> torch.Tensor:
        return discrete_laplace_sampler(plan.values.b, 0.0).sample(shape, gen).to(torch.float64)


#: The factory by its CLI name: ``discrete_tldp(epsilon=None, p=None, b=None, per=..., domain=..., reduction=...,
#: round_inputs=...)``.
discrete_tldp = DiscreteTLDPMechanism
