"""The ledger's database (a SQLite file, or PostgreSQL): its tables, how it is opened, and the migration from schema 1.

Tables: ``meta`` (schema version, the key check, creation time), ``mechanisms`` (one row per
mechanism identity and its per-record charge), ``spend`` (per source key: the summed
per-record epsilon in nats and delta, and the release count), ``legacy_spend`` (what a
schema-1 ledger charged per decoded tensor, until a run sees that tensor's source) and
``releases`` (the stored noised values, keyed by tensor key, source key, mechanism and scope); since schema 3
``caps`` (every per-record cap set on this ledger, in order: the last row holds) and ``fingerprints`` (per
source key, the perceptual fingerprint of the image a fresh release was made from:
:mod:`.fingerprint`); since schema 4 a fingerprint holds a fifth print, of the image's luma (an older ldpclient
would pass over those fingerprints, so it refuses the ledger); since schema 5 ``contents`` and ``aliases``
(:mod:`.same_images`: the same image under other files, whose spend is summed under the first; an older ldpclient
would sum them apart, so it refuses the ledger). A ledger of an older schema is migrated in one
transaction; a newer one is refused
(:class:`~ldpclient.state.NewerStateFile`). A PostgreSQL ledger starts at the current schema; its tables are
created under an advisory lock, so that hosts opening a new one at once do not race.
"""

from __future__ import annotations

import hmac
import os
import time
from contextlib import contextmanager
from typing import Iterator

from ...state import check_schema
from ...state.database import LEDGER_NAMESPACE, Database
from .errors import LedgerError

SCHEMA_VERSION = 5

#: SQLite page cache per ledger connection, KiB (measured: noising 300,000 records took 21 s at the default 2 MB,
#: several times what it takes with this one).
_CACHE_KIB = 256 * 1024
#: Keys per ``IN (...)`` clause (below SQLite's bound-parameter limit).
_SQL_CHUNK = 500

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
    # schema 3: the caps set on this ledger (epsilon per record in nats, delta a probability; NULL: no cap) and
    # the perceptual fingerprints of released sources
    "CREATE TABLE IF NOT EXISTS caps ("
    " id INTEGER PRIMARY KEY, epsilon REAL, delta REAL, origin TEXT NOT NULL, created REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS fingerprints (source_key BLOB PRIMARY KEY, print BLOB NOT NULL)",
    # schema 5: the same image under other files (:mod:`.same_images`)
    "CREATE TABLE IF NOT EXISTS contents (content_key BLOB PRIMARY KEY, source_key BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS aliases (source_key BLOB PRIMARY KEY, canonical_key BLOB NOT NULL)",
)


#: The advisory lock a PostgreSQL ledger's schema is created and checked under.
SCHEMA_LOCK = "ldpclient-ledger-schema"


def connect(location: str | os.PathLike[str]) -> Database:
    """An autocommit connection (transactions are explicit: :func:`transaction`) shared by threads."""
    return Database.open(location, namespace=LEDGER_NAMESPACE)


@contextmanager
def transaction(c: Database) -> Iterator[Database]:
    """One write transaction (:meth:`Database.transaction`); ``ROLLBACK`` on any exception."""
    with c.transaction():
        yield c


def has_legacy(c: Database) -> bool:
    """Whether spend a schema-1 ledger charged per tensor is still waiting for its source."""
    return bool(c.execute("SELECT EXISTS (SELECT 1 FROM legacy_spend)").fetchone()[0])


def stored_schema(c: Database) -> str | None:
    """The schema version the ledger database holds, None when it holds no ledger (yet)."""
    if "meta" not in c.tables():
        return None
    row = c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return None if row is None else str(row[0])


def init_database(
    c: Database, *, path: str, key_path: os.PathLike[str], key_check: str, key_created: bool
) -> None:
    """A SQLite ledger: set the journal (WAL, ``synchronous=FULL``), then create or check the schema and the key
    check in one transaction (:func:`init_schema`; a PostgreSQL ledger calls it itself, under :data:`SCHEMA_LOCK`,
    with its key). ``path``: the ledger's location as printed; ``key_check``: the hex HMAC of this ledger's key
    over a fixed message; ``key_created``: a new
    ledger starts with this key (made by this open, or one provisioned for it: ``Ledger(start_with_key=True)``)."""
    mode = c.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":  # pragma: no cover - e.g. some network file systems
        raise LedgerError(f"ledger {path} cannot use WAL journaling (got {mode!r})")
    c.execute("PRAGMA synchronous=FULL")
    c.execute("PRAGMA foreign_keys=ON")
    # the page cache the B-trees of a large ledger need (SQLite's default is 2 MB): keys are HMACs, so
    # inserts land all over the indexes; an upper bound, taken only as the ledger grows
    c.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
    # checkpoint the write-ahead log every 64 MB instead of every 4 MB: a page that several chunks touch
    # is copied into the database once (each commit still syncs the log: durability is unchanged)
    c.execute("PRAGMA wal_autocheckpoint=16384")
    with transaction(c):
        init_schema(c, path=path, key_path=key_path, key_check=key_check, key_created=key_created)


def init_schema(c: Database, *, path: str, key_path: os.PathLike[str], key_check: str, key_created: bool) -> None:
    """:func:`init_database` inside the caller's transaction (PostgreSQL: holding :data:`SCHEMA_LOCK`)."""
    c.execute(c.ddl(_META_TABLE))
    rows = {str(k): str(v) for k, v in c.execute("SELECT key, value FROM meta").fetchall()}
    key_matches = hmac.compare_digest(rows.get("key_check", ""), key_check)
    if "schema_version" in rows:
        check_schema("ledger", path, rows["schema_version"], SCHEMA_VERSION)
    if rows.get("schema_version") == "1" and key_matches:
        _migrate_v1(c)
        rows["schema_version"] = "2"
    for stmt in _SCHEMA:
        c.execute(c.ddl(stmt))
    # schemas 3 and 5 only add tables (created just above); schema 4 reads the fingerprints schema 3 stored as they are
    if rows.get("schema_version") in ("2", "3", "4") and key_matches:
        c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
        c.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                  (f"migrated_from_{rows['schema_version']}", repr(time.time())))
        rows["schema_version"] = str(SCHEMA_VERSION)
    if "schema_version" not in rows and not key_created:
        raise LedgerError(
            f"{path} is not an ldpclient ledger (no ledger metadata in it) but a ledger key "
            f"{os.fspath(key_path)} exists for it; restore the ledger or use another state"
        )
    if "schema_version" not in rows:
        c.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        c.execute("INSERT INTO meta(key, value) VALUES ('key_check', ?)", (key_check,))
        c.execute("INSERT INTO meta(key, value) VALUES ('created', ?)", (repr(time.time()),))
    else:
        if not hmac.compare_digest(rows.get("key_check", ""), key_check):
            raise LedgerError(
                f"ledger key file {os.fspath(key_path)} does not belong to ledger {path} "
                "(key check mismatch): records would not be recognised. Restore the right key file."
            )
        if rows["schema_version"] != str(SCHEMA_VERSION):
            raise LedgerError(
                f"ledger {path} has schema version {rows['schema_version']}, "
                f"this ldpclient understands {SCHEMA_VERSION}"
            )


def check_to_read(c: Database, *, path: str, key_path: os.PathLike[str], key_check: str) -> None:
    """A ledger opened read-only (nothing is made or migrated): it must hold a ledger of this schema whose key check
    is ``key_check``; :class:`LedgerError` (one line) otherwise."""
    rows = {str(k): str(v) for k, v in c.execute("SELECT key, value FROM meta").fetchall()} \
        if "meta" in c.tables() else {}
    if "schema_version" not in rows:
        raise LedgerError(f"{path} is not an ldpclient ledger (no ledger metadata in it)")
    check_schema("ledger", path, rows["schema_version"], SCHEMA_VERSION)
    if rows["schema_version"] != str(SCHEMA_VERSION):
        raise LedgerError(f"ledger {path} has schema version {rows['schema_version']}: it is brought up to date by "
                          "the next run that may write it (a label run, or budget --set-cap)")
    if not hmac.compare_digest(rows.get("key_check", ""), key_check):
        raise LedgerError(f"ledger key file {os.fspath(key_path)} does not belong to ledger {path} (key check "
                          "mismatch). Restore the right key file.")


def _migrate_v1(c: Database) -> None:
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
    c.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    c.execute("INSERT INTO meta(key, value) VALUES ('migrated_from_1', ?)"
              " ON CONFLICT(key) DO UPDATE SET value = excluded.value", (repr(time.time()),))


def chunks(items: list[bytes]) -> Iterator[list[bytes]]:
    """``items`` in slices of at most ``_SQL_CHUNK`` (one ``IN (...)`` query each)."""
    for i in range(0, len(items), _SQL_CHUNK):
        yield items[i : i + _SQL_CHUNK]


def placeholders(n: int) -> str:
    """``?,?,...`` for an ``IN (...)`` clause of ``n`` values."""
    return ",".join("?" * n)
