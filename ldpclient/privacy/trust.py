"""Trust-adaptive differential privacy (TADP): a per-teacher privacy budget.

The data owner gives each teacher an *inverse trust score* ``T`` in [0, 1]
(0 = fully trusted, 1 = least trusted). The policy maps it linearly to

    epsilon_T = eps_max - T * (eps_max - eps_min)

so a trusted teacher gets the largest epsilon (least noise) and the least
trusted one the smallest.

Unit: every epsilon of a :class:`TrustPolicy` is **per record** (in nats): the
privacy cost of releasing one whole record once to that teacher, the figure the
ledger charges and caps. Build the teacher's mechanism with a per-record
epsilon, e.g. ``laplace(eps, per="record")``. Each teacher is its own ledger
scope, so sending one record to two teachers is two fresh releases and costs
``epsilon_A + epsilon_B`` (see :meth:`TrustPolicy.total_epsilon`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

__all__ = ["TrustPolicy"]


def _finite(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)  # type: ignore[arg-type]  # numpy / torch scalars; anything else -> caught below
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a real number, got {value!r}") from None
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


@dataclass(frozen=True)
class TrustPolicy:
    """Linear map from inverse trust score ``T`` in [0, 1] to a per-record epsilon.

    ``eps_max``: per-record epsilon for a fully trusted teacher (T = 0).
    ``eps_min``: per-record epsilon for the least trusted teacher (T = 1).
    Requires ``0 < eps_min <= eps_max``, both finite.
    """

    eps_max: float
    eps_min: float

    def __post_init__(self) -> None:
        eps_max = _finite("eps_max", self.eps_max)
        eps_min = _finite("eps_min", self.eps_min)
        if eps_min <= 0:
            raise ValueError(f"eps_min must be > 0 (a per-record epsilon), got {eps_min}")
        if eps_min > eps_max:
            raise ValueError(f"eps_min ({eps_min}) must be <= eps_max ({eps_max})")
        object.__setattr__(self, "eps_max", eps_max)
        object.__setattr__(self, "eps_min", eps_min)

    def epsilon_for(self, T: float) -> float:
        """Per-record epsilon for inverse trust score ``T`` in [0, 1]: ``eps_max - T*(eps_max - eps_min)``."""
        t = _finite("inverse trust score T", T)
        if not 0.0 <= t <= 1.0:
            raise ValueError(f"inverse trust score T must be in [0, 1], got {T!r}")
        eps = self.eps_max - t * (self.eps_max - self.eps_min)
        # guard against rounding just outside the interval
        return min(max(eps, self.eps_min), self.eps_max)

    def for_teachers(self, scores: Mapping[str, float]) -> dict[str, float]:
        """Per-record epsilon for each teacher, from ``{teacher name: inverse trust score T}``."""
        if not isinstance(scores, Mapping):
            raise ValueError(f"scores must be a mapping teacher -> inverse trust score, got {type(scores).__name__}")
        out: dict[str, float] = {}
        for name, t in scores.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"teacher names must be non-empty strings, got {name!r}")
            try:
                out[name] = self.epsilon_for(t)
            except ValueError as exc:
                raise ValueError(f"teacher {name!r}: {exc}") from None
        return out

    def total_epsilon(self, scores: Mapping[str, float]) -> float:
        """Per-record epsilon of sending one record once to every teacher in ``scores`` (basic composition: the sum)."""
        return math.fsum(self.for_teachers(scores).values())
