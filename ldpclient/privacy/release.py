"""The type boundary between private data and everything downstream.

Only :mod:`ldpclient.privacy` reads raw record tensors. It hands out
:class:`Release` objects (the LDP output plus its :class:`Guarantee`). Every later
stage (post-processing, augmentation, teachers) works on a ``Release`` or on
:class:`Derived` tensors made from releases by post-processing, which cost no
further privacy. Neither class can be built from a raw tensor outside this
package: ``Release`` needs a private token, and ``Derived`` can only be made from
a ``Release`` or another ``Derived``. Teachers reject plain tensors with
``TypeError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence, Union

import torch

from .guarantee import Guarantee

_RELEASE_TOKEN = object()  # only code inside ldpclient.privacy may mint releases
_DERIVED_TOKEN = object()  # ... and Derived only comes from a Release (from_release, combine, map)


class Reconstruction(Protocol):
    """What a release in another basis carries to rebuild records from its values (post-processing)."""

    def inverse(self, coef: torch.Tensor) -> torch.Tensor:
        """Records ``(N, *record_shape)`` from released values ``(N, K)``."""
        ...


class Release:
    """LDP output for a batch of N records, each noised independently.

    ``values``: float tensor ``(N, *released_shape)`` in the domain's units (the
    noise may take values outside the domain; clip as post-processing if wanted).
    ``released_shape`` is the record shape after any reduction before noise.
    ``record_shape``: the original record shape (per record, without N).
    ``reduction``: integer average-pooling factor over the two spatial axes that
    was applied before noise (1 = none).
    ``clipped_elements``: per record, how many input elements were outside the
    declared domain and were clipped before noising (``(N,)`` int64).
    ``reused``: per record, True when the ledger returned a stored release at no
    cost instead of charging a fresh one.
    ``basis``: for a release in another basis (``basis="dct"``: ``values`` are the noised coefficients,
    ``(N, K)``), what rebuilds the records from them; :meth:`upsampled` applies it. None for pixels.
    """

    __slots__ = ("_values", "guarantee", "record_shape", "reduction", "clipped_elements", "reused", "basis")

    def __init__(
        self,
        values: torch.Tensor,
        guarantee: Guarantee,
        record_shape: Sequence[int],
        *,
        reduction: int = 1,
        clipped_elements: torch.Tensor | None = None,
        reused: torch.Tensor | None = None,
        basis: Reconstruction | None = None,
        _token: object = None,
    ) -> None:
        if _token is not _RELEASE_TOKEN:
            raise TypeError(
                "Release objects are produced by ldpclient.privacy mechanisms or the ledger only"
            )
        n = values.shape[0]
        self._values = values.detach()
        self.guarantee = guarantee
        self.record_shape = tuple(int(s) for s in record_shape)
        self.reduction = int(reduction)
        self.clipped_elements = (
            torch.zeros(n, dtype=torch.int64) if clipped_elements is None else clipped_elements
        )
        self.reused = torch.zeros(n, dtype=torch.bool) if reused is None else reused
        self.basis = basis

    @property
    def values(self) -> torch.Tensor:
        """A copy of the noised tensor ``(N, *released_shape)`` (the release itself stays immutable)."""
        return self._values.clone()

    @property
    def released_shape(self) -> tuple[int, ...]:
        return tuple(self._values.shape[1:])

    def __len__(self) -> int:
        return int(self._values.shape[0])

    def __getitem__(self, index: Union[int, slice, Sequence[int], torch.Tensor]) -> "Release":
        """Sub-batch of records (always a Release; an int index keeps the batch axis)."""
        if isinstance(index, int):
            index = slice(index, index + 1 if index != -1 else None)
        return Release(
            self._values[index],
            self.guarantee,
            self.record_shape,
            reduction=self.reduction,
            clipped_elements=self.clipped_elements[index],
            reused=self.reused[index],
            basis=self.basis,
            _token=_RELEASE_TOKEN,
        )

    def upsampled(self, mode: str = "nearest") -> "Derived":
        """Post-processing: restore the original record shape after a reduction, or rebuild the records from
        the coefficients of a release in another basis (``mode`` is then unused).

        ``mode`` is ``"nearest"`` or ``"bilinear"``. Free: it only sees the release.
        """
        basis = self.basis
        if basis is not None:
            return Derived.from_release(self).map(
                lambda v: basis.inverse(v).to(v.dtype), "reconstruct(inverse transform)"
            )
        return Derived.from_release(self).map(
            lambda v: upsample(v, self.record_shape, mode), f"upsample({mode})"
        )

    def __repr__(self) -> str:
        return f"Release(n={len(self)}, shape={self.released_shape}, {self.guarantee.summary()})"


class ReleaseBuilder:
    """One release of ``n`` records assembled from chunk releases, in order, in preallocated tensors.

    The records are noised independently, so the per-record guarantee of the whole is the
    chunks' common one; a chunk with another guarantee, record shape or reduction is refused
    (ValueError). Memory: the n released values are allocated once, at the first chunk, and
    each chunk is copied in and can be freed (collecting the chunks and concatenating them
    kept each chunk alive between the chunks' large transient buffers, which grew the C
    heap with n: measured, a 1,000,000-image label run's heap reached 2.4 GB).
    """

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"a release needs at least one record, got n={n}")
        self.n = int(n)
        self._first: Release | None = None
        self._values: torch.Tensor | None = None
        self._clipped = torch.zeros(self.n, dtype=torch.int64)
        self._reused = torch.zeros(self.n, dtype=torch.bool)
        self._filled = 0

    def add(self, part: Release) -> None:
        """Append the records of ``part`` after those added so far."""
        if not isinstance(part, Release):
            raise ValueError(f"expected a Release, got {type(part).__name__}")
        k, at = len(part), self._filled
        if at + k > self.n:
            raise ValueError(f"{at + k} records added to a release of {self.n}")
        if self._first is None or self._values is None:
            self._first = part
            self._values = torch.empty((self.n, *part.released_shape), dtype=part._values.dtype)
        elif (part.guarantee, part.record_shape, part.reduction) != (
            self._first.guarantee, self._first.record_shape, self._first.reduction
        ) or part.released_shape != self._first.released_shape:
            raise ValueError("cannot concatenate releases made with different guarantees, shapes or reductions")
        self._values[at : at + k] = part._values
        self._clipped[at : at + k] = part.clipped_elements
        self._reused[at : at + k] = part.reused
        self._filled = at + k

    def build(self) -> Release:
        """The whole release (every one of the ``n`` records must have been added)."""
        if self._first is None or self._values is None or self._filled != self.n:
            raise ValueError(f"{self._filled} of {self.n} records added; a release needs all of them")
        first = self._first
        return Release(self._values, first.guarantee, first.record_shape, reduction=first.reduction,
                       clipped_elements=self._clipped, reused=self._reused, basis=first.basis,
                       _token=_RELEASE_TOKEN)


def upsample(values: torch.Tensor, record_shape: Sequence[int], mode: str = "nearest") -> torch.Tensor:
    """Resize ``(N, C, h, w)`` values to ``(N, *record_shape)`` (post-processing, no privacy cost)."""
    target = tuple(record_shape)
    if tuple(values.shape[1:]) == target:
        return values
    if mode not in ("nearest", "bilinear"):
        raise ValueError(f"upsample mode must be 'nearest' or 'bilinear', got {mode!r}")
    size = target[-2:]
    kwargs = {"align_corners": False} if mode == "bilinear" else {}
    return torch.nn.functional.interpolate(values.float(), size=size, mode=mode, **kwargs)


def _check_row_wise(
    fn: Callable[[torch.Tensor], torch.Tensor], values: torch.Tensor, out: torch.Tensor, step: str
) -> None:
    """Refuse (TypeError) a ``map`` function whose output rows do not follow its input rows."""
    n = values.shape[0]
    if n == 0:
        return
    probe = torch.tensor([1, 0] if n > 1 else [0], dtype=torch.int64)
    again = fn(values[probe])
    if (
        not isinstance(again, torch.Tensor)
        or again.shape != (len(probe), *out.shape[1:])
        or not torch.allclose(again.to(out.dtype), out[probe], rtol=1e-5, atol=1e-6, equal_nan=True)
    ):
        raise TypeError(
            f"post-processing step {step!r} is not a row-wise function of the release (its output does not follow "
            "its input rows): a raw tensor cannot be passed off as post-processing"
        )


@dataclass(frozen=True)
class Derived:
    """Tensors computed from releases by post-processing only (no extra privacy cost).

    ``values``: ``(Q, *shape)`` float tensor. ``sources``: ``(Q, k)`` int64 indices
    of the records (within the originating release batch) each row was made from,
    -1 for unused slots. ``guarantee``: the guarantee of the underlying release;
    post-processing never changes it. ``steps``: the post-processing history.
    ``ids``: optional ``(Q,)`` int64 query ids from a query plan.
    """

    values: torch.Tensor
    sources: torch.Tensor
    guarantee: Guarantee
    steps: tuple[str, ...] = ()
    ids: torch.Tensor | None = None
    _token: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._token is not _DERIVED_TOKEN:
            raise TypeError(
                "Derived tensors come only from releases: use Derived.from_release, Derived.combine or "
                ".map (a raw tensor must go through an ldpclient.privacy mechanism first)"
            )

    @classmethod
    def from_release(cls, release: Release) -> "Derived":
        if not isinstance(release, Release):
            raise TypeError(f"expected a Release, got {type(release).__name__}")
        n = len(release)
        return cls(
            values=release._values,
            sources=torch.arange(n, dtype=torch.int64).unsqueeze(1),
            guarantee=release.guarantee,
            _token=_DERIVED_TOKEN,
        )

    @classmethod
    def combine(
        cls,
        origin: Union[Release, "Derived"],
        values: torch.Tensor,
        sources: torch.Tensor,
        step: str,
        ids: torch.Tensor | None = None,
    ) -> "Derived":
        """New rows computed from ``origin``'s rows (e.g. LDPKiT-Sup averages of pairs).

        ``origin`` must be a Release or Derived: this is what keeps raw tensors out.
        ``sources`` indexes records of the originating release batch.
        """
        if isinstance(origin, Release):
            origin = cls.from_release(origin)
        if not isinstance(origin, Derived):
            raise TypeError(
                f"post-processing needs a Release or Derived origin, got {type(origin).__name__}"
            )
        if values.shape[0] != sources.shape[0]:
            raise ValueError("values and sources must have the same number of rows")
        return cls(values.detach(), sources, origin.guarantee, origin.steps + (step,), ids, _token=_DERIVED_TOKEN)

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor], step: str) -> "Derived":
        """Apply a data-independent function to every row (post-processing).

        ``fn`` must be row-wise: each output row a function of the same input row only.
        That is checked on a probe (the first two rows, swapped, must give the same two
        output rows), so a function that ignores its input, such as one returning a raw
        tensor it closed over, is refused with ``TypeError`` instead of being sent as a
        release. The check guards against mistakes; code running with the raw data can
        always send it by other means, and the guarantee covers what ldpclient sends.
        """
        out = fn(self.values)
        if not isinstance(out, torch.Tensor) or out.dim() < 1 or out.shape[0] != self.values.shape[0]:
            raise ValueError(f"post-processing step {step!r} changed the number of rows")
        _check_row_wise(fn, self.values, out, step)
        return Derived(
            out.detach(), self.sources, self.guarantee, self.steps + (step,), self.ids, _token=_DERIVED_TOKEN
        )

    @property
    def record_shape(self) -> tuple[int, ...]:
        """Shape of one row (without the batch axis)."""
        return tuple(self.values.shape[1:])

    def rows(self, index: torch.Tensor) -> "Derived":
        """The rows ``index`` (int64 ``(K,)``) with their sources, ids and history (selection is not a new step).

        The same interface as :class:`~ldpclient.transfer.postprocess.ReleaseRows`, so query plans read either."""
        ids = self.ids[index] if self.ids is not None else None
        return Derived(self.values[index], self.sources[index], self.guarantee, self.steps, ids, _token=_DERIVED_TOKEN)

    def __len__(self) -> int:
        return int(self.values.shape[0])


Releasable = Union[Release, Derived]


def as_derived(obj: object) -> Derived:
    """Accept a Release or Derived; reject anything else (raw tensors) with TypeError."""
    if isinstance(obj, Derived):
        return obj
    if isinstance(obj, Release):
        return Derived.from_release(obj)
    raise TypeError(
        f"expected a Release or Derived (LDP output), got {type(obj).__name__}: "
        "raw tensors must go through an ldpclient.privacy mechanism first"
    )
