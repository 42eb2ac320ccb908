"""The query journal's file: its tables, its schema version and its id (see :mod:`ldpclient.teachers.journal`).

The file is versioned (``meta.schema_version``, :data:`SCHEMA_VERSION`): a journal of a newer schema, or with columns
this version does not know, is refused on open with :class:`~ldpclient.state.NewerStateFile` before anything is sent
or paid; one from before versioning (schema 1: the same tables) is stamped in a transaction. A new journal gets an
id, held in its ``meta`` and in a file beside it (:func:`journal_id_path`, ``journal.sqlite.id``), made once the
journal is committed: a journal that is missing or emptied while that file is there, or one whose id is another's,
is refused (:class:`~.errors.JournalError`), since starting afresh would send and pay every answered batch again.
"""

from __future__ import annotations

import secrets
import sqlite3
from contextlib import closing
from functools import lru_cache
from pathlib import Path

from ..state import NewerStateFile, check_schema
from ..state.database import Database
from .errors import JournalError

#: The journal's schema: 1 (no ``meta`` table; the tables below), 2 (the same, stamped with its version).
SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
    scope TEXT NOT NULL,
    batch_id TEXT NOT NULL,
    n INTEGER NOT NULL,
    labels BLOB NOT NULL,
    digest TEXT NOT NULL,
    cost REAL NOT NULL,
    billed INTEGER,
    requests INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (scope, batch_id)
);
CREATE TABLE IF NOT EXISTS pending (
    scope TEXT NOT NULL,
    batch_id TEXT NOT NULL,
    cost REAL NOT NULL,
    attempts INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (scope, batch_id)
);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    scope TEXT NOT NULL,
    started REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS plans (digest TEXT PRIMARY KEY, seed INTEGER NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    scope TEXT NOT NULL,
    batch_id TEXT NOT NULL,
    job_id TEXT NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (scope, batch_id, job_id)
);
"""


@lru_cache(maxsize=1)
def _known_columns() -> dict[str, frozenset[str]]:
    """The columns this version reads and writes, per table (from :data:`_SCHEMA` itself): a journal with others
    was written by a newer version."""
    with closing(sqlite3.connect(":memory:")) as mem:
        mem.executescript(_SCHEMA)
        tables = [r[0] for r in mem.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: frozenset(r[1] for r in mem.execute(f"PRAGMA table_info({t})")) for t in tables}


def journal_id_path(path: Path) -> Path:
    """The file beside the journal file ``path`` that holds its id (``journal.sqlite.id``)."""
    return path.with_name(path.name + ".id")


def _kept_id(path: Path) -> str | None:
    """The journal id kept beside the journal file ``path``, None when there is no such file."""
    try:
        return journal_id_path(path).read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise JournalError(f"cannot read {journal_id_path(path)}: {exc}") from None



def open_schema(c: Database, path: Path | None) -> str | None:
    """Check the journal in ``c`` (its file ``path``; None in PostgreSQL): refuse a newer version, and a missing,
    emptied or replaced journal where an id is kept beside the file; create the tables or stamp an unversioned
    journal, in one transaction (PostgreSQL: under a lock, so that hosts opening a new journal at once do not race).
    Returns the journal's id where the file beside it is to be made (a journal file without one), else None."""
    with c.transaction():
        c.lock("ldpclient-journal-schema")
        tables = c.tables()
        stored = None
        if "meta" in tables:
            row = c.execute("SELECT value FROM meta WHERE key = 'journal_id'").fetchone()
            stored = None if row is None else str(row[0])
        kept = _kept_id(path) if path is not None else None
        if kept is not None and "batches" not in tables:
            raise JournalError(
                f"query journal {c.location} is missing or empty, but {journal_id_path(Path(c.location))} "
                "says one was kept here: restore it (a new journal would send and pay every answered batch "
                "again), or move that file away to start a new journal knowingly")
        if kept is not None and stored is not None and stored != kept:
            raise JournalError(
                f"query journal {c.location} is not the one kept here (its id is not the one in "
                f"{journal_id_path(Path(c.location))}): restore the right journal, or move that file away "
                "to use this one knowingly")
        if "meta" in tables:
            row = c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is not None:
                check_schema("query journal", c.location, row[0], SCHEMA_VERSION)
        for table, known in _known_columns().items():
            if table in tables:
                columns = c.columns(table)
                if columns - known:
                    raise NewerStateFile("query journal", c.location,
                                         f"unknown (table {table} has columns {sorted(columns - known)})",
                                         SCHEMA_VERSION)
        for statement in filter(str.strip, _SCHEMA.split(";")):  # not executescript: it commits first
            c.execute(c.ddl(statement))
        c.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?) ON CONFLICT(key) DO NOTHING",
                  (str(SCHEMA_VERSION),))
        if stored is None:  # a new journal, or one without its id (older, or its meta lost): the id kept, or a new one
            stored = kept if kept is not None else secrets.token_hex(16)
            c.execute("INSERT INTO meta(key, value) VALUES ('journal_id', ?)", (stored,))
        c.execute("SELECT scope, batch_id, n, labels, digest, cost FROM batches LIMIT 1").fetchall()
    return stored if path is not None and kept is None else None

