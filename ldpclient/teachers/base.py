"""The Teacher protocol: what every adapter (remote or in-process) provides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Union, runtime_checkable

import torch

from ..privacy.release import Derived, Release

Queries = Union[Release, Derived]


@dataclass(frozen=True)
class TeacherMetadata:
    """What a teacher expects and returns.

    ``input_shape``: per-record shape without the batch axis, e.g. ``(1, 28, 28)``.
    ``datatype``: wire datatype of inputs, ``"FP32"`` (values in ``value_range``)
    or ``"UINT8"`` (0..255, meaning ``value_range`` scaled to bytes).
    ``num_classes``: labels are ints in ``[0, num_classes)``.
    ``class_names``: names by label index when the teacher publishes them.
    ``max_batch_size``: largest batch one request may carry (None = unknown).
    ``assumed``: one short phrase per fact that neither the server published nor
    the user supplied, e.g. ``"value_range [0, 1]"`` (runs print them).
    """

    name: str
    input_shape: tuple[int, ...]
    datatype: str
    num_classes: int
    class_names: tuple[str, ...] | None = None
    max_batch_size: int | None = None
    value_range: tuple[float, float] = (0.0, 1.0)
    assumed: tuple[str, ...] = ()


@runtime_checkable
class Teacher(Protocol):
    """A classifier that returns hard labels for LDP-derived queries only."""

    def metadata(self) -> TeacherMetadata:
        """Input shape, datatype, number of classes (may contact the server once)."""
        ...

    def classify(self, queries: Queries) -> torch.Tensor:
        """Hard labels, int64 ``(Q,)``, one per query row. Raw tensors raise TypeError."""
        ...
