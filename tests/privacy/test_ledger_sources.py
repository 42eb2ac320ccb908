"""The ledger sums a record's spend per source, whatever tensor a teacher's shape, range or dtype made of it:
caller-given source ids, the canonical fallback, and the one-time migration of schema-1 ledgers."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import torch

from ldpclient.io.records import TensorRecords
from ldpclient.privacy import Domain, laplace
from ldpclient.privacy.ledger import BudgetExceeded, Ledger
from support.ledger_support import Spy, images, make_mechanism


def eight_bit(n: int, seed: int, shape: tuple[int, ...] = (1, 8, 8)) -> torch.Tensor:
    """Images as decoded from 8-bit files: values k/255."""
    return (images(n, seed, shape) * 255).round() / 255


def test_one_image_in_three_dtypes_is_one_source_and_the_cap_adds_them_up(tmp_path: Path) -> None:
    x = eight_bit(4, seed=1)
    with Ledger(tmp_path / "l.sqlite", cap_epsilon=2.5) as led:
        led.release(make_mechanism(1.0), x.to(torch.float32))
        led.release(make_mechanism(1.0), x.to(torch.float64))
        assert led.spent(x.to(torch.float16)).epsilon.tolist() == [2.0] * 4
        spy = Spy(make_mechanism(1.0))
        with pytest.raises(BudgetExceeded):
            led.release(spy, x.to(torch.float16))  # 3 > 2.5: refused before sampling
        assert spy.calls == 0 and led.summary()["records"] == 4 and led.verify() == []


def test_the_canonical_source_follows_the_declared_range_not_the_units(tmp_path: Path) -> None:
    x = eight_bit(3, seed=2)
    with Ledger(tmp_path / "l.sqlite", cap_epsilon=1.5) as led:
        led.release(laplace(1.0, per="record"), x)
        pixels = laplace(1.0, per="record", domain=Domain.uint8())
        with pytest.raises(BudgetExceeded):  # the same images as 0..255 values
            led.release(pixels, x * 255)
        wider = laplace(1.0, per="record", domain=Domain(0.0, 1.0001))
        with pytest.raises(BudgetExceeded):  # a teacher's slightly wider published range
            led.release(wider, x * 1.0001)


def test_source_ids_sum_releases_across_shapes_and_mechanisms(tmp_path: Path) -> None:
    big, small = eight_bit(3, seed=3, shape=(1, 8, 8)), eight_bit(3, seed=3, shape=(1, 4, 4))
    ids = [b"file-a", b"file-b", "file-c"]
    with Ledger(tmp_path / "l.sqlite", cap_epsilon=2.0) as led:
        led.release(make_mechanism(1.0), big, sources=ids, scope="teacher-1")
        led.release(make_mechanism(1.0), small, sources=ids, scope="teacher-2")
        assert led.spent(small, sources=ids).epsilon.tolist() == [2.0] * 3
        with pytest.raises(BudgetExceeded, match="3 of 3 records"):
            led.release(laplace(0.5, per="record"), eight_bit(3, seed=3, shape=(1, 6, 6)), sources=ids)
        again = led.release(make_mechanism(1.0), big, sources=ids, scope="teacher-1")
        assert again.reused.all()  # the stored release: free
        s = led.summary()
        assert s["records"] == 3 and s["releases"] == 6 and s["epsilon"]["max"] == pytest.approx(2.0)
        # a RecordSource carries its ids to spent()
        assert led.spent(TensorRecords(small, ids=ids)).epsilon.tolist() == [2.0] * 3


def test_two_tensors_of_one_source_in_one_batch_are_charged_together(tmp_path: Path) -> None:
    x = eight_bit(2, seed=4)
    with Ledger(tmp_path / "l.sqlite", cap_epsilon=1.5) as led:
        with pytest.raises(BudgetExceeded):
            led.release(make_mechanism(1.0), x, sources=[b"same", b"same"])
        led.release(make_mechanism(1.0), x[:1], sources=[b"same"])
        assert led.verify() == []


def _write_schema_1(path: Path, led_key: Path) -> tuple[torch.Tensor, list[bytes]]:
    """A schema-1 ledger as ldpclient 0.1 wrote it: spend per tensor key, releases without a source."""
    x = eight_bit(3, seed=5)
    with Ledger(path) as led:  # makes the key file and the tables; then rewritten into the old layout
        keys = led.record_keys(x)
        mech_rel = led.release(make_mechanism(1.0), x, scope="old")
    con = sqlite3.connect(path)
    with con:
        con.execute("DROP TABLE spend")
        con.execute("DROP TABLE legacy_spend")
        con.execute("ALTER TABLE releases RENAME TO r2")
        con.execute(
            "CREATE TABLE spend (record_key BLOB PRIMARY KEY, epsilon REAL NOT NULL, delta REAL NOT NULL,"
            " releases INTEGER NOT NULL)"
        )
        con.execute(
            "CREATE TABLE releases (id INTEGER PRIMARY KEY, record_key BLOB NOT NULL,"
            " mechanism_id INTEGER NOT NULL REFERENCES mechanisms(id), scope TEXT NOT NULL,"
            " epsilon REAL NOT NULL, delta REAL NOT NULL, dtype TEXT NOT NULL, shape TEXT NOT NULL,"
            " data BLOB NOT NULL, clipped INTEGER NOT NULL, created REAL NOT NULL,"
            " UNIQUE (record_key, mechanism_id, scope))"
        )
        con.execute(
            "INSERT INTO releases SELECT id, record_key, mechanism_id, scope, epsilon, delta, dtype, shape, data,"
            " clipped, created FROM r2"
        )
        con.execute("DROP TABLE r2")
        con.executemany("INSERT INTO spend VALUES (?, 1.0, 0.0, 1)", [(k,) for k in keys])
        con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    assert mech_rel.guarantee.epsilon_record == 1.0
    return x, keys


def test_a_schema_1_ledger_is_migrated_once_and_its_spend_adopted_by_the_source(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    x, _ = _write_schema_1(path, Path(str(path) + ".key"))
    with Ledger(path, cap_epsilon=2.5) as led:
        s = led.summary()
        assert s["records"] == 3 and s["legacy_records"] == 3 and led.verify() == []
        # before any run sees the files again, the old spend still counts for the same tensor
        assert led.spent(x, sources=[b"a", b"b", b"c"]).epsilon.tolist() == [1.0] * 3
        # a run that sees the tensor with its source reuses the old release and adopts its spend
        again = led.release(make_mechanism(1.0), x, scope="old", sources=[b"a", b"b", b"c"])
        assert again.reused.all()
        s = led.summary()
        assert s["legacy_records"] == 0 and s["records"] == 3 and led.verify() == []
        small = eight_bit(3, seed=5, shape=(1, 4, 4))
        led.release(make_mechanism(1.0), small, scope="new", sources=[b"a", b"b", b"c"])
        with pytest.raises(BudgetExceeded):  # 1 (schema 1) + 1 + 1 > 2.5
            led.release(make_mechanism(1.0), eight_bit(3, seed=5, shape=(1, 2, 2)), sources=[b"a", b"b", b"c"])
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("5",)
    con.close()
