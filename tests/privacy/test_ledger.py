"""Privacy ledger: persistence, free reuse, cap enforcement before sampling, HMAC keying, scopes."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import sqlite3
import stat
from pathlib import Path

import pytest
import torch

from ldpclient.privacy.ledger import (
    BudgetExceeded,
    Ledger,
    LedgerError,
    default_ledger_path,
    default_state_dir,
)
from support.ledger_support import Spy, images, make_delta_mechanism, make_mechanism


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ledger.sqlite"


def test_fresh_release_is_charged_and_persists_across_reopen(db: Path) -> None:
    x = images(5, seed=1)
    mech = make_mechanism(2.0)
    g = mech.guarantee(x.shape[1:])
    with Ledger(db) as led:
        r1 = led.release(mech, x)
        assert r1.guarantee == g
        assert not r1.reused.any()
        assert torch.equal(led.spent(x).epsilon, torch.full((5,), g.epsilon_record, dtype=torch.float64))
    with Ledger(db) as led:  # reopen: same key file, same records recognised
        assert torch.allclose(led.spent(x).epsilon, torch.full((5,), 2.0, dtype=torch.float64))
        r2 = led.release(make_mechanism(2.0), x)  # a new but identically configured mechanism
        assert r2.reused.all()
        assert torch.equal(r2.values, r1.values)
        assert torch.allclose(led.spent(x).epsilon, torch.full((5,), 2.0, dtype=torch.float64))
        assert led.verify() == []


def test_reuse_is_free_and_does_not_sample(db: Path) -> None:
    x = images(6, seed=2)
    spy = Spy(make_mechanism(1.0))
    with Ledger(db, cap_epsilon=1.0) as led:  # cap allows exactly one release per record
        first = led.release(spy, x[:4])
        assert spy.calls == 1 and spy.records == 4
        # 4 stored + 2 new, shuffled: only the 2 new ones are sampled and charged
        order = torch.tensor([5, 0, 3, 4, 1, 2])
        second = led.release(spy, x[order])
        assert spy.calls == 2 and spy.records == 6
        assert second.reused.tolist() == [False, True, True, False, True, True]
        for pos, i in enumerate(order.tolist()):
            if i < 4:
                assert torch.equal(second.values[pos], first.values[i])
        third = led.release(spy, x)  # everything stored now: no sampling at all, even at the cap
        assert spy.calls == 2
        assert third.reused.all()
        assert torch.allclose(led.spent(x).epsilon, torch.ones(6, dtype=torch.float64))


def test_duplicates_within_a_batch_are_noised_and_charged_once(db: Path) -> None:
    a = images(2, seed=3)
    x = torch.stack([a[0], a[1], a[0], a[0]])
    spy = Spy(make_mechanism(1.5))
    with Ledger(db) as led:
        r = led.release(spy, x)
        assert spy.records == 2
        assert r.reused.tolist() == [False, False, True, True]
        v = r.values
        assert torch.equal(v[0], v[2]) and torch.equal(v[0], v[3])
        assert led.spent(a).epsilon.tolist() == pytest.approx([1.5, 1.5])
        assert led.summary()["releases"] == 2


def test_cap_refuses_before_sampling_and_charges_nothing(db: Path) -> None:
    x = images(10, seed=4)
    spy = Spy(make_mechanism(1.0))
    other = Spy(make_mechanism(0.75))
    with Ledger(db, cap_epsilon=2.0) as led:
        led.release(spy, x[:3])            # records 0-2 spent 1.0
        led.release(other, x[:3])          # records 0-2 spent 1.75
        led.release(other, x[3:5])         # records 3-4 spent 0.75
        before = led.spent(x).epsilon
        calls = (spy.calls, other.calls)
        mech_b = Spy(make_mechanism(0.5))
        with pytest.raises(BudgetExceeded) as info:
            led.release(mech_b, x)           # 0-2 would reach 2.25 > 2.0
        assert mech_b.calls == 0 and (spy.calls, other.calls) == calls
        assert torch.equal(led.spent(x).epsilon, before)
        assert led.summary()["releases"] == 3 + 3 + 2
        e = info.value
        assert e.n_exceeding == 3 and e.n_fresh == 10
        assert e.remaining_epsilon == pytest.approx((0.25, 0.25))
        msg = str(e)
        assert "3 of 10 records" in msg and "min 0.25" in msg and "max 0.25" in msg
        assert "Nothing was sampled or charged" in msg
        # the rest fit: 3-4 at 0.75 (remaining 1.25) and 5-9 at 0 (remaining 2.0)
        ok = led.release(mech_b, x[3:])
        assert mech_b.calls == 1 and not ok.reused.any()
        assert led.remaining(x[3:]).epsilon.tolist() == pytest.approx([0.75, 0.75] + [1.5] * 5)


def test_cap_message_reports_min_and_max_remaining(db: Path) -> None:
    x = images(4, seed=5)
    with Ledger(db, cap_epsilon=3.0) as led:
        led.release(make_mechanism(1.0), x[:1])   # remaining 2.0
        led.release(make_mechanism(2.5), x[1:2])  # remaining 0.5
        with pytest.raises(BudgetExceeded, match=r"2 of 4 records.*min 0\.5 / max 2") as info:
            led.release(make_mechanism(2.2), x)
        assert info.value.remaining_epsilon == pytest.approx((0.5, 2.0))
        assert "epsilon cap 3" in str(info.value) and "delta" not in str(info.value).split("per record")[-1]
        assert "inf" not in str(info.value)


def test_cap_is_inclusive_despite_float_summation(db: Path) -> None:
    x = images(1, seed=6)
    assert 0.1 + 0.2 > 0.3  # plain float summation would overshoot the cap
    with Ledger(db, cap_epsilon=0.3) as led:
        led.release(make_mechanism(0.1), x, scope="a")
        led.release(make_mechanism(0.2), x, scope="b")  # exactly reaches the cap: allowed
        with pytest.raises(BudgetExceeded):
            led.release(make_mechanism(0.01), x, scope="c")
        assert led.remaining(x).epsilon.item() == pytest.approx(0.0, abs=1e-12)
        assert led.summary()["records_at_cap"] == 1


def test_delta_cap(db: Path) -> None:
    x = images(3, seed=7)
    mech = make_delta_mechanism(1.0, 1e-6)
    with Ledger(db, cap_delta=1.5e-6) as led:
        led.release(mech, x, scope="a")
        with pytest.raises(BudgetExceeded, match="delta cap 1.5e-06") as info:
            led.release(mech, x, scope="b")
        assert info.value.remaining_delta == pytest.approx((0.5e-6, 0.5e-6))
        assert led.spent(x).delta.tolist() == pytest.approx([1e-6] * 3)


def test_scopes_compose_sending_to_two_teachers_costs_both(db: Path) -> None:
    x = images(3, seed=8)
    a, b = make_mechanism(1.0), make_mechanism(0.5)
    with Ledger(db, cap_epsilon=1.6) as led:
        ra = led.release(a, x, scope="teacherA")
        rb = led.release(b, x, scope="teacherB")
        assert not ra.reused.any() and not rb.reused.any()
        assert led.spent(x).epsilon.tolist() == pytest.approx([1.5] * 3)
        # same mechanism and scope again: stored, free
        assert led.release(a, x, scope="teacherA").reused.all()
        # same mechanism to a new scope is a fresh release: refused by the cap (1.5 + 1.0 > 1.6)
        with pytest.raises(BudgetExceeded):
            led.release(a, x, scope="teacherC")
        s = led.summary()
        scopes = {(m["scope"], m["releases"], m["epsilon_per_release"]) for m in s["by_mechanism"]}
        assert scopes == {("teacherA", 3, 1.0), ("teacherB", 3, 0.5)}
        assert s["records"] == 3 and s["releases"] == 6
        assert s["epsilon"]["total"] == pytest.approx(4.5)
        assert s["epsilon"]["max"] == pytest.approx(1.5) and s["epsilon"]["mean"] == pytest.approx(1.5)


def test_mechanism_identity_includes_config_and_record_shape(db: Path) -> None:
    x = images(2, seed=9)
    with Ledger(db) as led:
        led.release(make_mechanism(1.0), x)
        assert not led.release(make_mechanism(2.0), x).reused.any()  # different config: fresh
        assert led.spent(x).epsilon.tolist() == pytest.approx([3.0, 3.0])
        y = x.reshape(2, 1, 4, 16)  # same bytes, different shape: a different record
        assert led.spent(y).epsilon.tolist() == [0.0, 0.0]
        assert not led.release(make_mechanism(1.0), y).reused.any()


def test_public_release_is_neither_charged_nor_stored(db: Path) -> None:
    blank = torch.zeros(4, 1, 8, 8)
    spy = Spy(make_mechanism(1.0))
    with Ledger(db, cap_epsilon=0.5) as led:  # the cap would refuse a private release
        r = led.release(spy, blank, public=True)
        assert spy.calls == 1 and r.guarantee.epsilon_record == 0.0 and r.guarantee.public_input
        assert led.spent(blank).epsilon.tolist() == [0.0] * 4
        assert led.summary()["releases"] == 0


def test_failed_sampling_charges_nothing(db: Path) -> None:
    x = images(3, seed=10)

    class Boom(Spy):  # a mechanism that rejects the batch while sampling (e.g. NaN input)
        def release(self, records, *, generator=None, public=False):
            raise ValueError("records contain NaN")

    with Ledger(db) as led:
        with pytest.raises(ValueError, match="NaN"):
            led.release(Boom(make_mechanism(1.0)), x)
        assert led.summary()["releases"] == 0 and led.summary()["records"] == 0
        assert led.verify() == []


def test_hmac_keys(tmp_path: Path) -> None:
    x = images(3, seed=11)
    with Ledger(tmp_path / "a.sqlite") as a, Ledger(tmp_path / "b.sqlite") as b:
        ka, ka2, kb = a.record_keys(x), a.record_keys(x.clone()), b.record_keys(x)
        assert ka == ka2  # same bytes -> same key
        assert all(len(k) == 32 for k in ka) and len(set(ka)) == 3
        assert all(p != q for p, q in zip(ka, kb, strict=True))  # different secret -> different key
        assert a.record_keys(x.double()) != ka  # dtype is part of the canonical bytes
        nz = x.clone()
        nz[0, 0, 0, 0] = -0.0
        z = x.clone()
        z[0, 0, 0, 0] = 0.0
        assert a.record_keys(nz) == a.record_keys(z)  # -0.0 and +0.0 are the same record
        # non-contiguous view of the same values -> same key
        t = x.transpose(2, 3).contiguous().transpose(2, 3)
        assert not t.is_contiguous() and a.record_keys(t) == ka


def test_database_holds_no_raw_bytes_or_plain_hashes(db: Path) -> None:
    x = images(4, seed=12, shape=(1, 16, 16))
    x8 = (x * 255).round().to(torch.uint8)
    with Ledger(db) as led:
        led.release(make_mechanism(1.0), x)
        led.release(make_mechanism(1.0), x8.float() / 255, scope="q")
        keys = led.record_keys(x)
    files = [p for p in db.parent.iterdir() if p.name.startswith(db.name) and not p.name.endswith(".key")]
    blob = b"".join(p.read_bytes() for p in files)
    assert blob  # something was written
    for i in range(4):
        raw = x[i].contiguous().numpy().tobytes()
        assert raw[:64] not in blob and raw[-64:] not in blob
        assert x8[i].numpy().tobytes()[:64] not in blob
        assert hashlib.sha256(raw).digest() not in blob
        assert hashlib.sha256(raw).hexdigest().encode() not in blob
        assert keys[i] in blob  # records are stored under their HMAC


def test_key_file_mode_and_errors(db: Path) -> None:
    with Ledger(db) as led:
        led.release(make_mechanism(1.0), images(1, seed=13))
    key = Path(str(db) + ".key")
    assert key.stat().st_size == 32
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    secret = key.read_bytes()
    # a wrong key for this ledger is refused (records would not be recognised)
    key.write_bytes(os.urandom(32))
    with pytest.raises(LedgerError, match="does not belong"):
        Ledger(db)
    key.write_bytes(b"short")
    with pytest.raises(LedgerError, match="corrupt"):
        Ledger(db)
    key.unlink()
    with pytest.raises(LedgerError, match="missing"):
        Ledger(db)
    key.write_bytes(secret)
    key.chmod(0o600)
    if os.geteuid() != 0:  # root can read anything
        key.chmod(0)
        with pytest.raises(LedgerError, match="cannot read ledger key file"):
            Ledger(db)
        key.chmod(0o600)
    with Ledger(db) as led:
        assert led.spent(images(1, seed=13)).epsilon.item() == pytest.approx(1.0)


def test_wal_and_synchronous_full(db: Path) -> None:
    with Ledger(db) as led:
        assert led._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert led._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_default_state_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LDPCLIENT_STATE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_state_dir() == tmp_path / "explicit"
    monkeypatch.delenv("LDPCLIENT_STATE_DIR")
    assert default_state_dir() == tmp_path / "xdg" / "ldpclient"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_state_dir() == tmp_path / "home" / ".local" / "state" / "ldpclient"
    monkeypatch.setenv("LDPCLIENT_STATE_DIR", str(tmp_path / "st"))
    with Ledger() as led:
        assert led.path == default_ledger_path() == tmp_path / "st" / "ledger.sqlite"
        assert led.path.exists() and Path(str(led.path) + ".key").exists()


def test_bad_input(db: Path) -> None:
    with pytest.raises(ValueError, match="cap_epsilon"):
        Ledger(db, cap_epsilon=-1)
    with pytest.raises(ValueError, match="cap_delta"):
        Ledger(db, cap_delta=2.0)
    with pytest.raises(ValueError, match="file path"):
        Ledger(":memory:")
    with Ledger(db) as led:
        with pytest.raises(TypeError, match="torch.Tensor"):
            led.release(make_mechanism(1.0), [[0.5]])
        with pytest.raises(ValueError, match="non-empty"):
            led.release(make_mechanism(1.0), torch.zeros(0, 1, 8, 8))
        with pytest.raises(ValueError, match="scope"):
            led.release(make_mechanism(1.0), images(1, seed=0), scope="")
        with pytest.raises(TypeError, match="Mechanism"):
            led.release(object(), images(1, seed=0))  # type: ignore[arg-type]
    with pytest.raises(LedgerError, match="closed"):
        led.spent(images(1, seed=0))


def test_summary_has_no_keys_or_pixels(db: Path) -> None:
    x = images(2, seed=14)
    with Ledger(db, cap_epsilon=5.0) as led:
        led.release(make_mechanism(1.0), x)
        s = led.summary()
        keys = led.record_keys(x)
    text = repr(s)
    assert all(k.hex() not in text for k in keys)
    assert s["records"] == 2 and s["releases"] == 2 and s["cap_epsilon"] == 5.0
    assert s["by_mechanism"][0]["record_shape"] == [1, 8, 8]
    assert s["epsilon"]["mean"] == pytest.approx(1.0) and s["records_at_cap"] == 0


def test_two_processes_style_concurrent_handles_do_not_double_charge(db: Path) -> None:
    x = images(3, seed=15)
    mech = make_mechanism(1.0)
    with Ledger(db) as a, Ledger(db) as b:
        ra = a.release(mech, x)
        rb = b.release(mech, x)  # the second handle sees the first one's committed releases
        assert rb.reused.all() and torch.equal(ra.values, rb.values)
        assert math.isclose(float(b.spent(x).epsilon.sum()), 3.0)


def test_verify_detects_tampering(db: Path) -> None:
    x = images(2, seed=16)
    with Ledger(db) as led:
        led.release(make_mechanism(1.0), x)
        assert led.verify() == []
    con = sqlite3.connect(db)
    con.execute("UPDATE spend SET epsilon = epsilon - 0.5 WHERE rowid = 1")
    con.commit()
    con.close()
    with Ledger(db) as led:
        assert any("spend differs" in p for p in led.verify())


def test_mechanism_understating_its_cost_is_refused(db: Path) -> None:
    x = images(2, seed=17)

    class Liar(Spy):  # guarantee() says 1.0 but the release it makes claims 3.0
        def guarantee(self, record_shape):
            return make_mechanism(1.0).guarantee(record_shape)

        def release(self, records, *, generator=None, public=False):
            self.calls += 1
            return make_mechanism(3.0).release(records, generator=generator)

    with Ledger(db) as led:
        with pytest.raises(LedgerError, match="larger per-record cost"):
            led.release(Liar(make_mechanism(1.0)), x)
        assert led.summary()["records"] == 0


def test_missing_key_detected_before_first_checkpoint(db: Path) -> None:
    led = Ledger(db)  # kept open: the schema may sit in the WAL file only
    led.release(make_mechanism(1.0), images(1, seed=18))
    Path(str(db) + ".key").unlink()
    with pytest.raises(LedgerError, match="missing"):
        Ledger(db)
    led.close()


@pytest.mark.parametrize(
    "name, kwargs, records",
    [
        ("laplace", {"epsilon": 0.5, "per": "element", "reduction": 4}, lambda: images(3, seed=19, shape=(1, 8, 8))),
        ("tldp-laplace", {"epsilon": 0.5, "per": "element"}, lambda: images(3, seed=20, shape=(1, 4, 4))),
        ("discrete-tldp", {"epsilon": 8.0, "per": "element", "p": 0.1, "reduction": 2},
         lambda: (images(3, seed=21, shape=(1, 8, 8)) * 255).round().to(torch.uint8)),
    ],
)
def test_stored_releases_round_trip_for_real_mechanisms(db: Path, name: str, kwargs: dict, records) -> None:
    from ldpclient.privacy import make_mechanism as by_name

    x = records()
    mech = by_name(name, **kwargs)
    with Ledger(db) as led:
        r1 = led.release(mech, x)
    with Ledger(db) as led:
        r2 = led.release(by_name(name, **kwargs), x)
    assert r2.reused.all() and not r1.reused.any()
    assert r2.values.dtype == r1.values.dtype and torch.equal(r2.values, r1.values)
    assert r2.released_shape == r1.released_shape and r2.record_shape == r1.record_shape
    assert r2.reduction == r1.reduction == kwargs.get("reduction", 1)
    assert torch.equal(r2.clipped_elements, r1.clipped_elements)
    assert r2.guarantee == r1.guarantee == mech.guarantee(x.shape[1:])
    assert r2.upsampled().values.shape == x.shape


def test_changed_accounting_for_the_same_config_is_not_reused(db: Path) -> None:
    x = images(2, seed=22)
    base = make_mechanism(1.0)

    class Recalibrated(Spy):  # same config(), but its guarantee now says 1.2 per record
        def guarantee(self, record_shape):
            g = self.inner.guarantee(record_shape)
            return dataclasses.replace(g, epsilon_record=1.2)

        def release(self, records, *, generator=None, public=False):
            self.calls += 1
            r = self.inner.release(records, generator=generator)
            return r  # its guarantee (1.0) is below the declared 1.2: allowed

    with Ledger(db) as led:
        led.release(base, x)
        spy = Recalibrated(make_mechanism(1.0))
        r = led.release(spy, x)
        assert spy.calls == 1 and not r.reused.any()
        assert led.spent(x).epsilon.tolist() == pytest.approx([2.2, 2.2])
        assert led.verify() == []


def test_an_empty_or_missing_ledger_beside_its_key_is_refused_not_reset(tmp_path: Path) -> None:
    """The one failure that would quietly break the privacy promise: accounting silently starting over."""
    path = tmp_path / "ledger.sqlite"
    from ldpclient.privacy import laplace

    mech = laplace(1.0, per="element")
    records = torch.rand(3, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    with Ledger(path) as led:
        led.release(mech, records, generator=torch.Generator().manual_seed(1))
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    path.write_bytes(b"")  # truncated to zero bytes
    with pytest.raises(LedgerError, match="missing or empty.*key file"):
        Ledger(path)
    path.unlink()
    with pytest.raises(LedgerError, match="missing or empty"):
        Ledger(path)
    assert not path.exists()  # nothing was re-created
    with sqlite3.connect(path) as db:  # a foreign SQLite file in its place
        db.execute("CREATE TABLE other (x)")
    with pytest.raises(LedgerError, match="not an ldpclient ledger"):
        Ledger(path)
