"""The errors a newcomer meets first: a wrong port, an unknown host, a model-name typo, a URL without
the model, https against a plain-HTTP teacher. Each is one line of at most 160 characters that says what to check
next, with no library internals and no resume advice (nothing was done to resume), and a wrong port fails at once
rather than after the retries."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from PIL import Image

from ldpclient.cli.errors import EXIT_TEACHER, EXIT_USAGE
from support.cli_runs import invoke, mock_teacher, private_folder


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _label(folder: Path, teacher: str, tmp_path: Path):
    return invoke(["label", str(folder), "--teacher", teacher, "--state-dir", str(tmp_path / "state"), "--output",
                 str(tmp_path / "labels.csv")])


def _one_line(res, code: int, *words: str) -> str:
    assert res.exit_code == code, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr  # no retry warnings, no progress bar
    line = lines[0]
    assert len(line) <= 160, (len(line), line)
    for word in words:
        assert word in line, line
    for internal in ("_Watched", "HTTPConnection", "urllib3", "Max retries", "Traceback", "resume", "model="):
        assert internal not in line, line
    return line


def test_a_wrong_port_says_nothing_answers_there_at_once(tmp_path: Path) -> None:
    folder, port = private_folder(tmp_path), _free_port()
    started = time.monotonic()
    res = _label(folder, f"http://127.0.0.1:{port}/v2/models/digits", tmp_path)
    assert time.monotonic() - started < 10
    _one_line(res, EXIT_TEACHER, f"nothing answers at http://127.0.0.1:{port} (connection refused)",
              "is the teacher running")


@pytest.mark.parametrize(("teacher", "code", "words"), [
    ("http://127.0.0.1:{port}/v2/models/digitz", EXIT_TEACHER, ("unknown model 'digitz'", "this server has")),
    ("http://127.0.0.1:{port}", EXIT_USAGE, ("no model name", "/v2/models/<model>")),
    ("https://127.0.0.1:{port}/v2/models/trivial", EXIT_TEACHER, ("does not answer in TLS", "http://")),
])
def test_a_teacher_address_that_is_almost_right_says_what_to_fix(tmp_path: Path, teacher: str, code: int,
                                                                 words: tuple[str, ...]) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        res = _label(folder, teacher.format(port=srv.port), tmp_path)
    _one_line(res, code, *words)


def test_a_host_that_does_not_resolve_says_to_check_the_address(tmp_path: Path) -> None:
    res = _label(private_folder(tmp_path), "http://no-such-teacher.invalid:8080/v2/models/digits", tmp_path)
    _one_line(res, EXIT_TEACHER, "cannot resolve the host of http://no-such-teacher.invalid:8080", "--teacher")


def test_a_folder_whose_images_are_all_unreadable_says_so_before_anything_else(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's case: one unreadable ``a.jpg`` was refused as too few images for --augment sup."""
    monkeypatch.chdir(tmp_path)
    folder = Path("photos")
    folder.mkdir()
    (folder / "a.jpg").write_bytes(b"not a jpeg at all")
    port = _free_port()  # nothing answers there: the folder is judged before the teacher is asked anything
    line = _one_line(_label(folder, f"http://127.0.0.1:{port}/v2/models/digits", tmp_path), EXIT_USAGE,
                     "no readable image in private folder", "its 1 image file(s) cannot be decoded", "'a.jpg'")
    assert "--augment" not in line
    Image.new("L", (8, 8), 128).save(folder / "b.png")  # one readable image: the folder passes this check
    res = _label(folder, f"http://127.0.0.1:{port}/v2/models/digits", tmp_path)
    assert "nothing answers at" in res.stderr, res.output
