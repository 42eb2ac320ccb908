"""A cap lowered while a run is under way: ``budget --set-cap`` on another process or host binds every
later charge of a run that opened the ledger before it, in the same transaction as the charge, with one line
saying so; on SQLite and PostgreSQL. (The cluster's workers: tests/cluster/test_cluster.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ldpclient.privacy import laplace
from ldpclient.privacy.ledger import BudgetExceeded, Ledger


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    if request.param == "sqlite":
        return str(tmp_path / "ledger.sqlite"), tmp_path / "ledger.sqlite.key"
    return request.getfixturevalue("postgres_url"), tmp_path / "ledger.key"


def test_a_cap_lowered_by_another_process_binds_the_next_charge_of_a_run_under_way(where: tuple[str, Path]) -> None:
    location, key = where
    images = torch.rand(60, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    mech = laplace(100.0, per="record")
    with Ledger(location, key_file=key, cap_epsilon=200.0, cap_origin="--privacy-cap") as run:
        run.release(mech, images[:30], scope="t")  # charged under the cap the run began with
        with Ledger(location, key_file=key) as other:  # budget --set-cap 50, elsewhere
            other.set_caps(50.0, origin="budget --set-cap")
        with pytest.raises(BudgetExceeded) as info:
            run.release(mech, images[30:], scope="t")
        message = str(info.value)
        assert "\n" not in message and "epsilon cap 50" in message and "lowered on this state" in message
        assert run.cap_epsilon == 50.0
        assert run.release(mech, images[:30], scope="t").reused.all()  # what was released stays readable, free
        assert run.spent(images[30:]).epsilon.tolist() == [0.0] * 30  # nothing charged past the lowered cap
    with Ledger(location, key_file=key) as after:
        assert after.cap_epsilon == 50.0
        assert [h["origin"] for h in after.cap_history()] == ["--privacy-cap", "budget --set-cap"]
