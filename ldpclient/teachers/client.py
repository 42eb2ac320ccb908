"""QueryClient: batches, bounded concurrency, money cap and a resumable journal.

The client sits between a query plan and a teacher adapter::

    client = QueryClient(connect("oip+http://127.0.0.1:8000/digits"), workers=4,
                         journal=Journal("state/journal.sqlite"),
                         cost=CostMeter(price_per_query=0.001, cap=5.0))
    for batch_id, labels in client.label_batches(plan_batches):
        ...

``label_batches`` takes ``(batch_id, queries)`` pairs (queries: Release or
Derived; the id must be stable across runs, e.g. derived from the query plan) and
yields ``(batch_id, labels)`` in the same order. Batches already in the journal
are answered from it without being sent or paid again. At most ``workers``
requests are in flight; each worker thread has its own pooled HTTP session (held
by the adapter). Retries, timeouts and response checks live in the adapters (see
:mod:`ldpclient.teachers.http`); the client re-checks every label it hands out.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from typing import Callable, Iterable, Iterator

import torch

from ..privacy.release import Derived, as_derived
from .base import Queries, Teacher, TeacherMetadata, as_teacher
from .billing import takes_billing
from .client_stats import ClientStats, billing_section
from .cost import CostMeter, Reconciliation
from .errors import CostCapReached, Interrupted, JournalMismatch
from .identity import merge_scope_aliases
from .journal import Journal, JournalEntry, MoneyCapInJournal
from .leases import BatchLeases, new_run_id
from .result import InferResult, validate_labels
from .stream import BatchStream

log = logging.getLogger("ldpclient.teachers.client")


def _slice(d: Derived, start: int, stop: int) -> Derived:
    ids = d.ids[start:stop] if d.ids is not None else None
    return dataclasses.replace(d, values=d.values[start:stop], sources=d.sources[start:stop], ids=ids)


class _AttemptBilling:
    """The :class:`~ldpclient.teachers.billing.BillingGuard` of one batch, passed to ``teacher.infer``.

    Every attempt is booked in the journal before it is sent and closed when the server
    refused it; an attempt that may have been billed without a usable answer stays booked and
    is counted as spent at once; before any attempt after the first, what is spent and
    reserved must still fit the money cap. So what a server can bill never exceeds the cap,
    whatever is lost on the way, even across a kill.
    """

    def __init__(self, client: "QueryClient", batch_id: str) -> None:
        self.client = client
        self.batch_id = batch_id
        self.attempts = 0
        self.lost_cost = 0.0
        self._jobs: list[str] = []
        # the booking of this batch's attempts, fixed when it starts: what is opened is what is closed
        self._per_query, self._per_request = client.cost.price_per_query, client.cost.price_per_request

    def _booked(self, units: int) -> float:
        """What an attempt of ``units`` queries is booked at."""
        return units * self._per_query + self._per_request

    def before_attempt(self, units: int) -> None:
        c = self.client
        if c._stopping.is_set():  # interrupted: no new attempt is sent, not even a retry
            raise Interrupted(f"batch {self.batch_id} not sent: the run was interrupted")
        if self.attempts:  # the batch's reservation covers this attempt: it must still fit beside what is spent
            c.cost.reserve(self.batch_id, 0.0, done_batches=0)
        self.attempts += 1
        if c.journal is not None:
            cost = self._booked(units)
            try:  # the journal holds the cap across every process that shares it
                c.journal.open_attempt(c.scope, self.batch_id, cost, c.run_id, cap=c.cost.cap)
            except MoneyCapInJournal as exc:
                raise CostCapReached(cap=float(c.cost.cap or 0.0), spent_run=c.cost.spent_run,
                                     spent_total=exc.spent_total, next_batch=self.batch_id, next_cost=cost,
                                     done_batches=0, currency=c.cost.currency) from None

    def attempt_started(self, abort: Callable[[], None]) -> None:
        """Keep the way to abandon this attempt; abandon it now if the run was interrupted meanwhile."""
        c = self.client
        with c._abort_lock:
            c._aborts[self.batch_id] = abort
        if c._stopping.is_set():
            abort()

    def after_attempt(self, outcome: str, units: int) -> None:
        c = self.client
        with c._abort_lock:
            c._aborts.pop(self.batch_id, None)
        cost = self._booked(units)
        if outcome == "refused" and c.journal is not None:
            c.journal.close_attempt(c.scope, self.batch_id, cost)
        elif outcome == "lost":
            self.lost_cost += cost
            c.cost.book_unconfirmed(cost)

    @property
    def stopping(self) -> bool:
        """Whether the run was interrupted (a teacher waiting for a batch job stops waiting)."""
        return self.client._stopping.is_set()

    def jobs(self) -> list[str]:
        """The ids of the batch-API jobs kept for this batch (this run's and earlier runs'), oldest first."""
        c = self.client
        kept = c.journal.jobs(c.scope, self.batch_id) if c.journal is not None else []
        return kept + [j for j in self._jobs if j not in kept]

    def add_job(self, job_id: str) -> None:
        """Keep the id of a batch-API job this batch's queries were sent in (in the journal, where there is one)."""
        c = self.client
        self._jobs.append(job_id)
        if c.journal is not None:
            c.journal.add_job(c.scope, self.batch_id, job_id)

    def settle_attempt(self, units: int, cost: float, *, earlier: bool = False) -> None:
        """An answered attempt of ``units`` queries cost ``cost`` (the server's usage), not its booking at the
        most: the journal keeps the difference booked no longer. ``earlier``: an earlier run booked the attempt
        (a batch-API job it started, collected now): its booking leaves what earlier runs spent, as this run
        counts what the attempt cost."""
        c = self.client
        booked = self._booked(units)
        over = booked - float(cost)
        if over > 0 and c.journal is not None:
            c.journal.close_attempt(c.scope, self.batch_id, over)
        if earlier and c.journal is not None:
            c.cost.unbook_prior(booked)


class QueryClient:
    """Label query batches with a teacher, safely and without paying twice.

    ``teacher``: a :class:`~ldpclient.teachers.base.Teacher`, or any object with
    ``metadata()`` and ``classify()`` (see :func:`~ldpclient.teachers.base.as_teacher`);
    adapters that override ``infer()`` also report request counts, bytes and billed units.
    ``batch_size``: queries per request (default: the teacher's ``max_batch_size``;
    plan batches larger than this are split into several requests but journaled as
    one). ``workers``: requests in flight at once (>= 1). ``journal``: a
    :class:`Journal`, a path to one, ``True`` for the default path beside the
    ledger, or None (no resumption). ``cost``: a :class:`CostMeter` (None = free,
    uncapped). ``scope``: journal key of the teacher (default: the teacher's
    ``journal_scope``, by default its metadata name). ``verify_queries``: on resume, refuse
    a journaled batch id whose queries differ from what was sent (raises
    :class:`JournalMismatch`; labels of other queries would be silently wrong).
    """

    def __init__(
        self,
        teacher: Teacher | object,
        *,
        batch_size: int | None = None,
        workers: int = 1,
        journal: Journal | str | os.PathLike[str] | bool | None = None,
        cost: CostMeter | None = None,
        scope: str | None = None,
        verify_queries: bool = True,
    ) -> None:
        if batch_size is not None and int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if int(workers) < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.teacher: Teacher = as_teacher(teacher)  # TypeError for anything that is not a teacher
        self._infer_takes_billing = takes_billing(self.teacher.infer)  # third-party infer() may not take it
        self.workers = int(workers)
        self._batch_size = int(batch_size) if batch_size is not None else None
        if journal is True:
            journal = Journal()
        elif journal is False:
            journal = None
        elif journal is not None and not isinstance(journal, Journal):
            journal = Journal(journal)
        self.journal: Journal | None = journal
        self.cost = cost if cost is not None else CostMeter()
        most = self.teacher.most_per_query()
        # a teacher that books its own queries (billed in tokens), where no price was given: booked at its figure
        self._teacher_books = most is not None and not self.cost.price_per_query and not self.cost.price_per_request
        self.refresh_booking()
        self._scope = scope
        self.verify_queries = verify_queries
        self.stats = ClientStats()
        self.run_id = new_run_id()
        self.leases = BatchLeases(self.journal, self.run_id)
        self._meta: TeacherMetadata | None = None
        self._lock = threading.Lock()
        self._started = False
        self._stopping = threading.Event()  # set when a run is interrupted: no attempt is sent after it
        self._abort_lock = threading.Lock()
        self._aborts: dict[str, Callable[[], None]] = {}  # batch id -> abandon its attempt in flight

    def refresh_booking(self) -> None:
        """Book the next batches at what the teacher books a query at now (it may learn its model's bill from the
        answers, :class:`~ldpclient.teachers.token_booking.TokenBooking`), where the teacher books its own."""
        if self._teacher_books:
            self.cost.price_per_query = float(self.teacher.most_per_query() or 0.0)

    # -- metadata ---------------------------------------------------------------------------
    def metadata(self) -> TeacherMetadata:
        if self._meta is None:
            self._meta = self.teacher.metadata()
        return self._meta

    @property
    def scope(self) -> str:
        if self._scope is None:
            self._scope = str(self.teacher.journal_scope)
        return self._scope

    @property
    def batch_size(self) -> int | None:
        """Queries per request: the option, else the teacher's max batch size, else unlimited."""
        if self._batch_size is not None:
            mb = self.metadata().max_batch_size
            return min(self._batch_size, mb) if mb else self._batch_size
        return self.metadata().max_batch_size

    def requests_for(self, n: int) -> int:
        bs = self.batch_size
        chunks = [min(bs, n - s) for s in range(0, n, bs)] if bs else [n]
        return sum(int(self.teacher.requests_for(c)) for c in chunks)

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        if self.journal is not None:
            merge_scope_aliases(self.journal, self.scope)  # batches paid under other spellings of this teacher
            self.cost.prior_total = self.journal.total_spend(self.scope)
            self.journal.start_run(self.run_id, self.scope)

    # -- the work ---------------------------------------------------------------------------
    def _infer(self, derived: Derived, batch_id: str, billing: _AttemptBilling) -> InferResult:
        if self._infer_takes_billing:
            return self.teacher.infer(derived, request_id=batch_id, billing=billing)
        return self.teacher.infer(derived, request_id=batch_id)

    def _claim(self, batch_id: str, derived: Derived, digest: str) -> torch.Tensor | None:
        """Before sending a batch: None when this run may send it (:meth:`BatchLeases.claim`), else the labels
        another run answered it with (reused, as from the journal)."""
        found = self.leases.claim(self.scope, batch_id, self._stopping)
        return None if found is None else self._journaled(found, derived, digest)

    def send_batch(self, batch_id: str, derived: Derived, digest: str, reserved: float) -> torch.Tensor:
        try:
            reused = self._claim(batch_id, derived, digest)
        except BaseException:
            self.cost.release(reserved)
            raise
        if reused is not None:
            self.cost.release(reserved)
            return reused
        try:
            return self._send_batch(batch_id, derived, digest, reserved)
        finally:
            self.leases.done(batch_id)

    def _send_batch(self, batch_id: str, derived: Derived, digest: str, reserved: float) -> torch.Tensor:
        meta = self.metadata()
        n = len(derived)
        guard = _AttemptBilling(self, batch_id)
        try:
            t0 = time.perf_counter()
            bs = self.batch_size or max(n, 1)
            parts: list[InferResult] = []
            for k, start in enumerate(range(0, n, bs)):
                rid = batch_id if bs >= n else f"{batch_id}/{k}"
                parts.append(self._infer(_slice(derived, start, start + bs), rid, guard))
            dt = time.perf_counter() - t0
            labels = (
                torch.cat([torch.as_tensor(p.labels) for p in parts]) if parts else torch.zeros(0, dtype=torch.int64)
            )
            labels = validate_labels(labels.numpy(), n, meta.num_classes, meta.name, abstains=meta.abstains)
            requests = sum(p.requests for p in parts)
            billed_parts = [p.billed for p in parts]
            billed = None if any(b is None for b in billed_parts) else sum(int(b or 0) for b in billed_parts)
            counted = [p.cost for p in parts]
            cost = (sum(float(c or 0.0) for c in counted) if parts and all(c is not None for c in counted)
                    else self.cost.cost_of(n, requests))
            if self.journal is not None:  # another run's answer, where it recorded the batch first
                labels = self.journal.record(
                    self.scope, batch_id, labels, digest=digest, cost=cost + guard.lost_cost, billed=billed,
                    requests=requests, run_id=self.run_id,
                )
        except BaseException:
            self.cost.release(reserved)
            raise
        self.cost.settle(batch_id, reserved, cost, n, billed)
        with self._lock:
            self.stats.add_sent(parts, labels, dt)
        log.debug("batch %s: %d queries answered in %d request(s)", batch_id, n, requests)
        return labels

    def answered_in_journal(self, batch_id: str, derived: Derived, digest: str) -> torch.Tensor | None:
        """Journaled labels of this batch (counted in stats), or None; JournalMismatch if they do not fit it."""
        entry = self.journal.get(self.scope, batch_id) if self.journal is not None else None
        return None if entry is None else self._journaled(entry, derived, digest)

    def _journaled(self, entry: JournalEntry, derived: Derived, digest: str) -> torch.Tensor:
        """The labels of a journaled batch (counted in stats); JournalMismatch if they do not fit its queries."""
        batch_id = entry.batch_id
        if self.verify_queries and entry.digest != digest:
            raise JournalMismatch(
                f"journal {self.journal.path} has batch {batch_id!r} answered for different queries; "  # type: ignore[union-attr]
                "the query plan is not reproducible (seed it) or the journal belongs to another job"
            )
        if entry.labels.shape[0] != len(derived):
            raise JournalMismatch(f"journaled batch {batch_id!r} has {entry.labels.shape[0]} labels for "
                                  f"{len(derived)} queries")
        with self._lock:
            self.stats.add_journaled(entry.labels)
        return entry.labels

    def label_batches(self, batches: Iterable[tuple[str, Queries]]) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield ``(batch_id, labels int64 (n,))`` for each ``(batch_id, queries)``, in input order.

        Streams (:class:`~ldpclient.teachers.stream.BatchStream`): at most ``workers`` batches are in flight and a
        small window is buffered, so any number of batches can be labelled in bounded memory. Raises
        :class:`CostCapReached` after yielding every batch answered before the cap (nothing over the cap is
        sent); on any other failure, in-flight batches finish (and are journaled) before the error propagates.
        """
        self.metadata()
        self._start()
        yield from BatchStream(self).run(batches)

    def stop_sending(self) -> None:
        """From now on no attempt is sent (every later one raises :class:`Interrupted`)."""
        self._stopping.set()

    def resume_sending(self) -> None:
        """Attempts are sent again (a new run of :meth:`label_batches` after a stopped one)."""
        self._stopping.clear()

    def abort_attempts(self) -> None:
        """Shut the sockets of the attempts in flight."""
        with self._abort_lock:
            aborts = list(self._aborts.values())
            self._aborts.clear()
        for abort in aborts:
            abort()

    def release_leases(self) -> None:
        """After a run's batches: end its leases (:meth:`BatchLeases.release`)."""
        if self._started:
            self.leases.release(self.scope)

    def renew_leases(self, stop: threading.Event) -> None:
        """Until ``stop``: renew this run's leases on the batches it is sending (:meth:`BatchLeases.renew`)."""
        self.leases.renew(self.scope, stop)

    def label(self, queries: Queries, *, prefix: str = "batch") -> torch.Tensor:
        """Label all rows of one Release/Derived in batches with ids ``{prefix}-{k:06d}``.

        The ids are stable as long as ``prefix`` and the batch size are, so a
        re-run with the same journal resumes. Returns int64 labels ``(Q,)``.
        """
        derived = as_derived(queries)
        n = len(derived)
        bs = self.batch_size or max(n, 1)
        out = [
            labels
            for _, labels in self.label_batches(
                (f"{prefix}-{k:06d}", _slice(derived, s, s + bs)) for k, s in enumerate(range(0, n, bs))
            )
        ]
        return torch.cat(out) if out else torch.zeros(0, dtype=torch.int64)

    def to_pay(self, batches: Iterable[tuple[str, int]]) -> tuple[int, float]:
        """Of ``batches`` (batch id, queries in it), the queries the journal has not answered for this teacher and
        what sending them would cost at most (per query and per request; an answered batch is never paid again).
        Sends nothing: what a run checks against the money cap before it noises or sends anything."""
        self._start()
        answered = set(self.journal.batch_ids(self.scope)) if self.journal is not None else set()
        queries = requests = 0
        for batch_id, size in dict(batches).items():  # a batch id is sent (and paid) once
            if batch_id not in answered:
                queries += int(size)
                requests += self.requests_for(int(size))
        return queries, self.cost.cost_of(queries, requests)

    def reconcile(self) -> Reconciliation:
        """Server-reported billed units vs queries answered in this client's runs."""
        return self.cost.reconcile()

    def billing(self) -> dict[str, object]:
        """The report's billing section: the units the server billed against the queries answered
        (:func:`~.client_stats.billing_section`)."""
        return billing_section(self.reconcile(), self.stats, token_billed=self.teacher.most_per_query() is not None)

    def report(self) -> dict[str, object]:
        """Counters, spend and reconciliation as a JSON-able dict (contains no secrets)."""
        s = self.stats
        return {
            "teacher": self.scope,
            "run_id": self.run_id,
            **dataclasses.asdict(s),
            "spent_run": self.cost.spent_run,
            "spent_total": self.cost.spent_total,
            "spent_unconfirmed": self.cost.unconfirmed,
            "cap": self.cost.cap,
            "billing": self.billing(),
        }

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()
        self.teacher.close()

    def __enter__(self) -> "QueryClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"QueryClient(teacher={self.scope!r}, workers={self.workers}, batch_size={self._batch_size})"
