"""Outputs never overwrite inputs or state: every path a command writes is checked before anything is
noised, sent or paid. Through the command line against the real mock teacher on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpclient.cli.errors import EXIT_USAGE
from ldpclient.run.output_paths import check_output_paths
from ldpclient.state.locations import StateLocations
from support.cli_runs import charged_images, invoke, label_args, mock_teacher, paid_batches, private_folder


def _refused(res, *words: str) -> str:
    assert res.exit_code == EXIT_USAGE, res.output
    line = res.stderr.strip().splitlines()[-1]
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    for word in words:
        assert word in line, line
    return line


def test_an_output_on_an_input_another_output_or_the_state_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    check = tmp_path / "check.csv"
    check.write_text("file,label\ncats/img01.png,0\n")
    hand_labels = check.read_bytes()
    labels = tmp_path / "out" / "labels.csv"
    (tmp_path / "page.html").mkdir()
    state = tmp_path / "state"
    with mock_teacher() as srv:
        assert invoke(label_args(folder, srv.model_url, tmp_path)).exit_code == 0  # a state with a ledger and its key
        charged, paid, images = charged_images(tmp_path), paid_batches(tmp_path), srv.usage()["total"]["images"]
        key = state / "ledger.sqlite.key"
        key_bytes = key.read_bytes()
        cases = [
            (["--check", str(check), "--output", str(check)], ("--output", "--check file this run reads")),
            (["--report", str(labels)], ("--report", "is also where --output writes")),
            (["--report", str(labels.with_name("labels.html")), "--html"], ("--report", "also where --html writes")),
            (["--report", str(key)], ("--report", "state")),
            (["--report", str(tmp_path / "page.html")], ("--report", "is a directory")),
            (["--output", str(folder / "labels.csv")], ("--output", "PRIVATE_DIR folder")),
            (["--output", str(state / "labels.csv")], ("--output", "the state directory")),
        ]
        for extra, words in cases:
            _refused(invoke(label_args(folder, srv.model_url, tmp_path, *extra)), *words)
        # a baseline's labels beside an output named like another output's sibling
        _refused(invoke(label_args(folder, srv.model_url, tmp_path, "--baseline", "--report",
                            str(labels.with_name("labels.baseline.csv")))), "--report", "--baseline's labels")
        assert srv.usage()["total"]["images"] == images
    assert (charged_images(tmp_path), paid_batches(tmp_path)) == (charged, paid)
    assert check.read_bytes() == hand_labels and key.read_bytes() == key_bytes


def test_budget_html_on_the_key_file_and_noise_into_the_private_folder_are_refused(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    state = tmp_path / "state"
    with mock_teacher() as srv:
        assert invoke(label_args(folder, srv.model_url, tmp_path)).exit_code == 0
        key = state / "ledger.sqlite.key"
        key_bytes = key.read_bytes()
        _refused(invoke(["budget", "--state-dir", str(state), "--html", str(key)]), "--html", "state")
        elsewhere = tmp_path / "keys" / "ledger.key"
        _refused(invoke(["budget", "--state-dir", str(state), "--ledger-key-file", str(elsewhere), "--html",
                       str(elsewhere)]), "--html", "the ledger's key file")
        assert key.read_bytes() == key_bytes
        assert invoke(["budget", "--state-dir", str(state)]).exit_code == 0  # the key still reads
        res = invoke(["noise", str(folder), "--out", str(folder / "noised"), "--teacher", srv.model_url, "--reduce",
                    "2", "--epsilon", "4", "--epsilon-unit", "element", "--state-dir", str(state)])
        _refused(res, "--out", "PRIVATE_DIR folder")


def test_paths_compare_through_links_and_hard_links(tmp_path: Path) -> None:
    check = tmp_path / "check.csv"
    check.write_text("file,label\n")
    (tmp_path / "link.csv").symlink_to(check)
    (tmp_path / "hard.csv").hardlink_to(check)
    for alias in ("link.csv", "hard.csv", "./sub/../check.csv"):
        with pytest.raises(ValueError, match="--check file"):
            check_output_paths({"--output": tmp_path / alias}, input_files={"--check": check})
    check_output_paths({"--output": tmp_path / "labels.csv", "--report": tmp_path / "labels.json"},
                       input_files={"--check": check}, input_folders={"PRIVATE_DIR": tmp_path / "private"},
                       state=StateLocations(tmp_path / "state"))
