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
from typing import Callable, Iterator, Protocol, Sequence, TypeAlias, Union, runtime_checkable

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


def source_ids(source: RecordSource, indices: Sequence[int] | np.ndarray) -> list[bytes | str] | None:
    """The ids of the records' sources (what the ledger sums a record's spend under), or None.

    A source that knows where its records came from (a decoded folder: each file's
    SHA-256) has a ``source_ids(indices)`` method; for one that does not, the ledger
    falls back on the record's canonical values (see ``Ledger.source_keys``).
    """
    method = getattr(source, "source_ids", None)
    if method is None or not getattr(source, "has_source_ids", True):
        return None
    return list(method(indices))


class _SourceIds:
    """Optional per-record source ids: ``(N, 32)`` uint8 (a SHA-256 each), appended with the records."""

    def __init__(self) -> None:
        self._ids: list[np.ndarray] = []
        self._known = True

    def add(self, ids: Sequence[bytes] | None, count: int) -> None:
        if ids is None:
            self._known = False
            return
        if len(ids) != count or any(len(i) != 32 for i in ids):
            raise ValueError(f"source ids must be {count} SHA-256 digests (32 bytes each)")
        self._ids.append(np.frombuffer(b"".join(ids), dtype=np.uint8).reshape(count, 32))

    def get(self, indices: Sequence[int] | np.ndarray) -> list[bytes]:
        if not self._known or not self._ids:
            raise AttributeError("these records have no source ids")
        if len(self._ids) > 1:
            self._ids = [np.concatenate(self._ids)]
        rows = self._ids[0][np.asarray(indices, dtype=np.int64).reshape(-1)]
        return [r.tobytes() for r in rows]

    @property
    def known(self) -> bool:
        return self._known and bool(self._ids)


class TensorRecords:
    """A :class:`RecordSource` over a tensor already in memory (tests, embedding apps, small folders).

    ``ids``: optional one source id per record (bytes or str), handed to the ledger so
    that a record's spend is summed per source (see ``Ledger.source_keys``).
    """

    def __init__(self, records: torch.Tensor, ids: Sequence[bytes | str] | None = None) -> None:
        if not isinstance(records, torch.Tensor) or records.dim() < 2:
            raise ValueError("records must be a tensor (N, *record_shape)")
        if not records.is_floating_point():
            raise ValueError(f"records must be a float tensor, got {records.dtype}")
        if ids is not None and len(ids) != records.shape[0]:
            raise ValueError(f"ids must give one id per record: {len(ids)} ids for {records.shape[0]} records")
        self.records = records
        self._ids = None if ids is None else list(ids)

    @property
    def has_source_ids(self) -> bool:
        return self._ids is not None

    def source_ids(self, indices: Sequence[int] | np.ndarray) -> list[bytes | str]:
        """The ids given for these records (see ``has_source_ids``)."""
        if self._ids is None:
            raise AttributeError("these records have no source ids")
        return [self._ids[int(i)] for i in np.asarray(indices, dtype=np.int64).reshape(-1)]

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
        self._ids = _SourceIds()
        self._contents = _SourceIds()

    def source_ids(self, indices: Sequence[int] | np.ndarray) -> list[bytes]:
        """The SHA-256 of the file each record was decoded from (when every append gave ``ids``)."""
        return self._ids.get(indices)

    @property
    def has_source_ids(self) -> bool:
        return self._ids.known

    def content_ids(self, indices: Sequence[int] | np.ndarray) -> list[bytes]:
        """What each record's image shows (:func:`~ldpclient.io.decoding.content_id`; when every append gave
        ``contents``)."""
        return self._contents.get(indices)

    @property
    def has_content_ids(self) -> bool:
        return self._contents.known

    @property
    def record_shape(self) -> tuple[int, ...]:
        return self._shape

    def __len__(self) -> int:
        return self._n

    def append(self, records: torch.Tensor, ids: Sequence[bytes] | None = None,
               contents: Sequence[bytes] | None = None) -> None:
        """Add ``(B, *record_shape)`` records at the end (stored as float32); ``ids``: their sources'
        SHA-256 digests, ``contents``: their images' content ids (32 bytes each), kept in memory."""
        if tuple(records.shape[1:]) != self._shape:
            raise ValueError(f"records of shape {tuple(records.shape[1:])} do not fit a source of {self._shape}")
        self._ids.add(ids, int(records.shape[0]))
        self._contents.add(contents, int(records.shape[0]))
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


class MappedRecords:
    """A :class:`RecordSource` whose reads pass through ``fn`` (e.g. ``[0, 1]`` values to a teacher's range);
    it keeps the source's shape and source ids."""

    def __init__(self, source: RecordSource, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.source = source
        self.fn = fn

    @property
    def record_shape(self) -> tuple[int, ...]:
        return tuple(self.source.record_shape)

    def __len__(self) -> int:
        return len(self.source)

    def read(self, indices: Sequence[int] | np.ndarray) -> torch.Tensor:
        return self.fn(self.source.read(indices)).to(torch.float32)

    @property
    def has_source_ids(self) -> bool:
        return bool(getattr(self.source, "has_source_ids", hasattr(self.source, "source_ids")))

    def source_ids(self, indices: Sequence[int] | np.ndarray) -> list[bytes | str]:
        ids = source_ids(self.source, indices)
        if ids is None:
            raise AttributeError("these records have no source ids")
        return ids


class SubsetRecords:
    """The records of ``source`` at ``indices`` (int64, in that order), as a :class:`RecordSource`:
    record ``i`` of the view is record ``indices[i]`` of the source. Nothing is copied."""

    def __init__(self, source: RecordSource, indices: Sequence[int] | np.ndarray | torch.Tensor) -> None:
        self.source = source
        self.indices = np.asarray(indices, dtype=np.int64)
        if self.indices.ndim != 1 or (
            len(self.indices) and not 0 <= self.indices.min() <= self.indices.max() < len(source)
        ):
            raise ValueError("subset indices must be a 1-D list of positions in the source")

    @property
    def record_shape(self) -> tuple[int, ...]:
        return tuple(self.source.record_shape)

    def __len__(self) -> int:
        return len(self.indices)

    def read(self, indices: Sequence[int] | np.ndarray) -> torch.Tensor:
        return self.source.read(self.indices[np.asarray(indices, dtype=np.int64)])

    @property
    def has_source_ids(self) -> bool:
        return bool(getattr(self.source, "has_source_ids", hasattr(self.source, "source_ids")))

    def source_ids(self, indices: Sequence[int] | np.ndarray) -> list[bytes | str]:
        ids = source_ids(self.source, self.indices[np.asarray(indices, dtype=np.int64)])
        if ids is None:
            raise AttributeError("these records have no source ids")
        return ids


#: Records as the library takes them: a float ``(N, *record shape)`` tensor, or a :class:`RecordSource`.
Records: TypeAlias = Union[torch.Tensor, RecordSource]


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


__all__ = [
    "DiskRecords",
    "Records",
    "MappedRecords",
    "RecordSource",
    "SubsetRecords",
    "TensorRecords",
    "as_record_source",
    "iter_batches",
    "source_ids",
]
