"""A database or pooler that closes idle sessions: the state's connections are checked after quiet and
opened anew, so a run's long local work (training, adaptation) cannot kill it after labelling. Against the
throwaway PostgreSQL with ``idle_session_timeout`` set on the test's database."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from ldpclient.privacy import laplace
from ldpclient.privacy.ledger import Ledger
from ldpclient.state import database
from ldpclient.teachers import Journal
from support.cli_runs import invoke, label_args, mock_teacher, private_folder


def _idle_limit(url: str, limit: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f"ALTER DATABASE \"{name}\" SET idle_session_timeout = '{limit}'")


def _closed_idle_sessions(url: str) -> None:
    """Until the server has closed every session of ``url``'s database (watched from another database, whose
    sessions it leaves open)."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    deadline = time.monotonic() + 30
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as watch:
        while watch.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)).fetchone()[0]:
            assert time.monotonic() < deadline, "the server left the idle sessions open"
            time.sleep(0.05)


def test_the_ledger_and_the_journal_outlive_a_server_that_closes_idle_sessions(
        postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import psycopg

    _idle_limit(postgres_url, "700ms")
    monkeypatch.setattr(database, "IDLE_CHECK_SECONDS", 0.1)  # quieter than the server allows
    plain = psycopg.connect(postgres_url, autocommit=True)
    _closed_idle_sessions(postgres_url)
    with pytest.raises(psycopg.OperationalError):  # what the server does to a connection left idle
        plain.execute("SELECT 1")
    x = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with Ledger(postgres_url, key_file=tmp_path / "key") as ledger, Journal(postgres_url) as journal:
        ledger.release(laplace(5.0, per="record"), x, scope="t")
        journal.plan_seed("a plan", (), 7)
        _closed_idle_sessions(postgres_url)  # the server closes both sessions meanwhile
        assert ledger.spent(x).epsilon.tolist() == [5.0] * 4
        again = ledger.release(laplace(5.0, per="record"), x, scope="t")  # stored: found, not charged again
        assert again.guarantee.epsilon_record == 5.0 and ledger.spent(x).epsilon.tolist() == [5.0] * 4
        _closed_idle_sessions(postgres_url)
        assert journal.plan_seed("a plan", (), 8) == 7


def test_a_label_run_outlives_a_server_that_closes_idle_sessions(
        postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _idle_limit(postgres_url, "300ms")
    monkeypatch.setattr(database, "IDLE_CHECK_SECONDS", 0.1)  # quieter than the server allows
    folder = private_folder(tmp_path)
    state = ["--state", postgres_url, "--state-dir", str(tmp_path / "host"), "--ledger-key-file",
             str(tmp_path / "key")]
    with mock_teacher() as srv:
        res = invoke([*label_args(folder, srv.model_url, tmp_path, "--json", "--epochs", "3"), *state])
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout)["outputs"]["labels"] and (tmp_path / "out" / "labels.csv").exists()
        again = invoke([*label_args(folder, srv.model_url, tmp_path, "--json", "--epochs", "3"), *state])
        assert again.exit_code == 0, again.output
        assert json.loads(again.stdout)["queries"]["sent"] == 0
