"""``ldpclient label``/``budget`` with ``--state postgresql://...``: the ledger, the journal and the plan seeds in a
throwaway PostgreSQL (conftest ``postgres_url``), against the real mock teacher.

The same labels as the file state for a fixed seed; a second host (its own ``--state-dir``, a copy of the key
file, the same images under other names in another folder) re-running the command sends, pays and noises nothing
again; the money cap counts what every host
spent; a bad ``--state`` and an unreachable database are one line and a usage exit, with no password shown.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ldpclient.cli.errors import EXIT_MONEY_CAP, EXIT_USAGE
from ldpclient.report.label_files import read_labels
from support.cli_runs import invoke, label_args, mock_teacher, private_folder


def _pg(url: str, tmp_path: Path, host: str) -> list[str]:
    return ["--state", url, "--state-dir", str(tmp_path / host), "--ledger-key-file", str(tmp_path / f"{host}.key")]


def test_label_on_a_database_state_labels_as_the_file_state_and_hosts_share_it(postgres_url: str, tmp_path: Path):
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        on_file = invoke(label_args(folder, srv.model_url, tmp_path, "--seed", "3", "--json"))
        assert on_file.exit_code == 0, on_file.output
        file_labels = [r.label for r in read_labels(tmp_path / "out" / "labels.csv")]
        shared = invoke([*label_args(folder, srv.model_url, tmp_path, "--seed", "3", "--json",
                              "--output", str(tmp_path / "pg" / "labels.csv")), *_pg(postgres_url, tmp_path, "a")])
        assert shared.exit_code == 0, shared.output
        rep = json.loads(shared.stdout)
        assert rep["ledger"]["fresh"] == 12 - rep["counts"]["not_released"] and rep["queries"]["sent"] == 24
        assert [r.label for r in read_labels(tmp_path / "pg" / "labels.csv")] == file_labels
        assert not (tmp_path / "a" / "ledger.sqlite").exists() and not (tmp_path / "a" / "journal.sqlite").exists()

        # no --seed: the plan seed is made once in the database; a second host with a copy of the key file, and
        # the same images under other names in another folder, resumes the first host's run: nothing sent, paid
        # or noised again
        first = invoke([*label_args(folder, srv.model_url, tmp_path, "--json", "--epsilon", "3"),
                      *_pg(postgres_url, tmp_path, "a")])
        assert first.exit_code == 0, first.output
        released = {rep["ledger"]["fresh"], json.loads(first.stdout)["ledger"]["fresh"]}
        sent = srv.usage()["total"]["images"]
        shutil.copy(tmp_path / "a.key", tmp_path / "b.key")
        elsewhere = tmp_path / "host-b" / "mounted"
        for image in sorted(folder.rglob("*.png")):  # renamed, in the same order
            target = elsewhere / image.parent.name / f"b-{image.name}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(image, target)
        second = invoke([*label_args(elsewhere, srv.model_url, tmp_path, "--json", "--epsilon", "3"),
                       *_pg(postgres_url, tmp_path, "b")])
        assert second.exit_code == 0, second.output
        rep2 = json.loads(second.stdout)
        assert rep2["queries"]["sent"] == 0 and rep2["queries"]["from_journal"] == 24
        assert rep2["ledger"]["fresh"] == 0 and rep2["cost"]["spent_run"] == 0.0
        assert srv.usage()["total"]["images"] == sent

        # the money cap counts both hosts' spend (0.48 in the database): a new run's 0.24 does not fit 0.6
        capped = invoke([*label_args(folder, srv.model_url, tmp_path, "--epsilon", "2", "--money-cap", "0.6"),
                       *_pg(postgres_url, tmp_path, "b")])
        assert capped.exit_code == EXIT_MONEY_CAP, capped.output
        assert srv.usage()["total"]["images"] == sent

    budget = invoke(["budget", "--json", *_pg(postgres_url, tmp_path, "b")])
    assert budget.exit_code == 0, budget.output
    b = json.loads(budget.stdout)
    assert 11 <= b["records"] <= 12 and b["path"] == postgres_url  # 24 pairs of 12 images may leave one out
    assert b["epsilon"]["max"] == 64.0 + 48.0  # --epsilon 4, then 3, per element of 16
    assert {m["releases"] for m in b["by_mechanism"]} == released


def test_a_bad_or_unreachable_state_is_one_line_and_nothing_is_sent(tmp_path: Path):
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        bad = invoke([*label_args(folder, srv.model_url, tmp_path), "--state", str(tmp_path / "db")])
        assert bad.exit_code == EXIT_USAGE and "--state must be a postgresql:// URL" in bad.stderr
        gone = invoke([*label_args(folder, srv.model_url, tmp_path), "--state", "postgresql://ldp:hunter2@127.0.0.1:1/x"])
        assert gone.exit_code == EXIT_USAGE, gone.output
        assert "cannot reach the state database postgresql://ldp@127.0.0.1:1/x" in gone.stderr
        assert "hunter2" not in gone.output and "Traceback" not in gone.output
        assert srv.usage()["total"]["images"] == 0
