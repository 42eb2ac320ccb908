"""`ldpclient label --epsilon 0`: the data-free mode, against the real mock teacher on 127.0.0.1.

What it promises: nothing private leaves the device. Checked on the wire: two different private
folders give byte-identical queries in the teacher's query log, where a private run's differ.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import mock_server
from ldpclient.cli.commands import app
from ldpclient.io.querylog import read_query_log
from ldpclient.privacy import defaults as privacy_defaults
from support.image_folders import random_png_folder


def _private(root: Path, pixel_seed: int) -> Path:
    return random_png_folder(root / f"private{pixel_seed}", seed=pixel_seed)


def _label(folder: Path, url: str, work: Path, *extra: str):
    args = [
        "label", str(folder), "--teacher", url, "--state-dir", str(work / "state"),
        "--output", str(work / "labels.csv"), "--reduce", "2", "--queries", "24", "--batch-size", "8",
        "--epochs", "1", "--seed", "3", "--max-retry-time", "0", *extra,
    ]
    return CliRunner().invoke(app, args)


def _sent(log: Path) -> np.ndarray:
    """Every query the teacher received, in arrival order: float32 ``(Q, C, H, W)``."""
    return np.concatenate([arr for _, arr in read_query_log(str(log))])


@pytest.mark.parametrize("epsilon", ["0", "4"])
def test_what_the_teacher_sees_at_epsilon_0_does_not_depend_on_the_private_images(tmp_path: Path, epsilon: str) -> None:
    sent = []
    for pixel_seed in (1, 2):
        log = tmp_path / f"log{pixel_seed}.jsonl"
        with mock_server.serve(model="trivial", image_size=8, query_log=str(log), max_batch_size=64) as srv:
            result = _label(_private(tmp_path, pixel_seed), srv.model_url, tmp_path / f"run{pixel_seed}",
                            "--epsilon", epsilon, "--epsilon-unit", "element", "--json")
        assert result.exit_code == 0, result.output
        sent.append(_sent(log))
        report = json.loads(result.stdout)
    assert len(sent[0]) == len(sent[1]) == 24
    if epsilon == "0":
        assert sent[0].tobytes() == sent[1].tobytes()  # the same bytes whatever the private images hold
        g = report["guarantee"]
        assert g["public_input"] is True
        assert g["per_record"]["epsilon"] == 0.0 and g["per_element"]["epsilon"] == 0.0
        assert report["ledger"]["fresh"] == 0 and report["ledger"]["max_spent_epsilon"] == 0.0
        assert "no private information left the device" in report["guarantee_note"]
        # the blank queries are noised at the free level, whatever --epsilon-unit says
        assert report["mechanism"]["config"]["per"] == "record"
        assert report["counts"]["labelled"] == 12
    else:
        # a private run's releases carry its images: the check above can fail
        assert sent[0].tobytes() != sent[1].tobytes()


def test_epsilon_0_summary_and_budget(tmp_path: Path) -> None:
    folder = _private(tmp_path, 1)
    with mock_server.serve(model="trivial", image_size=8, max_batch_size=64) as srv:
        result = _label(folder, srv.model_url, tmp_path, "--epsilon", "0")
        assert result.exit_code == 0, result.output
        assert "epsilon 0 per record and per element: no private information left the device" in result.stderr
        assert "--check FILE with a hundred hand-labelled images measures it" in result.stderr
        budget = CliRunner().invoke(app, ["budget", "--state-dir", str(tmp_path / "state"), "--json"])
        assert budget.exit_code == 0, budget.output
        assert json.loads(budget.stdout)["records"] == 0  # nothing was charged: nothing private was released


def test_private_run_summary_points_to_the_baseline_and_the_curve(tmp_path: Path) -> None:
    folder = _private(tmp_path, 1)
    with mock_server.serve(model="trivial", image_size=8, max_batch_size=64) as srv:
        result = _label(folder, srv.model_url, tmp_path, "--epsilon", "50", "--baseline", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert "--baseline writes the data-free labels" in report["guarantee_note"]
    noise = report["baseline"]["blank_query_noise"]  # the free level, not the private run's 50
    assert noise["per"] == "record" and noise["epsilon"] == pytest.approx(privacy_defaults.free_query_epsilon())
    assert report["guarantee"]["per_record"]["epsilon"] == pytest.approx(50.0)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--epsilon", "0", "--baseline"], "already data-free"),
        (["--epsilon", "0", "--augment", "none"], "--epsilon 0 needs a student"),
        (["--epsilon", "-1"], "--epsilon must be a finite number > 0 (or 0: data-free"),
    ],
)
def test_epsilon_0_option_errors_are_one_line(tmp_path: Path, extra: list[str], needle: str) -> None:
    result = _label(_private(tmp_path, 1), "http://127.0.0.1:9/v2/models/none", tmp_path, *extra)
    assert result.exit_code == 2
    assert needle in result.output and len(result.output.strip().splitlines()) == 1


def test_noise_refuses_epsilon_0(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["noise", str(_private(tmp_path, 1)), "--out", str(tmp_path / "n"),
                                      "--epsilon", "0", "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 2
    assert "--epsilon must be a finite number > 0, got 0" in result.output
