"""Nothing lost when the disk, the database or the process fails: real faults against real runs.

A small tmpfs fills up, a bind mount turns the state read-only, ``chattr +i`` pins a file, files are truncated to
half their size or emptied, ``label`` is killed (SIGKILL) at seeded moments through every stage, and the
throwaway PostgreSQL server is stopped with ``pg_ctl stop -m immediate``. After every fault it is checked from
outside: the mock teacher's own record of what it received and billed, and the ledger as ``ldpclient budget``
and the file itself read it. Root only where a mount or ``chattr`` is needed (skipped with the reason elsewhere).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

import mock_server
from ldpclient.cli.errors import EXIT_FAILURE, EXIT_USAGE
from ldpclient.report.label_files import read_labels
from ldpclient.state.database import JOURNAL_NAMESPACE, LEDGER_NAMESPACE
from support.cli_runs import cli_command, label_args, mock_teacher, private_folder
from support.fast_children import run_cli
from support.faults import mounts  # noqa: F401 - a fixture

IMAGES = 16
#: Each image's release is charged 4 per pixel over 8x8 pixels; the cap lets each image be released once only.
CHARGE, CAP = 256.0, 300.0
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


def _sidp_args(folder: Path, url: str, where: Path, *extra: str) -> list[str]:
    """A label run whose queries are the releases themselves (no superimposition, no post-processing, every pixel
    released), so that what the teacher received can be matched to what the ledger holds."""
    return [*label_args(folder, url, where, "--queries", str(IMAGES), "--batch-size", "4", "--augment", "none",
                        "--postprocess", "", "--reduce", "1", "--privacy-cap", str(CAP), *extra), "--quiet"]


def _one_line(proc: subprocess.CompletedProcess[str] | object, code: int) -> str:
    """The one error line of a failed run (a process or an in-process result) with exit ``code``."""
    rc = getattr(proc, "returncode", getattr(proc, "exit_code", None))
    err = proc.stderr  # type: ignore[attr-defined]
    assert rc == code, (rc, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def _run(args: list[str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``ldpclient ARGS`` run to its end in a process of its own, forked from one that imported ldpclient once
    (:func:`~support.fast_children.run_cli`); the runs a test kills start a fresh interpreter."""
    return run_cli(*args, env=ENV, timeout=timeout)


#: Where each state database's tables are in PostgreSQL.
NAMESPACES = {"ledger": LEDGER_NAMESPACE, "journal": JOURNAL_NAMESPACE}


def _read_state(state: Path | str, name: str, *queries: str) -> list[list[tuple]]:
    """The rows of each of ``queries`` on the state's ``name`` (``ledger`` or ``journal``), read as a file of a state
    directory or in a database (a URL), read only."""
    if isinstance(state, str):
        import psycopg

        with psycopg.connect(state) as db:
            db.execute(f"SET search_path TO {NAMESPACES[name]}")
            return [db.execute(sql).fetchall() for sql in queries]
    with closing(sqlite3.connect(f"{(state / f'{name}.sqlite').as_uri()}?mode=ro", uri=True)) as db:
        return [db.execute(sql).fetchall() for sql in queries]


def _ledger_rows(state: Path | str) -> tuple[dict[bytes, float], list[tuple[bytes, np.ndarray]]]:
    """What the ledger holds: each source's epsilon spent, and each stored release (its source and its values)."""
    spend_rows, release_rows = _read_state(state, "ledger", "SELECT source_key, epsilon FROM spend",
                                           "SELECT source_key, shape, data FROM releases")
    releases = [(bytes(k), np.frombuffer(bytes(d), dtype=np.float32).reshape(json.loads(shape)))
                for k, shape, d in release_rows]
    return {bytes(k): float(e) for k, e in spend_rows}, releases


def _journal_total(state: Path | str) -> float:
    """The money the journal holds: answered batches and booked attempts."""
    (row,), = _read_state(state, "journal", "SELECT (SELECT COALESCE(SUM(cost), 0) FROM batches) + "
                                            "(SELECT COALESCE(SUM(cost), 0) FROM pending)")
    return float(row[0])


def _budget(state: Path, *database: str) -> dict[str, object]:
    """``ldpclient budget --json`` of the state directory ``state`` (``database``: ``--state URL`` and its key)."""
    out = _run(["budget", "--state-dir", str(state), *database, "--json"], timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# ------------------------------------------------------------------ SIGKILL at seeded moments


#: Kill points: 3 file states (a test each), 7 kills each (a database state: 7 more), at seeded moments through
#: every stage.
STATES, KILLS_PER_STATE = 3, 7
#: The mock's answer time (s): long enough that kills land while a request is in flight.
LATENCY = 0.2
#: The kill tests' timeout (s): each starts about 10 runs. Idle, the three states in one test took 66 s; beside two
#: CPU-bound processes, 127 s.
KILL_TEST_TIMEOUT = 900


def _killed_at(args: list[str], srv, rng: np.random.Generator, kills: int, span: float,
               landed: dict[str, int]) -> None:
    """Run ``args`` until it has been killed (SIGKILL) ``kills`` times, each time at a seeded moment: while queries
    are left to send, half of them once the teacher has answered a seeded number of images more (1 to 7: as an
    answer arrives, before it is journaled); the others at a time within ``span`` seconds of the start (a run that
    ends first sets ``span`` to its length: a re-run with less left to do is shorter). ``landed`` counts where the
    kills fell: with images sent since the start, or not (starting, noising, training, adapting, writing)."""
    left_to_send = True
    while kills:
        at, after_images = float(rng.uniform(0.0, span)), int(rng.integers(1, 8)) if rng.random() < 0.5 else 0
        after_images *= left_to_send
        images = srv.usage()["total"]["images"]
        started = time.monotonic()
        proc = subprocess.Popen(cli_command(*args), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while proc.poll() is None and (srv.usage()["total"]["images"] < images + after_images if after_images
                                       else time.monotonic() - started < at):
            time.sleep(0.005)
        if proc.poll() is not None:
            landed["finished first"] += 1
            span, left_to_send = time.monotonic() - started, False
        else:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
            srv.wait_idle()
            landed["while sending" if srv.usage()["total"]["images"] > images else "while not sending"] += 1
            kills -= 1
        _, err = proc.communicate()
        assert proc.returncode in (0, -signal.SIGKILL), err


def _check_after_kills(args: list[str], srv, where: Path, state: Path | str, billed_before: float,
                       one_run_bill: float, kills: int, *database: str) -> float:
    """The run completed once more: one whole set of labels, the bill within one run's plus a batch per kill, the
    journal holding at least what was paid, and ``budget``: every image charged once, within the cap. The bill."""
    final = _run(args)
    assert final.returncode == 0, final.stderr
    rows = read_labels(where / "out" / "labels.csv")
    assert len(rows) == IMAGES and len({r.path for r in rows}) == IMAGES  # one whole set of labels
    billed = srv.usage()["total"]["cost"] - billed_before
    # each kill can catch one batch (4 queries at 0.01) answered and billed but not yet journaled
    assert billed <= one_run_bill + kills * 4 * 0.01 + 1e-9, (billed, one_run_bill)
    assert _journal_total(state) >= billed - 1e-9  # the journal never holds less than what was paid
    summary = _budget(where / "state", *database)
    assert summary["records"] == IMAGES and summary["epsilon"]["max"] <= CAP
    return billed


@pytest.mark.timeout(KILL_TEST_TIMEOUT)
@pytest.mark.parametrize("state_number", range(STATES))
def test_killed_at_7_seeded_moments_one_run_of_labels_and_every_release_charged(
        tmp_path: Path, state_number: int) -> None:
    folder = private_folder(tmp_path, n=IMAGES)
    log = tmp_path / "received.jsonl"
    rng = np.random.default_rng(89 + state_number)
    landed = dict.fromkeys(("while sending", "while not sending", "finished first"), 0)
    with mock_teacher(latency=LATENCY, query_log=str(log)) as srv:
        started = time.monotonic()
        reference = _run(_sidp_args(folder, srv.model_url, tmp_path / "reference"))
        whole_run = time.monotonic() - started
        assert reference.returncode == 0, reference.stderr
        one_run_bill = srv.usage()["total"]["cost"]
        where = tmp_path / "killed"
        args = _sidp_args(folder, srv.model_url, where)
        billed_before = srv.usage()["total"]["cost"]
        _killed_at(args, srv, rng, KILLS_PER_STATE, whole_run, landed)
        billed = _check_after_kills(args, srv, where, where / "state", billed_before, one_run_bill, KILLS_PER_STATE)
        print(f"state {state_number}: billed {billed:.2f} against one run's {one_run_bill:.2f}")
    _check_the_teacher_saw_charged_releases(log, [tmp_path / "reference" / "state", where / "state"])
    print("kills landed:", landed)


def _check_the_teacher_saw_charged_releases(log: Path, states: list[Path | str]) -> None:
    """Every query the teacher received (its own log) is a release one of the ledgers holds, charged to its image
    once at least and within the cap; no ledger holds two releases of one image."""
    spend: dict[bytes, float] = {}
    releases: list[tuple[bytes, np.ndarray]] = []
    for state in states:
        s, r = _ledger_rows(state)
        assert len({k for k, _ in r}) == len(r)  # one release per image: none was noised afresh
        spend.update(s)
        releases += r
    stored = np.stack([np.clip(v, 0, 1) for _, v in releases])
    sent = np.concatenate([tensor for _, tensor in mock_server.read_query_log(log)])
    for query in np.clip(sent, 0, 1):
        match = np.flatnonzero(np.abs(stored - query).reshape(len(stored), -1).max(axis=1) == 0)
        assert len(match) >= 1, "the teacher received a release no ledger holds"
        assert CHARGE <= spend[releases[int(match[0])][0]] <= CAP


# ------------------------------------------------------------------ damaged or emptied state


@pytest.mark.parametrize("name", ["ledger.sqlite", "journal.sqlite"])
def test_a_state_file_truncated_to_half_is_refused_in_one_line_naming_it_and_left_as_it_is(
        tmp_path: Path, name: str) -> None:
    folder = private_folder(tmp_path, n=IMAGES)
    with mock_teacher() as srv:
        args = _sidp_args(folder, srv.model_url, tmp_path)
        assert _run(args).returncode == 0
        sent = srv.usage()["total"]["images"]
        damaged = tmp_path / "state" / name
        damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
        kept = damaged.read_bytes()
        line = _one_line(_run(args), EXIT_FAILURE)
        assert f"{damaged} is damaged" in line and "restore it" in line and "--state-dir" in line
        assert srv.usage()["total"]["images"] == sent and damaged.read_bytes() == kept  # nothing sent, not replaced


def test_an_emptied_or_replaced_journal_is_refused_and_nothing_is_paid_again(tmp_path: Path) -> None:
    folder = private_folder(tmp_path, n=IMAGES)
    with mock_teacher() as srv:
        args = _sidp_args(folder, srv.model_url, tmp_path)
        other = _sidp_args(folder, srv.model_url, tmp_path / "other")
        assert _run(args).returncode == 0 and _run(other).returncode == 0
        sent = srv.usage()["total"]["images"]
        journal = tmp_path / "state" / "journal.sqlite"
        answered = journal.read_bytes()
        journal.write_bytes(b"")  # emptied
        line = _one_line(_run(args), EXIT_FAILURE)
        assert f"query journal {journal} is missing or empty" in line and "journal.sqlite.id" in line
        journal.unlink()  # gone
        assert "is missing or empty" in _one_line(_run(args), EXIT_FAILURE)
        journal.write_bytes((tmp_path / "other" / "state" / "journal.sqlite").read_bytes())  # another state's
        assert "is not the one kept here" in _one_line(_run(args), EXIT_FAILURE)
        assert srv.usage()["total"]["images"] == sent  # nothing was sent, so nothing was paid again
        journal.write_bytes(answered)  # restored: the re-run pays nothing
        assert _run(args).returncode == 0 and srv.usage()["total"]["images"] == sent


def test_a_ledger_key_without_its_ledger_after_a_first_open_that_died_is_not_a_dead_end(tmp_path: Path) -> None:
    """A first open killed between making the key and committing the ledger leaves only a pending key: the next
    open starts the ledger; one killed after the commit, before the key file, takes the pending key up."""
    from ldpclient.privacy.ledger import Ledger
    from ldpclient.privacy.ledger.identity import pending_key_path

    path = tmp_path / "ledger.sqlite"
    key = Path(str(path) + ".key")
    pending_key_path(key).write_bytes(os.urandom(32))  # died before the ledger was committed
    with Ledger(path):
        pass
    assert key.exists() and not pending_key_path(key).exists()
    made = key.read_bytes()
    key.rename(pending_key_path(key))  # died after the ledger's commit, before its key file was made
    with Ledger(path):
        pass
    assert key.read_bytes() == made and not pending_key_path(key).exists()


# ------------------------------------------------------------------ a full disk, a read-only state


@pytest.mark.parametrize("size", ["40k", "96k", "200k"])
def test_a_disk_that_fills_at_the_first_write_is_one_line_and_the_rerun_completes(
        tmp_path: Path, mounts, size: str) -> None:  # noqa: F811 - the fixture
    folder = private_folder(tmp_path, n=IMAGES)
    disk = mounts.tmpfs(size)
    with mock_teacher() as srv:
        args = _sidp_args(folder, srv.model_url, disk)
        line = _one_line(_run(args), EXIT_USAGE)
        assert "disk" in line and str(disk / "state") in line
        assert srv.usage()["total"]["images"] == 0
        mounts.resize(disk, "64m")
        assert _run(args).returncode == 0
        assert srv.usage()["total"]["images"] == IMAGES  # one run's queries, paid once
        assert _budget(disk / "state")["records"] == IMAGES


@pytest.mark.parametrize("size", ["300k", "600k"])
def test_a_disk_that_fills_mid_querying_stops_sending_and_the_rerun_completes(
        tmp_path: Path, mounts, size: str) -> None:  # noqa: F811 - the fixture
    folder = private_folder(tmp_path, n=48)
    disk = mounts.tmpfs(size)
    with mock_teacher() as srv:
        args = [*label_args(folder, srv.model_url, disk, "--queries", "240", "--batch-size", "4",
                            "--privacy-cap", str(CAP)), "--quiet"]
        line = _one_line(_run(args), EXIT_USAGE)
        assert "disk" in line and "nothing committed is lost" in line
        sent = srv.usage()["total"]["images"]
        mounts.resize(disk, "64m")
        done = _run([*args[:-1], "--json"])
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        # the re-run sends only what was not journaled: at most the batch answered when the disk filled again
        assert report["queries"]["sent"] + report["queries"]["from_journal"] == 240
        assert report["queries"]["from_journal"] >= sent - 4
        assert srv.usage()["total"]["images"] <= 240 + 4
        assert _budget(disk / "state")["epsilon"]["max"] <= CAP


def test_a_read_only_state_is_one_line_budget_reads_it_and_the_rerun_completes(
        tmp_path: Path, mounts) -> None:  # noqa: F811 - the fixture
    folder = private_folder(tmp_path, n=IMAGES)
    state = tmp_path / "state"
    with mock_teacher(latency=0.05) as srv:
        args = _sidp_args(folder, srv.model_url, tmp_path)
        proc = subprocess.Popen(cli_command(*args), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        while srv.usage()["total"]["images"] < 8:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)  # a write-ahead log with the last charges stays beside the ledger
        proc.wait(timeout=60)
        srv.wait_idle()
        mounts.read_only(state)
        sent = srv.usage()["total"]["images"]
        line = _one_line(_run(args), EXIT_USAGE)
        assert "read-only" in line.lower() and str(state) in line
        assert srv.usage()["total"]["images"] == sent  # nothing is sent that the state could not record
        read = subprocess.run(cli_command("budget", "--state-dir", str(state)), env=ENV, capture_output=True,
                              text=True, timeout=120)
        assert read.returncode in (0, EXIT_USAGE), read.stderr  # read, or one line: the killed run's log
        if read.returncode:
            assert "write-ahead log" in _one_line(read, EXIT_USAGE)
        mounts.unmount(state)
        assert _run(args).returncode == 0
        assert srv.usage()["total"]["images"] <= IMAGES + 4
        mounts.read_only(state)  # closed cleanly now: everything is in the file
        assert _budget(state)["records"] == IMAGES


def test_an_immutable_ledger_is_one_line_and_nothing_is_sent(tmp_path: Path, mounts) -> None:  # noqa: F811
    folder = private_folder(tmp_path, n=IMAGES)
    more = private_folder(tmp_path / "more", n=IMAGES + 4)
    with mock_teacher() as srv:
        assert _run(_sidp_args(folder, srv.model_url, tmp_path)).returncode == 0
        sent = srv.usage()["total"]["images"]
        mounts.immutable(tmp_path / "state" / "ledger.sqlite")
        line = _one_line(_run(_sidp_args(more, srv.model_url, tmp_path)), EXIT_USAGE)
        assert "ledger" in line and str(tmp_path / "state") in line
        assert srv.usage()["total"]["images"] == sent


def test_a_full_output_disk_leaves_the_labels_whole_or_absent(tmp_path: Path, mounts) -> None:  # noqa: F811
    folder = private_folder(tmp_path, n=IMAGES)
    disk = mounts.tmpfs("64k")
    with mock_teacher() as srv:
        args = _sidp_args(folder, srv.model_url, tmp_path)
        args[args.index("--output") + 1] = str(disk / "labels.csv")
        assert _run(args).returncode == 0
        whole, written = (disk / "labels.csv").read_bytes(), sorted(p.name for p in disk.iterdir())
        (disk / "filler").write_bytes(b"\0" * (disk_free(disk) - 512))
        _one_line(_run([*args, "--seed", "5"]), EXIT_USAGE)
        assert (disk / "labels.csv").read_bytes() == whole  # the old labels, whole
        assert sorted(p.name for p in disk.iterdir() if p.name != "filler") == written  # no half-written file


def disk_free(where: Path) -> int:
    stat = os.statvfs(where)
    return stat.f_bavail * stat.f_frsize


# ------------------------------------------------------------------ PostgreSQL: a server that dies mid-run


@pytest.fixture(scope="module")
def own_postgres():
    """A throwaway PostgreSQL server of this module's own, which its tests crash and start again."""
    from support import postgres_server as pg

    server = pg.start_for_tests(fsync=True)
    yield server
    server.stop()


def _pg_args(folder: Path, url: str, tmp_path: Path, database: str) -> list[str]:
    return [*_sidp_args(folder, url, tmp_path), "--state", database,
            "--ledger-key-file", str(tmp_path / "ledger.key")]


def _stopped_midway(args: list[str], srv, fault) -> subprocess.CompletedProcess[str]:
    """Run ``args``; once the teacher answered 4 images, call ``fault()``; the finished process."""
    proc = subprocess.Popen(cli_command(*args), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while srv.usage()["total"]["images"] < 4:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    fault()
    out, err = proc.communicate(timeout=180)
    srv.wait_idle()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("how", ["stop -m immediate", "restart"])
def test_a_database_that_stops_mid_run_is_one_line_and_the_rerun_completes(
        tmp_path: Path, own_postgres, how: str) -> None:
    folder = private_folder(tmp_path, n=IMAGES)
    database = own_postgres.database("crashed" if how != "restart" else "restarted")
    with mock_teacher(latency=0.1) as srv:
        args = _pg_args(folder, srv.model_url, tmp_path, database)
        stopped = _stopped_midway(args, srv, own_postgres.crash if how != "restart" else own_postgres.restart)
        sent = srv.usage()["total"]["images"]
        if how != "restart" or stopped.returncode:  # a restart between two statements is reconnected
            line = _one_line(stopped, EXIT_USAGE)
            assert "127.0.0.1" in line and ("re-run" in line or "cannot reach" in line)
        if how != "restart":
            own_postgres.start_again()
        assert _journal_total(database) >= 0.01 * (sent - 4) - 1e-9  # nothing was sent that it could not record
        done = _run([*args, "--json"])
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["queries"]["from_journal"] >= sent - 4 and report["ledger"]["fresh"] <= IMAGES
        assert srv.usage()["total"]["images"] <= IMAGES + 4


def test_connections_cut_mid_run_are_one_line_or_reopened_and_the_rerun_completes(
        tmp_path: Path, own_postgres) -> None:
    import psycopg

    folder = private_folder(tmp_path, n=IMAGES)
    database = own_postgres.database("cut")

    def cut() -> None:
        with psycopg.connect(database, autocommit=True) as c:
            c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                      " WHERE datname = current_database() AND pid <> pg_backend_pid()")

    with mock_teacher(latency=0.1) as srv:
        args = _pg_args(folder, srv.model_url, tmp_path, database)
        stopped = _stopped_midway(args, srv, cut)
        if stopped.returncode:  # cut inside a transaction (reopened when cut between statements)
            assert "nothing committed is lost" in _one_line(stopped, EXIT_USAGE)
        done = _run(args)
        assert done.returncode == 0, done.stderr
        assert srv.usage()["total"]["images"] <= IMAGES + 4


# ------------------------------------------------------------------ images are images, whatever their names


def test_an_image_renamed_copied_or_re_encoded_is_the_same_record_and_one_edited_is_a_new_one(tmp_path: Path) -> None:
    import shutil

    from PIL import Image

    folder = private_folder(tmp_path, n=IMAGES)
    with mock_teacher() as srv:
        args = [*_sidp_args(folder, srv.model_url, tmp_path), "--json"]
        first = _run(args)
        assert first.returncode == 0 and json.loads(first.stdout)["ledger"]["fresh"] == IMAGES
        files = sorted(folder.rglob("*.png"))
        files[0].rename(files[0].with_name("renamed.png"))
        (tmp_path / "elsewhere").mkdir()
        shutil.copy(files[1], tmp_path / "elsewhere" / "copied.png")
        files[1].unlink()
        before = files[2].read_bytes()
        with Image.open(files[2]) as img:
            img.load()
        img.save(files[2], compress_level=0)  # the same pixels in other bytes
        assert files[2].read_bytes() != before
        with Image.open(files[3]) as img:
            img.save(files[3].with_suffix(".bmp"))  # another format, no loss
        files[3].unlink()
        edited = np.array(Image.open(files[4]))
        edited[0, 0] ^= 0xFF  # one pixel
        Image.fromarray(edited).save(files[4])
        again = _run(args)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["ledger"]["fresh"] == 1  # the edited image only
        elsewhere = _run([*_sidp_args(tmp_path / "elsewhere", srv.model_url, tmp_path), "--json"])
        assert elsewhere.returncode == 0, elsewhere.stderr
        assert json.loads(elsewhere.stdout)["ledger"]["fresh"] == 0
    summary = _budget(tmp_path / "state")
    assert summary["records"] == IMAGES + 1  # the edited image's old spend stays on the books
    assert summary["epsilon"]["max"] <= CAP


def test_what_another_file_of_an_image_spent_before_the_ledger_knew_joins_that_image(tmp_path: Path) -> None:
    import torch

    from ldpclient.privacy import laplace
    from ldpclient.privacy.ledger import Ledger

    mechanism = laplace(1.0, per="element")  # 16 per release of a 4x4 record
    image = torch.rand(1, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    first, other, content = b"a" * 32, b"b" * 32, b"c" * 32
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        ledger.release(mechanism, image, sources=[first])
        ledger.release(mechanism, image, scope="another teacher", sources=[other])  # before the ledger knew
        assert ledger.spent_by_source([first, other]) == [16.0, 16.0]
        assert ledger.same_images([first, other], [content, content]) == 1
        assert ledger.spent_by_source([first, other]) == [32.0, 32.0]  # one image, both releases
        assert ledger.summary()["records"] == 1
        assert ledger.same_images([first, other], [content, content]) == 0  # told again: nothing changes
        assert ledger.spent_by_source([other]) == [32.0]
        assert ledger.verify() == []  # the spend is the sum of the image's releases, under either file


@pytest.mark.timeout(KILL_TEST_TIMEOUT)
def test_killed_at_7_seeded_moments_on_a_database_state(tmp_path: Path, own_postgres) -> None:
    folder = private_folder(tmp_path, n=IMAGES)
    database = own_postgres.database("killed")
    log = tmp_path / "received.jsonl"
    landed = dict.fromkeys(("while sending", "while not sending", "finished first"), 0)
    with mock_teacher(latency=LATENCY, query_log=str(log)) as srv:
        args = _pg_args(folder, srv.model_url, tmp_path, database)
        _killed_at(args, srv, np.random.default_rng(90), KILLS_PER_STATE, 6.0, landed)
        billed = _check_after_kills(args, srv, tmp_path, database, 0.0, IMAGES * 0.01, KILLS_PER_STATE,
                                    "--state", database, "--ledger-key-file", str(tmp_path / "ledger.key"))
    _check_the_teacher_saw_charged_releases(log, [database])
    print(f"database state: billed {billed:.2f} against one run's {IMAGES * 0.01:.2f}; kills landed: {landed}")
