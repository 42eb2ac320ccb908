"""The journal's leases on the batches one run is sending. Runs that share a journal (a PostgreSQL state) and
need the same batch wait for each other: the first to claim it holds a lease, renewed while it sends, and the
others wait for its answer and reuse it (it is paid once); a lease its holder stops renewing (the host died)
lapses and the batch is taken over, at once where its holder is a process of this machine that has ended (a run
killed here: :func:`holder_ended`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import Interrupted
from .journal import JournalEntry, Leased

if TYPE_CHECKING:
    from .journal import Journal

log = logging.getLogger(__name__)

#: Seconds a batch's lease lasts without renewal (:meth:`Journal.claim`): a run waiting for another's batch takes
#: it over this long after its holder stopped renewing (died).
LEASE_S = 30.0
#: Seconds between renewals of the leases of the batches a run is sending.
RENEW_S = 5.0
#: Seconds between looks at the journal while another run sends a batch this one needs.
WAIT_POLL_S = 0.25

__all__ = ["LEASE_S", "RENEW_S", "WAIT_POLL_S", "BatchLeases", "holder_ended", "new_run_id"]


@lru_cache(maxsize=1)
def _process_space() -> str | None:
    """What names the process ids this process sees (Linux: the kernel's boot id and the PID namespace), None where
    it cannot be told: two processes that see the same process ids have the same."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except (OSError, UnicodeDecodeError):
        return None
    return f"{boot}/{namespace}" if boot else None


def new_run_id() -> str:
    """A new run's id in the journal: random, with where its process can be looked for
    (``RANDOM@SPACE:PID``; only the random part where :func:`_process_space` is unknown)."""
    space = _process_space()
    return f"{uuid.uuid4().hex}@{space}:{os.getpid()}" if space else uuid.uuid4().hex


def holder_ended(run_id: str) -> bool:
    """Whether run ``run_id`` (:func:`new_run_id`) was a process of this machine's that has ended: its leases need not
    lapse. False wherever that cannot be told (another machine or container, a process still there or whose id was
    given to another since): those lapse after :data:`LEASE_S`."""
    _, at, where = run_id.rpartition("@")
    space, _, pid = where.rpartition(":")
    if not at or not pid.isdigit() or space != _process_space():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # there, but another user's
        return False
    return False


class BatchLeases:
    """The leases run ``run_id`` holds in ``journal`` (None, or a journal of this host only: no leases)."""

    def __init__(self, journal: Journal | None, run_id: str) -> None:
        self.journal, self.run_id = journal, run_id
        self._held: set[str] = set()
        self._lock = threading.Lock()

    @property
    def shared(self) -> bool:
        """Whether other runs share the journal (a database): only then are batches leased."""
        return self.journal is not None and self.journal.shared

    def claim(self, scope: str, batch_id: str, stopping: threading.Event) -> JournalEntry | None:
        """Before sending a batch: None when this run may send it (it now holds the lease, or the journal is not
        shared), else the journal's entry another run answered it with, waited for while that run held the lease.
        :class:`Interrupted` when ``stopping`` is set while waiting."""
        if not self.shared:
            return None
        assert self.journal is not None  # shared: there is one
        while True:
            found = self.journal.claim(scope, batch_id, self.run_id, lease=LEASE_S)
            if isinstance(found, Leased) and holder_ended(found.run_id):  # killed here: take it over now
                found = self.journal.claim(scope, batch_id, self.run_id, lease=0.0)
            if found is None:
                with self._lock:
                    self._held.add(batch_id)
                return None
            if isinstance(found, JournalEntry):
                return found
            if stopping.is_set():
                raise Interrupted(f"batch {batch_id} not sent: the run was interrupted")
            log.debug("batch %s: another run (%s) is sending it; waiting for its answer", batch_id, found.run_id[:8])
            time.sleep(WAIT_POLL_S)

    def done(self, batch_id: str) -> None:
        """The batch is answered (or failed): its lease is no longer renewed."""
        with self._lock:
            self._held.discard(batch_id)

    def release(self, scope: str) -> None:
        """After a run's batches: end its leases, so that a run waiting for a batch it did not finish takes it at
        once (a journal that cannot be written keeps them until they lapse)."""
        with self._lock:
            self._held.clear()
        if self.shared:
            assert self.journal is not None  # shared: there is one
            try:
                self.journal.release_leases(scope, self.run_id)
            except Exception as exc:
                log.debug("ending the journal's leases failed: %s", exc)

    def renew(self, scope: str, stop: threading.Event) -> None:
        """Until ``stop``: renew the leases on the batches being sent, every :data:`RENEW_S` seconds."""
        while not stop.wait(RENEW_S):
            with self._lock:
                held = sorted(self._held)
            try:
                if self.journal is not None:
                    self.journal.renew(scope, held, self.run_id)
            except Exception as exc:  # a lapsed lease costs at most a resend; the batch's own write reports errors
                log.debug("renewing the journal's leases failed: %s", exc)
