"""Secure discrete Gaussian: exact Bernoulli draws, output law (chi-square), tail path, zCDP accounting,
the mechanism's figures, and an empirical (epsilon, delta) check with Clopper-Pearson bounds."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

import ldpclient.privacy.discrete_gaussian as dg
from ldpclient.privacy import Domain, gaussian, tldp_gaussian, zcdp
from ldpclient.privacy.sampling import make_generator


def gen(seed: int) -> torch.Generator:
    return make_generator(seed=seed)


def _chi2(z: np.ndarray, pmf, lo: int, hi: int) -> float:
    support = np.arange(lo, hi + 1)
    probs = np.array([float(pmf(int(k))) for k in support])
    obs = np.array([(z < lo).sum()] + [(z == k).sum() for k in support] + [(z > hi).sum()], dtype=float)
    side = (1.0 - probs.sum()) / 2.0
    exp = np.concatenate([[side], probs, [side]]) * z.size
    keep = exp >= 5
    obs = np.concatenate([obs[keep], [obs[~keep].sum()]]) if (~keep).any() else obs
    exp = np.concatenate([exp[keep], [exp[~keep].sum()]]) if (~keep).any() else exp
    return float(stats.chisquare(obs, exp).pvalue)


# ------------------------------------------------------------------------------------ exact Bernoulli draws


@pytest.mark.parametrize("num,den", [(0, 7), (3, 7), (7, 7), (5, 3), (29, 10)])
def test_bernoulli_exp_matches_exp_minus_gamma(num, den):
    n = 200_000
    hits = int(dg.bernoulli_exp(torch.full((n,), num, dtype=torch.int64), den, gen(num * 31 + den)).sum())
    p = math.exp(-num / den)
    assert hits / n == pytest.approx(p, abs=5 * math.sqrt(p * (1 - p) / n) + 1e-12)


def test_bernoulli_ratio_is_exact_for_any_denominator():
    n = 300_000
    den = 3 * (1 << 60)  # q = 1: three quarters of the 62-bit range are kept, the rest redrawn
    hits = dg.bernoulli_ratio(torch.full((n,), den // 3, dtype=torch.int64), den, gen(3)).double().mean()
    assert float(hits) == pytest.approx(1 / 3, abs=5 * math.sqrt(2 / 9 / n))
    with pytest.raises(ValueError, match="den"):
        dg.bernoulli_ratio(torch.zeros(1, dtype=torch.int64), 0, gen(1))


# ------------------------------------------------------------------------------------ output law


@pytest.mark.parametrize("variance", [1, 10, 400])
def test_table_sampler_matches_the_discrete_gaussian_pmf(variance):
    s = dg.DiscreteGaussianSampler(variance)
    z = s.sample((200_000,), gen(variance)).numpy()
    assert z.dtype == np.int64
    span = int(3 * math.sqrt(variance)) + 1
    assert _chi2(z, s.pmf, -span, span) > 1e-3


def test_reference_cks_sampler_has_the_same_law():
    s = dg.CKSDiscreteGaussianSampler(10)
    z = s.sample((100_000,), gen(7)).numpy()
    assert _chi2(z, s.pmf, -10, 10) > 1e-3


def test_tail_path_is_exact(monkeypatch):
    # A table spanning e**0.5 only: a third of the draws go through the geometric-rejection tail.
    monkeypatch.setattr(dg, "_SPAN", 0.5)
    s = dg.DiscreteGaussianSampler(16)
    assert s.k == 4 and s.tail_mass > 0.3
    z = s.sample((150_000,), gen(5)).numpy()
    assert (np.abs(z) >= s.k).mean() > 0.3
    assert _chi2(z, s.pmf, -14, 14) > 1e-3


def test_rounding_bounds_are_tiny_and_positive():
    for variance in (1, 2, 1000, 1 << 24):
        s = dg.discrete_gaussian_sampler(variance)
        assert 0.0 < s.epsilon_excess(4096) < 1e-8
        assert 0.0 < s.tv_bound() < 1e-12
    with pytest.raises(ValueError, match="variance"):
        dg.DiscreteGaussianSampler((1 << 24) + 1)
    with pytest.raises(ValueError, match="variance"):
        dg.DiscreteGaussianSampler(0)


# ------------------------------------------------------------------------------------ zCDP accounting


def test_zcdp_conversion_is_tighter_than_the_classic_bound_and_round_trips():
    for rho in (0.01, 0.5, 3.0):
        for delta in (1e-5, 1e-9):
            eps = zcdp.epsilon_for(rho, delta)
            assert eps < rho + 2 * math.sqrt(rho * math.log(1 / delta))
            assert zcdp.delta_for(rho, eps) == pytest.approx(delta, rel=1e-6)
            assert zcdp.epsilon_for(zcdp.rho_for(eps, delta), delta) == pytest.approx(eps, rel=1e-9)
    assert zcdp.delta_for(0.5, 0.1) > zcdp.delta_for(0.5, 1.0)  # delta falls as epsilon grows


# ------------------------------------------------------------------------------------ mechanisms


@pytest.mark.parametrize("per", ["element", "record"])
def test_secure_gaussian_meets_its_target_and_reports_the_sampling(per):
    m = gaussian(2.0, 1e-5, per=per)
    g = m.guarantee((1, 7, 7))
    target = g.epsilon_element if per == "element" else g.epsilon_record
    target_delta = g.delta_element if per == "element" else g.delta_record
    assert target <= 2.0 and target == pytest.approx(2.0, rel=1e-3)
    assert target_delta <= 1e-5 and target_delta == pytest.approx(1e-5, rel=1e-3)
    p = g.params
    assert p["secure"] is True and p["sampling"].startswith("secure")
    assert p["rho_record"] == pytest.approx(49 * p["rho_element"])
    # the discrete Gaussian needs a little more noise than the analytic float calibration
    assert p["sigma"] >= gaussian(2.0, 1e-5, per=per, secure=False).guarantee((1, 7, 7)).params["sigma"]


def test_secure_gaussian_releases_lie_on_the_grid_with_the_stated_sigma():
    m = gaussian(1.0, 1e-5, per="element")
    x = torch.rand(400, 1, 10, 10, generator=gen(1))
    r = m.release(x, generator=gen(2))
    p = r.guarantee.params
    j = r.values.double() / p["grid"]
    assert torch.allclose(j, j.round(), atol=1e-3)  # float32 storage of grid values
    snapped = torch.round(x.double() / p["grid"]) * p["grid"]
    noise = r.values.double() - snapped
    assert float(noise.std()) == pytest.approx(p["sigma"], rel=0.02)
    assert abs(float(noise.mean())) < 5 * p["sigma"] / math.sqrt(noise.numel())


def test_secure_tldp_gaussian_keeps_elements_on_the_grid():
    m = tldp_gaussian(1.0, 1e-5, p=0.25, per="element")
    x = torch.rand(4000, 2, generator=gen(3))
    r = m.release(x, generator=gen(4))
    grid = r.guarantee.params["grid"]
    kept = (r.values.double() - torch.round(x.double() / grid) * grid).abs() < grid / 4
    assert float(kept.double().mean()) == pytest.approx(0.25, abs=0.02)


# ------------------------------------------------------------------------------------ empirical privacy


def _cp(k: np.ndarray, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    lower = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
    upper = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    return lower, upper


def empirical_delta_lower_bound(a: np.ndarray, b: np.ndarray, epsilon: float, alpha: float = 1e-6) -> float:
    """High-confidence lower bound on sup_S P(S|x0) - e^eps P(S|x1) over threshold sets S = {y >= t}."""
    n = a.size
    thresholds = np.unique(np.concatenate([a, b]))
    ka = np.array([(a >= t).sum() for t in thresholds])
    kb = np.array([(b >= t).sum() for t in thresholds])
    level = alpha / (2 * len(thresholds))
    la, _ = _cp(ka, n, level)
    _, ub = _cp(kb, n, level)
    return float(max(0.0, (la - math.exp(epsilon) * ub).max()))


def test_empirical_delta_does_not_exceed_the_claim_and_the_check_has_power():
    variance, d = 4, 4  # rho = d² / (2 s) = 2 per element
    s = dg.DiscreteGaussianSampler(variance)
    n = 400_000
    a = (d + s.sample((n,), gen(10))).numpy()  # input d
    b = s.sample((n,), gen(11)).numpy()  # input 0
    rho = d * d / (2 * variance)
    delta = 0.05
    claimed = zcdp.epsilon_for(rho, delta) + s.epsilon_excess(d)
    assert empirical_delta_lower_bound(a, b, claimed) <= delta
    # Power: a claim at half the true rho is caught.
    wrong = zcdp.epsilon_for(rho / 4, delta)
    assert empirical_delta_lower_bound(a, b, wrong) > delta


def test_domain_uint8_and_dtype_mismatches_are_refused():
    pixels = torch.randint(0, 256, (2, 1, 4, 4), dtype=torch.uint8, generator=gen(5))
    with pytest.raises(ValueError, match=r"uint8 .* x.float\(\) / 255 .* Domain.uint8\(\)"):
        gaussian(1.0, per="element").release(pixels)
    assert gaussian(1.0, domain=Domain.uint8(), per="element").release(pixels, generator=gen(6)).values.shape == (
        2,
        1,
        4,
        4,
    )
    assert Domain.uint8() == Domain(0, 255, integer=True)


def test_large_delta_is_refused_unless_forced() -> None:
    with pytest.raises(ValueError, match=r"delta=0.5 is above 0.01: .* allow_large_delta=True"):
        gaussian(1.0, 0.5, per="element")
    with pytest.raises(ValueError, match="allow_large_delta"):
        tldp_gaussian(1.0, 0.02, per="element")
    assert gaussian(1.0, 0.5, allow_large_delta=True, per="element").guarantee((1, 2, 2)).delta_element <= 0.5


def test_delta_warning_names_one_over_n() -> None:
    from ldpclient.privacy.preprocess import delta_warning

    assert delta_warning(1e-5, 1000) is None
    assert "exceeds 1/n = 0.001 for 1000 records" in delta_warning(2e-3, 1000)


def test_tldp_keep_probability_can_be_set_and_the_guarantee_follows() -> None:
    from ldpclient.privacy import tldp_laplace

    published = tldp_laplace(1.0, per="element").guarantee((1, 2, 2))
    forced = tldp_laplace(1.0, p=0.2, per="element").guarantee((1, 2, 2))
    assert forced.params["p"] == pytest.approx(0.2) and forced.params["p_source"] == "set explicitly"
    assert forced.delta_element == pytest.approx(0.2)
    assert forced.delta_record == pytest.approx(1 - 0.8**4)
    assert published.delta_element < forced.delta_element
    x = torch.rand(20_000, 1, generator=gen(8))
    r = tldp_laplace(1.0, p=0.2, per="element").release(x, generator=gen(9))
    grid = r.guarantee.params["grid"]
    kept = (r.values.double() - torch.round(x.double() / grid) * grid).abs() < grid / 4
    assert float(kept.double().mean()) == pytest.approx(0.2, abs=0.02)  # (+ the rare noise draw of exactly 0)


def test_weights_may_be_given_at_the_released_resolution_and_a_mismatch_names_both_shapes() -> None:
    from ldpclient.privacy import weighted_tldp

    full = weighted_tldp(1.0, torch.zeros(8, 8), reduction=2, p=0.3, per="element").guarantee((1, 8, 8))
    released = weighted_tldp(1.0, torch.zeros(4, 4), reduction=2, p=0.3, per="element").guarantee((1, 8, 8))
    assert full.params["weights_released_shape"] == released.params["weights_released_shape"] == [4, 4]
    assert full.delta_record == pytest.approx(released.delta_record)
    with pytest.raises(ValueError, match=r"weights shape \(3, 3\) .* \(8, 8\) or the released \(4, 4\)"):
        weighted_tldp(1.0, torch.zeros(3, 3), reduction=2, per="element").guarantee((1, 8, 8))
