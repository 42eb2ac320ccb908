"""Analytic Gaussian calibration (Balle & Wang 2018) against an independent SciPy solution."""

import math

import pytest
from scipy.optimize import brentq
from scipy.special import log_ndtr
from scipy.stats import norm

from ldpclient.privacy.analytic_gaussian import (
    calibrate_sigma,
    classical_sigma,
    delta_for_epsilon,
    epsilon_for_sigma,
    log_phi,
)


def _profile(eps: float, sigma: float, sens: float) -> float:
    """Theorem 8 of Balle & Wang, written independently with scipy.stats.norm."""
    return norm.cdf(sens / (2 * sigma) - eps * sigma / sens) - math.exp(eps) * norm.cdf(
        -sens / (2 * sigma) - eps * sigma / sens
    )


@pytest.mark.parametrize(
    "eps,delta,sens",
    [(1.0, 1e-5, 1.0), (0.1, 1e-5, 1.0), (10.0, 1e-5, 1.0), (1.0, 1e-10, 1.0), (0.5, 0.1, 2.0), (5.0, 1e-6, 28.0)],
)
def test_calibrate_sigma_matches_independent_root_of_the_privacy_profile(eps, delta, sens):
    sigma = calibrate_sigma(eps, delta, sens)
    ref = brentq(lambda s: _profile(eps, s, sens) - delta, 1e-4 * sens, 1e4 * sens, xtol=1e-15, rtol=1e-14)
    assert sigma == pytest.approx(ref, rel=1e-9)
    # privacy profile identity: delta(eps; sigma) == delta, and sigma is on the safe side
    assert _profile(eps, sigma, sens) == pytest.approx(delta, rel=1e-6)
    assert delta_for_epsilon(eps, sigma, sens) <= delta * (1 + 1e-9)


def test_known_values():
    # Balle & Wang's headline example: eps=1, delta=1e-5 needs sigma ~3.73 (classical formula: 4.84).
    assert calibrate_sigma(1.0, 1e-5) == pytest.approx(3.7306316, rel=1e-6)
    assert classical_sigma(1.0, 1e-5) == pytest.approx(4.8448053, rel=1e-6)
    # sigma = Delta is 1-GDP: delta(0) = TV distance = 2 Phi(1/2) - 1
    assert delta_for_epsilon(0.0, 1.0, 1.0) == pytest.approx(2 * norm.cdf(0.5) - 1, rel=1e-12)
    # analytic beats classical for eps < 1 and stays valid for eps > 1
    for eps in (0.05, 0.5, 0.99):
        assert calibrate_sigma(eps, 1e-5) < classical_sigma(eps, 1e-5)


@pytest.mark.parametrize("sigma,delta,sens", [(3.7306316, 1e-5, 1.0), (1.0, 1e-5, 28.0), (0.2, 1e-3, 1.0)])
def test_epsilon_for_sigma_is_the_inverse(sigma, delta, sens):
    eps = epsilon_for_sigma(sigma, delta, sens)
    assert eps > 0
    assert _profile(eps, sigma, sens) == pytest.approx(delta, rel=1e-6)
    assert calibrate_sigma(eps, delta, sens) == pytest.approx(sigma, rel=1e-9)


def test_epsilon_for_sigma_zero_when_delta_covers_everything():
    tv = delta_for_epsilon(0.0, 10.0, 1.0)
    assert epsilon_for_sigma(10.0, min(0.99, tv * 1.01), 1.0) == 0.0


def test_log_phi_deep_tail_matches_scipy():
    for x in (-3.0, -10.0, -29.9, -30.1, -45.0, -200.0, 0.0, 4.0, 6.0, 9.0):
        assert log_phi(x) == pytest.approx(float(log_ndtr(x)), rel=1e-11, abs=1e-15)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: calibrate_sigma(0.0, 1e-5), "epsilon"),
        (lambda: calibrate_sigma(float("nan"), 1e-5), "epsilon"),
        (lambda: calibrate_sigma(1.0, 0.0), "delta"),
        (lambda: calibrate_sigma(1.0, 1.0), "delta"),
        (lambda: calibrate_sigma(1.0, 1e-5, -1.0), "l2_sensitivity"),
        (lambda: epsilon_for_sigma(0.0, 1e-5), "sigma"),
        (lambda: delta_for_epsilon(-1.0, 1.0), "epsilon"),
    ],
)
def test_bad_parameters_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()
