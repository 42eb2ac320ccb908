"""The :class:`Ledger`: one release of a batch through the key, the store and the spend, in one transaction.

See the package docstring (:mod:`ldpclient.privacy.ledger`) for what the ledger keeps and guarantees.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable, Sequence

import torch

from ...state import default_state_dir
from ...state.database import Database, display_location, is_database_error, is_database_url
from ..base import Mechanism
from ..release import Release
from . import fingerprint as _fingerprint
from . import same_images as _same_images
from . import spend as _spend
from . import store as _store
from .cap_history import CAPS_LOCK, cap_history, set_caps, settle_caps, stored_caps
from .errors import LedgerError
from .opening import open_ledger, open_to_read
from .reader import LedgerReader, check_records
from .schema import has_legacy, transaction
from .spend import Caps


class _SourcesAliased(Exception):
    """Inside a release's transaction: a source it was keyed under has become another file's alias since."""


def default_ledger_path() -> Path:
    """``default_state_dir() / "ledger.sqlite"``."""
    return default_state_dir() / "ledger.sqlite"


def _ledger_file(
    path: str | os.PathLike[str] | None, key_file: str | os.PathLike[str] | None, in_database: bool
) -> Path | None:
    """The ledger's SQLite file (its folder made): ``path``, or ``ledger.sqlite`` in the state directory; None for
    a ledger in PostgreSQL, which needs a key file. ValueError for an in-memory path."""
    if path is None:
        state = default_state_dir()
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        return state / "ledger.sqlite"
    if in_database:
        if key_file is None:
            raise ValueError("a postgresql:// ledger needs key_file= (--ledger-key-file): its secret is a file "
                             "on each host, never in the database")
        return None
    if str(path) == ":memory:" or str(path) == "":
        raise ValueError("Ledger needs a file path (an in-memory ledger would not persist any charge)")
    file = Path(path).expanduser()
    file.parent.mkdir(parents=True, exist_ok=True)
    return file


class Ledger(LedgerReader):
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
    ``read_only``: a ledger file that exists, opened only to be read (``ldpclient budget`` on a read-only state):
    nothing is made, migrated or recorded, and it works under the caps it holds.

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
        read_only: bool = False,
    ) -> None:
        given = Caps.checked(cap_epsilon, cap_delta)
        self._caps = given
        #: whether a cap set on the ledger since this user settled its caps has tightened them
        self._lowered = False
        in_database = path is not None and is_database_url(path)
        self.path = _ledger_file(path, key_file, in_database)
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
        try:
            if read_only and self.path is not None:
                self._conn, self._key = open_to_read(self.path, self.location, self.key_path)
                self._legacy = has_legacy(self._conn)
                self._knows_images = "aliases" in self._conn.tables()
                self._caps = stored_caps(self._conn)
                return
            url = os.fspath(path) if self.path is None and path is not None else None
            self._conn, self._key = open_ledger(url, self.path, self.location, self.key_path,
                                                start_with_key=start_with_key)
            self._legacy = has_legacy(self._conn)
            self._knows_images = True
            if settled:
                with transaction(self._conn) as c:
                    self._caps_now(c)
            else:
                self._caps = settle_caps(self._conn, given, cap_origin)
        except BaseException as exc:
            self.close()
            if is_database_error(exc):
                raise LedgerError(f"cannot open ledger database {self.location}: {exc}") from exc
            raise

    def set_caps(self, epsilon: float | None, delta: float | None = None, *, origin: str = "Ledger.set_caps") -> None:
        """Set the caps the ledger holds (raise, lower, or remove with None), recorded with ``origin``. Images whose
        spend is above a lowered cap are frozen: no fresh release of theirs is charged."""
        caps = Caps.checked(epsilon, delta)
        with self._lock:
            self._caps = set_caps(self._db, caps, origin)

    def same_images(self, sources: Sequence[bytes | str], contents: Sequence[bytes]) -> int:
        """Tell the ledger what each source shows: ``contents[i]`` (:func:`~ldpclient.io.decoding.content_id`) is
        the image of source id ``sources[i]``. From then on another file of an image seen before (re-encoded without
        loss) is summed under that image's first source, with what it had spent (:mod:`.same_images`). Call it
        before checking or charging those sources. Returns the sources found to be other files of an image."""
        if len(sources) != len(contents):
            raise ValueError(f"same_images needs one content per source: {len(contents)} for {len(sources)}")
        source_keys = self._key.source_id_keys(sources)
        content_keys = self._key.content_keys(contents)
        with self._lock, transaction(self._db) as c:
            return _same_images.register(c, source_keys, content_keys)

    def cap_history(self) -> list[dict[str, object]]:
        """Every cap set on this ledger, oldest first (:func:`~.cap_history.cap_history`)."""
        with self._lock:
            return cap_history(self._db)

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
        records = check_records(records)
        record_shape = tuple(int(s) for s in records.shape[1:])
        with self._lock:
            while True:
                keys = self._identities(records, sources, getattr(mechanism, "domain", None))  # not a Mechanism:
                mech = self._mechanism(mechanism, record_shape)  # TypeError
                first: dict[bytes, int] = {}  # unique keys, first occurrence order
                for i, k in enumerate(keys):
                    first.setdefault(k, i)
                try:
                    stored, fresh_values = self._release_transaction(mechanism, records, first, mech, scope, generator)
                except _SourcesAliased:  # another file of one of these images became known meanwhile: key again
                    continue
                break
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
        """One BEGIN IMMEDIATE..COMMIT: cap check, sampling, charges (per record, nats/probability) and values;
        (stored, fresh)."""
        g = mech.guarantee
        uniq = list(first)
        with transaction(self._db) as c:  # write lock held from the check to the commit
            _spend.lock_sources(c, [k[32:] for k in uniq])  # PostgreSQL: these sources' rows, to the commit
            if self._knows_images and _same_images.resolve_map(c, [k[32:] for k in uniq]):
                raise _SourcesAliased
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
                fresh_values = _store.sample_fresh(mechanism, records, first, fresh, g, generator)
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

    def _hook(self, stage: str) -> None:
        if self._fault_hook is not None:
            self._fault_hook(stage)

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
        records = check_records(records)
        keys = self._identities(records, sources, getattr(mechanism, "domain", None))  # non-Mechanism: TypeError below
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

def _stricter(mine: float | None, held: float | None) -> float | None:
    """The lower of two caps on one quantity (None: no cap)."""
    return held if mine is None else mine if held is None else min(mine, held)


def _check_scope(scope: object) -> None:
    if not isinstance(scope, str) or not scope:
        raise ValueError(f"scope must be a non-empty string, got {scope!r}")
