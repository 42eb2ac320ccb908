"""A ledger key provisioned before its ledger: a run refuses it as a lost ledger's and says how to start
the ledger with it; ``budget --init`` does, once, on SQLite and PostgreSQL, and the key is used as it is. A new
PostgreSQL state whose ``--state-dir`` does not exist yet takes ``budget --set-cap``."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from ldpclient.cli.errors import EXIT_FAILURE
from support.cli_runs import invoke, label_args, mock_teacher, private_folder


def _state(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> list[str]:
    key = ["--ledger-key-file", str(tmp_path / "secrets" / "ldpclient.key")]
    if kind == "sqlite":
        return ["--state-dir", str(tmp_path / "state"), *key]
    return ["--state", request.getfixturevalue("postgres_url"), "--state-dir", str(tmp_path / "host"), *key]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_provisioned_key_starts_a_new_ledger_when_the_user_says_so_once(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    state = _state(kind, tmp_path, request)
    key = tmp_path / "secrets" / "ldpclient.key"
    key.parent.mkdir()
    key.write_bytes(secrets.token_bytes(32))  # what a secrets manager put there
    key.chmod(0o600)
    provisioned = key.read_bytes()
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        refused = invoke([*label_args(folder, srv.model_url, tmp_path), *state])
        assert refused.exit_code == EXIT_FAILURE, refused.output
        line = refused.stderr.strip().splitlines()[-1]
        assert "its key file" in line and "ldpclient budget --init" in line, line
        assert srv.usage()["total"]["images"] == 0
        started = invoke(["budget", "--init", "--json", *state])
        assert started.exit_code == 0, started.output
        assert json.loads(started.stdout)["records"] == 0
        done = invoke([*label_args(folder, srv.model_url, tmp_path, "--json"), *state])
        assert done.exit_code == 0, done.output
        assert json.loads(done.stdout)["ledger"]["fresh"] > 0
        assert invoke(["budget", "--init", *state]).exit_code == 0  # a ledger that exists is opened as it is
    assert key.read_bytes() == provisioned
    summary = json.loads(invoke(["budget", "--json", *state]).stdout)
    assert summary["records"] > 0
    other = tmp_path / "other.key"
    other.write_bytes(secrets.token_bytes(32))
    wrong = invoke(["budget", "--init", *state[:-1], str(other)])  # another key for an existing ledger: refused
    assert wrong.exit_code == EXIT_FAILURE and "does not belong to ledger" in wrong.stderr, wrong.output


def test_set_cap_on_a_new_database_state_whose_state_dir_does_not_exist(postgres_url: str, tmp_path: Path) -> None:
    host = tmp_path / "not" / "yet" / "here"
    res = invoke(["budget", "--state", postgres_url, "--state-dir", str(host), "--set-cap", "50", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["cap_epsilon"] == 50 and (host / "ledger.key").exists()
