"""The :class:`Ledger`: one release of a batch through the key, the store and the spend, in one transaction.

See the package docstring (:mod:`ldpclient.privacy.ledger`) for what the ledger keeps and guarantees.
"""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from ...io.records import RecordSource, as_record_source, iter_batches, source_ids
from ...state import default_state_dir
from ...state.database import Database, display_location, is_database_error, is_database_url
from ..base import Mechanism
from ..guarantee import Domain, Guarantee
from ..release import Release
from . import fingerprint as _fingerprint
from . import spend as _spend
from . import store as _store
from .cap_history import CAPS_LOCK, cap_history, set_caps, settle_caps, stored_caps
from .errors import LedgerError
from .identity import database_exists, first_steps_lock, forget_new_key, load_or_create_key
from .schema import SCHEMA_LOCK, connect, has_legacy, init_database, init_schema, stored_schema, transaction
from .spend import Caps, Spend

#: Records hashed per chunk when a spend is asked of a RecordSource (3.2 MB of 28x28 float32: chunk buffers
#: of a few MB are reused by the C heap; measured over 200,000 records: +19 MB, with 4,096 per chunk +43 MB).
_SPENT_CHUNK = 1024


def default_ledger_path() -> Path:
    """``default_state_dir() / "ledger.sqlite"``."""
    return default_state_dir() / "ledger.sqlite"


class Ledger:
    """Persistent per-record privacy ledger with stored, reusable releases.

    ``path``: the SQLite file (default :func:`default_ledger_path`; its parent is
    created if needed), or a ``postgresql://`` URL: a ledger in PostgreSQL that
    processes on several hosts share (``pip install 'ldpclient[cluster]'``).
    ``key_file``: the ledger's secret (default: ``path + ".key"`` beside a file; a
    PostgreSQL ledger needs it given: the secret never goes into the database, and
    every host that shares the ledger holds a copy of the same file).
    ``cap_epsilon`` / ``cap_delta``: per-record caps on the *total* spend of a
    record (epsilon in nats, delta a probability), across all mechanisms and
    scopes. Caps live in the ledger (:mod:`.cap_history`): ``None`` works under the
    caps the ledger holds (none, if none was ever set); a cap given here tightens
    them and is recorded (it holds for every later user of the ledger); one above
    them raises :class:`~.errors.CapRaiseRefused` (raise caps with
    :meth:`set_caps`). ``cap_origin`` names the caps given, in messages and in the
    history (``--privacy-cap`` for the command line). ``settled``: the caps given are those a run already settled
    on this ledger (a cluster worker of the run whose driver opened it): worked under, tightened by a cap the
    ledger holds that is lower (lowered since the run began, which a refusal then says), never recorded or refused.

    Use as a context manager or call :meth:`close`. One ``Ledger`` object may be
    shared by threads; several processes may open the same ledger (SQLite's file
    lock serialises their releases; PostgreSQL locks the spend rows of the sources
    a release charges, in key order, so releases of other images go on at once).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        key_file: str | os.PathLike[str] | None = None,
        cap_epsilon: float | None = None,
        cap_delta: float | None = None,
        cap_origin: str = "Ledger(cap_epsilon=...)",
        start_with_key: bool = False,
        settled: bool = False,
    ) -> None:
        given = Caps.checked(cap_epsilon, cap_delta)
        self._caps = given
        #: whether a cap set on the ledger since this user settled its caps has tightened them
        self._lowered = False
        in_database = path is not None and is_database_url(path)
        #: The ledger's SQLite file; None for a ledger in PostgreSQL (see :attr:`location`).
        self.path: Path | None
        if path is None:
            state = default_state_dir()
            state.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.path = state / "ledger.sqlite"
        elif in_database:
            if key_file is None:
                raise ValueError("a postgresql:// ledger needs key_file= (--ledger-key-file): its secret is a file "
                                 "on each host, never in the database")
            self.path = None
        else:
            self.path = Path(path).expanduser()
            if str(path) == ":memory:" or str(path) == "":
                raise ValueError("Ledger needs a file path (an in-memory ledger would not persist any charge)")
            self.path.parent.mkdir(parents=True, exist_ok=True)
        #: Where the ledger is, as it may be printed: the file's path, or the database's URL without its password.
        self.location = display_location(path) if in_database and path is not None else str(self.path)
        if key_file is not None:
            self.key_path = Path(os.fspath(key_file)).expanduser()
        else:
            self.key_path = Path(str(self.path) + ".key")
        #: Test hook: called with "checked" (cap checked, before sampling), "sampled"
        #: (noise drawn, before the write) and "committed" (after COMMIT, before
        #: returning). Used by the crash tests; None in normal use.
        self._fault_hook: Callable[[str], None] | None = None
        self._lock = threading.RLock()
        self._mechs: dict[str, _store.StoredMechanism] = {}
        self._conn: Database | None = None
        key_created = False
        try:
            if self.path is None:  # the database first: whether it holds a ledger decides about the key
                self._conn = connect(os.fspath(path) if path is not None else "")
                with transaction(self._conn):  # processes opening a new ledger at once: one makes it, under the lock
                    self._conn.lock(SCHEMA_LOCK)
                    existed = stored_schema(self._conn) is not None
                    self._key, key_created, starts = load_or_create_key(self.location, self.key_path, existed,
                                                                        start_with_key=start_with_key)
                    init_schema(self._conn, path=self.location, key_path=self.key_path, key_check=self._key.check(),
                                key_created=starts)
            else:  # the key first: opening a file creates it; other processes opening it wait for both
                with first_steps_lock(self.path):
                    self._key, key_created, starts = load_or_create_key(
                        self.path, self.key_path, database_exists(self.path), start_with_key=start_with_key)
                    self._conn = connect(self.path)
                    init_database(
                        self._conn, path=self.location, key_path=self.key_path, key_check=self._key.check(),
                        key_created=starts,
                    )
            self._legacy = has_legacy(self._conn)
            if settled:
                with transaction(self._conn) as c:
                    self._caps_now(c)
            else:
                self._caps = settle_caps(self._conn, given, cap_origin)
        except BaseException as exc:
            if key_created:
                self._forget_new_key()
            self.close()
            if is_database_error(exc):
                raise LedgerError(f"cannot open ledger database {self.location}: {exc}") from exc
            raise

    def _forget_new_key(self) -> None:
        """After a failed first open: remove the key this open created while no ledger holds its key check."""
        if self.path is not None:
            forget_new_key(self.path, self.key_path)
            return
        try:
            if self._conn is not None and stored_schema(self._conn) is not None:
                return
        except Exception:
            return  # cannot tell: keep the key
        self.key_path.unlink(missing_ok=True)

    @property
    def cap_epsilon(self) -> float | None:
        """Per-record cap on a source's total epsilon (nats); None: no cap."""
        return self._caps.epsilon

    @property
    def cap_delta(self) -> float | None:
        """Per-record cap on a source's total delta (a probability); None: no cap."""
        return self._caps.delta

    def set_caps(self, epsilon: float | None, delta: float | None = None, *, origin: str = "Ledger.set_caps") -> None:
        """Set the caps the ledger holds (raise, lower, or remove with None), recorded with ``origin``. Images whose
        spend is above a lowered cap are frozen: no fresh release of theirs is charged."""
        caps = Caps.checked(epsilon, delta)
        with self._lock:
            self._caps = set_caps(self._db, caps, origin)

    def cap_history(self) -> list[dict[str, Any]]:
        """Every cap set on this ledger, oldest first (:func:`~.cap_history.cap_history`)."""
        with self._lock:
            return cap_history(self._db)

    @property
    def _db(self) -> Database:
        if self._conn is None:
            raise LedgerError("ledger is closed")
        return self._conn

    def close(self) -> None:
        """Close the database (idempotent). Everything returned so far is already committed."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r}, cap_epsilon={self.cap_epsilon}, cap_delta={self.cap_delta})"

    # --------------------------------------------------------------- keying

    def record_keys(self, records: torch.Tensor) -> list[bytes]:
        """HMAC-SHA256 key (32 bytes) of each record of ``(N, *record_shape)``.

        The message is a domain tag, the record's dtype and shape, and its
        contiguous little-endian bytes; the key is this ledger's secret. Equal
        records (same dtype, shape and values) get the same key; a different
        ledger secret gives unrelated keys.
        """
        return self._key.record_keys(_check_records(records))

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
        records = _check_records(records)
        if sources is not None:
            if len(sources) != records.shape[0]:
                raise ValueError(f"sources must give one id per record: {len(sources)} ids for {records.shape[0]} records")
            return self._key.source_id_keys(sources)
        return self._key.canonical_source_keys(records, domain if domain is not None else Domain())

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

    def _mechanism(self, mechanism: Mechanism, record_shape: tuple[int, ...]) -> _store.StoredMechanism:
        """Look up / register the mechanism identity (canonical config + record shape + per-record charge)."""
        identity, g = _store.mechanism_identity(mechanism, record_shape)
        cached = self._mechs.get(identity)
        if cached is None:
            cached = self._mechs[identity] = _store.register_mechanism(self._db, mechanism, identity, g)
        return cached

    # -------------------------------------------------------------- release

    def release(
        self,
        mechanism: Mechanism,
        records: torch.Tensor,
        *,
        scope: str = "default",
        generator: torch.Generator | None = None,
        public: bool = False,
        sources: Sequence[bytes | str] | None = None,
    ) -> Release:
        """Release a batch ``(N, *record_shape)`` through the ledger.

        For each record with a stored release for (record, mechanism identity,
        ``scope``) the stored values are returned at no cost (``reused`` True).
        The other records are *fresh*: the whole batch is refused with
        :class:`BudgetExceeded` before any sampling if one of them would exceed a
        cap; otherwise they are noised by ``mechanism.release`` (a record that
        appears several times in the batch is noised and charged once; its later
        copies are marked ``reused``), and their charges
        (``mechanism.guarantee(record_shape).epsilon_record`` / ``delta_record``,
        added to each record's total over all mechanisms and scopes) and values are
        committed durably in one transaction before anything is returned.

        ``scope`` names who receives the release (e.g. the teacher): the same
        record released to two scopes is two fresh releases and costs both.
        ``public=True`` (data-free baseline, public blank inputs) bypasses the
        ledger: neither charged nor stored. ``sources``: one id per record (see
        :meth:`source_keys`); the cap is checked against the total of each source.

        The returned :class:`Release` is in input order; its guarantee is the
        mechanism's per-release guarantee for ``record_shape``.
        """
        if public:
            return mechanism.release(records, generator=generator, public=True)
        _check_scope(scope)
        records = _check_records(records)
        record_shape = tuple(int(s) for s in records.shape[1:])
        keys = self._identities(records, sources, getattr(mechanism, "domain", None))
        with self._lock:
            mech = self._mechanism(mechanism, record_shape)
            first: dict[bytes, int] = {}  # unique keys, first occurrence order
            for i, k in enumerate(keys):
                first.setdefault(k, i)
            stored, fresh_values = self._release_transaction(mechanism, records, first, mech, scope, generator)
            self._hook("committed")
        return _store.assemble(mechanism, keys, first, stored, fresh_values, mech.guarantee, record_shape)

    def _release_transaction(
        self,
        mechanism: Mechanism,
        records: torch.Tensor,
        first: dict[bytes, int],
        mech: _store.StoredMechanism,
        scope: str,
        generator: torch.Generator | None,
    ) -> tuple[dict[bytes, _store.Stored], _store.Fresh | None]:
        """One BEGIN IMMEDIATE..COMMIT: cap check, sampling, charges (per record, nats/probability) and values; (stored, fresh)."""
        g = mech.guarantee
        uniq = list(first)
        with transaction(self._db) as c:  # write lock held from the check to the commit
            _spend.lock_sources(c, [k[32:] for k in uniq])  # PostgreSQL: these sources' rows, to the commit
            if self._legacy:
                self._legacy = _spend.adopt_legacy(c, uniq)
            stored = _store.stored_releases(c, uniq, mech.id, scope)
            fresh = [k for k in uniq if k not in stored]
            if fresh:
                caps = self._caps_now(c)
                _spend.check_budget(c, fresh, g, caps, lowered=self._lowered)
            self._hook("checked")
            fresh_values: _store.Fresh | None = None
            if fresh:
                fresh_values = self._sample_fresh(mechanism, records, first, fresh, g, generator)
                self._hook("sampled")
                _store.store_fresh(c, fresh, fresh_values, mech, scope)
                _spend.charge(c, fresh, g)
                _fingerprint.store(c, [k[32:] for k in fresh], records[[first[k] for k in fresh]])
        return stored, fresh_values

    def _caps_now(self, c: Database) -> Caps:
        """Inside a charge's transaction: the caps it is checked against, those this ledger user settled on,
        tightened by a cap set on the ledger since (``budget --set-cap`` by another process or host: read under
        the caps' lock, shared, so that a change waits for the charges under way and binds every later one). A cap
        lowered since is kept for this user's later charges and said in the refusal."""
        c.lock(CAPS_LOCK, shared=True)
        held = stored_caps(c)
        caps = Caps(_stricter(self._caps.epsilon, held.epsilon), _stricter(self._caps.delta, held.delta))
        if caps != self._caps:
            self._caps, self._lowered = caps, True
        return caps

    def _sample_fresh(
        self,
        mechanism: Mechanism,
        records: torch.Tensor,
        first: dict[bytes, int],
        fresh: list[bytes],
        g: Guarantee,
        generator: torch.Generator | None,
    ) -> _store.Fresh:
        """Noise the fresh records once each; refuse a release costing more per record (eps nats, delta) than ``g``."""
        idx = torch.tensor([first[k] for k in fresh], dtype=torch.int64)
        rel = mechanism.release(records[idx], generator=generator)
        if not isinstance(rel, Release) or len(rel) != len(fresh):
            raise LedgerError(
                f"{type(mechanism).__name__}.release returned {type(rel).__name__} "
                f"of wrong length for {len(fresh)} records"
            )
        rg = rel.guarantee
        if rg.epsilon_record > g.epsilon_record * (1 + _spend._CAP_RTOL) or (
            rg.delta_record > g.delta_record * (1 + _spend._CAP_RTOL)
        ):
            raise LedgerError(
                f"{type(mechanism).__name__}.release reported a larger per-record cost "
                f"(epsilon {rg.epsilon_record}, delta {rg.delta_record}) than its guarantee() "
                f"(epsilon {g.epsilon_record}, delta {g.delta_record}); nothing was charged or returned"
            )
        return _store.Fresh(
            rel._values.detach().cpu().contiguous(), rel.clipped_elements.tolist(), {k: j for j, k in enumerate(fresh)}
        )

    def _hook(self, stage: str) -> None:
        if self._fault_hook is not None:
            self._fault_hook(stage)

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
            for idx, chunk in iter_batches(records, _SPENT_CHUNK):
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
    ) -> dict[int, str]:
        """Which of ``records`` (images offered as public) are private images: index -> the reason in words. An
        image whose source the ledger has charged ("charged as a private image"), or whose perceptual fingerprint,
        as it is or mirrored, turned, inverted (:func:`~.fingerprint.nearest`), is near that of an image the ledger
        charged or of one of ``private`` (the private images of the run at hand, charged or not: "a near copy of a
        private image"). ``records``, ``sources``, ``domain``: as for :meth:`spent`. ``more``: images that would
        be sent after ``records`` (made from them: the mirror check's copies), searched in the same pass, found
        under index ``len(records) + k``. Reads only."""
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
            run_private = () if private is None else (
                chunk for _, chunk in iter_batches(as_record_source(private), _SPENT_CHUNK))
            with self._lock:
                blocks = itertools.chain(_fingerprint.stored(self._db), _fingerprint.prints_of(run_private))
                similarity = _fingerprint.nearest(blocks, _fingerprint.Query.cat(queries))
            for k, sim in zip(np.concatenate(indices).tolist(), similarity.tolist(), strict=True):
                if sim >= _fingerprint.NEAR:
                    found[int(k)] = f"a near copy of a private image (cosine {sim:.4f})"
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
        keys = self._key.source_id_keys(sources)
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

    def rename_scopes(self, aliases: Sequence[str], identity: str) -> int:
        """Move the releases stored under ``aliases`` (other spellings of one teacher) to ``identity``, in one
        transaction, so that they are reused instead of noised again. A release that exists under both
        stays where it is (the spend, per source, is unchanged either way). Returns the releases moved."""
        moved = 0
        with self._lock, transaction(self._db) as c:
            for alias in aliases:
                # a row whose (record, source, mechanism) the identity already holds stays (SQLite's UNIQUE: a
                # schema-1 row without a source never collides)
                moved += c.execute(
                    "UPDATE releases SET scope = ? WHERE scope = ? AND NOT EXISTS (SELECT 1 FROM releases o"
                    " WHERE o.scope = ? AND o.record_key = releases.record_key AND o.source_key = releases.source_key"
                    " AND o.mechanism_id = releases.mechanism_id)",
                    (identity, alias, identity),
                ).rowcount
        return moved

    def would_charge(
        self,
        mechanism: Mechanism,
        records: torch.Tensor,
        *,
        scope: str = "default",
        sources: Sequence[bytes | str] | None = None,
    ) -> torch.Tensor:
        """``(N,)`` bool: True where :meth:`release` would charge the record (no stored release yet,
        first copy of a duplicate). Samples nothing, charges nothing."""
        _check_scope(scope)
        records = _check_records(records)
        keys = self._identities(records, sources, getattr(mechanism, "domain", None))
        record_shape = tuple(int(s) for s in records.shape[1:])
        with self._lock:
            mech = self._mechanism(mechanism, record_shape)
            stored = _store.stored_releases(self._db, list(dict.fromkeys(keys)), mech.id, scope)
        seen: set[bytes] = set()
        out = []
        for k in keys:
            out.append(k not in stored and k not in seen)
            seen.add(k)
        return torch.tensor(out, dtype=torch.bool)

    def summary(self) -> dict[str, Any]:
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
            return problems + _spend.verify(c)


def _stricter(mine: float | None, held: float | None) -> float | None:
    """The lower of two caps on one quantity (None: no cap)."""
    return held if mine is None else mine if held is None else min(mine, held)


def _chunks_of(
    records: torch.Tensor | RecordSource, sources: Sequence[bytes | str] | None
) -> Iterator[tuple[np.ndarray, torch.Tensor, Sequence[bytes | str] | None]]:
    """``(indices, records, their source ids)`` in chunks: a RecordSource read with its own ids, a tensor whole."""
    if isinstance(records, torch.Tensor):
        yield np.arange(len(records)), records, sources
        return
    for idx, chunk in iter_batches(records, _SPENT_CHUNK):
        yield idx, chunk, source_ids(records, idx)


def _check_scope(scope: object) -> None:
    if not isinstance(scope, str) or not scope:
        raise ValueError(f"scope must be a non-empty string, got {scope!r}")


def _check_records(records: object) -> torch.Tensor:
    if not isinstance(records, torch.Tensor):
        raise TypeError(f"records must be a torch.Tensor (N, *record_shape), got {type(records).__name__}")
    if records.dim() < 1 or records.shape[0] == 0:
        raise ValueError(f"records must be a non-empty batch (N, *record_shape), got shape {tuple(records.shape)}")
    if records.numel() == 0:
        raise ValueError(f"records must have at least one element each, got shape {tuple(records.shape)}")
    if records.is_complex():
        raise ValueError("records must be real-valued")
    return records
