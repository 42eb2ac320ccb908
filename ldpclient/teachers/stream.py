"""How a :class:`~ldpclient.teachers.client.QueryClient` streams plan batches to its teacher: a window of
batches, at most ``workers`` of them in flight, answered in input order; a cap that stops sending; a Ctrl-C
that lets the requests in flight finish and be journaled (a second one abandons them).

:class:`BatchStream` sends each batch through the client (journal, lease, cost, retries) and only orders, bounds
and winds down the work; it sees the client through :class:`StreamedClient`, the few public members it calls.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Iterable, Iterator, Protocol, Union

import torch

from ..privacy.release import Derived, as_derived
from .base import Queries
from .client_stats import ClientStats
from .errors import AbandonedInFlight, CostCapReached
from .retry import LONG_WAIT_S

if TYPE_CHECKING:
    from .cost import CostMeter
    from .journal import Journal

log = logging.getLogger(__name__)

#: Seconds an interrupted run waits for its abandoned attempts to book what they may have cost.
ABANDON_WAIT_S = 2.0
#: Most seconds a Ctrl-C waits for the requests in flight to finish and be recorded (each attempt is also bounded
#: by its transport's deadline; a second Ctrl-C abandons them at once).
FINISH_WAIT_S = 120.0

Pending = deque[tuple[str, Union[Future[torch.Tensor], torch.Tensor]]]


def query_digest(derived: Derived) -> str:
    """The SHA-256 of a batch's queries (shape, dtype, values): what the journal keeps to know them again."""
    v = derived.values.detach().contiguous().cpu()
    h = hashlib.sha256(str((tuple(v.shape), str(v.dtype))).encode())
    h.update(v.numpy().tobytes())
    return h.hexdigest()


class StreamedClient(Protocol):
    """What a :class:`BatchStream` uses of its client (:class:`~ldpclient.teachers.client.QueryClient`)."""

    workers: int
    stats: ClientStats
    cost: CostMeter
    journal: Journal | None

    def answered_in_journal(self, batch_id: str, derived: Derived, digest: str) -> torch.Tensor | None:
        """The journal's labels of this batch (None: not answered yet)."""

    def requests_for(self, n: int) -> int:
        """The requests ``n`` queries take."""

    def send_batch(self, batch_id: str, derived: Derived, digest: str, reserved: float) -> torch.Tensor:
        """Send one batch (its cost ``reserved``) and journal its labels."""

    def refresh_booking(self) -> None:
        """Book the next batch at what the teacher has learnt a query costs."""

    def renew_leases(self, stop: threading.Event) -> None:
        """Renew the leases of the batches in flight until ``stop`` is set."""

    def release_leases(self) -> None:
        """Release the leases still held."""

    def stop_sending(self) -> None:
        """Send no attempt from now on."""

    def resume_sending(self) -> None:
        """Send attempts again."""

    def abort_attempts(self) -> None:
        """Shut the sockets of the attempts in flight."""


class BatchStream:
    """One run of :meth:`QueryClient.label_batches` over ``client``."""

    def __init__(self, client: StreamedClient) -> None:
        self.client = client
        self.window = max(2 * client.workers, 8)

    def run(self, batches: Iterable[tuple[str, Queries]]) -> Iterator[tuple[str, torch.Tensor]]:
        """``(batch_id, labels)`` for each of ``batches``, in input order (see the module doc)."""
        client = self.client
        t_start = time.perf_counter()
        pending: Pending = deque()
        seen: set[str] = set()
        stop: CostCapReached | None = None
        done = 0
        waiting_before = _mostly_waiting(client.stats)
        pool = ThreadPoolExecutor(max_workers=client.workers, thread_name_prefix="ldpclient-teacher")
        client.resume_sending()
        finished = interrupted = False
        renewing = threading.Event()
        renewer = threading.Thread(target=client.renew_leases, args=(renewing,), name="ldpclient-leases", daemon=True)
        if client.journal is not None and client.journal.shared:
            renewer.start()
        try:
            for batch_id, queries in batches:
                _check_batch_id(batch_id, seen)
                stop = self._enqueue(batch_id, as_derived(queries), pending, pool, done)  # raw tensors: TypeError
                if stop is not None:
                    break
                while pending and self._ready(pending):
                    done += 1
                    yield self._pop(pending, done)
            while pending:
                done += 1
                yield self._pop(pending, done)
            finished = True
            if stop is not None:
                self._fill_cap_counts(stop, done)
                raise stop
        except (KeyboardInterrupt, GeneratorExit):  # Ctrl-C here, or in the caller (which closes this generator)
            interrupted = True
            raise
        finally:
            try:
                self._wind_down(pending, pool, finished=finished, interrupted=interrupted)
            finally:
                renewing.set()
                if renewer.is_alive():
                    renewer.join()
                client.release_leases()
                client.stats.wall_s += time.perf_counter() - t_start
                _warn_if_mostly_waiting(client.stats, waiting_before)

    def _ready(self, pending: Pending) -> bool:
        """Whether the oldest pending batch is to be yielded now: answered, or the window or the workers full."""
        head = pending[0][1]
        ready = not isinstance(head, Future) or head.done()
        return ready or _in_flight(pending) >= self.client.workers or len(pending) >= self.window

    def _enqueue(self, batch_id: str, derived: Derived, pending: Pending, pool: ThreadPoolExecutor,
                 done: int) -> CostCapReached | None:
        """Put the answer to one batch at the end of ``pending``: the journal's, or a request sent once its cost is
        reserved (``done``: batches yielded so far). The cap it would cross instead, where it would (nothing
        sent)."""
        client = self.client
        digest = query_digest(derived)
        journaled = client.answered_in_journal(batch_id, derived, digest)
        if journaled is not None:
            pending.append((batch_id, journaled))
            return None
        client.refresh_booking()
        est = client.cost.cost_of(len(derived), client.requests_for(len(derived)))
        try:
            client.cost.reserve(batch_id, est, done_batches=done + len(pending))
        except CostCapReached as exc:
            return exc
        pending.append((batch_id, pool.submit(client.send_batch, batch_id, derived, digest, est)))
        return None


    def _fill_cap_counts(self, exc: CostCapReached, done: int) -> None:
        """Set the run's batches answered and money spent so far on a cap error."""
        exc.done_batches, exc.spent_run, exc.spent_total = (
            done,
            self.client.cost.spent_run,
            self.client.cost.spent_total,
        )

    def _pop(self, pending: Pending, done: int) -> tuple[str, torch.Tensor]:
        """Take the oldest pending batch, waiting for its labels; a cap reached by a retry gets the run's counts."""
        bid, item = pending.popleft()
        try:
            return bid, item.result() if isinstance(item, Future) else item
        except CostCapReached as exc:  # a retry that no longer fitted the cap
            self._fill_cap_counts(exc, done)
            raise
        except KeyboardInterrupt:  # still in flight: the stop finishes (or abandons) it with the others
            pending.appendleft((bid, item))
            raise

    def _wind_down(
        self, pending: Pending, pool: ThreadPoolExecutor, *,
        finished: bool, interrupted: bool,
    ) -> None:
        """After the batches (or a failure): nothing new is sent; what is in flight is finished (Ctrl-C) or
        abandoned (an error), and the pool shut down."""
        for _, item in pending:
            if isinstance(item, Future):
                item.cancel()
        try:
            if not finished:
                futures = [item for _, item in pending if isinstance(item, Future)]
                if interrupted:
                    self._finish_in_flight(futures)
                else:
                    self._abandon_in_flight(futures)
        finally:
            pool.shutdown(wait=finished, cancel_futures=True)

    def _finish_in_flight(self, futures: list[Future[torch.Tensor]]) -> None:
        """After a Ctrl-C: stop sending (no new attempt, no retry), and let the requests in flight finish and be
        recorded in the journal (each within its deadline, all within :data:`FINISH_WAIT_S`), so the run that
        resumes does not pay for them again. A second Ctrl-C abandons them (:class:`AbandonedInFlight`)."""
        self.client.stop_sending()
        running = [f for f in futures if not f.done()]
        if not running:
            return
        log.warning("interrupted: waiting for the %d request(s) in flight to be answered and recorded; Ctrl-C again "
                    "abandons them (the server may then bill them twice)", len(running))
        try:
            wait(running, timeout=FINISH_WAIT_S)
        except KeyboardInterrupt:
            left = [f for f in running if not f.done()]
            self._abandon_in_flight(left)
            raise AbandonedInFlight(len(left)) from None
        left = [f for f in running if not f.done()]
        if left:
            self._abandon_in_flight(left)

    def _abandon_in_flight(self, futures: list[Future[torch.Tensor]]) -> None:
        """Stop sending (every later attempt raises :class:`Interrupted`), shut the sockets of the attempts
        in flight, and give them :data:`ABANDON_WAIT_S` to book what they may have cost (as spent)."""
        self.client.stop_sending()
        self.client.stats.abandoned += sum(1 for f in futures if not f.done())
        self.client.abort_attempts()
        wait(futures, timeout=ABANDON_WAIT_S)


def _in_flight(pending: Pending) -> int:
    """Pending batches whose request has not finished yet."""
    return sum(1 for _, x in pending if isinstance(x, Future) and not x.done())



def _check_batch_id(batch_id: str, seen: set[str]) -> None:
    """Raise ValueError for a batch id that is not a non-empty string or repeats one of ``seen``; add it."""
    if not isinstance(batch_id, str) or not batch_id:
        raise ValueError(f"batch ids must be non-empty strings, got {batch_id!r}")
    if batch_id in seen:
        raise ValueError(f"batch id {batch_id!r} appears twice in one run; ids must be unique")
    seen.add(batch_id)


#: Share of the time spent on the teacher from which waiting for its rate limits is worth a warning line.
MOSTLY_WAITING = 0.5


def _mostly_waiting(stats: ClientStats) -> bool:
    """Whether waiting for a busy teacher (429/503 waits and pacing) took over :data:`MOSTLY_WAITING` of the time
    spent on it, and more than :data:`~.retry.LONG_WAIT_S` seconds: the limit, not the teacher, sets the pace."""
    waited = stats.waits.busy_s + stats.waits.paced_s
    return waited > LONG_WAIT_S and stats.teacher_s > 0 and waited > MOSTLY_WAITING * stats.teacher_s


def _warn_if_mostly_waiting(stats: ClientStats, before: bool) -> None:
    """One warning, when the client's waiting has just come to dominate (``before``: whether it did already)."""
    if not before and _mostly_waiting(stats):
        log.warning("the teacher's rate limit set this run's pace: %.0f s of the %.0f s spent on it went to waiting "
                    "(%d rate limits waited out): the run goes only as fast as that limit allows",
                    stats.waits.busy_s + stats.waits.paced_s, stats.teacher_s, stats.waits.busy)


__all__ = ["ABANDON_WAIT_S", "BatchStream", "FINISH_WAIT_S", "query_digest"]
