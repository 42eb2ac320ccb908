"""The privacy ledger: what each private record has spent, and its stored releases.

A :class:`Ledger` is a SQLite file on the device. For every private record it
keeps

* the record's **spend**: the sum of the per-record (epsilon, delta) of every
  *fresh* release of that record, across all mechanisms and scopes (basic
  composition), and
* each **release** it made: the noised values (the LDP output, never the input),
  keyed by (record, mechanism identity, scope). The mechanism identity is the
  canonical JSON of ``mechanism.config()``, the record shape and the per-record
  charge ``guarantee(record_shape)`` gives.

Asking again for the same record, mechanism and scope returns the stored release
at no cost (post-processing of a release is free; re-noising is not). A fresh
release is charged, and refused *before any sampling* when it would push a
record over the per-record cap (:class:`BudgetExceeded`).

**Spend is per source, not per tensor.** A record has two keyed identities:

* its **source**: what the record was made from. For a folder run that is the
  image file's bytes (:func:`source_id_of_bytes`, given as ``sources=``); an
  application may pass its own ids. Without ``sources`` the ledger uses the record
  at a canonical dtype and value scale (:meth:`Ledger.source_keys`): the values
  mapped by the mechanism's declared domain onto 0..255 steps, so the same image as
  float16, float32 or float64, or in another declared value range, is one source.
  The per-record cap sums every release of a source, across teachers, shapes,
  value ranges, dtypes and mechanisms, so no teacher can reset an image's spend by
  publishing another input shape or range.
* its **tensor**: the exact values released (dtype, shape, bytes). A stored
  release is reused only for the same tensor, source, mechanism and scope.

Both are ``HMAC-SHA256(secret, domain tag + bytes)`` with a 32-byte per-ledger
secret kept beside the database (``<path>.key``, mode 0600). The database holds no raw inputs and no plain hash of them, so it does
not fingerprint images for anyone without the key. Losing the key file makes the
ledger unable to recognise its records; the ledger then refuses to open rather
than silently treating every record as new.

Crash safety: the cap check, the sampling and the write of both the charges and
the released values happen inside one ``BEGIN IMMEDIATE`` transaction (WAL
journal, ``synchronous=FULL``), and nothing is returned before ``COMMIT`` has
returned. A kill before the commit leaves no charge and no release (the sampled
noise died with the process and was never seen); a kill after it leaves both, so
a re-run reuses the stored release instead of charging again.

Units: epsilon in nats, delta a probability; both **per record** (the ledger
charges ``Guarantee.epsilon_record`` / ``delta_record``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import secrets
import sqlite3
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import torch

from ..records import RecordSource, iter_batches, source_ids
from ..state import default_state_dir
from .base import Mechanism
from .guarantee import Domain, Guarantee
from .release import _RELEASE_TOKEN, Release

__all__ = [
    "Ledger",
    "LedgerError",
    "BudgetExceeded",
    "Spend",
    "cap_reached",
    "default_state_dir",
    "default_ledger_path",
]

SCHEMA_VERSION = 2
KEY_BYTES = 32
_KEY_CHECK_MESSAGE = b"ldpclient-ledger-key-check-v1"
_RECORD_DOMAIN = b"ldpclient-record-v1\x00"
_SOURCE_ID_DOMAIN = b"ldpclient-source-id-v1\x00"
_CANONICAL_DOMAIN = b"ldpclient-source-canonical-v1\x00"
#: Steps of the canonical value scale over a declared domain (8-bit images keep every value).
_CANONICAL_LEVELS = 255
# Relative slack on cap comparisons, so that e.g. ten charges of 0.1 fit a cap of 1.0
# despite floating-point summation (1e-9 of the cap: far below any meaningful epsilon).
_CAP_RTOL = 1e-9
_SQL_CHUNK = 500

#: Records hashed per chunk when a spend is asked of a RecordSource (3.2 MB of 28x28 float32: chunk buffers
#: of a few MB are reused by the C heap; measured over 200,000 records: +19 MB, with 4,096 per chunk +43 MB).
_SPENT_CHUNK = 1024

class LedgerError(Exception):
    """The ledger cannot be used safely (unreadable or mismatched key file, bad database)."""


class BudgetExceeded(LedgerError):
    """A fresh release would push some records over the per-record cap; nothing was sampled or charged.

    Attributes: ``n_exceeding`` (records that would exceed), ``n_fresh`` (records in
    the batch that would be charged), ``epsilon_cost``/``delta_cost`` (per-record cost
    of this release), ``remaining_epsilon``/``remaining_delta`` ((min, max) remaining
    budget over the exceeding records), ``cap_epsilon``/``cap_delta``.
    """

    def __init__(
        self,
        message: str,
        *,
        n_exceeding: int,
        n_fresh: int,
        epsilon_cost: float,
        delta_cost: float,
        remaining_epsilon: tuple[float, float],
        remaining_delta: tuple[float, float],
        cap_epsilon: float | None,
        cap_delta: float | None,
    ) -> None:
        super().__init__(message)
        self.n_exceeding = n_exceeding
        self.n_fresh = n_fresh
        self.epsilon_cost = epsilon_cost
        self.delta_cost = delta_cost
        self.remaining_epsilon = remaining_epsilon
        self.remaining_delta = remaining_delta
        self.cap_epsilon = cap_epsilon
        self.cap_delta = cap_delta


class Spend(NamedTuple):
    """Per-record privacy spend: ``epsilon`` and ``delta`` are float64 tensors ``(N,)`` (per record)."""

    epsilon: torch.Tensor
    delta: torch.Tensor


def default_ledger_path() -> Path:
    """``default_state_dir() / "ledger.sqlite"``."""
    return default_state_dir() / "ledger.sqlite"


def _check_cap(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or None, got {value!r}") from None
    if math.isnan(v) or v < 0:
        raise ValueError(f"{name} must be >= 0 (or None for no cap), got {value!r}")
    if name == "cap_delta" and v > 1:
        raise ValueError(f"cap_delta must be in [0, 1] (a probability), got {value!r}")
    return v


def _exceeds(total: float, cap: float | None) -> bool:
    return cap is not None and total > cap + _CAP_RTOL * max(cap, 1e-300)


def cap_reached(total: float, cap: float | None) -> bool:
    """Whether a record that has spent ``total`` has no budget left under ``cap`` (what
    :meth:`Ledger.summary` counts as ``records_at_cap``); never without a cap."""
    return cap is not None and total >= cap * (1 - _CAP_RTOL)


def _canonical_json(obj: Any) -> str:
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"mechanism.config() must be JSON-serialisable with finite numbers: {exc}") from None


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise LedgerError(f"stored release has unknown dtype {name!r}")
    return dtype


#: SQLite page cache per ledger connection, KiB (measured: noising 300,000 records went from 21 s at the
#: default 2 MB to the figure in BENCHMARKS.md, "A million images in minutes").
_CACHE_KIB = 256 * 1024


def _rows_as_bytes(t: torch.Tensor) -> list[bytes]:
    """The bytes of each row of a contiguous ``(N, ...)`` tensor, native dtype, C order: one copy, then sliced."""
    u8 = t.contiguous().reshape(t.shape[0], -1).view(torch.uint8).numpy()  # a byte view: every dtype, bfloat16 included
    buf, step = u8.tobytes(), u8.shape[1]
    return [buf[i : i + step] for i in range(0, len(buf), step)]


def _row_bytes(t: torch.Tensor) -> list[bytes]:
    """Canonical bytes of each row of ``(N, ...)``: contiguous, native dtype, little-endian.

    Floating ``-0.0`` is normalised to ``+0.0`` (the same value to every mechanism).
    """
    t = t.detach().cpu()
    if t.is_floating_point():
        t = t + 0.0  # -0.0 + 0.0 == +0.0; keeps dtype
    t = t.contiguous().reshape(t.shape[0], -1)
    if t.element_size() > 1 and sys.byteorder != "little":  # pragma: no cover - big-endian hosts
        raw = t.numpy().byteswap()
        return [r.tobytes() for r in raw]
    return _rows_as_bytes(t)


@dataclass
class _Fresh:
    """The records noised in one release call: ``values`` ``(F, *released_shape)`` (row j is the j-th fresh
    key), each row's clipped-element count, and each fresh key's row."""

    values: torch.Tensor
    clipped: list[int]
    row: dict[bytes, int]


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


@dataclass(frozen=True)
class _Mech:
    id: int
    identity: str
    guarantee: Guarantee


class Ledger:
    """Persistent per-record privacy ledger with stored, reusable releases.

    ``path``: the SQLite file (default :func:`default_ledger_path`); its parent is
    created if needed. The secret lives at ``path + ".key"``.
    ``cap_epsilon`` / ``cap_delta``: per-record caps on the *total* spend of a
    record (epsilon in nats, delta a probability), across all mechanisms and
    scopes; ``None`` means no cap (releases are still charged and recorded). The
    caps are a policy of this ``Ledger`` object, not stored in the file.

    Use as a context manager or call :meth:`close`. One ``Ledger`` object may be
    shared by threads; several processes may open the same file (SQLite locking
    serialises their releases).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        cap_epsilon: float | None = None,
        cap_delta: float | None = None,
    ) -> None:
        self.cap_epsilon = _check_cap("cap_epsilon", cap_epsilon)
        self.cap_delta = _check_cap("cap_delta", cap_delta)
        if path is None:
            state = default_state_dir()
            state.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.path = state / "ledger.sqlite"
        else:
            self.path = Path(path).expanduser()
            if str(path) == ":memory:" or str(path) == "":
                raise ValueError("Ledger needs a file path (an in-memory ledger would not persist any charge)")
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.key_path = Path(str(self.path) + ".key")
        #: Test hook: called with "checked" (cap checked, before sampling), "sampled"
        #: (noise drawn, before the write) and "committed" (after COMMIT, before
        #: returning). Used by the crash tests; None in normal use.
        self._fault_hook: Callable[[str], None] | None = None
        self._lock = threading.RLock()
        self._mechs: dict[str, _Mech] = {}
        # the database may live only in its WAL file until the first checkpoint
        db_existed = any(
            p.exists() and p.stat().st_size > 0 for p in (self.path, Path(str(self.path) + "-wal"))
        )
        self._secret = self._load_or_create_key(db_existed)
        self._conn: sqlite3.Connection | None = None
        try:
            self._conn = sqlite3.connect(
                str(self.path), timeout=60.0, isolation_level=None, check_same_thread=False
            )
            self._init_db()
        except sqlite3.DatabaseError as exc:
            self.close()
            self._forget_new_key()
            raise LedgerError(f"cannot open ledger database {self.path}: {exc}") from exc
        except BaseException:
            self.close()
            self._forget_new_key()
            raise

    def _forget_new_key(self) -> None:
        """After a failed first open (e.g. a full disk): remove the key this call created, and the empty
        database, so that the next run starts the ledger instead of refusing a key with no ledger. Nothing
        was ever charged under that key: the schema was never committed."""
        if not getattr(self, "_key_created", False):
            return
        for p in (self.path, Path(str(self.path) + "-wal"), Path(str(self.path) + "-shm")):
            try:
                if p.exists() and (p.stat().st_size == 0 or p != self.path):
                    p.unlink()
            except OSError:
                pass
        if not self.path.exists() or self.path.stat().st_size == 0:
            try:
                self.key_path.unlink()
            except OSError:
                pass

    # ------------------------------------------------------------------ setup

    def _load_or_create_key(self, db_existed: bool) -> bytes:
        kp = self.key_path
        if kp.exists() and not db_existed:
            raise LedgerError(
                f"ledger {self.path} is missing or empty but its key file {kp} exists: the privacy spend "
                "recorded with this key is gone, and starting afresh would forget it. Restore the ledger "
                "file; only if no release was ever made with this key (e.g. the very first run was killed "
                "before noising anything), delete the key file to start a new ledger."
            )
        self._key_created = not kp.exists()
        if self._key_created:
            if db_existed:
                raise LedgerError(
                    f"ledger key file {kp} is missing but the ledger {self.path} exists: without its "
                    "key the ledger cannot recognise its records (every release would be charged "
                    "again). Restore the key file, or start a new ledger at another path."
                )
            self._create_key()
        try:
            data = kp.read_bytes()
        except OSError as exc:
            raise LedgerError(f"cannot read ledger key file {kp}: {exc.strerror or exc}") from exc
        if len(data) != KEY_BYTES:
            raise LedgerError(
                f"ledger key file {kp} is corrupt: expected {KEY_BYTES} bytes, found {len(data)}"
            )
        return data

    def _create_key(self) -> None:
        """Write a fresh secret atomically: temp file (0600) + fsync + hard link (never clobbers)."""
        kp = self.key_path
        fd, tmp = tempfile.mkstemp(prefix=kp.name + ".", suffix=".tmp", dir=kp.parent)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
            os.close(fd)
            fd = -1
            try:
                os.link(tmp, kp)  # atomic and fails if another process created the key first
            except FileExistsError:
                pass
            _fsync_dir(kp.parent)
        finally:
            if fd >= 0:
                os.close(fd)
            try:
                os.unlink(tmp)
            except FileNotFoundError:  # pragma: no cover
                pass

    def _init_db(self) -> None:
        c = self._db
        mode = c.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":  # pragma: no cover - e.g. some network file systems
            raise LedgerError(f"ledger {self.path} cannot use WAL journaling (got {mode!r})")
        c.execute("PRAGMA synchronous=FULL")
        c.execute("PRAGMA foreign_keys=ON")
        # the page cache the B-trees of a large ledger need (SQLite's default is 2 MB): keys are HMACs, so
        # inserts land all over the indexes; an upper bound, taken only as the ledger grows
        c.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
        # checkpoint the write-ahead log every 64 MB instead of every 4 MB: a page that several chunks touch
        # is copied into the database once (each commit still syncs the log: durability is unchanged)
        c.execute("PRAGMA wal_autocheckpoint=16384")
        check = hmac.new(self._secret, _KEY_CHECK_MESSAGE, hashlib.sha256).hexdigest()
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute(_META_TABLE)
            rows = dict(c.execute("SELECT key, value FROM meta").fetchall())
            if rows.get("schema_version") == "1" and hmac.compare_digest(rows.get("key_check", ""), check):
                _migrate_v1(c)
                rows["schema_version"] = str(SCHEMA_VERSION)
            for stmt in _SCHEMA:
                c.execute(stmt)
            if "schema_version" not in rows and not self._key_created:
                raise LedgerError(
                    f"{self.path} is not an ldpclient ledger (no ledger metadata in it) but a ledger key "
                    f"{self.key_path} exists beside it; restore the ledger file or use another --state-dir"
                )
            if "schema_version" not in rows:
                c.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                c.execute("INSERT INTO meta(key, value) VALUES ('key_check', ?)", (check,))
                c.execute("INSERT INTO meta(key, value) VALUES ('created', ?)", (repr(time.time()),))
            else:
                if not hmac.compare_digest(rows.get("key_check", ""), check):
                    raise LedgerError(
                        f"ledger key file {self.key_path} does not belong to ledger {self.path} "
                        "(key check mismatch): records would not be recognised. Restore the right key file."
                    )
                if rows["schema_version"] != str(SCHEMA_VERSION):
                    raise LedgerError(
                        f"ledger {self.path} has schema version {rows['schema_version']}, "
                        f"this ldpclient understands {SCHEMA_VERSION}"
                    )
            self._legacy = c.execute("SELECT EXISTS (SELECT 1 FROM legacy_spend)").fetchone()[0] == 1
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    @property
    def _db(self) -> sqlite3.Connection:
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
        records = _check_records(records)
        header = (
            _RECORD_DOMAIN
            + _dtype_name(records.dtype).encode()
            + b"\x00"
            + json.dumps(list(records.shape[1:])).encode()
            + b"\x00"
        )
        secret = self._secret
        return [hmac.digest(secret, header + row, "sha256") for row in _row_bytes(records)]

    def source_keys(
        self,
        records: torch.Tensor,
        *,
        sources: Sequence[bytes | str] | None = None,
        domain: Domain | None = None,
    ) -> list[bytes]:
        """HMAC-SHA256 key (32 bytes) of each record's **source**: what its spend is summed under.

        ``sources``: one id per record (bytes or str: a file's SHA-256, a database key),
        as the caller knows it; the folder commands pass :func:`~ldpclient.data` file
        hashes. Without it the source is the record at a canonical dtype and scale:
        each value mapped by ``domain`` (the mechanism's declared value range, default
        [0, 1]) onto ``0..255`` steps and rounded, with the record's shape. The same
        image as float16, float32 or float64, or declared in another value range, is
        then one source; at another size it is another source unless ``sources``
        names it.
        """
        records = _check_records(records)
        secret = self._secret
        if sources is not None:
            if len(sources) != records.shape[0]:
                raise ValueError(f"sources must give one id per record: {len(sources)} ids for {records.shape[0]} records")
            return self._source_id_keys(sources)
        dom = domain if domain is not None else Domain()
        unit = (records.detach().cpu().to(torch.float64).nan_to_num(0.0) - dom.low) / dom.width
        levels = (unit.clamp(0.0, 1.0) * _CANONICAL_LEVELS).round().to(torch.uint8)
        header = _CANONICAL_DOMAIN + json.dumps(list(records.shape[1:])).encode() + b"\x00"
        return [hmac.digest(secret, header + row, "sha256") for row in _row_bytes(levels)]

    def _source_id_keys(self, sources: Sequence[bytes | str]) -> list[bytes]:
        """The source key of each caller-given source id (see :meth:`source_keys`)."""
        out = []
        for sid in sources:
            if isinstance(sid, str):
                sid = sid.encode("utf-8", "surrogateescape")
            if not isinstance(sid, (bytes, bytearray)) or not sid:
                raise TypeError(f"each source id must be non-empty bytes or str, got {type(sid).__name__}")
            out.append(hmac.digest(self._secret, _SOURCE_ID_DOMAIN + bytes(sid), "sha256"))
        return out

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

    def _mechanism(self, mechanism: Mechanism, record_shape: tuple[int, ...]) -> _Mech:
        """Look up / register the mechanism identity (canonical config + record shape + per-record charge)."""
        if not isinstance(mechanism, Mechanism):
            raise TypeError(f"expected an ldpclient.privacy Mechanism, got {type(mechanism).__name__}")
        g = mechanism.guarantee(record_shape)
        if not isinstance(g, Guarantee):
            raise TypeError(f"{type(mechanism).__name__}.guarantee() must return a Guarantee")
        for name in ("epsilon_record", "delta_record"):
            if not math.isfinite(getattr(g, name)):
                raise ValueError(f"mechanism guarantee {name} must be finite to be charged, got {getattr(g, name)}")
        # The per-record charge is part of the identity: should the accounting of a configuration
        # ever change, its old releases are not reused under a charge they were not made with.
        identity = _canonical_json(
            {
                "config": mechanism.config(),
                "record_shape": list(record_shape),
                "charge": [g.epsilon_record, g.delta_record],
            }
        )
        cached = self._mechs.get(identity)
        if cached is not None:
            return cached
        name = getattr(mechanism, "name", type(mechanism).__name__)
        c = self._db
        row = c.execute("SELECT id FROM mechanisms WHERE identity = ?", (identity,)).fetchone()
        if row is None:
            c.execute("BEGIN IMMEDIATE")
            try:
                row = c.execute("SELECT id FROM mechanisms WHERE identity = ?", (identity,)).fetchone()
                if row is None:
                    cur = c.execute(
                        "INSERT INTO mechanisms(identity, name, epsilon_record, delta_record, guarantee)"
                        " VALUES (?, ?, ?, ?, ?)",
                        (identity, str(name), g.epsilon_record, g.delta_record, _canonical_json(g.as_dict())),
                    )
                    row = (cur.lastrowid,)
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        mech = _Mech(int(row[0]), identity, g)
        self._mechs[identity] = mech
        return mech

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
        if not isinstance(scope, str) or not scope:
            raise ValueError(f"scope must be a non-empty string, got {scope!r}")
        records = _check_records(records)
        record_shape = tuple(int(s) for s in records.shape[1:])
        keys = self._identities(records, sources, getattr(mechanism, "domain", None))
        with self._lock:
            mech = self._mechanism(mechanism, record_shape)
            # unique keys, first occurrence order
            first: dict[bytes, int] = {}
            for i, k in enumerate(keys):
                first.setdefault(k, i)
            stored, fresh_values = self._release_transaction(mechanism, records, first, mech, scope, generator)
            self._hook("committed")
        return self._assemble(mechanism, keys, first, stored, fresh_values, mech.guarantee, record_shape)

    def _release_transaction(
        self,
        mechanism: Mechanism,
        records: torch.Tensor,
        first: dict[bytes, int],
        mech: _Mech,
        scope: str,
        generator: torch.Generator | None,
    ) -> tuple[dict[bytes, tuple[torch.Tensor, int]], _Fresh | None]:
        """One BEGIN IMMEDIATE..COMMIT: cap check, sampling, charges (per record, nats/probability) and values; (stored, fresh)."""
        g = mech.guarantee
        uniq = list(first)
        c = self._db
        c.execute("BEGIN IMMEDIATE")  # write lock held from the check to the commit
        try:
            self._adopt_legacy(uniq)
            stored = self._stored_releases(uniq, mech.id, scope)
            fresh = [k for k in uniq if k not in stored]
            if fresh:
                self._check_budget(fresh, g)
            self._hook("checked")
            fresh_values: _Fresh | None = None
            if fresh:
                fresh_values = self._sample_fresh(mechanism, records, first, fresh, g, generator)
                self._hook("sampled")
                self._write_fresh(fresh, fresh_values, mech, g, scope)
            c.execute("COMMIT")
        except BaseException:
            if self._conn is not None and self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        return stored, fresh_values

    def _sample_fresh(
        self,
        mechanism: Mechanism,
        records: torch.Tensor,
        first: dict[bytes, int],
        fresh: list[bytes],
        g: Guarantee,
        generator: torch.Generator | None,
    ) -> _Fresh:
        """Noise the fresh records once each; refuse a release costing more per record (eps nats, delta) than ``g``."""
        idx = torch.tensor([first[k] for k in fresh], dtype=torch.int64)
        rel = mechanism.release(records[idx], generator=generator)
        if not isinstance(rel, Release) or len(rel) != len(fresh):
            raise LedgerError(
                f"{type(mechanism).__name__}.release returned {type(rel).__name__} "
                f"of wrong length for {len(fresh)} records"
            )
        rg = rel.guarantee
        if rg.epsilon_record > g.epsilon_record * (1 + _CAP_RTOL) or (
            rg.delta_record > g.delta_record * (1 + _CAP_RTOL)
        ):
            raise LedgerError(
                f"{type(mechanism).__name__}.release reported a larger per-record cost "
                f"(epsilon {rg.epsilon_record}, delta {rg.delta_record}) than its guarantee() "
                f"(epsilon {g.epsilon_record}, delta {g.delta_record}); nothing was charged or returned"
            )
        return _Fresh(rel._values.detach().cpu().contiguous(), rel.clipped_elements.tolist(),
                      {k: j for j, k in enumerate(fresh)})

    def _assemble(
        self,
        mechanism: Mechanism,
        keys: list[bytes],
        first: dict[bytes, int],
        stored: dict[bytes, tuple[torch.Tensor, int]],
        fresh: _Fresh | None,
        g: Guarantee,
        record_shape: tuple[int, ...],
    ) -> Release:
        """The Release in input order (guarantee ``g`` per release of one record); no database access.

        Values keep the fresh release's dtype (stored rows are converted to it); with nothing fresh, the stored one."""
        n = len(keys)
        fresh_row = fresh.row if fresh is not None else {}
        fresh_clipped = fresh.clipped if fresh is not None else []
        fresh_pos, fresh_rows, stored_pos, stored_values = [], [], [], []
        clipped_out, reused = [0] * n, [True] * n
        for i, k in enumerate(keys):
            j = fresh_row.get(k)
            if j is not None:
                fresh_pos.append(i)
                fresh_rows.append(j)
                clipped_out[i] = fresh_clipped[j]
                reused[i] = first[k] != i
            else:
                v, cl = stored[k]
                stored_values.append(v)
                stored_pos.append(i)
                clipped_out[i] = cl
        kept = torch.stack(stored_values) if stored_values else None
        like = fresh.values if fresh is not None else kept
        assert like is not None  # every key is fresh or stored
        values = torch.empty((n, *like.shape[1:]), dtype=like.dtype)
        if fresh is not None:
            values[torch.tensor(fresh_pos)] = fresh.values[torch.tensor(fresh_rows)]
        if kept is not None:
            values[torch.tensor(stored_pos)] = kept.to(like.dtype)
        return Release(
            values,
            g,
            record_shape,
            reduction=int(getattr(mechanism, "reduction", 1)),
            basis=mechanism.reconstruction(record_shape),
            clipped_elements=torch.tensor(clipped_out, dtype=torch.int64),
            reused=torch.tensor(reused, dtype=torch.bool),
            _token=_RELEASE_TOKEN,
        )

    def _hook(self, stage: str) -> None:
        if self._fault_hook is not None:
            self._fault_hook(stage)

    def _stored_releases(
        self, keys: list[bytes], mech_id: int, scope: str
    ) -> dict[bytes, tuple[torch.Tensor, int]]:
        """Stored releases of (tensor + source) ``keys`` for this mechanism and scope; a release a
        schema-1 ledger made (no source yet) matches its tensor whatever the source."""
        wanted: dict[bytes, list[bytes]] = {}
        for k in keys:
            wanted.setdefault(k[:32], []).append(k)
        out: dict[bytes, tuple[torch.Tensor, int]] = {}
        for chunk in _chunks(list(wanted)):
            q = (
                "SELECT record_key, source_key, dtype, shape, data, clipped FROM releases"
                f" WHERE mechanism_id = ? AND scope = ? AND record_key IN ({','.join('?' * len(chunk))})"
            )
            for rkey, skey, dtype, shape, data, clipped in self._db.execute(q, (mech_id, scope, *chunk)):
                matches = [k for k in wanted[bytes(rkey)] if skey is None or k[32:] == bytes(skey)]
                if not matches:
                    continue
                t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
                t = t.view(_dtype_from_name(dtype)).reshape(json.loads(shape)).clone()
                for k in matches:
                    out[k] = (t, int(clipped))
        return out

    def _adopt_legacy(self, keys: list[bytes]) -> None:
        """Inside the caller's transaction: move the spend and releases a schema-1 ledger kept per tensor
        onto the source now seen with that tensor (the first source seen adopts them), so they count
        against that source's cap from now on."""
        if not self._legacy:
            return
        c = self._db
        source_of: dict[bytes, bytes] = {}
        for k in keys:
            source_of.setdefault(k[:32], k[32:])
        for chunk in _chunks(list(source_of)):
            q = f"SELECT record_key, epsilon, delta, releases FROM legacy_spend WHERE record_key IN ({','.join('?' * len(chunk))})"
            for rkey, eps, delta, n in c.execute(q, chunk).fetchall():
                skey = source_of[bytes(rkey)]
                c.execute(_ADD_SPEND, (skey, eps, delta, n))
                c.execute("DELETE FROM legacy_spend WHERE record_key = ?", (rkey,))
                c.execute("UPDATE releases SET source_key = ? WHERE record_key = ? AND source_key IS NULL", (skey, rkey))
        self._legacy = c.execute("SELECT EXISTS (SELECT 1 FROM legacy_spend)").fetchone()[0] == 1

    def _spend_of(self, keys: Sequence[bytes], table: str = "spend") -> dict[bytes, tuple[float, float]]:
        """Spend per key of ``table``: ``spend`` (per source key) or ``legacy_spend`` (per tensor key, schema 1)."""
        column = "source_key" if table == "spend" else "record_key"
        out: dict[bytes, tuple[float, float]] = {}
        for chunk in _chunks(list(dict.fromkeys(keys))):
            q = f"SELECT {column}, epsilon, delta FROM {table} WHERE {column} IN ({','.join('?' * len(chunk))})"
            for key, eps, delta in self._db.execute(q, chunk):
                out[bytes(key)] = (float(eps), float(delta))
        return out

    def _check_budget(self, fresh: list[bytes], g: Guarantee) -> None:
        """Refuse when a source would pass a cap: its total so far plus this batch's charges to it."""
        if self.cap_epsilon is None and self.cap_delta is None:
            return
        charges: dict[bytes, int] = {}
        for k in fresh:
            charges[k[32:]] = charges.get(k[32:], 0) + 1
        spend = self._spend_of(list(charges))
        bad_eps: list[float] = []
        bad_delta: list[float] = []
        for k, count in charges.items():
            eps, delta = spend.get(k, (0.0, 0.0))
            if _exceeds(eps + count * g.epsilon_record, self.cap_epsilon) or _exceeds(
                delta + count * g.delta_record, self.cap_delta
            ):
                bad_eps.append(math.inf if self.cap_epsilon is None else max(self.cap_epsilon - eps, 0.0))
                bad_delta.append(math.inf if self.cap_delta is None else max(self.cap_delta - delta, 0.0))
        if not bad_eps:
            return
        rem_e = (min(bad_eps), max(bad_eps))
        rem_d = (min(bad_delta), max(bad_delta))
        caps, left = [], []
        if self.cap_epsilon is not None:
            caps.append(f"epsilon cap {_fmt(self.cap_epsilon)}")
            left.append(f"epsilon min {_fmt(rem_e[0])} / max {_fmt(rem_e[1])}")
        if self.cap_delta is not None:
            caps.append(f"delta cap {_fmt(self.cap_delta)}")
            left.append(f"delta min {_fmt(rem_d[0])} / max {_fmt(rem_d[1])}")
        msg = (
            f"privacy budget exceeded: {len(bad_eps)} of {len(charges)} records to be freshly released "
            f"would exceed the per-record cap ({', '.join(caps)}). This release costs epsilon "
            f"{_fmt(g.epsilon_record)}, delta {_fmt(g.delta_record)} per record ({g.mechanism}); the "
            f"remaining budget of those records is {', '.join(left)}. Nothing was sampled or charged."
        )
        raise BudgetExceeded(
            msg,
            n_exceeding=len(bad_eps),
            n_fresh=len(charges),
            epsilon_cost=g.epsilon_record,
            delta_cost=g.delta_record,
            remaining_epsilon=rem_e,
            remaining_delta=rem_d,
            cap_epsilon=self.cap_epsilon,
            cap_delta=self.cap_delta,
        )

    def _write_fresh(self, fresh: list[bytes], values: _Fresh, mech: _Mech, g: Guarantee, scope: str) -> None:
        now = time.time()
        dtype_name, shape_json = _dtype_name(values.values.dtype), json.dumps(list(values.values.shape[1:]))
        rows = [  # row j of the values is the j-th fresh key (_sample_fresh)
            (k[:32], k[32:], mech.id, scope, g.epsilon_record, g.delta_record, dtype_name, shape_json, data, clipped, now)
            for k, data, clipped in zip(fresh, _rows_as_bytes(values.values), values.clipped, strict=True)
        ]
        c = self._db
        c.executemany(
            "INSERT INTO releases(record_key, source_key, mechanism_id, scope, epsilon, delta, dtype, shape, data,"
            " clipped, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        c.executemany(_ADD_SPEND, [(k[32:], g.epsilon_record, g.delta_record, 1) for k in fresh])

    # -------------------------------------------------------------- queries

    def spent(
        self,
        records: torch.Tensor | RecordSource,
        *,
        sources: Sequence[bytes | str] | None = None,
        domain: Domain | None = None,
    ) -> Spend:
        """Total spend so far of each record's source: per-record epsilon and delta, ``(N,)`` float64.

        ``records``: a tensor ``(N, *record_shape)``, or a :class:`~ldpclient.records.RecordSource`
        read in chunks (its own source ids used, see :func:`~ldpclient.records.source_ids`).
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
            spend = self._spend_of([k[32:] for k in keys])
            legacy = self._spend_of([k[:32] for k in keys], "legacy_spend") if self._legacy else {}
        totals = [
            tuple(a + b for a, b in zip(spend.get(k[32:], (0.0, 0.0)), legacy.get(k[:32], (0.0, 0.0)), strict=True))
            for k in keys
        ]
        eps = torch.tensor([t[0] for t in totals], dtype=torch.float64)
        delta = torch.tensor([t[1] for t in totals], dtype=torch.float64)
        return Spend(eps, delta)

    def remaining(
        self,
        records: torch.Tensor,
        *,
        sources: Sequence[bytes | str] | None = None,
        domain: Domain | None = None,
    ) -> Spend:
        """Budget left of each record's source under this ledger's caps (``inf`` where there is no cap; never < 0)."""
        s = self.spent(records, sources=sources, domain=domain)
        eps = (
            torch.full_like(s.epsilon, math.inf)
            if self.cap_epsilon is None
            else (self.cap_epsilon - s.epsilon).clamp(min=0.0)
        )
        delta = (
            torch.full_like(s.delta, math.inf)
            if self.cap_delta is None
            else (self.cap_delta - s.delta).clamp(min=0.0)
        )
        return Spend(eps, delta)

    def spent_by_source(self, sources: Sequence[bytes | str]) -> list[float]:
        """Per-record epsilon spent so far by each source id (as :meth:`source_keys` takes them; a folder's
        files: :func:`~ldpclient.data.source_id` of their bytes), 0 for a source never charged. Only spend
        charged to sources counts: a schema-1 record no run has matched to its source yet is not found here."""
        keys = self._source_id_keys(sources)
        with self._lock:
            spend = self._spend_of(keys)
        return [spend.get(k, (0.0, 0.0))[0] for k in keys]

    def epsilon_per_record(self) -> list[float]:
        """Every record's total per-record epsilon, in no particular order: the numbers only, no keys."""
        with self._lock:
            return [float(r[0]) for r in self._db.execute(f"SELECT epsilon FROM {_ALL_SPEND}")]

    def epsilon_per_record_by_scope(self) -> dict[str, list[float]]:
        """Per scope (teacher identity), the per-record epsilon its stored releases cost each record that has
        one, in no particular order: the numbers only, no keys. Records of a schema-1 ledger not yet matched
        to a source count per decoded tensor."""
        out: dict[str, list[float]] = {}
        with self._lock:
            rows = self._db.execute(
                "SELECT scope, SUM(epsilon) FROM releases GROUP BY scope, COALESCE(source_key, record_key)"
                " ORDER BY scope"
            ).fetchall()
        for scope, eps in rows:
            out.setdefault(str(scope), []).append(float(eps))
        return out

    def scopes(self) -> list[str]:
        """Every scope (teacher identity) the ledger holds releases for."""
        with self._lock:
            return sorted(r[0] for r in self._db.execute("SELECT DISTINCT scope FROM releases"))

    def rename_scopes(self, aliases: Sequence[str], identity: str) -> int:
        """Move the releases stored under ``aliases`` (other spellings of one teacher) to ``identity``, in one
        transaction, so that they are reused instead of noised again. A release that exists under both
        stays where it is (the spend, per source, is unchanged either way). Returns the releases moved."""
        moved = 0
        with self._lock:
            c = self._db
            c.execute("BEGIN IMMEDIATE")
            try:
                for alias in aliases:
                    moved += c.execute("UPDATE OR IGNORE releases SET scope = ? WHERE scope = ?", (identity, alias)).rowcount
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
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
        if not isinstance(scope, str) or not scope:
            raise ValueError(f"scope must be a non-empty string, got {scope!r}")
        records = _check_records(records)
        keys = self._identities(records, sources, getattr(mechanism, "domain", None))
        record_shape = tuple(int(s) for s in records.shape[1:])
        with self._lock:
            mech = self._mechanism(mechanism, record_shape)
            stored = self._stored_releases(list(dict.fromkeys(keys)), mech.id, scope)
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
        records (per record), ``cap_epsilon``, ``cap_delta``, ``records_at_cap``
        (records whose remaining epsilon or delta budget is 0 under the caps), and
        ``by_mechanism``: one entry per (mechanism, scope) with ``mechanism`` (name),
        ``config`` (mechanism config), ``record_shape``, ``scope``, ``releases``,
        ``epsilon_per_release``, ``delta_per_release``.
        """
        with self._lock:
            c = self._db
            n, tot_e, max_e, tot_d, max_d = c.execute(
                "SELECT COUNT(*), COALESCE(SUM(epsilon),0), COALESCE(MAX(epsilon),0),"
                f" COALESCE(SUM(delta),0), COALESCE(MAX(delta),0) FROM {_ALL_SPEND}"
            ).fetchone()
            n_legacy = c.execute("SELECT COUNT(*) FROM legacy_spend").fetchone()[0]
            at_cap = 0
            conds, params = [], []
            if self.cap_epsilon is not None:
                conds.append("epsilon >= ?")
                params.append(self.cap_epsilon * (1 - _CAP_RTOL))
            if self.cap_delta is not None:
                conds.append("delta >= ?")
                params.append(self.cap_delta * (1 - _CAP_RTOL))
            if conds:
                at_cap = c.execute(
                    f"SELECT COUNT(*) FROM {_ALL_SPEND} WHERE {' OR '.join(conds)}", params
                ).fetchone()[0]
            by = c.execute(
                "SELECT m.name, m.identity, r.scope, COUNT(*), m.epsilon_record, m.delta_record"
                " FROM releases r JOIN mechanisms m ON m.id = r.mechanism_id"
                " GROUP BY r.mechanism_id, r.scope ORDER BY m.name, r.scope, m.id"
            ).fetchall()
            n_rel = c.execute("SELECT COUNT(*) FROM releases").fetchone()[0]
        by_mechanism = []
        for name, identity, scope, count, eps, delta in by:
            ident = json.loads(identity)  # {"config", "record_shape", "charge"}
            by_mechanism.append(
                {
                    "mechanism": name,
                    "config": ident["config"],
                    "record_shape": ident["record_shape"],
                    "scope": scope,
                    "releases": int(count),
                    "epsilon_per_release": float(eps),
                    "delta_per_release": float(delta),
                }
            )
        n = int(n)
        return {
            "path": str(self.path),
            "records": n,
            "legacy_records": int(n_legacy),
            "releases": int(n_rel),
            "epsilon": {"total": float(tot_e), "max": float(max_e), "mean": float(tot_e) / n if n else 0.0},
            "delta": {"total": float(tot_d), "max": float(max_d), "mean": float(tot_d) / n if n else 0.0},
            "cap_epsilon": self.cap_epsilon,
            "cap_delta": self.cap_delta,
            "records_at_cap": int(at_cap),
            "by_mechanism": by_mechanism,
        }

    def verify(self) -> list[str]:
        """Consistency check; returns a list of problems (empty when all is well).

        Checks ``PRAGMA integrity_check``, that every stored release carries exactly
        its mechanism's per-record charge, and that each source's spend (and each
        schema-1 record's not yet adopted) equals the sum of the charges of its
        stored releases (and their count).
        """
        problems: list[str] = []
        with self._lock:
            c = self._db
            ic = [r[0] for r in c.execute("PRAGMA integrity_check").fetchall()]
            if ic != ["ok"]:
                problems.append("integrity_check: " + "; ".join(ic))
            bad = c.execute(
                "SELECT COUNT(*) FROM releases r JOIN mechanisms m ON m.id = r.mechanism_id"
                " WHERE r.epsilon != m.epsilon_record OR r.delta != m.delta_record"
            ).fetchone()[0]
            if bad:
                problems.append(f"{bad} stored releases carry a charge different from their mechanism's")
            rows = c.execute(
                "SELECT s.epsilon, s.delta, s.releases, t.eps, t.delta, t.n FROM spend s LEFT JOIN"
                " (SELECT source_key, SUM(epsilon) AS eps, SUM(delta) AS delta, COUNT(*) AS n"
                "  FROM releases WHERE source_key IS NOT NULL GROUP BY source_key) t ON t.source_key = s.source_key"
            ).fetchall()
            rows += c.execute(
                "SELECT s.epsilon, s.delta, s.releases, t.eps, t.delta, t.n FROM legacy_spend s LEFT JOIN"
                " (SELECT record_key, SUM(epsilon) AS eps, SUM(delta) AS delta, COUNT(*) AS n"
                "  FROM releases WHERE source_key IS NULL GROUP BY record_key) t ON t.record_key = s.record_key"
            ).fetchall()
            orphans = c.execute(
                "SELECT COUNT(DISTINCT source_key) FROM releases WHERE source_key NOT IN"
                " (SELECT source_key FROM spend)"
            ).fetchone()[0]
            orphans += c.execute(
                "SELECT COUNT(DISTINCT record_key) FROM releases WHERE source_key IS NULL AND record_key NOT IN"
                " (SELECT record_key FROM legacy_spend)"
            ).fetchone()[0]
        mismatched = 0
        for eps, delta, nrel, seps, sdelta, sn in rows:
            if sn is None or nrel != sn or not math.isclose(eps, seps, rel_tol=1e-9, abs_tol=1e-12) or not (
                math.isclose(delta, sdelta, rel_tol=1e-9, abs_tol=1e-15)
            ):
                mismatched += 1
        if mismatched:
            problems.append(f"{mismatched} records' spend differs from the sum of their stored releases' charges")
        if orphans:
            problems.append(f"{orphans} records have stored releases but no spend")
        return problems


_META_TABLE = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
_RELEASES_TABLE = (
    "CREATE TABLE IF NOT EXISTS releases ("
    " id INTEGER PRIMARY KEY, record_key BLOB NOT NULL, source_key BLOB,"
    " mechanism_id INTEGER NOT NULL REFERENCES mechanisms(id), scope TEXT NOT NULL,"
    " epsilon REAL NOT NULL, delta REAL NOT NULL, dtype TEXT NOT NULL, shape TEXT NOT NULL,"
    " data BLOB NOT NULL, clipped INTEGER NOT NULL, created REAL NOT NULL,"
    " UNIQUE (record_key, source_key, mechanism_id, scope))"
)
# spend: per source (schema 2); legacy_spend: what a schema-1 ledger charged per decoded tensor,
# moved onto a source the first time a run sees that tensor again (releases.source_key NULL until then)
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS mechanisms ("
    " id INTEGER PRIMARY KEY, identity TEXT NOT NULL UNIQUE, name TEXT NOT NULL,"
    " epsilon_record REAL NOT NULL, delta_record REAL NOT NULL, guarantee TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS spend ("
    " source_key BLOB PRIMARY KEY, epsilon REAL NOT NULL, delta REAL NOT NULL, releases INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS legacy_spend ("
    " record_key BLOB PRIMARY KEY, epsilon REAL NOT NULL, delta REAL NOT NULL, releases INTEGER NOT NULL)",
    _RELEASES_TABLE,
)
_ADD_SPEND = (
    "INSERT INTO spend(source_key, epsilon, delta, releases) VALUES (?, ?, ?, ?)"
    " ON CONFLICT(source_key) DO UPDATE SET epsilon = epsilon + excluded.epsilon,"
    " delta = delta + excluded.delta, releases = releases + excluded.releases"
)
_ALL_SPEND = "(SELECT epsilon, delta FROM spend UNION ALL SELECT epsilon, delta FROM legacy_spend)"


def _migrate_v1(c: sqlite3.Connection) -> None:
    """Schema 1 -> 2 inside the caller's transaction: the per-tensor spend becomes ``legacy_spend``
    (adopted by a source when a run sees the tensor again), releases gain a ``source_key`` (NULL)."""
    c.execute("ALTER TABLE spend RENAME TO legacy_spend")
    c.execute("ALTER TABLE releases RENAME TO releases_v1")
    c.execute(_RELEASES_TABLE)
    c.execute(
        "INSERT INTO releases(id, record_key, source_key, mechanism_id, scope, epsilon, delta, dtype, shape, data,"
        " clipped, created) SELECT id, record_key, NULL, mechanism_id, scope, epsilon, delta, dtype, shape, data,"
        " clipped, created FROM releases_v1"
    )
    c.execute("DROP TABLE releases_v1")
    c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
    c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('migrated_from_1', ?)", (repr(time.time()),))


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


def _chunks(items: list[bytes]) -> Iterator[list[bytes]]:
    for i in range(0, len(items), _SQL_CHUNK):
        yield items[i : i + _SQL_CHUNK]


def _fmt(x: float | None) -> str:
    if x is None:
        return "none"
    return f"{x:.6g}"
