"""Hostile teachers (a real HTTP peer that lies, tests/hostile_server.py): every case ends in one line,
the right exit code, within the user's deadlines and in bounded memory; nothing goes to a host the
user never named, and no credential from the teacher URL is ever printed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from ldpclient.cli.errors import EXIT_FAILURE, EXIT_TEACHER
from ldpclient.privacy import laplace
from ldpclient.teachers import MalformedResponse, RetriesExhausted, TeacherError
from ldpclient.teachers.http import RetryPolicy, redact_url
from ldpclient.teachers.oip import OIPTeacher
from support.fast_children import run_cli
from support.hostile_server import HostileServer
from support.peak_rss import cli_command, peak_rss_kb, without_peak_line

PEAK_RSS_LIMIT_KB = 1_500_000  # the bound: 1.5 GB against every hostile peer
# What a hostile peer may add to the client's peak RSS over an honest teacher's run of the same job:
# the 64 MiB body limit plus decoded pieces and slack.
HOSTILE_RSS_MARGIN_KB = 128 * 1024


@pytest.fixture(scope="module")
def private(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("private")
    rng = np.random.default_rng(0)
    for k in range(6):
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(folder / f"{k}.png")
    return folder


@pytest.fixture(scope="module")
def benign_rss(private, tmp_path_factory) -> int:
    """Peak RSS (KB) of the same ``label`` job against an honest teacher: it trains and labels to the end."""
    with HostileServer(f"labels:{list(range(10))}") as srv:
        code, err, rss = _label(private, f"{srv.url}/v2/models/m", tmp_path_factory.mktemp("benign"))
    assert code == 0, err
    return rss


def _label(private: Path, url: str, tmp_path: Path, *extra: str) -> tuple[int, str, int]:
    """``ldpclient label`` in a process of its own: (exit code, stderr without the RSS line, peak RSS in KB)."""
    proc = run_cli("label", str(private), "--teacher", url, "--state-dir", str(tmp_path / "s"),
                   "--output", str(tmp_path / "labels.csv"), "--queries", "10", "--epochs", "1",
                   "--max-retry-time", "0", "--quiet", *extra, peak_rss=True)
    return proc.returncode, without_peak_line(proc.stderr.strip()), peak_rss_kb(proc.stderr)


@pytest.mark.parametrize("behaviour, needle", [
    ("huge-shape", "100000"),  # [-1, 1, 100000, 100000]: refused, not allocated (past 6 GiB)
    ("gzip-bomb-metadata", "larger than"),  # 250 KB that inflates to 256 MiB
    ("big-body", "larger than"),  # a plain 80 MB body
    ("gzip-bomb-infer", "larger than"),
])
def test_bounded_memory_against_lying_teachers(private, benign_rss, tmp_path, behaviour, needle):
    with HostileServer(behaviour) as srv:
        code, err, rss = _label(private, f"{srv.url}/v2/models/m", tmp_path)
    assert code == EXIT_TEACHER, err
    assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in err
    assert rss < PEAK_RSS_LIMIT_KB, f"peak RSS {rss} KB"
    assert rss < benign_rss + HOSTILE_RSS_MARGIN_KB, f"peak RSS {rss} KB against {benign_rss} KB for an honest teacher"


@pytest.mark.parametrize("behaviour", ["trickle", "trickle-headers"])
def test_a_trickling_teacher_is_cut_off_at_the_users_deadline(private, tmp_path, behaviour):
    """One byte every 0.2 s, in the body or in the status line and headers: per-read timeouts never
    fire; the per-request deadline does (the whole metadata answer would take over 40 s)."""
    with HostileServer(behaviour) as srv:
        code, err, _ = _label(private, f"{srv.url}/v2/models/m", tmp_path, "--timeout", "1", "--max-retry-time", "3")
    assert code == EXIT_TEACHER and "did not arrive within" in err and len(err.splitlines()) == 1


def test_redirects_to_another_host_are_never_followed(private, tmp_path):
    with HostileServer("labels:[0]") as elsewhere, HostileServer("redirect", redirect_to=elsewhere.port) as srv:
        code, err, _ = _label(private, f"{srv.url}/v2/models/m", tmp_path)
        assert code == EXIT_TEACHER and "not followed" in err
        assert elsewhere.requests == []  # nothing, not even a health check, reached the other port


def test_credentials_in_the_teacher_url_are_never_printed(private, tmp_path):
    with HostileServer("trickle") as srv:
        url = f"http://alice:SeCrEtPw@127.0.0.1:{srv.port}/v2/models/m?api_key=QuErYkEy"
        code, err, _ = _label(private, url, tmp_path, "--timeout", "1")
    assert code == EXIT_TEACHER
    assert "SeCrEtPw" not in err and "QuErYkEy" not in err and "127.0.0.1" in err
    assert redact_url(url) == f"http://127.0.0.1:{srv.port}/v2/models/m"


@pytest.mark.parametrize("data", ["[1.7, 2, 3]", "[true, 2, 3]", '["3", 2, 3]', f"[{2**70}, 2, 3]", "[1, 2, 30]"])
def test_labels_must_be_integers_in_range(data):
    release = laplace(2.0, per="element").release(torch.rand(3, 1, 8, 8), generator=torch.Generator().manual_seed(0))
    with HostileServer(f"labels:{data}") as srv:
        teacher = OIPTeacher(srv.url, "m", wire="json", state_dir=None,
                                 retry=RetryPolicy(max_attempts=1, sleep=lambda s: None))
        with pytest.raises(TeacherError, match="label|integer|usable") as info:
            teacher.classify(release)
        assert isinstance(info.value, (MalformedResponse, RetriesExhausted))  # never a label


def test_a_corrupt_journal_is_a_one_line_error(private, tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "journal.sqlite").write_bytes(b"this is not a database" * 100)
    with HostileServer("labels:[0]") as srv:
        code, err, _ = _label(private, f"{srv.url}/v2/models/m", tmp_path)
    journal = tmp_path / "s" / "journal.sqlite"
    assert code == EXIT_FAILURE and f"query journal {journal} is damaged" in err and "restore it" in err
    assert journal.read_bytes() == b"this is not a database" * 100  # left as it is
    assert len(err.splitlines()) == 1 and "Traceback" not in err


_ACTIVE = [chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F)]  # all C0 but tab and newline, DEL


def _no_terminal_control(text: str, where: str) -> None:
    bad = sorted({f"{ord(c):#04x}" for c in text if c in _ACTIVE})
    assert not bad, f"{where} holds control characters {bad}"


def test_class_names_from_a_peer_are_data_in_every_output(private, tmp_path: Path) -> None:
    """Formula and escape-sequence class names: labels.csv, stdout and stderr stay inert."""
    import json

    names = ["=cmd|'/c calc'!A1", "+1", "-2", "@SUM(A1)", "\x1b[2J\x1b]0;pwned\x07", "\ttab", "a\rb",
             "'=quoted", "plain", "\u202eevil"]
    with HostileServer("names:" + json.dumps(names)) as srv:
        proc = run_cli("label", str(private), "--teacher", f"{srv.url}/v2/models/m",
                       "--state-dir", str(tmp_path / "s"), "--output", str(tmp_path / "labels.csv"),
                       "--queries", "10", "--epochs", "1", "--max-retry-time", "0")
    assert proc.returncode == 0, proc.stderr
    csv_text = (tmp_path / "labels.csv").read_text()
    for text, where in ((proc.stdout, "stdout"), (proc.stderr, "stderr"), (csv_text, "labels.csv")):
        _no_terminal_control(text, where)
    cells = [line.split(",") for line in csv_text.splitlines()[1:]]
    assert cells and all(not c[2].startswith(("=", "+", "-", "@", "\t", "\r")) for c in cells)
    from ldpclient.report.label_files import read_labels

    back = {r.label_name for r in read_labels(tmp_path / "labels.csv")}
    assert back <= {"=cmd|'/c calc'!A1", "+1", "-2", "@SUM(A1)", "\\x1b[2J\\x1b]0;pwned\\x07", "\ttab", "a\\x0db",
                    "'=quoted", "plain", "\\u202eevil"}


def test_huge_class_names_are_refused_in_one_line(private, tmp_path: Path) -> None:
    """Ten class names of 5 MB each are refused in one line (they would make labels.csv 42 MB for 8 images)."""
    import json

    with HostileServer("names:" + json.dumps([f"{k}" * 5_000_000 for k in range(10)])) as srv:
        code, err, _ = _label(private, f"{srv.url}/v2/models/m", tmp_path)
    assert code == EXIT_TEACHER and "characters (limit 256)" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "labels.csv").exists()


def test_escape_sequences_in_server_errors_never_reach_the_terminal(private, tmp_path: Path) -> None:
    with HostileServer("error-text") as srv:
        code, err, _ = _label(private, f"{srv.url}/v2/models/m", tmp_path)
    assert code == EXIT_TEACHER and "\\x1b[2J" in err
    _no_terminal_control(err, "stderr")
    assert "\x9b" not in err


@pytest.mark.parametrize("token", ["sk-" + "9" * 37 + "\n", "sk-" + "8" * 37 + "\r\n", "sk-" + "7" * 37])
def test_a_token_is_never_printed_even_when_the_server_echoes_it_past_the_cut(private, tmp_path: Path,
                                                                             token: str) -> None:
    """A token with CR/LF was printed whole in the header error; one echoed after 250 characters of padding
    was cut before redaction (37 of 40 characters left)."""
    import os

    with HostileServer("echo-token") as srv:
        proc = run_cli("label", str(private), "--teacher", f"{srv.url}/v2/models/m", "--state-dir",
                       str(tmp_path / "s"), "--output", str(tmp_path / "labels.csv"), "--queries", "10",
                       "--max-retry-time", "0", "--json", env={**os.environ, "LDPCLIENT_TOKEN": token})
    assert proc.returncode == EXIT_TEACHER, proc.stderr
    secret = token.strip()
    for text in (proc.stdout, proc.stderr):
        for k in range(0, len(secret) - 7):
            assert secret[k : k + 8] not in text  # not even 8 characters of it
    assert "HTTP 401" in proc.stderr


@pytest.mark.parametrize("token, needle", [(" ", "--token is empty"), ("sk-1\x1b[2J2345", "control characters")])
def test_a_blank_or_controlled_token_is_refused_without_being_shown(private, tmp_path: Path, token: str,
                                                                    needle: str) -> None:
    import os

    proc = run_cli("label", str(private), "--teacher", "http://127.0.0.1:9/v2/models/m", "--state-dir",
                   str(tmp_path / "s"), "--output", str(tmp_path / "labels.csv"), timeout=60,
                   env={**os.environ, "LDPCLIENT_TOKEN": token})
    err = without_peak_line(proc.stderr.strip())
    assert proc.returncode == 2 and needle in err and "***" not in err and "2345" not in err


def test_ctrl_c_stops_paying_against_a_teacher_that_never_answers(private, tmp_path: Path) -> None:
    """After SIGINT no new attempt is sent (no more billed POSTs against a teacher that never answers); the
    first Ctrl-C waits for the request in flight (so it is not paid twice), a second one abandons it
    at once, books it as possibly billed and says it may be paid twice; the exit is 130."""
    import os
    import signal
    import time

    from ldpclient.teachers import Journal

    with HostileServer("hang-infer") as srv:
        cmd = cli_command("label", str(private), "--teacher", f"{srv.url}/v2/models/m", "--state-dir",
                          str(tmp_path / "s"), "--output", str(tmp_path / "labels.csv"), "--queries", "10",
                          "--price", "0.5", "--timeout", "60", "--max-retry-time", "180", "--quiet")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + 60
        while not any(p.endswith("/infer") for p in srv.requests):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.3)
        posts = sum(p.endswith("/infer") for p in srv.requests)
        proc.send_signal(signal.SIGINT)
        time.sleep(1.5)
        assert proc.poll() is None  # waiting for the answer in flight, sending nothing new
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
        time.sleep(0.5)
        after = sum(p.endswith("/infer") for p in srv.requests)
    assert proc.returncode == 130, err
    assert took < 5.0, f"exit took {took:.1f} s after the second Ctrl-C"
    assert after == posts, f"{after - posts} POSTs after Ctrl-C"
    last = without_peak_line(err).splitlines()[-1]
    assert "interrupted" in last and "1 request(s) in flight were abandoned" in last and "paid twice" in last
    assert "Traceback" not in err
    with Journal(tmp_path / "s" / "journal.sqlite") as journal:
        assert journal.total_spend() >= 0.5  # the abandoned attempt counts as (possibly) billed


def test_a_declared_shape_too_large_for_memory_is_refused_before_decoding(private, tmp_path: Path) -> None:
    """1x4096x4096 is inside TeacherLimits; 3 images took the client to 4.5 GB RSS."""
    with HostileServer("shape:[-1, 1, 4096, 4096]") as srv:
        code, err, rss = _label(private, f"{srv.url}/v2/models/m", tmp_path)
        assert not any(p.endswith("/infer") for p in srv.requests)
    assert code == 2 and "1x4096x4096" in err and "--max-memory" in err and len(err.splitlines()) == 1
    assert rss < PEAK_RSS_LIMIT_KB
    with HostileServer("shape:[-1, 1, 4096, 4096]") as srv:  # the user may raise the bound; then the estimate is named
        code, err, _ = _label(private, f"{srv.url}/v2/models/m", tmp_path, "--max-memory", "0.5",
                              "--train-batch-size", "1", "--batch-size", "1")
    assert code == 2 and "over --max-memory 0.5 GiB" in err


def test_estimates_stay_small_for_ordinary_images() -> None:
    from ldpclient.run.memory import check_memory_for_shape

    for shape in ((1, 28, 28), (3, 32, 32), (3, 64, 64)):
        est = check_memory_for_shape(shape, "t", 1.0, query_batch=256, train_batch=128)
        assert est.peak < 2**30


def test_cosmetic_lies_get_their_own_words(private, tmp_path: Path) -> None:
    """A published range of [0, 1e300] was blamed on --epsilon; a 304 'redirected to (no Location)';
    FP32 scores sent as "7" or true were accepted."""
    import json

    with HostileServer("range:[0, 1e300]") as srv:
        code, err, _ = _label(private, f"{srv.url}/v2/models/m", tmp_path / "a")
    assert code == EXIT_TEACHER and "value range [0, 1e+300]" in err and "--epsilon" not in err
    with HostileServer("status:304") as srv:
        code, err, _ = _label(private, f"{srv.url}/v2/models/m", tmp_path / "b")
    assert code == EXIT_TEACHER and "without a Location" in err and "redirects to" not in err
    for odd in ('"7"', "true"):
        scores = json.dumps([[0.0] * 9 + [1.0]])[:-2] + f", {odd}]]"
        with HostileServer(f"scores:{scores}") as srv:
            code, err, _ = _label(private, f"{srv.url}/v2/models/m", tmp_path / f"c{odd}")
        assert code == EXIT_TEACHER and "scores must be JSON numbers" in err, err
