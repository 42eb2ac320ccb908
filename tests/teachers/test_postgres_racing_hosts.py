"""Two hosts labelling the same images at once against one PostgreSQL state: each batch is sent by one of
them while the other waits and reuses its answer; both finish, nothing is billed twice. Two real ``ldpclient label``
processes (each its own ``--state-dir``, a copy of the key file, the images under other names in another folder)
against the real mock teacher, whose requests are slowed so that the runs overlap."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ldpclient.privacy.ledger import Ledger
from ldpclient.teachers import Journal
from ldpclient.teachers.client import QueryClient
from ldpclient.teachers.journal import Leased
from support.cli_runs import label_args, mock_teacher, private_folder


def _host(folder: Path, url: str, tmp_path: Path, postgres_url: str, host: str, key: Path) -> list[str]:
    return [sys.executable, "-m", "ldpclient.cli", *label_args(folder, url, tmp_path, "--json", "--quiet",
                                                        "--output", str(tmp_path / f"out-{host}" / "labels.csv")),
            "--state", postgres_url, "--state-dir", str(tmp_path / host), "--ledger-key-file", str(key)]


def test_two_hosts_on_the_same_images_at_once_both_finish_and_pay_once(postgres_url: str, tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    elsewhere = tmp_path / "mounted-elsewhere"
    for k, path in enumerate(sorted(folder.rglob("*.png"))):  # the same bytes under other names
        elsewhere.mkdir(exist_ok=True)
        shutil.copyfile(path, elsewhere / f"copy{k:02d}.png")
    key = tmp_path / "a.key"
    with Ledger(postgres_url, key_file=key):  # the first host made the key; the second holds a copy
        pass
    shutil.copyfile(key, tmp_path / "b.key")
    with mock_teacher(latency=0.3) as srv:
        started = time.monotonic()
        runs = [subprocess.Popen(_host(f, srv.model_url, tmp_path, postgres_url, host, tmp_path / f"{host}.key"),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for f, host in ((folder, "a"), (elsewhere, "b"))]
        outs = [r.communicate(timeout=300) for r in runs]
        assert time.monotonic() - started < 300
        for r, (_, err) in zip(runs, outs, strict=True):
            assert r.returncode == 0, err[-3000:]
        reports = [json.loads(out) for out, _ in outs]
        planned = reports[0]["queries"]["planned"]
        sent = sum(rep["queries"]["sent"] for rep in reports)
        billed = srv.usage()["total"]["images"]
    assert sent == planned and billed == planned, (sent, billed, [rep["queries"] for rep in reports])
    for rep in reports:  # each host has every answer: sent by it, or by the other and reused
        assert rep["queries"]["sent"] + rep["queries"]["from_journal"] == planned
    assert reports[0]["queries"]["answers_histogram"] == reports[1]["queries"]["answers_histogram"]
    with Journal(postgres_url) as journal:
        assert journal.total_spend() == pytest.approx(0.01 * planned)


class _Slow:
    """A teacher that answers class 1 after ``delay`` seconds, counting the queries it was sent."""

    def __init__(self, delay: float) -> None:
        from ldpclient.teachers.base import TeacherMetadata

        self.meta = TeacherMetadata(name="slow", input_shape=(1, 4, 4), datatype="FP32", num_classes=3)
        self.delay, self.sent = delay, 0

    def metadata(self):
        return self.meta

    def classify(self, x):
        time.sleep(self.delay)
        self.sent += len(x)
        return torch.ones(len(x), dtype=torch.int64)


def test_a_batch_another_run_holds_is_waited_for_and_a_lapsed_lease_is_taken_over(postgres_url: str) -> None:
    from ldpclient.privacy import laplace

    x = laplace(5.0, per="record").release(torch.rand(8, 1, 4, 4), public=True)
    with Journal(postgres_url) as journal:
        assert journal.claim("slow", "b1", "run-a", lease=30) is None  # run a holds it
        assert isinstance(journal.claim("slow", "b1", "run-b", lease=30), Leased)
        teacher = _Slow(0.0)
        client = QueryClient(teacher, journal=journal, scope="slow")

        digest = _digest_of(x)

        def answer_as_run_a() -> None:
            time.sleep(1.0)
            journal.record("slow", "b1", torch.full((8,), 2, dtype=torch.int64), digest=digest, cost=0.0,
                           billed=None, requests=1, run_id="run-a")

        import threading

        threading.Thread(target=answer_as_run_a).start()
        got = dict(client.label_batches([("b1", x)]))
        assert got["b1"].tolist() == [2] * 8 and teacher.sent == 0  # run a's answer, nothing sent
        assert client.stats.queries_from_journal == 8
        assert journal.claim("slow", "b2", "run-dead", lease=30) is None  # a holder that dies: its lease lapses
        journal.renew("slow", ["b2"], "run-dead")
        assert isinstance(journal.claim("slow", "b2", "run-c", lease=30), Leased)
        assert journal.claim("slow", "b2", "run-c", lease=0.0) is None  # past the lease: taken over


def test_a_lease_whose_holder_ended_on_this_machine_is_taken_over_at_once(postgres_url: str) -> None:
    """A run killed here (its process gone) leaves leases that need not lapse: the next run sends the batch at once.
    One held by a process still running, or by a run elsewhere (another machine's or container's id, an id that
    names no process), lapses as before."""
    import os

    from ldpclient.privacy import laplace
    from ldpclient.teachers.leases import LEASE_S, holder_ended, new_run_id

    ended = subprocess.run([sys.executable, "-c", "from ldpclient.teachers.leases import new_run_id; "
                            "print(new_run_id())"], capture_output=True, text=True, check=True).stdout.strip()
    here = new_run_id()
    assert here.endswith(f":{os.getpid()}") and holder_ended(ended)
    elsewhere = here.replace("@", "@another-machine-", 1).rsplit(":", 1)[0] + ":999999999"
    assert not any(holder_ended(r) for r in (here, elsewhere, "run-a", "x@y:not-a-pid"))
    x = laplace(5.0, per="record").release(torch.rand(4, 1, 4, 4), public=True)
    with Journal(postgres_url) as journal:
        assert journal.claim("slow", "b1", ended, lease=30) is None
        teacher = _Slow(0.0)
        started = time.monotonic()
        got = dict(QueryClient(teacher, journal=journal, scope="slow").label_batches([("b1", x)]))
        assert got["b1"].tolist() == [1] * 4 and teacher.sent == 4  # sent, without waiting for the lease to lapse
        assert time.monotonic() - started < LEASE_S / 2


def _digest_of(x) -> str:
    from ldpclient.privacy.release import as_derived
    from ldpclient.teachers.stream import query_digest as _digest

    return _digest(as_derived(x))


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_batch_recorded_twice_keeps_the_first_answer_and_both_costs(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    where = str(tmp_path / "journal.sqlite") if kind == "sqlite" else request.getfixturevalue("postgres_url")
    with Journal(where) as journal:
        assert journal.shared == (kind == "postgresql")
        first = journal.record("t", "b", torch.tensor([1, 2]), digest="d", cost=0.5, billed=2, requests=1, run_id="a")
        second = journal.record("t", "b", torch.tensor([0, 0]), digest="d", cost=0.5, billed=2, requests=1,
                                run_id="b")
        assert first.tolist() == [1, 2] and second.tolist() == [1, 2]
        assert journal.total_spend("t") == pytest.approx(1.0) and journal.count("t") == 1
