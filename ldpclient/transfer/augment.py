"""LDPKiT query expansion: many teacher queries from n releases, by post-processing only.

A :class:`QueryPlan` maps every query id ``q`` in ``[0, Q)`` to a recipe:

* **LDPKiT-Sup** (``kind="sup"``): the average ``(r_i + r_j) / 2`` of two releases,
  ``i < j``. We use **unordered** pairs: the average is symmetric, so the ordered
  pairs ``(i, j)`` and ``(j, i)`` that the paper counts give the same query twice.
  With ``n`` releases there are ``n(n-1)/2`` distinct queries.
* **LDPKiT-Rand** (``kind="rand"``): ``r_i`` plus a fresh draw of the base
  mechanism's noise (same distribution and scale as the release's noise by default,
  times ``rand_scale``), drawn with a per-query seed. Where the mechanism reduced
  the record before noise, the extra noise is drawn at the released (reduced) shape
  and resized like the release.
* **identity** (``kind="identity"``): the releases themselves, ``Q = n``.
* **Mixing**: ``blank_fraction`` of the queries can be built the same way from a
  second set of *public* releases (blank records released with ``public=True``:
  epsilon 0), e.g. to test whether data-free queries help the student.

Sampling is without replacement and O(batch) in memory: a seeded Feistel
permutation (with cycle walking) maps query ids onto the recipe index space, and
``pair_from_index`` maps a pair index to ``(i, j)`` in O(1). Nothing ever holds all
``Q`` queries or recipes. The same plan (same config and seed) gives the same
queries in a new process, which is what resume and training epochs rely on.

Batches carry a stable id ``f"{plan.fingerprint}:{batch_index}"`` for the query
journal. Outputs are :class:`~ldpclient.privacy.Derived` objects with the base
release's guarantee: augmentation is post-processing and costs no privacy.
Inputs must be a ``Release`` or ``Derived``; raw tensors raise ``TypeError``.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from ..privacy.base import Mechanism
from ..privacy.release import Derived, Releasable, as_derived, upsample
from .postprocess import ReleaseRows

KINDS = ("sup", "rand", "identity")

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def _derive_seed(*parts: int | str) -> int:
    """A 63-bit seed from labelled parts (stable across processes and platforms)."""
    h = hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).digest()
    return int.from_bytes(h[:8], "little") >> 1


class FeistelPermutation:
    """A seeded pseudo-random bijection of ``[0, size)`` evaluated in O(1) per index.

    Balanced Feistel network (``rounds`` rounds, splitmix64 round function) over
    the smallest even-bit power of two >= ``size``; indices that land outside
    ``[0, size)`` are walked again through the network (cycle walking), which
    keeps it a bijection of ``[0, size)``. Not cryptographic; it only needs to be
    a well-mixed, reproducible shuffle. ``size`` up to 2**62.
    """

    def __init__(self, size: int, seed: int, rounds: int = 6) -> None:
        if size < 1:
            raise ValueError(f"permutation size must be >= 1, got {size}")
        if size > 2**62:
            raise ValueError(f"permutation size {size} too large (max 2**62)")
        self.size = int(size)
        bits = max(2, (self.size - 1).bit_length())
        self.half = (bits + 1) // 2
        self.mask = np.uint64((1 << self.half) - 1)
        self.keys = [np.uint64(_derive_seed("feistel", seed, size, r)) for r in range(rounds)]

    def _round_trip(self, x: np.ndarray) -> np.ndarray:
        h = np.uint64(self.half)
        left = x >> h
        right = x & self.mask
        for key in self.keys:
            f = _mix64(right ^ key) & self.mask
            left, right = right, left ^ f
        return (left << h) | right

    def __call__(self, index: np.ndarray | Sequence[int]) -> np.ndarray:
        """Permuted positions (int64) of ``index`` (ints in ``[0, size)``)."""
        idx = np.asarray(index, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.size):
            raise ValueError(f"permutation index out of range [0, {self.size})")
        if self.size == 1:
            return np.zeros_like(idx)
        out = self._round_trip(idx.astype(np.uint64))
        bad = out >= np.uint64(self.size)
        while bad.any():
            out[bad] = self._round_trip(out[bad])
            bad = out >= np.uint64(self.size)
        return out.astype(np.int64)


def num_pairs(n: int) -> int:
    """Number of unordered pairs ``i < j`` of ``n`` releases: ``n(n-1)/2``."""
    return n * (n - 1) // 2


def check_sup_queries(num_queries: int, n: int, *, option: str, instead: str) -> None:
    """ValueError naming ``option`` when ``num_queries`` Sup queries exceed the distinct pairs of ``n`` records
    (``instead``: the alternative the message suggests)."""
    pairs = num_pairs(n)
    if num_queries > pairs:
        raise ValueError(
            f"{option} {num_queries} exceeds the {pairs} distinct Sup pairs of {n} records; lower it or use {instead}"
        )


def pair_from_index(k: np.ndarray | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """O(1) map of pair index ``k = j(j-1)/2 + i`` to ``(i, j)`` with ``0 <= i < j``.

    The order (colexicographic) does not depend on ``n``: the pairs of ``n``
    releases are exactly the indices ``[0, n(n-1)/2)``.
    """
    k = np.asarray(k, dtype=np.int64)
    if k.size and k.min() < 0:
        raise ValueError("pair index must be >= 0")
    j = ((1.0 + np.sqrt(1.0 + 8.0 * k.astype(np.float64))) / 2.0).astype(np.int64)
    # correct float rounding: need j(j-1)/2 <= k < j(j+1)/2
    j = np.where(j * (j - 1) // 2 > k, j - 1, j)
    j = np.where(j * (j + 1) // 2 <= k, j + 1, j)
    i = k - j * (j - 1) // 2
    return i, j


def pair_to_index(i: np.ndarray | Sequence[int], j: np.ndarray | Sequence[int]) -> np.ndarray:
    """Inverse of :func:`pair_from_index` (requires ``i < j``)."""
    i = np.asarray(i, dtype=np.int64)
    j = np.asarray(j, dtype=np.int64)
    if np.any(i >= j) or np.any(i < 0):
        raise ValueError("pairs need 0 <= i < j")
    return j * (j - 1) // 2 + i


@dataclass(frozen=True)
class QueryPlan:
    """Which query each id is: a pure function of this config (no tensors held).

    ``kind``: ``"sup"``, ``"rand"`` or ``"identity"``. ``n``: number of private
    releases. ``num_queries``: Q (``None`` = all n(n-1)/2 pairs for Sup, n for
    identity; required for Rand). ``seed``: shuffle and Rand-noise seed.
    ``batch_size``: queries per batch (a batch is the journal's unit).
    ``rand_scale``: multiplier of the base noise scale for Rand (1 = same scale).
    ``n_blank``/``blank_fraction``: mixing with public blank releases (see module doc).
    ``decoder``: the key of the decoder the rows are made by (:mod:`~ldpclient.transfer.decoder`; empty: the
    releases rebuilt and post-processed); other rows, other batch ids.
    """

    kind: str
    n: int
    num_queries: int | None = None
    seed: int = 0
    batch_size: int = 256
    rand_scale: float = 1.0
    n_blank: int = 0
    blank_fraction: float = 0.0
    decoder: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"augmentation kind must be one of {KINDS}, got {self.kind!r}")
        if self.n < 1:
            raise ValueError(f"need at least one release, got n={self.n}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not (self.rand_scale >= 0 and math.isfinite(self.rand_scale)):
            raise ValueError(f"rand_scale must be a finite number >= 0, got {self.rand_scale}")
        if not 0.0 <= self.blank_fraction <= 1.0:
            raise ValueError(f"blank_fraction must be in [0, 1], got {self.blank_fraction}")
        if self.blank_fraction > 0 and self.n_blank < 1:
            raise ValueError("blank_fraction > 0 needs n_blank >= 1 public blank releases")
        if self.kind == "sup" and self.n < 2:
            raise ValueError("LDPKiT-Sup needs at least 2 releases")
        if self.kind == "rand" and self.num_queries is None:
            raise ValueError("LDPKiT-Rand needs num_queries")
        if self.num_queries is not None and self.num_queries < 1:
            raise ValueError(f"num_queries must be >= 1, got {self.num_queries}")
        q = self.total
        if self.kind == "identity" and self.num_queries not in (None, self.n):
            raise ValueError(f"identity plan sends the n={self.n} releases, num_queries must be n or None")
        if self.kind == "sup":
            if self.num_private > num_pairs(self.n):
                raise ValueError(
                    f"{self.num_private} Sup queries requested but only {num_pairs(self.n)} "
                    f"unordered pairs of n={self.n} releases exist"
                )
            if self.num_blank > num_pairs(max(self.n_blank, 1)):
                raise ValueError(f"{self.num_blank} blank Sup queries exceed the pairs of n_blank={self.n_blank}")
        if q < 1:
            raise ValueError("plan has no queries")

    # ---- sizes -------------------------------------------------------------
    @property
    def total(self) -> int:
        """Q, the number of queries in the plan."""
        if self.num_queries is not None:
            return int(self.num_queries)
        return num_pairs(self.n) if self.kind == "sup" else self.n

    @property
    def num_blank(self) -> int:
        return int(round(self.blank_fraction * self.total))

    @property
    def num_private(self) -> int:
        return self.total - self.num_blank

    @property
    def num_batches(self) -> int:
        return -(-self.total // self.batch_size)

    def as_dict(self) -> dict[str, object]:
        """The plan's configuration (JSON values; what the report holds and the fingerprint hashes); ``decoder``
        only when there is one, so a plan without a decoder has the ids and the report it has always had."""
        return {k: v for k, v in asdict(self).items() if k != "decoder" or v}

    @property
    def fingerprint(self) -> str:
        """16 hex chars identifying this plan (config + seed); part of every batch id."""
        blob = json.dumps(self.as_dict(), sort_keys=True).encode()
        return hashlib.sha256(b"ldpclient.QueryPlan.v1" + blob).hexdigest()[:16]

    def batch_id(self, batch_index: int) -> str:
        return f"{self.fingerprint}:{batch_index}"

    def batch_ids(self, batch_index: int) -> np.ndarray:
        """Query ids (int64) of batch ``batch_index``: a contiguous id range."""
        if not 0 <= batch_index < self.num_batches:
            raise ValueError(f"batch index {batch_index} out of range [0, {self.num_batches})")
        start = batch_index * self.batch_size
        return np.arange(start, min(start + self.batch_size, self.total), dtype=np.int64)

    # ---- recipes -----------------------------------------------------------
    def _space(self, count: int, pool: int) -> int:
        if self.kind == "sup":
            return num_pairs(pool)
        if self.kind == "rand":
            return pool * -(-count // pool)
        return pool

    def recipes(self, ids: np.ndarray | Sequence[int]) -> dict[str, np.ndarray]:
        """Recipes of query ids: ``blank`` (bool), ``i``, ``j`` (-1 unless Sup), ``noise_seed`` (Rand).

        ``i``/``j`` index the private releases, or the blank releases where ``blank``.
        """
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.total):
            raise ValueError(f"query id out of range [0, {self.total})")
        nb = self.num_blank
        if nb:
            pos = FeistelPermutation(self.total, _derive_seed(self.seed, "mix"))(ids)
        else:
            pos = ids
        blank = pos < nb
        local = np.where(blank, pos, pos - nb)
        i = np.full(ids.shape, -1, dtype=np.int64)
        j = np.full(ids.shape, -1, dtype=np.int64)
        noise_seed = np.zeros(ids.shape, dtype=np.int64)
        for is_blank, count, pool in ((False, self.num_private, self.n), (True, nb, self.n_blank)):
            sel = blank == is_blank
            if not sel.any():
                continue
            space = self._space(count, pool)
            if self.kind == "identity" and not is_blank:
                idx = local[sel]
            else:
                idx = FeistelPermutation(space, _derive_seed(self.seed, self.kind, is_blank))(local[sel])
            if self.kind == "sup":
                i[sel], j[sel] = pair_from_index(idx)
            else:
                i[sel] = idx % pool
            if self.kind == "rand":
                raw = _mix64(idx.astype(np.uint64) ^ np.uint64(_derive_seed(self.seed, "noise", is_blank)))
                noise_seed[sel] = (raw >> np.uint64(1)).astype(np.int64)
        return {"blank": blank, "i": i, "j": j, "noise_seed": noise_seed}

    def private_records_used(self, chunk: int = 1 << 20) -> np.ndarray:
        """The private records (sorted int64 indices in ``0..n-1``) that at least one query of the plan is made from:
        the only ones whose release the plan needs. Reads the recipes ``chunk`` query ids at a time, and stops once
        every
        record is used (20 queries per record: after about 8 per record)."""
        used = np.zeros(self.n, dtype=bool)
        for start in range(0, self.total, chunk):
            r = self.recipes(np.arange(start, min(start + chunk, self.total), dtype=np.int64))
            private = ~r["blank"]
            used[r["i"][private]] = True
            if self.kind == "sup":
                used[r["j"][private]] = True
            if used.all():  # every record already: the rest of the plan changes nothing
                break
        return np.nonzero(used)[0].astype(np.int64)

    # ---- query generation --------------------------------------------------
    def queries(
        self,
        releases: Releasable | ReleaseRows,
        ids: np.ndarray | Sequence[int],
        *,
        mechanism: Mechanism | None = None,
        blank_releases: Releasable | ReleaseRows | None = None,
        noise_mode: str = "bilinear",
    ) -> Derived:
        """Build the queries ``ids`` from the (post-processed) releases.

        ``releases``: Release/Derived with ``n`` rows ``(n, C, H, W)`` (already in
        the teacher's input shape), or :class:`~ldpclient.transfer.postprocess.ReleaseRows`
        post-processing only the rows a batch uses. ``mechanism``: the base mechanism,
        needed for Rand (its ``noise``). ``blank_releases``: public releases for mixing.
        ``noise_mode``: how Rand noise drawn at a reduced released shape is resized.
        Returns a Derived with ``ids`` set and ``sources`` ``(B, 2)`` naming the
        private records used (-1: none, e.g. blank queries).
        """
        src, blank_src = self._tables(releases, blank_releases)
        if self.kind == "rand" and mechanism is None:
            raise ValueError("LDPKiT-Rand needs the base mechanism to draw its noise")
        ids = np.asarray(ids, dtype=np.int64)
        r = self.recipes(ids)
        shape = tuple(src.record_shape)
        out: torch.Tensor | None = None
        origin: Derived | None = None  # the private rows: their guarantee and history go with the queries
        sources = torch.full((len(ids), 2), -1, dtype=torch.int64)
        for is_blank, table in ((False, src), (True, blank_src)):
            sel_np = r["blank"] == is_blank
            if table is None or not sel_np.any():
                continue
            rows, out = self._fill(table, r, sel_np, out, (len(ids), *shape), None if is_blank else sources,
                                   mechanism, noise_mode)
            if not is_blank:
                origin = rows
        if origin is None:  # a batch of blank queries only
            origin = src.rows(torch.empty(0, dtype=torch.int64))
        assert out is not None
        step = {"sup": "ldpkit-sup", "rand": f"ldpkit-rand(scale={self.rand_scale:g})", "identity": "identity"}
        return Derived.combine(origin, out, sources, step[self.kind], ids=torch.from_numpy(ids))

    def _fill(
        self, table: ReleaseRows | Derived, r: dict[str, np.ndarray], sel_np: np.ndarray, out: torch.Tensor | None,
        out_shape: tuple[int, ...], sources: torch.Tensor | None, mechanism: Mechanism | None, noise_mode: str,
    ) -> tuple[Derived, torch.Tensor]:
        """Write the queries ``sel_np`` of the recipes ``r`` made from ``table``'s rows into ``out`` (allocated at
        ``out_shape``, the queries' and a record's, at the first call) and, unless they are blank queries
        (``sources`` None), the private rows each is made from into ``sources``; the rows gathered (only those the
        batch uses) and ``out``."""
        sel = torch.from_numpy(np.nonzero(sel_np)[0])
        i = torch.from_numpy(r["i"][sel_np])
        j = torch.from_numpy(r["j"][sel_np]) if self.kind == "sup" else None
        # only the rows this batch uses are gathered (and post-processed, for ReleaseRows)
        used, pos = torch.unique(i if j is None else torch.cat([i, j]), return_inverse=True)
        rows = table.rows(used)
        if out is None:
            out = torch.empty(out_shape, dtype=rows.values.dtype)
        if j is not None:
            pi, pj = pos[: len(i)], pos[len(i) :]
            out[sel] = (rows.values[pi] + rows.values[pj]) / 2
            if sources is not None:
                sources[sel] = torch.stack([i, j], dim=1)
            return rows, out
        out[sel] = rows.values[pos]
        if sources is not None:
            sources[sel, 0] = i
        if self.kind == "rand" and self.rand_scale > 0:
            assert mechanism is not None
            out[sel] += self.rand_scale * self._rand_noise(
                mechanism, r["noise_seed"][sel_np], out_shape[1:], noise_mode
            ).to(out.dtype)
        return rows, out

    def _tables(
        self, releases: Releasable | ReleaseRows, blank_releases: Releasable | ReleaseRows | None
    ) -> tuple[Derived | ReleaseRows, Derived | ReleaseRows | None]:
        """The releases and the blank releases as row tables, checked against the plan (ValueError)."""
        src = _table(releases)
        if len(src) != self.n:
            raise ValueError(f"plan is for n={self.n} releases, got {len(src)}")
        if not self.num_blank:
            return src, None
        if blank_releases is None:
            raise ValueError("this plan mixes blank queries: pass blank_releases")
        blank_src = _table(blank_releases)
        if len(blank_src) != self.n_blank:
            raise ValueError(f"plan is for n_blank={self.n_blank} blank releases, got {len(blank_src)}")
        if blank_src.record_shape != src.record_shape:
            raise ValueError("blank releases must have the same shape as the private releases")
        return src, blank_src

    @staticmethod
    def _rand_noise(mechanism: Mechanism, seeds: np.ndarray, shape: tuple[int, ...], mode: str) -> torch.Tensor:
        """Per-query noise, each from its own seeded generator (independent of batching)."""
        r = max(1, int(mechanism.reduction or 1))
        base = tuple(shape)
        if r > 1 and len(shape) == 3:
            base = (shape[0], shape[1] // r, shape[2] // r)
        rows = []
        g = torch.Generator()
        for s in seeds.tolist():
            g.manual_seed(int(s))
            rows.append(mechanism.noise((1, *base), generator=g).reshape(1, *base))
        noise = torch.cat(rows).float()
        return upsample(noise, shape, mode) if base != tuple(shape) else noise

    def batches(
        self,
        releases: Releasable | ReleaseRows,
        *,
        mechanism: Mechanism | None = None,
        blank_releases: Releasable | ReleaseRows | None = None,
        order: Sequence[int] | None = None,
        skip: set[str] | frozenset[str] = frozenset(),
        noise_mode: str = "bilinear",
    ) -> Iterator[tuple[str, Derived]]:
        """Yield ``(batch_id, Derived)`` one batch at a time (memory O(batch_size)).

        ``order``: batch indices to produce (default all, in order), e.g. a
        shuffled order per training epoch. ``skip``: batch ids not to build
        (e.g. already answered ones).
        """
        src = _table(releases)  # type check once, up front
        indices = range(self.num_batches) if order is None else order
        for b in indices:
            bid = self.batch_id(int(b))
            if bid in skip:
                continue
            yield bid, self.queries(
                src,
                self.batch_ids(int(b)),
                mechanism=mechanism,
                blank_releases=blank_releases,
                noise_mode=noise_mode,
            )


def _table(releases: object) -> Derived | ReleaseRows:
    """The rows queries are built from (``rows(index)``, ``record_shape``): a ReleaseRows as is, else a
    Release/Derived (raw tensors refused)."""
    return releases if isinstance(releases, ReleaseRows) else as_derived(releases)


__all__ = [
    "KINDS",
    "FeistelPermutation",
    "QueryPlan",
    "num_pairs",
    "pair_from_index",
    "pair_to_index",
]
