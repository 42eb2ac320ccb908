"""Clean private records read in batches: the hand-off between data loading and the stages.

A :class:`RecordSource` is what the release, adaptation and labelling stages read
the clean private records from. It never has to hold every record at once: a
folder of images is decoded once, in chunks, into a spool file
(:class:`DiskRecords`) and read back in batches, so peak memory is O(batch), not
O(number of records).

Units: ``read`` returns float32 values already in the source's declared value
range (for a teacher-facing run, the teacher's ``value_range``), shape
``(len(indices), *record_shape)``, in the order of ``indices``.
"""

from __future__ import annotations

import math
import os
import tempfile
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


class DiskRecords:
    """A :class:`RecordSource` spooled to disk: float32 records appended in chunks, read back by index.

    The records live in an anonymous temporary file in ``directory`` (default: the
    system's temporary directory), unlinked from the start on POSIX, so nothing is left
    behind when the process ends or is killed. Reads use ``os.pread`` (no memory map), so
    the file's pages never count in this process's resident set: memory is O(batch).
    Each record takes ``4 x prod(record_shape)`` bytes on disk.
    """

    def __init__(self, record_shape: Sequence[int], directory: str | os.PathLike[str] | None = None) -> None:
        self._shape = tuple(int(s) for s in record_shape)
        if not self._shape or any(s < 1 for s in self._shape):
            raise ValueError(f"record_shape must be positive sizes, got {tuple(record_shape)}")
        self._row_bytes = 4 * math.prod(self._shape)
        self._file = tempfile.TemporaryFile(dir=directory)
        self._fd = self._file.fileno()
        self._n = 0

    @property
    def record_shape(self) -> tuple[int, ...]:
        return self._shape

    def __len__(self) -> int:
        return self._n

    def append(self, records: torch.Tensor) -> None:
        """Add ``(B, *record_shape)`` records at the end (stored as float32)."""
        if tuple(records.shape[1:]) != self._shape:
            raise ValueError(f"records of shape {tuple(records.shape[1:])} do not fit a source of {self._shape}")
        data = records.detach().to(torch.float32).contiguous().numpy().tobytes()
        written = os.pwrite(self._fd, data, self._n * self._row_bytes)
        if written != len(data):  # pragma: no cover - a full disk raises OSError first
            raise OSError(f"short write spooling records ({written} of {len(data)} bytes)")
        self._n += int(records.shape[0])

    def read(self, indices: Sequence[int] | np.ndarray) -> torch.Tensor:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self._n):
            raise IndexError(f"record index out of range [0, {self._n})")
        out = np.empty((idx.size, *self._shape), dtype=np.float32)
        flat = out.reshape(idx.size, self._row_bytes // 4)
        row = self._row_bytes
        # one pread per run of consecutive indices (a whole in-order batch is one read)
        breaks = np.flatnonzero(np.diff(idx) != 1) + 1
        for run in np.split(np.arange(idx.size), breaks) if idx.size else ():
            first, count = int(idx[run[0]]), len(run)
            data = os.pread(self._fd, count * row, first * row)
            if len(data) != count * row:
                raise OSError(f"spooled records truncated: read {len(data)} of {count * row} bytes")
            flat[run[0] : run[0] + count] = np.frombuffer(data, dtype=np.float32).reshape(count, -1)
        return torch.from_numpy(out)

    def close(self) -> None:
        """Release the temporary file (idempotent)."""
        self._file.close()

    def __enter__(self) -> "DiskRecords":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


__all__ = ["DiskRecords", "RecordSource", "TensorRecords", "as_record_source", "iter_batches"]
