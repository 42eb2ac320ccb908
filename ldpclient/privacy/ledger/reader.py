"""What a ledger answers without charging anything: the keys records and their sources are kept under, the
spend of each source, which images offered as public are private ones, and the figures of ``ldpclient budget``.

:class:`~.ledger.Ledger` opens the store and adds the charging (releases under the caps).
"""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from ...io.records import RecordSource, as_record_source, iter_batches, source_ids
from ...state.database import Database
from ..guarantee import Domain
from . import fingerprint as _fingerprint
from . import same_images as _same_images
from . import spend as _spend
from . import store as _store
from .cap_history import cap_history
from .errors import LedgerError
from .identity import LedgerKey
from .spend import Caps, Spend

#: Records hashed per chunk when a spend is asked of a RecordSource (3.2 MB of 28x28 float32: chunk buffers
#: of a few MB are reused by the C heap; measured over 200,000 records: +19 MB, with 4,096 per chunk +43 MB).
SPENT_CHUNK = 1024


class LedgerReader:
    """The reading half of a ledger: its key, its store and its caps, as :class:`~.ledger.Ledger` opened them."""

    #: The ledger's SQLite file; None for a ledger in PostgreSQL (see :attr:`location`).
    path: Path | None
    #: Where the ledger is, as it may be printed: the file's path, or the database's URL without its password.
    location: str
    _key: LedgerKey
    _caps: Caps
    _legacy: bool
    #: whether the ledger holds the tables of :mod:`.same_images` (a ledger read-only from before them: no)
    _knows_images: bool
    _conn: Database | None
    _lock: threading.RLock

    @property
    def cap_epsilon(self) -> float | None:
        """Per-record cap on a source's total epsilon (nats); None: no cap."""
        return self._caps.epsilon

    @property
    def cap_delta(self) -> float | None:
        """Per-record cap on a source's total delta (a probability); None: no cap."""
        return self._caps.delta

    @property
    def _db(self) -> Database:
        if self._conn is None:
            raise LedgerError("ledger is closed")
        return self._conn

    # --------------------------------------------------------------- keying

    def record_keys(self, records: torch.Tensor) -> list[bytes]:
        """HMAC-SHA256 key (32 bytes) of each record of ``(N, *record_shape)``.

        The message is a domain tag, the record's dtype and shape, and its
        contiguous little-endian bytes; the key is this ledger's secret. Equal
        records (same dtype, shape and values) get the same key; a different
        ledger secret gives unrelated keys.
        """
        return self._key.record_keys(check_records(records))

    def source_keys(
        self,
        records: torch.Tensor,
        *,
        sources: Sequence[bytes | str] | None = None,
        domain: Domain | None = None,
    ) -> list[bytes]:
        """HMAC-SHA256 key (32 bytes) of each record's **source**: what its spend is summed under.

        ``sources``: one id per record (bytes or str: a file's SHA-256, a database key),
        as the caller knows it; the folder commands pass :func:`~ldpclient.io.folders` file
        hashes. Without it the source is the record at a canonical dtype and scale:
        each value mapped by ``domain`` (the mechanism's declared value range, default
        [0, 1]) onto ``0..255`` steps and rounded, with the record's shape. The same
        image as float16, float32 or float64, or declared in another value range, is
        then one source; at another size it is another source unless ``sources``
        names it.
        """
        records = check_records(records)
        if sources is not None:
            if len(sources) != records.shape[0]:
                raise ValueError(f"sources must give one id per record: {len(sources)} ids for {records.shape[0]} "
                                 "records")
            return self._id_keys(sources)
        return self._key.canonical_source_keys(records, domain if domain is not None else Domain())

    def _id_keys(self, sources: Sequence[bytes | str]) -> list[bytes]:
        """The key each source id's spend is summed under: its own, or, for another file of an image seen before,
        that image's first source's (:mod:`.same_images`)."""
        keys = self._key.source_id_keys(sources)
        if not self._knows_images:
            return keys
        with self._lock:
            return _same_images.resolve(self._db, keys)

    def _identities(
        self, records: torch.Tensor, sources: Sequence[bytes | str] | None, domain: Domain | None
    ) -> list[bytes]:
        """Per record, tensor key + source key (64 bytes): what a stored release is reused under."""
        return [
            r + s
            for r, s in zip(
                self.record_keys(records), self.source_keys(records, sources=sources, domain=domain), strict=True
            )
        ]

    # -------------------------------------------------------------- queries

    def spent(
        self,
        records: torch.Tensor | RecordSource,
        *,
        sources: Sequence[bytes | str] | None = None,
        domain: Domain | None = None,
    ) -> Spend:
        """Total spend so far of each record's source: per-record epsilon and delta, ``(N,)`` float64.

        ``records``: a tensor ``(N, *record_shape)``, or a :class:`~ldpclient.io.records.RecordSource`
        read in chunks (its own source ids used, see :func:`~ldpclient.io.records.source_ids`).
        ``sources``/``domain``: as for :meth:`source_keys`. A record a schema-1 ledger charged
        and no run has matched to its source yet counts too.
        """
        if not isinstance(records, torch.Tensor) and isinstance(records, RecordSource):
            # filled in place: per-chunk results kept between the chunks' large transient buffers
            # pinned them in the C heap (measured: 233 to 565 MB more over 200,000 28x28 records)
            eps = torch.zeros(len(records), dtype=torch.float64)
            delta = torch.zeros(len(records), dtype=torch.float64)
            for idx, chunk in iter_batches(records, SPENT_CHUNK):
                part = self.spent(chunk, sources=source_ids(records, idx), domain=domain)
                eps[idx[0] : idx[-1] + 1] = part.epsilon
                delta[idx[0] : idx[-1] + 1] = part.delta
            return Spend(eps, delta)
        keys = self._identities(records, sources, domain)
        with self._lock:
            return _spend.totals(self._db, keys, self._legacy)

    def private_copies(
        self,
        records: torch.Tensor | RecordSource,
        *,
        sources: Sequence[bytes | str] | None = None,
        domain: Domain | None = None,
        private: torch.Tensor | RecordSource | None = None,
        more: torch.Tensor | None = None,
        private_names: Sequence[str] | None = None,
    ) -> dict[int, str]:
        """Which of ``records`` (images offered as public) are private images: index -> the reason in words. An
        image whose source the ledger has charged ("charged as a private image"), or whose perceptual fingerprint,
        as it is or mirrored, turned, inverted (:func:`~.fingerprint.nearest`), is near that of an image the ledger
        charged or of one of ``private`` (the private images of the run at hand, charged or not: "a near copy of a
        private image"). ``records``, ``sources``, ``domain``: as for :meth:`spent`. ``more``: images that would
        be sent after ``records`` (made from them: the mirror check's copies), searched in the same pass, found
        under index ``len(records) + k``. ``private_names``: how the reasons name ``private``'s images (default:
        by their position); a near copy's reason names the private image it copies, or says the ledger's. Reads
        only."""
        found: dict[int, str] = {}
        indices: list[np.ndarray] = []
        queries: list[_fingerprint.Query] = []
        extra = [] if more is None else [(idx + len(records), chunk, None) for idx, chunk, _ in _chunks_of(more, None)]
        for idx, chunk, ids in itertools.chain(_chunks_of(records, sources), extra):
            charged = (self.spent(chunk, sources=ids, domain=domain).epsilon > 0).numpy()
            found.update((int(k), "charged as a private image") for k in idx[charged])
            if _fingerprint.fingerprintable(tuple(chunk.shape[1:])) and not charged.all():
                indices.append(idx[~charged])
                queries.append(_fingerprint.query(chunk[torch.from_numpy(~charged)]))
        if queries:  # one pass over the stored fingerprints (and this run's private images) for all of them
            source = None if private is None else as_record_source(private)
            run_private = () if source is None else (chunk for _, chunk in iter_batches(source, SPENT_CHUNK))
            with self._lock:  # this run's images first: a tie names the file rather than the ledger
                blocks = itertools.chain(_fingerprint.prints_of(run_private), _fingerprint.stored(self._db))
                near = _fingerprint.closest(blocks, _fingerprint.Query.cat(queries))
            # the blocks' first images: this run's, where prints_of fingerprinted them (images of its shape only)
            in_run = len(source) if source is not None and _fingerprint.fingerprintable(
                tuple(source.record_shape)) else 0
            for k, sim, at in zip(np.concatenate(indices).tolist(), near.similarity.tolist(), near.at.tolist(),
                                  strict=True):
                if sim >= _fingerprint.NEAR:
                    twin = _twin(at, in_run, private_names)
                    found[int(k)] = f"a near copy of a private image{twin} (cosine {sim:.4f})"
        return dict(sorted(found.items()))

    def remaining(
        self,
        records: torch.Tensor,
        *,
        sources: Sequence[bytes | str] | None = None,
        domain: Domain | None = None,
    ) -> Spend:
        """Budget left of each record's source under this ledger's caps (``inf`` where there is no cap; never < 0)."""
        return self._caps.remaining(self.spent(records, sources=sources, domain=domain))

    def spent_by_source(self, sources: Sequence[bytes | str]) -> list[float]:
        """Per-record epsilon spent so far by each source id (as :meth:`source_keys` takes them; a folder's
        files: :func:`~ldpclient.io.folders.source_id` of their bytes), 0 for a source never charged. Only spend
        charged to sources counts: a schema-1 record no run has matched to its source yet is not found here."""
        keys = self._id_keys(sources)
        with self._lock:
            spend = _spend.spend_of(self._db, keys)
        return [spend.get(k, (0.0, 0.0))[0] for k in keys]

    def epsilon_per_record(self) -> list[float]:
        """Every record's total per-record epsilon, in no particular order: the numbers only, no keys."""
        with self._lock:
            return _spend.epsilon_per_record(self._db)

    def epsilon_per_record_by_scope(self) -> dict[str, list[float]]:
        """Per scope (teacher identity), the per-record epsilon its stored releases cost each record that has
        one, in no particular order: the numbers only, no keys. Records of a schema-1 ledger not yet matched
        to a source count per decoded tensor."""
        with self._lock:
            return _spend.epsilon_per_record_by_scope(self._db)

    def scopes(self) -> list[str]:
        """Every scope (teacher identity) the ledger holds releases for."""
        with self._lock:
            return sorted(r[0] for r in self._db.execute("SELECT DISTINCT scope FROM releases"))

    def summary(self) -> dict[str, object]:
        """Aggregate figures for ``ldpclient budget`` (no pixels, no record keys).

        Keys: ``path``, ``records`` (sources with any spend: images, for a folder run),
        ``legacy_records`` (of those, records a schema-1 ledger charged per decoded tensor
        whose source no run has seen since: their spend is kept, but should the same image
        have been released at two shapes, it shows here as two records), ``releases`` (stored
        fresh releases), ``epsilon``/``delta`` each ``{"total", "max", "mean"}`` over
        records (per record), ``cap_epsilon``, ``cap_delta`` (the caps this ledger works
        under), ``records_at_cap`` (records whose remaining epsilon or delta budget is 0
        under the caps), ``records_over_cap`` (of those, records whose spend is above a
        cap: charged before it was lowered), ``cap_history`` (:meth:`cap_history`), and
        ``by_mechanism``: one entry per (mechanism, scope) with ``mechanism`` (name),
        ``config`` (mechanism config), ``record_shape``, ``scope``, ``releases``,
        ``epsilon_per_release``, ``delta_per_release``.
        """
        with self._lock:
            c = self._db
            figures = _spend.aggregate(c, self._caps)
            by_mechanism = _store.by_mechanism(c)
            n_rel = c.execute("SELECT COUNT(*) FROM releases").fetchone()[0]
            history = cap_history(c)
        return {
            "path": self.location,
            "records": figures["records"],
            "legacy_records": figures["legacy_records"],
            "releases": int(n_rel),
            "epsilon": figures["epsilon"],
            "delta": figures["delta"],
            "cap_epsilon": self.cap_epsilon,
            "cap_delta": self.cap_delta,
            "records_at_cap": figures["records_at_cap"],
            "records_over_cap": figures["records_over_cap"],
            "cap_history": history,
            "by_mechanism": by_mechanism,
        }

    def verify(self) -> list[str]:
        """Consistency check; returns a list of problems (empty when all is well).

        Checks ``PRAGMA integrity_check`` (SQLite), that every stored release carries exactly
        its mechanism's per-record charge, and that each source's spend (and each
        schema-1 record's not yet adopted) equals the sum of the charges of its
        stored releases (and their count).
        """
        with self._lock:
            c = self._db
            problems = []
            if not c.postgresql:  # PostgreSQL checks its own pages (checksums, amcheck): nothing to ask here
                ic = [r[0] for r in c.execute("PRAGMA integrity_check").fetchall()]
                problems = [] if ic == ["ok"] else ["integrity_check: " + "; ".join(ic)]
            return problems + _spend.verify(c, aliases=self._knows_images)


def _chunks_of(
    records: torch.Tensor | RecordSource, sources: Sequence[bytes | str] | None
) -> Iterator[tuple[np.ndarray, torch.Tensor, Sequence[bytes | str] | None]]:
    """``(indices, records, their source ids)`` in chunks: a RecordSource read with its own ids, a tensor whole."""
    if isinstance(records, torch.Tensor):
        yield np.arange(len(records)), records, sources
        return
    for idx, chunk in iter_batches(records, SPENT_CHUNK):
        yield idx, chunk, source_ids(records, idx)


def check_records(records: object) -> torch.Tensor:
    """``records`` as a non-empty real batch ``(N, *record_shape)`` (TypeError, ValueError)."""
    if not isinstance(records, torch.Tensor):
        raise TypeError(f"records must be a torch.Tensor (N, *record_shape), got {type(records).__name__}")
    if records.dim() < 1 or records.shape[0] == 0:
        raise ValueError(f"records must be a non-empty batch (N, *record_shape), got shape {tuple(records.shape)}")
    if records.numel() == 0:
        raise ValueError(f"records must have at least one element each, got shape {tuple(records.shape)}")
    if records.is_complex():
        raise ValueError("records must be real-valued")
    return records



def _twin(at: int, in_run: int, names: Sequence[str] | None) -> str:
    """Which private image a public one copies, in words: this run's ``at``-th (by ``names`` when given), or one the
    ledger charged (``at`` past this run's ``in_run`` images: in an earlier run; the ledger keeps no names)."""
    if at >= in_run:
        return " the ledger charged in an earlier run (the ledger keeps no file names)"
    return f", {names[at]!r}" if names is not None else f", number {at + 1} of this run's"

__all__ = ["LedgerReader", "SPENT_CHUNK", "check_records"]
