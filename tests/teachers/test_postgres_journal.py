"""The query journal in PostgreSQL (``Journal("postgresql://...")``): processes sharing it never book past the money
cap together, and an attempt booked by a process killed before the teacher's answer was recorded stays counted.

Each child is a process of its own (:mod:`fast_children`) on the session's throwaway server (conftest
``postgres_url``).
"""

from __future__ import annotations

import signal
from pathlib import Path

import torch

from ldpclient.teachers import Journal
from support import journal_child
from support.fast_children import Child


def test_processes_sharing_a_journal_never_book_past_the_money_cap(postgres_url: str, tmp_path: Path) -> None:
    Journal(postgres_url).close()  # the tables, once
    go = tmp_path / "go"
    children = [Child(journal_child.book, postgres_url, f"p{i}", str(go)) for i in range(6)]
    try:
        for c in children:
            c.expect("ready")
        go.touch()
        booked = [c.said(timeout=120) for c in children]
        assert [c.wait() for c in children] == [0] * 6
    finally:  # a failed child must not leave the others polling for a file
        for c in children:
            c.kill()
    assert sum(booked) == 300  # 600 attempts of 1.0 against a cap of 300: exactly 300 booked, by every process
    with Journal(postgres_url) as j:
        assert j.total_spend("teacher") == 300.0


def test_an_attempt_booked_before_a_kill_stays_spent_and_is_paid_once(postgres_url: str) -> None:
    assert Child(journal_child.killed_after_billing, postgres_url).wait(timeout=120) == -signal.SIGKILL
    with Journal(postgres_url) as j:
        assert j.total_spend("teacher") == 2.5  # counted as spent: the teacher may have billed it
        assert j.get("teacher", "batch-7") is None  # not answered: the re-run sends it again
        j.open_attempt("teacher", "batch-7", 2.5, "run-2", cap=10.0)  # the re-run's attempt
        j.record("teacher", "batch-7", torch.tensor([1, 2, 3]), digest="d", cost=2.5, billed=3, requests=1,
                 run_id="run-2")
        assert j.total_spend("teacher") == 5.0  # both attempts may have been billed: both count, once each
        assert j.get("teacher", "batch-7").labels.tolist() == [1, 2, 3]
        assert j.count("teacher") == 1


def test_plan_seeds_live_in_the_journals_versioned_schema(postgres_url: str, tmp_path: Path) -> None:
    """The ``plans`` table is the journal's: a run state written by a newer ldpclient is refused before a seed is
    read or written, and a seed is made once, kept, and carried over once from a legacy key."""
    import pytest

    from ldpclient.run.run_state import RunState, _digest
    from ldpclient.state import NewerStateFile
    from ldpclient.state.database import JOURNAL_NAMESPACE, Database

    state = RunState(tmp_path, database=postgres_url)
    first = state.seed_for({"run": "a"}, None)
    assert state.seed_for({"run": "a"}, None) == first  # made once, read back
    with Journal(postgres_url) as j:  # an older ldpclient's key for run "b" already holds a seed
        assert j.plan_seed(_digest({"run": "b-old"}), [], 1234) == 1234
    assert state.seed_for({"run": "b"}, None, legacy_keys=[{"run": "b-old"}]) == 1234
    assert state.seed_for({"run": "b"}, None) == 1234  # now under its own key
    db = Database.open(postgres_url, namespace=JOURNAL_NAMESPACE)
    try:
        with db.transaction():
            db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    finally:
        db.close()
    with pytest.raises(NewerStateFile, match="newer ldpclient"):
        state.seed_for({"run": "c"}, None)
    assert not (tmp_path / "runs.json").exists()  # the database state never falls back to the file


def test_batch_api_job_ids_kept_in_postgresql_are_read_back_by_another_host(postgres_url: str) -> None:
    """The ids of a plan batch's Batch API jobs, kept by one host, are what another host sharing the journal
    collects (oldest first, each once)."""
    with Journal(postgres_url) as first:
        first.add_job("openai:x", "b-0", "batch_one")
        first.add_job("openai:x", "b-0", "batch_two")
        first.add_job("openai:x", "b-0", "batch_one")  # kept twice: once
    with Journal(postgres_url) as other:
        assert other.jobs("openai:x", "b-0") == ["batch_one", "batch_two"]
        assert other.jobs("openai:x", "b-1") == [] and other.jobs("openai:y", "b-0") == []
