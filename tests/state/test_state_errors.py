"""State that fails loudly: a full disk, a read-only or misplaced state
directory, an unknown ~user, a malformed runs.json and a second run on a held state directory each end
in one line and a documented exit code, and lose nothing already done."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ldpclient.cli.errors import EXIT_FAILURE, EXIT_USAGE
from ldpclient.state import state_lock
from support.cli_runs import invoke, label_args, mock_teacher, private_folder
from support.faults import mounts  # noqa: F401 - a fixture


def _args(*a):
    return [*label_args(*a), "--quiet"]


def _one_line_error(result, code: int) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and result.exc_info[0] is SystemExit, result.exc_info
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_a_full_state_disk_is_one_line_and_the_next_run_resumes(tmp_path: Path, mounts) -> None:  # noqa: F811
    folder = private_folder(tmp_path, n=12, size=8)
    small = mounts.tmpfs("1m")
    with mock_teacher() as srv:
        args = _args(folder, srv.model_url, tmp_path)
        args[args.index("--state-dir") + 1] = str(small / "state")
        (small / "filler").write_bytes(b"\0" * (1024 * 1024 - 24_000))  # too little room for the ledger and spool
        line = _one_line_error(invoke(args), EXIT_USAGE)
        assert "disk" in line or "space" in line
        (small / "filler").unlink()
        again = invoke(args)
        assert again.exit_code == 0, again.output


def test_a_full_output_disk_is_one_line(tmp_path: Path, mounts) -> None:  # noqa: F811
    folder = private_folder(tmp_path, n=12, size=8)
    small = mounts.tmpfs("16k")
    (small / "filler").write_bytes(b"\0" * 14_000)
    with mock_teacher() as srv:
        args = _args(folder, srv.model_url, tmp_path)
        args[args.index("--output") + 1] = str(small / "labels.csv")
        _one_line_error(invoke(args), EXIT_USAGE)


def test_a_read_only_state_dir_is_one_line(tmp_path: Path, mounts) -> None:  # noqa: F811
    folder = private_folder(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    mounts.read_only(ro)
    with mock_teacher() as srv:
        args = _args(folder, srv.model_url, tmp_path)
        args[args.index("--state-dir") + 1] = str(ro)
        line = _one_line_error(invoke(args), EXIT_USAGE)
        assert "Read-only" in line and srv.usage()["total"]["images"] == 0


def test_a_file_in_place_of_the_state_dir_and_an_unknown_user_are_one_line(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    (tmp_path / "statefile").write_text("not a directory")
    with mock_teacher() as srv:
        args = _args(folder, srv.model_url, tmp_path)
        args[args.index("--state-dir") + 1] = str(tmp_path / "statefile")
        assert "a file is in its place" in _one_line_error(invoke(args), EXIT_USAGE)
        args[args.index("--state-dir") + 1] = "~nosuchuser-ldpclient/x"
        assert "cannot expand" in _one_line_error(invoke(args), EXIT_USAGE)


@pytest.mark.parametrize("content", ["[1, 2, 3]", '"text"', "42", '{"abc": 5}', '{"abc": {"seed": "x"}}'])
def test_a_malformed_runs_json_is_refused_not_overwritten(tmp_path: Path, content: str) -> None:
    folder = private_folder(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    (state / "runs.json").write_text(content)
    with mock_teacher() as srv:
        line = _one_line_error(invoke(_args(folder, srv.model_url, tmp_path)), EXIT_USAGE)
        assert "runs.json" in line and "not overwritten" in line
        assert srv.usage()["total"]["images"] == 0
    assert (state / "runs.json").read_text() == content


def test_a_second_run_on_a_held_state_dir_stops_at_once(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    with mock_teacher() as srv, state_lock(state):
        line = _one_line_error(invoke(_args(folder, srv.model_url, tmp_path)), EXIT_FAILURE)
        assert "in use by another ldpclient run" in line and srv.usage()["total"]["images"] == 0
        noise = invoke(["noise", str(folder), "--out", str(tmp_path / "noised"), "--state-dir", str(state)])
        assert noise.exit_code == EXIT_FAILURE and "in use" in noise.stderr


def test_two_concurrent_runs_on_one_state_dir_never_pass_the_cap_together(tmp_path: Path) -> None:
    """Two runs at once spend at most the money cap together, and neither dies on sqlite3.IntegrityError."""
    import os
    import sys

    folders = [private_folder(tmp_path / f"f{k}", n=12, size=8) for k in range(2)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    with mock_teacher(latency=0.05) as srv:
        procs = []
        for k, folder in enumerate([folders[0], folders[0], folders[1]]):
            args = _args(folder, srv.model_url, tmp_path, "--money-cap", "0.30")
            args[args.index("--output") + 1] = str(tmp_path / f"out{k}" / "labels.csv")
            procs.append(subprocess.Popen([sys.executable, "-m", "ldpclient.cli", *args], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        results = [(p.wait(timeout=120), p.communicate()[1]) for p in procs]
        billed = srv.usage()["total"]["images"]
    assert billed * 0.01 <= 0.30 + 1e-9, (billed, results)
    for code, err in results:
        assert "Traceback" not in err and "IntegrityError" not in err, err
        assert code in (0, 1, 4), (code, err)  # done, the state dir in use, or the money cap
        if code == 1:
            assert "in use by another ldpclient run" in err
    assert any(code == 0 for code, _ in results)
