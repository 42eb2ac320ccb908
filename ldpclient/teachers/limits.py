"""Plausibility limits on what a teacher declares, checked before anything is sized from it.

A teacher's metadata decides how large the client's tensors are: the private images are
decoded at its declared input shape, and labels are checked against its class count. A
hostile or broken server declaring ``[-1, 1, 100000, 100000]`` would make the client
allocate 40 GB. :class:`TeacherLimits` bounds those facts; every bound can be raised by
passing ``limits=TeacherLimits(...)`` to the adapter (``connect(..., limits=...)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..io.text import printable
from .errors import MalformedResponse


@dataclass(frozen=True)
class TeacherLimits:
    """``max_record_elements``: elements of one input (C*H*W; default 2**24, e.g. 3x2365x2365);
    ``max_dims``: axes of one input; ``max_classes``: classes of the output;
    ``max_batch_size``: a published batch limit above this is treated as this."""

    max_record_elements: int = 2**24
    max_dims: int = 4
    max_classes: int = 100_000
    max_batch_size: int = 65_536
    #: Largest magnitude of a published input value range (images: [0, 1], [0, 255], [-1, 1], [0, 65535]).
    max_abs_value: float = 1e6

    def check_input_shape(self, shape: Sequence[int], teacher: str) -> None:
        """MalformedResponse naming ``teacher`` for a declared per-record shape that cannot be right."""
        if not 1 <= len(shape) <= self.max_dims:
            raise MalformedResponse(
                f"teacher {teacher} declares an input of {len(shape)} axes {list(shape)} (limit {self.max_dims})",
                transient=False,
            )
        elements = math.prod(int(s) for s in shape)
        if elements > self.max_record_elements:
            raise MalformedResponse(
                f"teacher {teacher} declares input shape {list(shape)} = {elements:,} elements per record, over the "
                f"limit of {self.max_record_elements:,} (pass limits=TeacherLimits(max_record_elements=...) if real)",
                transient=False,
            )

    def check_value_range(self, value_range: Sequence[float], teacher: str) -> None:
        """MalformedResponse for a published input range no image model has (the noise scale follows from it)."""
        lo, hi = (float(v) for v in value_range)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi) or max(abs(lo), abs(hi)) > self.max_abs_value:
            raise MalformedResponse(
                f"teacher {teacher} publishes the input value range [{lo:g}, {hi:g}], implausible for images "
                f"(limit |value| <= {self.max_abs_value:g}); pass --value-range if the server's is wrong",
                transient=False,
            )

    def check_classes(self, num_classes: int, teacher: str) -> None:
        if num_classes > self.max_classes:
            raise MalformedResponse(
                f"teacher {teacher} declares {num_classes:,} classes, over the limit of {self.max_classes:,}",
                transient=False,
            )


#: Longest class name accepted from a teacher or a --class-names file (characters).
MAX_CLASS_NAME_CHARS = 256


def check_class_names(names: Sequence[str], teacher: str) -> None:
    """MalformedResponse for a class name longer than :data:`MAX_CLASS_NAME_CHARS` (names are never echoed)."""
    for k, name in enumerate(names):
        if len(str(name)) > MAX_CLASS_NAME_CHARS:
            raise MalformedResponse(
                f"teacher {printable(teacher, max_chars=200)} publishes class name {k} of {len(str(name)):,} "
                "characters "
                f"(limit {MAX_CLASS_NAME_CHARS})",
                transient=False,
            )


__all__ = ["MAX_CLASS_NAME_CHARS", "TeacherLimits", "check_class_names"]
