"""Shared pieces for the ledger tests and the crash-test child process.

``make_mechanism`` returns the real :func:`ldpclient.privacy.laplace` (per-record
epsilon) when it exists, else a minimal Laplace test double. ``Spy`` wraps any
mechanism and counts ``release`` calls (same config, so the same ledger identity).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from ldpclient.privacy.base import Mechanism
from ldpclient.privacy.guarantee import Domain, Guarantee
from ldpclient.privacy.release import _RELEASE_TOKEN, Release


class ToyLaplace(Mechanism):
    """Test double: Laplace noise, scale = elements / epsilon per record, optional declared delta."""

    name = "toy-laplace"

    def __init__(self, epsilon: float, delta: float = 0.0) -> None:
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        self.domain = Domain(0.0, 1.0)
        self.reduction = 1

    def guarantee(self, record_shape: Sequence[int]) -> Guarantee:
        n = math.prod(record_shape)
        return Guarantee(
            self.name, self.epsilon / n, self.delta / n, self.epsilon, self.delta, n, self.domain,
            params={"scale": n / self.epsilon},
        )

    def release(self, records: torch.Tensor, *, generator: torch.Generator | None = None,
                public: bool = False) -> Release:
        record_shape = tuple(records.shape[1:])
        g = self.guarantee(record_shape)
        x = records.float()
        clipped = ((x < 0) | (x > 1)).reshape(x.shape[0], -1).sum(1)
        noise = self.noise(x.shape, generator=generator)
        return Release(x.clamp(0, 1) + noise, g.for_public_input() if public else g, record_shape,
                       clipped_elements=clipped, _token=_RELEASE_TOKEN)

    def noise(self, shape: Sequence[int], *, generator: torch.Generator | None = None) -> torch.Tensor:
        u = torch.rand(tuple(shape), generator=generator) - 0.5
        scale = math.prod(shape[1:]) / self.epsilon
        return -scale * torch.sign(u) * torch.log1p(-2 * u.abs())

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "epsilon": self.epsilon, "delta": self.delta}


def _real(name: str) -> Any:
    """The real factory ``ldpclient.privacy.<name>``, or None while the mechanisms are not there."""
    import importlib

    for module in ("ldpclient.privacy", "ldpclient.privacy.mechanisms"):
        try:
            factory = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if factory is not None:
            return factory
    return None


def real_laplace_available() -> bool:
    return _real("laplace") is not None


def make_mechanism(epsilon: float) -> Mechanism:
    """Laplace with a per-record epsilon: the real one when the mechanisms are there."""
    laplace = _real("laplace")
    return ToyLaplace(epsilon) if laplace is None else laplace(epsilon, per="record")


def make_delta_mechanism(epsilon: float, delta: float) -> Mechanism:
    """A mechanism with delta > 0 per record: the real Gaussian when available."""
    gaussian = _real("gaussian")
    return ToyLaplace(epsilon, delta) if gaussian is None else gaussian(epsilon, delta, per="record")


class Spy(Mechanism):
    """Delegates to ``inner`` and counts release calls and released records."""

    def __init__(self, inner: Mechanism) -> None:
        self.inner = inner
        self.name = inner.name
        self.domain = inner.domain
        self.reduction = inner.reduction
        self.calls = 0
        self.records = 0

    def guarantee(self, record_shape: Sequence[int]) -> Guarantee:
        return self.inner.guarantee(record_shape)

    def release(self, records: torch.Tensor, *, generator: torch.Generator | None = None,
                public: bool = False) -> Release:
        self.calls += 1
        self.records += int(records.shape[0])
        return self.inner.release(records, generator=generator, public=public)

    def noise(self, shape: Sequence[int], *, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.inner.noise(shape, generator=generator)

    def config(self) -> dict[str, Any]:
        return self.inner.config()


def images(n: int, seed: int, shape: tuple[int, ...] = (1, 8, 8)) -> torch.Tensor:
    """Deterministic distinct float32 'images' in [0, 1]."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand((n, *shape), generator=g)
