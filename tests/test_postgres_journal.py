"""The query journal in PostgreSQL (``Journal("postgresql://...")``): processes sharing it never book past the money
cap together, and an attempt booked by a process killed before the teacher's answer was recorded stays counted.

Each child is a fresh interpreter (``python -c``) on the session's throwaway server (conftest ``postgres_url``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from ldpclient.teachers import Journal

ROOT = Path(__file__).resolve().parent.parent

_BOOKER = textwrap.dedent("""
    import sys, time
    from ldpclient.teachers.journal import Journal, MoneyCapInJournal
    url, who, go = sys.argv[1], sys.argv[2], sys.argv[3]
    import os
    with Journal(url) as j:
        print("ready", flush=True)
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
    print(booked)
""")


def test_processes_sharing_a_journal_never_book_past_the_money_cap(postgres_url: str, tmp_path: Path) -> None:
    Journal(postgres_url).close()  # the tables, once
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _BOOKER, postgres_url, f"p{i}", str(go)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True) for i in range(6)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        go.touch()
        booked = [int(p.communicate(timeout=120)[0]) for p in procs]
    finally:  # a failed child must not leave the others polling for a file
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in procs)
    assert sum(booked) == 300  # 600 attempts of 1.0 against a cap of 300: exactly 300 booked, by every process
    with Journal(postgres_url) as j:
        assert j.total_spend("teacher") == 300.0


_KILLED_AFTER_BILLING = textwrap.dedent("""
    import os, signal, sys
    from ldpclient.teachers.journal import Journal
    j = Journal(sys.argv[1])
    j.open_attempt("teacher", "batch-7", 2.5, "run-1", cap=10.0)
    # the request is sent and the teacher bills it here; the process dies before the answer is recorded
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_an_attempt_booked_before_a_kill_stays_spent_and_is_paid_once(postgres_url: str) -> None:
    child = subprocess.run([sys.executable, "-c", _KILLED_AFTER_BILLING, postgres_url], cwd=ROOT, timeout=120)
    assert child.returncode == -signal.SIGKILL
    with Journal(postgres_url) as j:
        assert j.total_spend("teacher") == 2.5  # counted as spent: the teacher may have billed it
        assert j.get("teacher", "batch-7") is None  # not answered: the re-run sends it again
        j.open_attempt("teacher", "batch-7", 2.5, "run-2", cap=10.0)  # the re-run's attempt
        j.record("teacher", "batch-7", torch.tensor([1, 2, 3]), digest="d", cost=2.5, billed=3, requests=1,
                 run_id="run-2")
        assert j.total_spend("teacher") == 5.0  # both attempts may have been billed: both count, once each
        assert j.get("teacher", "batch-7").labels.tolist() == [1, 2, 3]
        assert j.count("teacher") == 1
