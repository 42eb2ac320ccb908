"""Shared pieces for the ledger tests and the crash-test child process.

``make_mechanism`` returns the real :func:`ldpclient.privacy.laplace` with a
per-record epsilon, ``make_delta_mechanism`` the real Gaussian. ``Spy`` wraps any
mechanism and counts ``release`` calls (same config, so the same ledger identity).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ldpclient.privacy import Guarantee, Mechanism, Release, gaussian, laplace


def make_mechanism(epsilon: float) -> Mechanism:
    """The real Laplace mechanism with a per-record epsilon (nats)."""
    return laplace(epsilon, per="record")


def make_delta_mechanism(epsilon: float, delta: float) -> Mechanism:
    """The real (analytic) Gaussian mechanism: per-record epsilon and delta > 0."""
    return gaussian(epsilon, delta, per="record")


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
