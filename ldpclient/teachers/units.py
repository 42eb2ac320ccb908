"""A teacher presented in other value units: :class:`ByteUnitsTeacher` (integer bytes 0..255)."""

from __future__ import annotations

import dataclasses

import torch

from ..privacy.release import Derived, as_derived
from .base import Queries, Teacher, TeacherMetadata, as_teacher
from .billing import BillingGuard
from .result import InferResult


class ByteUnitsTeacher(Teacher):
    """Present a teacher in integer byte units 0..255 (for ``discrete-tldp``, whose domain is {0..255}).

    Records are released in 0..255; queries are mapped back to the wrapped
    teacher's value range (``lo + v / 255 * (hi - lo)``) before sending, which is
    post-processing of releases (free). The student then trains and predicts in the
    same byte units. Everything else (journal scope, request accounting, billing)
    is the wrapped adapter's (``inner``, any teacher :func:`as_teacher` accepts).
    """

    def __init__(self, inner: Teacher | object) -> None:
        self.inner = as_teacher(inner)
        self._meta_inner = self.inner.metadata()
        self._meta = dataclasses.replace(self._meta_inner, value_range=(0.0, 255.0))
        self.journal_scope = self.inner.journal_scope

    def _to_inner(self, queries: Queries) -> Derived:
        lo, hi = (float(v) for v in self._meta_inner.value_range)
        return as_derived(queries).map(lambda v: lo + v.clamp(0, 255) * ((hi - lo) / 255.0), "bytes->value_range")

    def metadata(self) -> TeacherMetadata:
        return self._meta

    def classify(self, queries: Queries) -> torch.Tensor:
        return self.inner.classify(self._to_inner(queries))

    def infer(
        self, queries: Queries, *, request_id: str | None = None, billing: BillingGuard | None = None
    ) -> InferResult:
        return self.inner.infer(self._to_inner(queries), request_id=request_id, billing=billing)

    def requests_for(self, n: int) -> int:
        return self.inner.requests_for(n)

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"ByteUnitsTeacher({self.inner!r})"
