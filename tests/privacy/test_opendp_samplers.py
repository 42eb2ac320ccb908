"""Our exact samplers against OpenDP's: the same law (``benchmarks/bench_opendp_samplers.py`` holds the comparison:
a two-sample chi-square test of homogeneity at significance 1e-6 between our draws, fixed seed, and OpenDP's).

OpenDP's samplers are the vetted ones but 250 to 800 times slower per draw (that benchmark), so ours stay on the
release paths. Here: every law and scale at 50,000 draws each (``make test``), and at 1,000,000 (the slow mark, run
by the benchmark); each size also shows that the comparison rejects a sampler at a wrong scale (10 % off at
50,000 draws, 2 % off at 1,000,000).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("opendp.prelude", reason="OpenDP is not installed (pip install -e '.[dev]')")
pytest.importorskip("scipy.stats")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_opendp_samplers import ALPHA, CASES, compare  # noqa: E402

IDS = [f"{law}-{scale:g}" for law, scale in CASES]


@pytest.mark.parametrize("law, scale", CASES, ids=IDS)
def test_our_sampler_draws_opendps_law(law: str, scale: float) -> None:
    assert compare(law, scale, 50_000)["p_value"] > ALPHA


def test_the_comparison_rejects_a_scale_ten_percent_off() -> None:
    assert compare("laplace", 3.0, 50_000, ours_scale=3.3)["p_value"] < ALPHA


@pytest.mark.slow
@pytest.mark.parametrize("law, scale", CASES, ids=IDS)
def test_our_sampler_draws_opendps_law_in_a_million_draws(law: str, scale: float) -> None:
    assert compare(law, scale, 1_000_000)["p_value"] > ALPHA


@pytest.mark.slow
def test_a_million_draws_reject_a_scale_two_percent_off() -> None:
    assert compare("laplace", 3.0, 1_000_000, ours_scale=3.06)["p_value"] < ALPHA
