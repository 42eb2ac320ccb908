"""The mechanism interface every LDP mechanism implements.

A mechanism is configured once (epsilon and its unit, domain, reduction, ...) and
then noises batches ``(N, *record_shape)`` of records, each record independently.
Its guarantee depends only on its configuration and the record shape, so the
ledger can check the per-record cap *before* any sampling.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import torch

from .guarantee import Domain, Guarantee
from .release import Reconstruction, Release


class Mechanism(ABC):
    """Base class of all LDP mechanisms in :mod:`ldpclient.privacy`.

    Subclasses set ``name`` (e.g. ``"laplace"``), ``domain`` and ``reduction``
    (integer average-pooling factor over the last two axes applied before noise,
    1 = none) and implement the abstract methods.
    """

    name: str
    domain: Domain
    reduction: int = 1

    @abstractmethod
    def guarantee(self, record_shape: Sequence[int]) -> Guarantee:
        """The cost of releasing one record of ``record_shape`` once (no sampling)."""

    @abstractmethod
    def release(
        self,
        records: torch.Tensor,
        *,
        generator: torch.Generator | None = None,
        public: bool = False,
    ) -> Release:
        """Noise a batch ``(N, *record_shape)``: validate, clip to the domain, reduce, noise.

        ``generator``: None means a fresh generator seeded from the OS CSPRNG.
        ``public=True`` marks the input as public (e.g. blank records of the
        data-free baseline): same noise, but the guarantee is epsilon 0.
        """

    @abstractmethod
    def noise(self, shape: Sequence[int], *, generator: torch.Generator | None = None) -> torch.Tensor:
        """Fresh noise of this mechanism's (noising branch) distribution and scale, ``shape`` float.

        Used by LDPKiT-Rand to add a second noise layer to a release
        (post-processing: it never sees raw data).
        """

    @abstractmethod
    def config(self) -> dict[str, object]:
        """JSON-serialisable parameters identifying this mechanism (ledger key, reports)."""

    def reconstruction(self, record_shape: Sequence[int]) -> Reconstruction | None:
        """What rebuilds records of ``record_shape`` from released values in another basis (the ledger attaches
        it to the releases it returns); None, the default, for releases of pixels."""
        return None
