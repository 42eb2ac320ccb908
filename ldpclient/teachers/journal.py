"""Resumable query journal (a SQLite file, or PostgreSQL): which batches the teacher answered, and with what.

Each answered batch is one row, written in one transaction (WAL mode,
``synchronous=FULL``), holding its labels, the digest of its queries, what it
cost and what the server billed. A run killed at any moment and restarted reads
the answered batches back instead of sending them: no batch in the journal is
sent or paid twice. Batches are keyed by ``(scope, batch_id)``: ``scope`` names the
teacher (a different teacher must not reuse another's labels) and ``batch_id`` is
the stable id the query plan gives the batch.

The only unavoidable window is a request the server answered but whose row was
not yet committed when the process died; that batch is sent again on resume.

The file's tables, its version and its id are :mod:`.journal_schema`'s: a journal of a newer schema is refused, and
so is a missing, emptied or replaced one where its id is kept beside the file. The ``plans`` table holds the
query-plan seed of each run configuration where the run state is a database (:meth:`Journal.plan_seed`; a file
state keeps them in ``runs.json``): a journal of schema 2 from before it had none, and gets it, empty, on open.
The ``jobs`` table holds the ids of the jobs a batch API (:mod:`ldpclient.teachers.openai_batch`) runs a batch's
queries in, so that a run started again collects them instead of sending the queries twice; a journal without it
gets it on open.

In PostgreSQL (``Journal("postgresql://...")``) processes on several hosts share one journal: every attempt is
booked under a lock per teacher that makes the money cap hold across all of them (:meth:`Journal.open_attempt`).
Two runs with the same batches (two hosts labelling the same images at once) never both send one: a run
claims a batch before it sends it (:meth:`~Journal.claim`): a lease in its ``pending`` row (the run's id and the time it
last renewed it, :meth:`~Journal.renew`); a run that finds another's live lease waits for that batch's answer and
reuses it, and takes the batch over only when the lease lapses (its holder died).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..state import NewerStateFile, default_state_dir
from ..state.database import JOURNAL_NAMESPACE, Database, display_location, is_database_error, is_database_url
from .errors import JournalError
from .journal_schema import journal_id_path, open_schema


def _total(c: Database, scope: str | None) -> float:
    """Money the journal holds (of one scope, or all): answered batches plus booked attempts."""
    where, args = (" WHERE scope=?", (scope,)) if scope is not None else ("", ())
    done = c.execute(f"SELECT COALESCE(SUM(cost), 0) FROM batches{where}", args).fetchone()[0]
    open_ = c.execute(f"SELECT COALESCE(SUM(cost), 0) FROM pending{where}", args).fetchone()[0]
    return float(done) + float(open_)


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


@dataclass(frozen=True)
class Leased:
    """What :meth:`Journal.claim` found when another run holds the batch's lease: that run's id, and the seconds
    since it last renewed the lease."""

    run_id: str
    age: float


class MoneyCapInJournal(Exception):
    """An attempt was not booked: with what the journal holds for its teacher, it would pass the money cap.
    ``spent_total``: the money the journal holds for that teacher (answered and booked), every process's."""

    def __init__(self, spent_total: float) -> None:
        super().__init__(f"the journal holds {spent_total:.6g} for this teacher")
        self.spent_total = spent_total


class Journal:
    """The journal of answered batches: a SQLite file (``path``, default :func:`default_journal_path`) or a
    ``postgresql://`` URL. Safe to share between the client's threads."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        in_database = path is not None and is_database_url(path)
        #: The journal's file; None for a journal in PostgreSQL (see :attr:`location`).
        self.path: Path | None = None if in_database else (Path(path) if path is not None else default_journal_path())
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db: Database | None = None
        #: Where the journal is, as it may be printed (no password).
        self.location = display_location(os.fspath(path)) if in_database and path is not None else str(self.path)
        try:
            self._db = Database.open(os.fspath(path) if in_database and path is not None else self.location,
                                     namespace=JOURNAL_NAMESPACE)
            if not self._db.postgresql:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
            with self._lock:
                made = open_schema(self._conn, self.path)
            if made is not None and self.path is not None:
                from ..io.output import atomic_write_text

                atomic_write_text(journal_id_path(self.path), made + "\n")
        except NewerStateFile:
            self._close()
            raise
        except Exception as exc:
            self._close()
            if not is_database_error(exc):
                raise
            raise JournalError(
                f"query journal {self.location} is unreadable ({exc}); move it away to start a new one (answered "
                "batches recorded in it would then be sent and paid again)"
            ) from None

    @property
    def shared(self) -> bool:
        """Whether runs on several hosts may use this journal at once (PostgreSQL): they then claim each batch
        before sending it (:meth:`claim`). A journal file belongs to the state directory one run holds at a time."""
        return self._conn.postgresql

    @property
    def _conn(self) -> Database:
        if self._db is None:
            raise JournalError("the query journal is closed")
        return self._db

    def start_run(self, run_id: str, scope: str) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO runs(run_id, scope, started) VALUES (?, ?, ?) ON CONFLICT(run_id) DO NOTHING",
                (run_id, scope, time.time()),
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
        labels = torch.from_numpy(np.frombuffer(bytes(blob), dtype="<i8").copy())
        if labels.shape[0] != n:
            raise RuntimeError(f"journal {self.location}: batch {batch_id!r} is corrupt ({labels.shape[0]} of {n} "
                               "labels)")
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
    ) -> torch.Tensor:
        """Commit one answered batch atomically (all of it or nothing). Its recorded cost is the larger of
        ``cost`` and what its attempts booked (:meth:`open_attempt`), including attempts of earlier runs
        that were in flight when they died; its booking is then closed. Returns the batch's labels as the journal
        holds them: ``labels``, or, where another run recorded the batch first (its lease had lapsed), that run's,
        with this answer's cost added to the batch's (both were paid)."""
        blob = np.ascontiguousarray(labels.numpy().astype("<i8")).tobytes()
        with self._lock, self._conn.transaction() as c:
            c.lock(f"ldpclient-money:{scope}")
            booked = c.execute("SELECT cost FROM pending WHERE scope=? AND batch_id=?", (scope, batch_id)).fetchone()
            if booked is not None:  # every attempt of this batch that may have been billed, in any run
                cost = max(float(cost), float(booked[0]))
            first = c.execute("SELECT labels FROM batches WHERE scope=? AND batch_id=?", (scope, batch_id)).fetchone()
            if first is None:
                c.execute(
                    "INSERT INTO batches(scope, batch_id, n, labels, digest, cost, billed, requests, run_id, ts)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (scope, batch_id, int(labels.shape[0]), blob, digest, float(cost), billed, int(requests), run_id,
                     time.time()),
                )
            else:
                c.execute("UPDATE batches SET cost = cost + ? WHERE scope=? AND batch_id=?",
                          (float(cost), scope, batch_id))
                labels = torch.from_numpy(np.frombuffer(bytes(first[0]), dtype="<i8").copy())
            c.execute("DELETE FROM pending WHERE scope=? AND batch_id=?", (scope, batch_id))
        return labels

    def claim(self, scope: str, batch_id: str, run_id: str, *, lease: float) -> JournalEntry | Leased | None:
        """Before run ``run_id`` sends a batch: the batch's entry when it is answered (reuse it), :class:`Leased`
        when another run renewed its lease on it less than ``lease`` seconds ago (wait for it), else None: this run
        holds the lease now (send it; :meth:`renew` it while the batch is in flight). Checked and taken in one
        transaction under the teacher's lock, so two runs never both hold it."""
        with self._lock, self._conn.transaction() as c:
            c.lock(f"ldpclient-money:{scope}")
            answered = c.execute("SELECT 1 FROM batches WHERE scope=? AND batch_id=?", (scope, batch_id)).fetchone()
            if answered is None:
                now = time.time()
                row = c.execute("SELECT run_id, ts FROM pending WHERE scope=? AND batch_id=?",
                                (scope, batch_id)).fetchone()
                if row is not None and str(row[0]) != run_id and now - float(row[1]) < lease:
                    return Leased(str(row[0]), max(0.0, now - float(row[1])))
                c.execute(
                    "INSERT INTO pending(scope, batch_id, cost, attempts, run_id, ts) VALUES (?, ?, 0, 0, ?, ?)"
                    " ON CONFLICT(scope, batch_id) DO UPDATE SET run_id = excluded.run_id, ts = excluded.ts",
                    (scope, batch_id, run_id, now),
                )
                return None
        return self.get(scope, batch_id)

    def renew(self, scope: str, batch_ids: Sequence[str], run_id: str) -> None:
        """Renew run ``run_id``'s leases on ``batch_ids`` (batches it is sending: :meth:`claim`)."""
        if not batch_ids:
            return
        now = time.time()
        with self._lock:
            self._conn.executemany("UPDATE pending SET ts = ? WHERE scope=? AND batch_id=? AND run_id=?",
                                   [(now, scope, b, run_id) for b in batch_ids])

    def release_leases(self, scope: str, run_id: str) -> None:
        """End run ``run_id``'s leases (it sends nothing more): another run may take its batches at once. What its
        attempts booked stays booked."""
        with self._lock:
            self._conn.execute("UPDATE pending SET ts = 0 WHERE scope=? AND run_id=?", (scope, run_id))

    def total_spend(self, scope: str | None = None) -> float:
        """Money recorded (of one scope, or all): answered batches, plus every attempt that may have been
        billed without an answer (dropped, timed out, malformed, or in flight when the process died)."""
        with self._lock:
            return _total(self._conn, scope)

    def open_attempt(self, scope: str, batch_id: str, cost: float, run_id: str, *, cap: float | None = None) -> None:
        """Book ``cost`` for an attempt about to be sent (durably, before it is): until it is answered or
        refused, it counts as spent, so a kill mid-request never lets billing exceed the cap. With ``cap``, the
        booking is refused (:class:`MoneyCapInJournal`, nothing booked) when the journal's total for ``scope``
        (every process's answered and booked attempts) plus ``cost`` would pass it: checked and booked in one
        transaction under the teacher's lock, so processes sharing the journal never pass the cap together."""
        with self._lock, self._conn.transaction() as c:
            c.lock(f"ldpclient-money:{scope}")
            if cap is not None:
                total = _total(c, scope)
                if total + float(cost) > cap + 1e-12:
                    raise MoneyCapInJournal(total)
            c.execute(
                "INSERT INTO pending(scope, batch_id, cost, attempts, run_id, ts) VALUES (?, ?, ?, 1, ?, ?)"
                " ON CONFLICT(scope, batch_id) DO UPDATE SET cost = pending.cost + excluded.cost,"
                " attempts = pending.attempts + 1, run_id = excluded.run_id, ts = excluded.ts",
                (scope, batch_id, float(cost), run_id, time.time()),
            )

    def close_attempt(self, scope: str, batch_id: str, cost: float) -> None:
        """Take back ``cost`` of an attempt the server did not bill (refused, or never sent)."""
        with self._lock:
            self._conn.execute(
                "UPDATE pending SET cost = CASE WHEN cost > ? THEN cost - ? ELSE 0 END WHERE scope=? AND batch_id=?",
                (float(cost), float(cost), scope, batch_id),
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

    def rename_scopes(self, aliases: Sequence[str], identity: str) -> int:
        """Move what was journaled under ``aliases`` (other spellings of one teacher) to ``identity``, in one
        transaction. A batch answered under two spellings keeps both rows (the second under a suffixed id
        no plan uses), so the money both cost still counts against the one cap. Returns the rows moved."""
        moved = 0
        suffix = f"#from-alias-{time.time_ns()}-"
        with self._lock, self._conn.transaction() as c:
            for alias in aliases:
                for table in ("batches", "pending"):
                    moved += c.execute(
                        f"UPDATE {table} SET scope=? WHERE scope=? AND NOT EXISTS"
                        f" (SELECT 1 FROM {table} o WHERE o.scope = ? AND o.batch_id = {table}.batch_id)",
                        (identity, alias, identity),
                    ).rowcount
                    moved += c.execute(
                        f"UPDATE {table} SET scope=?, batch_id = batch_id || ? WHERE scope=?",
                        (identity, suffix + alias, alias),
                    ).rowcount
                c.execute("UPDATE runs SET scope=? WHERE scope=?", (identity, alias))
        return moved

    def plan_seed(self, digest: str, legacy: Sequence[str], new_seed: int) -> int:
        """The query-plan seed stored under ``digest``, else the one under the first of ``legacy`` that has one
        (how an older ldpclient keyed the same run), else ``new_seed``; stored under ``digest`` the first time, so
        that every later call, on any host sharing the database, gets the first caller's seed (PostgreSQL: under a
        lock, so that hosts starting one run at once agree)."""
        with self._lock:
            c = self._conn
            with c.transaction():
                c.lock("ldpclient-plans")
                for key in (digest, *legacy):
                    row = c.execute("SELECT seed FROM plans WHERE digest = ?", (key,)).fetchone()
                    if row is not None:
                        break
                seed = int(row[0]) if row is not None else int(new_seed)
                if row is None or key != digest:
                    c.execute("INSERT INTO plans(digest, seed, created) VALUES (?, ?, ?)", (digest, seed, time.time()))
                return seed

    def add_job(self, scope: str, batch_id: str, job_id: str) -> None:
        """Keep the id of a job a batch API runs (some of) batch ``batch_id``'s queries in (durably, at once)."""
        with self._lock:
            self._conn.execute("INSERT INTO jobs(scope, batch_id, job_id, ts) VALUES (?, ?, ?, ?)"
                               " ON CONFLICT(scope, batch_id, job_id) DO "
                               "NOTHING", (scope, batch_id, job_id, time.time()))

    def jobs(self, scope: str, batch_id: str) -> list[str]:
        """The ids of the jobs kept for batch ``batch_id`` (:meth:`add_job`), oldest first."""
        with self._lock:
            rows = self._conn.execute("SELECT job_id FROM jobs WHERE scope=? AND batch_id=? ORDER BY ts, job_id",
                                      (scope, batch_id)).fetchall()
        return [str(r[0]) for r in rows]

    def batch_ids(self, scope: str) -> list[str]:
        with self._lock:
            return [r[0] for r in self._conn.execute("SELECT batch_id FROM batches WHERE scope=? ORDER BY "
                                                     "ts", (scope,))]

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Journal({self.location!r})"
