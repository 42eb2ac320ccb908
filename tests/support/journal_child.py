"""Children of the PostgreSQL journal tests (run by :mod:`fast_children`): processes booking money attempts against
one cap, and one killed after the teacher billed its request."""

from __future__ import annotations

import os
import signal
import time
from typing import Callable


def book(url: str, who: str, go: str, *, say: Callable[[object], None]) -> None:
    """Open the journal, say ``ready``, wait for the file ``go``, then try to book 100 attempts of 1.0 under the cap
    of 300; say how many were booked."""
    from ldpclient.teachers.journal import Journal, MoneyCapInJournal

    with Journal(url) as j:
        say("ready")
        deadline = time.monotonic() + 120
        while not os.path.exists(go) and time.monotonic() < deadline:  # a failed parent never makes it
            time.sleep(0.01)
        booked = 0
        for b in range(100):
            try:
                j.open_attempt("teacher", f"{who}-{b}", 1.0, who, cap=300.0)
                booked += 1
            except MoneyCapInJournal:
                pass
    say(booked)


def killed_after_billing(url: str, *, say: Callable[[object], None]) -> None:
    """Book an attempt of 2.5, then die (SIGKILL) as if the teacher billed the request before its answer came."""
    from ldpclient.teachers.journal import Journal

    j = Journal(url)
    j.open_attempt("teacher", "batch-7", 2.5, "run-1", cap=10.0)
    os.kill(os.getpid(), signal.SIGKILL)
