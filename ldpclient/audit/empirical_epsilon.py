"""Empirical lower bounds on a mechanism's per-element epsilon (a distinguishing test).

Two adjacent inputs differ in one element, set to the domain's extremes (``low``
vs ``high``). Every mechanism in :mod:`ldpclient.privacy` noises elements
independently, so the output of that element depends on its own input only; the
test therefore releases records whose elements are all ``low`` (resp. all
``high``) and reads many independent samples of one element (``element=None``:
every position pooled, valid when positions are treated alike; pass ``element``
for position-dependent mechanisms such as weighted TLDP).

For any event E and an (eps, delta)-LDP mechanism, P[M(x) in E] <= e^eps P[M(x') in E]
+ delta. Half of the samples choose the event (thresholds ``out >= t`` / ``out <= t``
over a quantile grid, and the point events ``out == low`` / ``out == high`` that
expose point masses); the other half estimates both probabilities with
Clopper-Pearson bounds, giving with confidence ``1 - alpha``

    eps >= ln((P_lo[M(x) in E] - delta) / P_hi[M(x') in E]).

A lower bound above the claimed per-element epsilon refutes the claim.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import torch

from .stats import clopper_pearson

if TYPE_CHECKING:
    from ..privacy.base import Mechanism

Sampler = Callable[[torch.Tensor, Optional[torch.Generator]], torch.Tensor]


def mechanism_sampler(mechanism: Mechanism) -> Sampler:
    """Sampler for an :class:`ldpclient.privacy.Mechanism`: the released values (constant test inputs)."""

    def sample(x: torch.Tensor, g: torch.Generator | None) -> torch.Tensor:
        return mechanism.release(x, generator=g, public=True).values

    return sample


def _collect(
    sampler: Sampler, value: float, shape: Sequence[int], samples: int, element: int | None, g: torch.Generator
) -> torch.Tensor:
    out: list[torch.Tensor] = []
    got = 0
    per_record = None
    while got < samples:
        if per_record is None:
            probe = sampler(torch.full((1, *shape), float(value)), g).flatten(1)
            per_record = probe.shape[1] if element is None else 1
            rows = probe if element is None else probe[:, element : element + 1]
        else:
            batch = max(1, min(4096, math.ceil((samples - got) / per_record)))
            y = sampler(torch.full((batch, *shape), float(value)), g).flatten(1)
            rows = y if element is None else y[:, element : element + 1]
        flat = rows.flatten().double()
        out.append(flat)
        got += flat.numel()
    return torch.cat(out)[:samples]


def _events(
    a: torch.Tensor, b: torch.Tensor, low: float, high: float, grid: int, g: torch.Generator
) -> list[tuple[str, float]]:
    pooled = torch.cat([a, b])
    qs = torch.quantile(
        pooled[torch.randperm(pooled.numel(), generator=g)[:200_000]].float(), torch.linspace(0.001, 0.999, grid)
    ).double()
    ev: list[tuple[str, float]] = [("==", low), ("==", high)]
    for t in torch.unique(qs).tolist():
        ev += [(">=", t), ("<=", t)]
    return ev


def _count(x: torch.Tensor, op: str, t: float) -> int:
    if op == "==":
        return int((x == t).sum())
    return int((x >= t).sum()) if op == ">=" else int((x <= t).sum())


def _lb(c0: int, c1: int, n: int, delta: float, alpha: float) -> float:
    p0_lo = clopper_pearson(c0, n, alpha)[0]
    p1_hi = clopper_pearson(c1, n, alpha)[1]
    num = p0_lo - delta
    return math.log(num / p1_hi) if num > 0 else 0.0


def _check_arguments(samples: int, low: float, high: float, claimed_epsilon: float, claimed_delta: float) -> None:
    """Raise ValueError for a sample count, domain or claimed (epsilon, delta) that cannot be tested."""
    if samples < 100:
        raise ValueError(f"samples must be >= 100, got {samples}")
    if not high > low:
        raise ValueError(f"high must exceed low, got [{low}, {high}]")
    if claimed_epsilon < 0 or not 0 <= claimed_delta <= 1:
        raise ValueError("claimed epsilon must be >= 0 and claimed delta in [0, 1]")


def _select(events: list[tuple[str, float, int, int]], n_sel: int, delta: float) -> tuple[str, float, bool]:
    """Event (op, threshold, swap) with the best cheap bound on the selection half; delta in probability."""
    best: tuple[float, str, float, bool] | None = None
    for op, t, c0, c1 in events:
        for swap in (False, True):
            a, b = (c1, c0) if swap else (c0, c1)
            # cheap selection score: approximate lower/upper confidence ends
            p_a = (a + 0.5) / (n_sel + 1)
            p_b = (b + 0.5) / (n_sel + 1)
            num = p_a - 2 * math.sqrt(p_a / n_sel) - delta
            score = math.log(max(num, 1e-300)) - math.log(p_b + 2 * math.sqrt(p_b / n_sel))
            if best is None or score > best[0]:
                best = (score, op, t, swap)
    assert best is not None
    return best[1], best[2], best[3]


def _test(
    test0: torch.Tensor, test1: torch.Tensor, n_test: int, alpha: float, op: str, t: float, swap: bool, delta: float
) -> tuple[float, int, int]:
    """Clopper-Pearson lower bound (nats) of the event on the test half, and its two counts."""
    c0, c1 = _count(test0, op, t), _count(test1, op, t)
    if swap:
        c0, c1 = c1, c0
    return _lb(c0, c1, n_test, delta, alpha), c0, c1


def empirical_epsilon(
    sampler: Sampler,
    record_shape: Sequence[int],
    *,
    low: float = 0.0,
    high: float = 1.0,
    claimed_epsilon: float,
    claimed_delta: float = 0.0,
    samples: int = 200_000,
    alpha: float = 0.01,
    element: int | None = None,
    grid: int = 199,
    seed: int = 0,
) -> dict:
    """Empirical lower bound on the per-element epsilon of ``sampler`` (see module doc).

    ``claimed_epsilon``/``claimed_delta``: the per-element guarantee to test (e.g.
    the paper's pure epsilon with delta 0, or the delta the guarantee reports).
    ``samples``: outputs per input used in total (half select the event, half
    estimate). Returns the bound ignoring delta (``epsilon_lb_pure``), the bound
    after subtracting ``claimed_delta`` (``epsilon_lb``), the chosen event, the
    empirical probabilities, and ``violated`` = ``epsilon_lb > claimed_epsilon``.
    """
    _check_arguments(samples, low, high, claimed_epsilon, claimed_delta)
    g = torch.Generator().manual_seed(seed)
    x0 = _collect(sampler, low, record_shape, samples, element, g)
    x1 = _collect(sampler, high, record_shape, samples, element, g)
    half = samples // 2
    sel0, test0, sel1, test1 = x0[:half], x0[half:], x1[:half], x1[half:]
    n_sel, n_test = half, samples - half
    events = [(op, t, _count(sel0, op, t), _count(sel1, op, t)) for op, t in _events(sel0, sel1, low, high, grid, g)]
    op, t, swap = _select(events, n_sel, 0.0)
    lb_pure, c0, c1 = _test(test0, test1, n_test, alpha, op, t, swap, 0.0)
    if claimed_delta > 0:
        op_d, t_d, swap_d = _select(events, n_sel, claimed_delta)
        lb, _, _ = _test(test0, test1, n_test, alpha, op_d, t_d, swap_d, claimed_delta)
    else:
        lb, op_d, t_d = lb_pure, op, t
    first, second = (high, low) if swap else (low, high)
    return {
        "event": f"out {op} {t:.6g}",
        "event_given_delta": f"out {op_d} {t_d:.6g}",
        "inputs": {"x": first, "x_adjacent": second},
        "p_x": c0 / n_test,
        "p_x_adjacent": c1 / n_test,
        "samples_per_input": samples,
        "confidence": 1 - alpha,
        "claimed_epsilon": claimed_epsilon,
        "claimed_delta": claimed_delta,
        "epsilon_lb_pure": lb_pure,
        "epsilon_lb": lb,
        "violated": lb > claimed_epsilon,
        "pure_claim_violated": lb_pure > claimed_epsilon,
    }


def audit_mechanism(
    mechanism: Mechanism,
    record_shape: Sequence[int],
    *,
    paper_epsilon: float | None = None,
    samples: int = 200_000,
    alpha: float = 0.01,
    element: int | None = None,
    seed: int = 0,
) -> dict:
    """Empirical epsilon of an ldpclient mechanism against its own reported guarantee.

    The mechanism's guarantee for ``record_shape`` gives the claimed per-element
    (epsilon, delta); ``violated`` means the reported guarantee is wrong (a bug).
    ``paper_epsilon`` (e.g. the epsilon a published TLDP claims as pure
    epsilon-LDP) is tested as a pure claim: ``paper_claim_violated`` when the
    bound ignoring delta exceeds it.
    """
    gu = mechanism.guarantee(tuple(record_shape))
    dom = gu.domain
    res = empirical_epsilon(
        mechanism_sampler(mechanism),
        record_shape,
        low=dom.low,
        high=dom.high,
        claimed_epsilon=gu.epsilon_element,
        claimed_delta=gu.delta_element,
        samples=samples,
        alpha=alpha,
        element=element,
        seed=seed,
    )
    res["mechanism"] = gu.mechanism
    res["record_shape"] = list(record_shape)
    res["guarantee"] = gu.as_dict()
    if paper_epsilon is not None:
        res["paper_epsilon"] = paper_epsilon
        res["paper_claim_violated"] = res["epsilon_lb_pure"] > paper_epsilon
    return res
