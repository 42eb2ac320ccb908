"""Resumable query journal (SQLite): which batches the teacher answered, and with what.

Each answered batch is one row, written in one transaction (WAL mode,
``synchronous=FULL``), holding its labels, the digest of its queries, what it
cost and what the server billed. A run killed at any moment and restarted reads
the answered batches back instead of sending them: no batch in the journal is
sent or paid twice. Batches are keyed by ``(scope, batch_id)``: ``scope`` names the
teacher (a different teacher must not reuse another's labels) and ``batch_id`` is
the stable id the query plan gives the batch.

The only unavoidable window is a request the server answered but whose row was
not yet committed when the process died; that batch is sent again on resume.

The file is versioned (``meta.schema_version``, :data:`SCHEMA_VERSION`): a journal of a newer schema, or
with columns this version does not know, is refused on open with
:class:`~ldpclient.state.NewerStateFile` before anything is sent or paid; one from before versioning
(schema 1: the same tables) is stamped in a transaction.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import closing
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from ..state import NewerStateFile, check_schema, default_state_dir
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
"""


@lru_cache(maxsize=1)
def _known_columns() -> dict[str, frozenset[str]]:
    """The columns this version reads and writes, per table (from :data:`_SCHEMA` itself): a journal with others
    was written by a newer version."""
    with closing(sqlite3.connect(":memory:")) as mem:
        mem.executescript(_SCHEMA)
        tables = [r[0] for r in mem.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: frozenset(r[1] for r in mem.execute(f"PRAGMA table_info({t})")) for t in tables}


def default_journal_path() -> Path:
    """``journal.sqlite`` in the state directory (:func:`ldpclient.state.default_state_dir`)."""
    return default_state_dir() / "journal.sqlite"


@dataclass(frozen=True)
class JournalEntry:
    """One answered batch: labels int64 ``(n,)``, query digest, cost, billed units."""

    batch_id: str
    labels: torch.Tensor
    digest: str
    cost: float
    billed: int | None
    requests: int
    run_id: str


class Journal:
    """SQLite journal of answered batches. Safe to share between the client's threads."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_journal_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False
        )
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            with self._lock:
                self._open_schema()
        except NewerStateFile:
            self._conn.close()
            raise
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise JournalError(
                f"query journal {self.path} is unreadable ({exc}); move it away to start a new one (answered "
                "batches recorded in it would then be sent and paid again)"
            ) from None

    def _open_schema(self) -> None:
        """Check the file's version (refuse a newer one), create the tables or stamp an unversioned journal, in
        one transaction."""
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        try:
            tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "meta" in tables:
                row = c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                if row is not None:
                    check_schema("query journal", self.path, row[0], SCHEMA_VERSION)
            for table, known in _known_columns().items():
                if table in tables:
                    columns = {r[1] for r in c.execute(f"PRAGMA table_info({table})")}
                    if columns - known:
                        raise NewerStateFile("query journal", self.path,
                                             f"unknown (table {table} has columns {sorted(columns - known)})",
                                             SCHEMA_VERSION)
            for statement in filter(str.strip, _SCHEMA.split(";")):  # not executescript: it commits first
                c.execute(statement)
            c.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            c.execute("SELECT scope, batch_id, n, labels, digest, cost FROM batches LIMIT 1").fetchall()
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise

    def start_run(self, run_id: str, scope: str) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR IGNORE INTO runs(run_id, scope, started) VALUES (?, ?, ?)", (run_id, scope, time.time())
            )

    def get(self, scope: str, batch_id: str) -> JournalEntry | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT n, labels, digest, cost, billed, requests, run_id FROM batches WHERE scope=? AND batch_id=?",
                (scope, batch_id),
            ).fetchone()
        if row is None:
            return None
        n, blob, digest, cost, billed, requests, run_id = row
        labels = torch.from_numpy(np.frombuffer(blob, dtype="<i8").copy())
        if labels.shape[0] != n:
            raise RuntimeError(f"journal {self.path}: batch {batch_id!r} is corrupt ({labels.shape[0]} of {n} labels)")
        return JournalEntry(batch_id, labels, digest, float(cost), billed, int(requests), run_id)

    def record(
        self,
        scope: str,
        batch_id: str,
        labels: torch.Tensor,
        *,
        digest: str,
        cost: float,
        billed: int | None,
        requests: int,
        run_id: str,
    ) -> None:
        """Commit one answered batch atomically (all of it or nothing). Its recorded cost is the larger of
        ``cost`` and what its attempts booked (:meth:`open_attempt`), including attempts of earlier runs
        that were in flight when they died; its booking is then closed."""
        blob = np.ascontiguousarray(labels.numpy().astype("<i8")).tobytes()
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                booked = self._conn.execute(
                    "SELECT cost FROM pending WHERE scope=? AND batch_id=?", (scope, batch_id)
                ).fetchone()
                if booked is not None:  # every attempt of this batch that may have been billed, in any run
                    cost = max(float(cost), float(booked[0]))
                self._conn.execute(
                    "INSERT INTO batches(scope, batch_id, n, labels, digest, cost, billed, requests, run_id, ts)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (scope, batch_id, int(labels.shape[0]), blob, digest, float(cost), billed, int(requests), run_id, time.time()),
                )
                self._conn.execute("DELETE FROM pending WHERE scope=? AND batch_id=?", (scope, batch_id))
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def total_spend(self, scope: str | None = None) -> float:
        """Money recorded (of one scope, or all): answered batches, plus every attempt that may have been
        billed without an answer (dropped, timed out, malformed, or in flight when the process died)."""
        where, args = (" WHERE scope=?", (scope,)) if scope is not None else ("", ())
        with self._lock:
            done = self._conn.execute(f"SELECT COALESCE(SUM(cost), 0) FROM batches{where}", args).fetchone()[0]
            open_ = self._conn.execute(f"SELECT COALESCE(SUM(cost), 0) FROM pending{where}", args).fetchone()[0]
        return float(done) + float(open_)

    def open_attempt(self, scope: str, batch_id: str, cost: float, run_id: str) -> None:
        """Book ``cost`` for an attempt about to be sent (durably, before it is): until it is answered or
        refused, it counts as spent, so a kill mid-request never lets billing exceed the cap."""
        with self._lock:
            self._conn.execute(
                "INSERT INTO pending(scope, batch_id, cost, attempts, run_id, ts) VALUES (?, ?, ?, 1, ?, ?)"
                " ON CONFLICT(scope, batch_id) DO UPDATE SET cost = cost + excluded.cost, attempts = attempts + 1",
                (scope, batch_id, float(cost), run_id, time.time()),
            )

    def close_attempt(self, scope: str, batch_id: str, cost: float) -> None:
        """Take back ``cost`` of an attempt the server did not bill (refused, or never sent)."""
        with self._lock:
            self._conn.execute(
                "UPDATE pending SET cost = MAX(0, cost - ?) WHERE scope=? AND batch_id=?", (float(cost), scope, batch_id)
            )

    def run_spend(self, run_id: str) -> float:
        with self._lock:
            return float(
                self._conn.execute("SELECT COALESCE(SUM(cost), 0) FROM batches WHERE run_id=?", (run_id,)).fetchone()[0]
            )

    def count(self, scope: str | None = None) -> int:
        q, args = "SELECT COUNT(*) FROM batches", tuple[str, ...]()
        if scope is not None:
            q, args = q + " WHERE scope=?", (scope,)
        with self._lock:
            return int(self._conn.execute(q, args).fetchone()[0])

    def scopes(self) -> list[str]:
        """Every teacher scope the journal holds anything for."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT scope FROM batches UNION SELECT scope FROM pending UNION SELECT scope FROM runs"
            ).fetchall()
        return sorted(r[0] for r in rows)

    def rename_scopes(self, aliases: list[str], identity: str) -> int:
        """Move what was journaled under ``aliases`` (other spellings of one teacher) to ``identity``, in one
        transaction. A batch answered under two spellings keeps both rows (the second under a suffixed id
        no plan uses), so the money both cost still counts against the one cap. Returns the rows moved."""
        moved = 0
        with self._lock:
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                for alias in aliases:
                    for table in ("batches", "pending"):
                        moved += c.execute(f"UPDATE OR IGNORE {table} SET scope=? WHERE scope=?", (identity, alias)).rowcount
                        moved += c.execute(
                            f"UPDATE {table} SET scope=?, batch_id = batch_id || '#from-alias-' || rowid WHERE scope=?",
                            (identity, alias),
                        ).rowcount
                    c.execute("UPDATE runs SET scope=? WHERE scope=?", (identity, alias))
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")
        return moved

    def batch_ids(self, scope: str) -> list[str]:
        with self._lock:
            return [r[0] for r in self._conn.execute("SELECT batch_id FROM batches WHERE scope=? ORDER BY ts", (scope,))]

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Journal({str(self.path)!r})"
