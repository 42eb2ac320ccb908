"""Release only what is sent: a query budget smaller than the folder could carry releases (and charges) only the
images its queries are made from; every image is still labelled by the student.

Checked with the real pipeline and a real ledger (file, then through ``ldpclient label`` against the mock
teacher): the images released are exactly those the plan's queries use (decided by the plan, from the count, the
budget and the seed, not from the images); the others are never charged; a budget that uses every image
releases every image, as before; the report and the summary say how many were not released.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ldpclient.privacy.ledger import Ledger
from ldpclient.transfer.augment import QueryPlan
from support.cli_runs import invoke, label_args, mock_teacher, private_folder
from support.transfers import quadrant_records, quadrant_transfer


def test_a_plan_uses_the_records_its_queries_are_made_from() -> None:
    plan = QueryPlan(kind="sup", n=1000, num_queries=50, seed=3, batch_size=16)
    used = plan.private_records_used(chunk=7)  # read in small chunks: the same set
    r = plan.recipes(np.arange(plan.total))
    assert used.tolist() == sorted(set(r["i"].tolist()) | set(r["j"].tolist()))
    assert 50 < len(used) <= 100
    rand = QueryPlan(kind="rand", n=1000, num_queries=30, seed=3, batch_size=16)
    assert len(rand.private_records_used()) <= 30
    every = QueryPlan(kind="sup", n=20, num_queries=190, seed=3, batch_size=16)  # all 190 pairs of 20
    assert len(every.private_records_used()) == 20


def test_only_the_images_a_query_uses_are_released_and_charged(tmp_path: Path) -> None:
    x, _y = quadrant_records(n=120)
    with Ledger(tmp_path / "ledger.sqlite") as led:
        kt = quadrant_transfer(ledger=led, plan=dict(num_queries=40))
        used = kt.records_to_release(x)
        assert used is not None and 40 < len(used) <= 80
        result = kt.run(x)
        spent = led.spent(x).epsilon
    assert result.labels.shape == (120,)  # every image labelled
    assert result.counts["releases_fresh"] == len(used) and result.counts["not_released"] == 120 - len(used)
    charged = torch.nonzero(spent > 0).flatten().tolist()
    assert charged == used.tolist()  # exactly the images the queries are made from
    assert result.sent_sample is not None and set(result.sent_sample.release_indices.tolist()) <= set(used.tolist())
    # the same plan on other images of the same count: the same positions (the plan never looks at the values)
    assert quadrant_transfer(plan=dict(num_queries=40)).records_to_release(torch.rand_like(x)).tolist() == used.tolist()


def test_a_budget_that_uses_every_image_releases_every_image(tmp_path: Path) -> None:
    x, _y = quadrant_records(n=40)
    with Ledger(tmp_path / "ledger.sqlite") as led:
        kt = quadrant_transfer(ledger=led, plan=dict(num_queries=600))
        assert kt.records_to_release(x) is None
        result = kt.run(x)
        assert result.counts["releases_fresh"] == 40 and result.counts["not_released"] == 0
        assert bool((led.spent(x).epsilon > 0).all())


def test_label_says_how_many_images_were_not_released(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        run = invoke([*label_args(folder, srv.model_url, tmp_path, "--json"), "--queries", "3"])
        assert run.exit_code == 0, run.output
        rep = json.loads(run.stdout)
        skipped = rep["counts"]["not_released"]
        assert 12 - 6 <= skipped < 12 and rep["ledger"]["not_released"] == skipped
        assert rep["ledger"]["fresh"] == 12 - skipped and rep["counts"]["labelled"] == 12
        human = invoke([*label_args(folder, srv.model_url, tmp_path), "--queries", "3"])
        assert human.exit_code == 0, human.output
        assert f"{skipped} not released (no query uses them)" in " ".join(human.stderr.split())
    budget = invoke(["budget", "--state-dir", str(tmp_path / "state"), "--json"])
    assert json.loads(budget.stdout)["records"] == 12 - skipped
