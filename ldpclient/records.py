"""Clean private records read in batches: the hand-off between data loading and the stages.

A :class:`RecordSource` is what the release, adaptation and labelling stages read
the clean private records from. It never has to hold every record at once: a
folder of images decodes the requested files on each :meth:`RecordSource.read`,
so peak memory is O(batch), not O(number of records).

Units: ``read`` returns float32 values already in the source's declared value
range (for a teacher-facing run, the teacher's ``value_range``), shape
``(len(indices), *record_shape)``, in the order of ``indices``.
"""

from __future__ import annotations

from typing import Iterator, Protocol, Sequence, runtime_checkable

import numpy as np
import torch


@runtime_checkable
class RecordSource(Protocol):
    """Random access to ``len(self)`` clean records of shape ``record_shape`` (per record, no batch axis)."""

    @property
    def record_shape(self) -> tuple[int, ...]: ...

    def __len__(self) -> int: ...

    def read(self, indices: Sequence[int] | np.ndarray) -> torch.Tensor:
        """Float32 records ``(len(indices), *record_shape)`` in the order given."""
        ...


class TensorRecords:
    """A :class:`RecordSource` over a tensor already in memory (tests, embedding apps, small folders)."""

    def __init__(self, records: torch.Tensor) -> None:
        if not isinstance(records, torch.Tensor) or records.dim() < 2:
            raise ValueError("records must be a tensor (N, *record_shape)")
        if not records.is_floating_point():
            raise ValueError(f"records must be a float tensor, got {records.dtype}")
        self.records = records

    @property
    def record_shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.records.shape[1:])

    def __len__(self) -> int:
        return int(self.records.shape[0])

    def read(self, indices: Sequence[int] | np.ndarray) -> torch.Tensor:
        index = torch.as_tensor(np.asarray(indices, dtype=np.int64))
        return self.records.index_select(0, index).to(torch.float32)


def as_record_source(records: RecordSource | torch.Tensor) -> RecordSource:
    """Wrap a tensor as :class:`TensorRecords`; pass a source through unchanged."""
    if isinstance(records, torch.Tensor):
        return TensorRecords(records)
    if isinstance(records, RecordSource):
        return records
    raise TypeError(f"records must be a tensor or a RecordSource, got {type(records).__name__}")


def iter_batches(
    source: RecordSource, batch_size: int, order: Sequence[int] | np.ndarray | None = None
) -> Iterator[tuple[np.ndarray, torch.Tensor]]:
    """Yield ``(indices, records)`` over ``order`` (default ``0..n-1``), ``batch_size`` records at a time."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    idx = np.arange(len(source), dtype=np.int64) if order is None else np.asarray(order, dtype=np.int64)
    for start in range(0, len(idx), batch_size):
        chunk = idx[start : start + batch_size]
        yield chunk, source.read(chunk)


__all__ = ["RecordSource", "TensorRecords", "as_record_source", "iter_batches"]
