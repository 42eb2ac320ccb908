"""The ledger in PostgreSQL (``Ledger("postgresql://...", key_file=...)``): the same guarantees as the file, under
processes that race on one database.

A throwaway server runs for the session (conftest ``postgres_server``: ``initdb`` + ``pg_ctl``, as ``nobody`` when
root); each test gets a fresh database. Checked: releases are reused, not noised again, and the cap refuses before
sampling; the caps live in the database; a second host with a copy of the key file shares the spend, a host with
another key is refused; 8 processes releasing overlapping batches to 6 teachers under one cap never pass it and
never noise one image twice for one teacher (and opening the new ledger at once, one of them makes it); a process
SIGKILLed after its commit, or with noise drawn but not
committed, leaves the accounting whole, and a re-run charges nothing new.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from ldpclient.privacy.ledger import BudgetExceeded, Ledger, LedgerError
from ldpclient.privacy.ledger.cap_history import cap_for_run, held_caps
from ldpclient.privacy.ledger.errors import CapRaiseRefused
from ldpclient.state import StateError
from support import ledger_crash_child as child
from support import postgres_race_child as race
from support.fast_children import Child
from support.ledger_support import make_mechanism


def test_release_reuse_cap_and_summary_as_in_a_file(postgres_url: str, tmp_path: Path) -> None:
    mech = make_mechanism(2.0)
    x = torch.rand((5, 1, 8, 8), generator=torch.Generator().manual_seed(1))
    with Ledger(postgres_url, key_file=tmp_path / "ledger.key", cap_epsilon=5.0) as led:
        first = led.release(mech, x, scope="A")
        again = led.release(mech, x, scope="A")
        assert torch.equal(first._values, again._values) and again.reused.all()
        led.release(mech, x, scope="B")
        with pytest.raises(BudgetExceeded, match="5 of 5 records"):
            led.release(mech, x, scope="C")  # 4 + 2 > 5: refused, nothing sampled
        assert led.spent(x).epsilon.tolist() == [4.0] * 5
        assert led.verify() == []
        s = led.summary()
        assert (s["records"], s["releases"], s["records_at_cap"], s["path"]) == (5, 10, 0, postgres_url)
        assert {(m["scope"], m["releases"]) for m in s["by_mechanism"]} == {("A", 5), ("B", 5)}
        assert sorted(led.epsilon_per_record()) == [4.0] * 5
    assert held_caps(postgres_url).epsilon == 5.0
    with pytest.raises(CapRaiseRefused):
        cap_for_run(postgres_url, 7.0, "--privacy-cap")
    # a second host, with its own copy of the key file: the same spend, the same stored releases
    shutil.copy(tmp_path / "ledger.key", tmp_path / "host2.key")
    with Ledger(postgres_url, key_file=tmp_path / "host2.key") as other:
        assert other.cap_epsilon == 5.0
        assert torch.equal(other.release(mech, x, scope="A")._values, first._values)
        assert other.rename_scopes(["B"], "A") == 0  # already held under A: stays
        assert other.rename_scopes(["B"], "Z") == 5
        other.set_caps(9.0, origin="test")
        assert [h["epsilon"] for h in other.cap_history()] == [5.0, 9.0]
        assert other.spent(x).epsilon.tolist() == [4.0] * 5


def test_the_key_file_decides_who_may_open_it(postgres_url: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs key_file"):
        Ledger(postgres_url)
    with Ledger(postgres_url, key_file=tmp_path / "a.key") as led:
        led.release(make_mechanism(1.0), torch.rand(2, 1, 8, 8), scope="A")
    with pytest.raises(LedgerError, match="is missing but the ledger"):
        Ledger(postgres_url, key_file=tmp_path / "missing.key")
    assert not (tmp_path / "missing.key").exists()
    other = tmp_path / "other"
    other.mkdir()
    with Ledger(str(other / "x.sqlite")):
        pass  # a key of another ledger
    with pytest.raises(LedgerError, match="does not belong"):
        Ledger(postgres_url, key_file=other / "x.sqlite.key")
    with pytest.raises(StateError, match=r"cannot reach the state database postgresql://ldp@127\.0\.0\.1:1/nothing:"):
        Ledger("postgresql://ldp:secret@127.0.0.1:1/nothing", key_file=tmp_path / "b.key")
    with pytest.raises(StateError) as refused:
        Ledger("postgresql://ldp:secret@127.0.0.1:1/nothing", key_file=tmp_path / "b.key")
    assert "secret" not in str(refused.value)
    assert not (tmp_path / "b.key").exists()  # a failed first open leaves no key behind


def test_near_copies_are_found_in_the_database(postgres_url: str, tmp_path: Path) -> None:
    x = torch.rand((3, 3, 32, 32), generator=torch.Generator().manual_seed(2))
    with Ledger(postgres_url, key_file=tmp_path / "k") as led:
        led.release(make_mechanism(1.0), x, scope="A", sources=["a", "b", "c"])
        copies = led.private_copies(torch.cat([x[:1] * 0.98, torch.rand(1, 3, 32, 32)]), sources=["d", "e"])
    assert list(copies) == [0] and "near copy" in copies[0]


def test_eight_processes_racing_one_cap_never_pass_it_nor_noise_twice(postgres_url: str, tmp_path: Path) -> None:
    key = tmp_path / "ledger.key"  # every process opens the new ledger at once, with the same key file
    outs = [tmp_path / f"child{i}.jsonl" for i in range(8)]
    children = [Child(race.main, postgres_url, str(key), i, str(out)) for i, out in enumerate(outs)]
    try:
        for stage, line in (("open", "loaded"), ("go", "ready")):
            for c in children:
                c.expect(line)
            for out in outs:
                Path(f"{out}.{stage}").touch()
        assert [c.wait(timeout=240) for c in children] == [0] * 8
    finally:  # a child that failed leaves the others waiting for a file that never comes: stop them all
        for c in children:
            c.kill()
    values: dict[tuple[int, str], set[str]] = defaultdict(set)
    refused = 0
    for out in outs:
        for line in out.read_text().splitlines():
            row = json.loads(line)
            if "refused" in row:
                refused += row["refused"]
            else:
                values[(row["record"], row["teacher"])].add(row["values"])
    assert all(len(v) == 1 for v in values.values()), "one image noised twice for one teacher"
    assert refused > 0  # the cap did bind
    n = race.STRIDE * (race.BATCHES - 1) + race.SIZE
    everything = race.records(0, n)
    with Ledger(postgres_url, key_file=key) as led:
        assert led.verify() == []
        spent = led.spent(everything, sources=race.sources(everything)).epsilon
        s = led.summary()
    assert float(spent.max()) <= race.CAP and s["records_over_cap"] == 0
    per_record = defaultdict(int)
    for record, _teacher in values:
        per_record[record] += 1
    # every charge was returned to a process, every returned release was charged once
    assert spent.tolist() == [race.CHARGE * per_record[j] for j in range(n)]
    assert s["releases"] == len(values)


def _prefix(led: Ledger, scope: str) -> int:
    mech = child.mechanisms()[scope]
    charge = led.would_charge(mech, child.records(0, 200), scope=scope)
    m = int(charge.to(torch.int8).argmax()) if charge.any() else 200
    assert charge[m:].all(), "stored records beyond a gap: a release was not atomic"
    return m


@pytest.mark.parametrize("stage, scope, expected", [("sampled", "A", (16, 16)), ("committed", "A", (20, 16)),
                                                    ("committed", "B", (20, 20))])
def test_sigkill_at_a_stage_loses_and_doubles_nothing(
    postgres_url: str, tmp_path: Path, stage: str, scope: str, expected: tuple[int, int]
) -> None:
    key = tmp_path / "ledger.key"
    killed = Child(child.run_quietly, postgres_url, stage, 3, scope, str(key))
    assert killed.wait(timeout=120) == -signal.SIGKILL
    eps = {"A": child.EPS_A, "B": child.EPS_B}
    with Ledger(postgres_url, key_file=key) as led:
        assert led.verify() == []
        m_a, m_b = _prefix(led, "A"), _prefix(led, "B")
        assert (m_a, m_b) == expected
        before = led.spent(child.records(0, 40)).epsilon
        assert before.tolist() == [eps["A"] * (j < m_a) + eps["B"] * (j < m_b) for j in range(40)]
        start = time.monotonic()
        for scope_name in ("A", "B"):  # the re-run: what was committed is reused, nothing charged twice
            led.release(child.mechanisms()[scope_name], child.records(0, min(m_a, m_b)), scope=scope_name)
        assert torch.equal(led.spent(child.records(0, 40)).epsilon, before)
        assert time.monotonic() - start < 60
