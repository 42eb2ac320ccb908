"""Discrete TLDP: exact epsilon, solvers, output law, and an empirical privacy check (Clopper-Pearson)."""


import numpy as np
import pytest
import torch
from scipy import stats

from ldpclient.privacy import Domain, discrete_tldp, discrete_tldp_epsilon
from ldpclient.privacy.discrete import c_of_b, solve_b, solve_p


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def ideal_pmf(z: np.ndarray, p: float, b: float) -> np.ndarray:
    c = c_of_b(b)
    base = (1 - p) * c * np.exp(-np.abs(z) / b)
    return np.where(z == 0, base + p, base)


@pytest.mark.parametrize("p,b,d", [(0.3, 3.0, 3), (0.05, 100.0, 255), (0.0, 2.0, 1), (0.9, 50.0, 15)])
def test_formula_is_the_worst_case_likelihood_ratio(p, b, d):
    # brute force: max over outputs o and inputs x, x' in {0..d} of ln P(o|x)/P(o|x')
    outs = np.arange(-200, 200 + d)
    worst = 0.0
    for x in range(d + 1):
        for x2 in range(d + 1):
            ratio = np.log(ideal_pmf(outs - x, p, b)) - np.log(ideal_pmf(outs - x2, p, b))
            worst = max(worst, float(ratio.max()))
    assert discrete_tldp_epsilon(p, b, d) == pytest.approx(worst, rel=1e-10)


def test_solvers_round_trip():
    d = 255
    for p, b in [(0.05, 100.0), (0.5, 300.0), (0.2, 60.0)]:
        eps = discrete_tldp_epsilon(p, b, d)
        assert solve_p(eps, b, d) == pytest.approx(p, rel=1e-9)
        b2 = solve_b(eps, p, d)
        assert discrete_tldp_epsilon(p, b2, d) == pytest.approx(eps, rel=1e-9)
        assert discrete_tldp_epsilon(p, b2, d) <= eps * (1 + 1e-12)
        assert b2 <= b * (1 + 1e-9)  # the smaller-noise solution of the two
    assert solve_b(2.0, 0.0, 255) == pytest.approx(127.5)


def test_solver_infeasible_targets_name_the_problem():
    with pytest.raises(ValueError, match=r"D/b = 2\.55 >= epsilon"):
        solve_p(2.0, 100.0, 255)
    with pytest.raises(ValueError, match="at least"):
        solve_b(1.0, 0.5, 255)


def test_guarantee_is_exact_formula_plus_reported_rounding_bound():
    m = discrete_tldp(5.0, p=0.05, per="element")
    g = m.guarantee((1, 28, 28))
    assert g.epsilon_element <= 5.0 and g.epsilon_element == pytest.approx(5.0, rel=1e-9)
    assert g.epsilon_record == pytest.approx(784 * g.epsilon_element) and g.delta_record == 0.0
    assert g.params["epsilon_element_formula"] + g.params["epsilon_quantisation_excess"] == pytest.approx(
        g.epsilon_element, rel=1e-14
    )
    assert 0 < g.params["epsilon_quantisation_excess"] < 1e-9
    assert g.params["secure"] is True
    # only epsilon: half goes to the noise, b = 2 D / eps
    g2 = discrete_tldp(10.0, per="element").guarantee((4,))
    assert g2.params["b"] == pytest.approx(51.0, rel=1e-9)
    # per record: eps / I per element
    g3 = discrete_tldp(784 * 6.0, p=0.1, per="record").guarantee((1, 28, 28))
    assert g3.epsilon_record <= 784 * 6.0 and g3.epsilon_element == pytest.approx(6.0, rel=1e-9)
    # p and b given: epsilon computed
    g4 = discrete_tldp(p=0.2, b=100.0, per="element").guarantee((2,))
    assert g4.params["epsilon_element_formula"] == pytest.approx(discrete_tldp_epsilon(0.2, 100.0, 255))


def test_output_law_matches_keep_or_discrete_laplace():
    m = discrete_tldp(p=0.3, b=4.0, domain=Domain(0, 3, integer=True), per="element")
    n = 120_000
    x = torch.randint(0, 4, (n, 1), generator=gen(1))
    r = m.release(x, generator=gen(2))
    out = r.values.double()
    assert torch.equal(out, out.round())  # integers, not clipped
    z = (out - x.double()).numpy().ravel().astype(np.int64)
    support = np.arange(-20, 21)
    probs = ideal_pmf(support, 0.3, 4.0)
    obs = np.array([(z < -20).sum()] + [(z == k).sum() for k in support] + [(z > 20).sum()], dtype=float)
    tail = (1 - probs.sum()) / 2
    exp = np.concatenate([[tail], probs, [tail]]) * n
    assert stats.chisquare(obs, exp).pvalue > 1e-3


def test_integer_domain_clips_rounds_and_pools():
    m = discrete_tldp(p=0.0, b=0.1, domain=Domain(0, 255, integer=True), reduction=2, per="element")  # almost no noise
    x = torch.tensor([[[[0, 1], [2, 4]]]], dtype=torch.uint8).repeat(50, 1, 1, 1)  # mean 1.75 -> 2
    assert m.guarantee((1, 2, 2)).elements_per_record == 1
    r = m.release(x, generator=gen(3))
    assert r.values.shape == (50, 1, 1, 1)
    assert float((r.values == 2).double().mean()) > 0.95
    floats = torch.tensor([[-5.0, 3.4, 20.0]])
    with pytest.raises(ValueError, match=r"1 values are not integers .* round_inputs=True"):
        discrete_tldp(p=0.0, b=0.1, domain=Domain(0, 10, integer=True), per="element").release(floats)
    r2 = discrete_tldp(p=0.0, b=0.1, domain=Domain(0, 10, integer=True), round_inputs=True, per="element").release(
        floats, generator=gen(4)
    )
    assert r2.clipped_elements.tolist() == [3]  # two clipped, one rounded: every changed element is counted
    whole = discrete_tldp(p=0.0, b=0.1, domain=Domain(0, 10, integer=True), per="element").release(
        torch.tensor([[3.0, 4.0]])
    )
    assert whole.clipped_elements.tolist() == [0]  # integral floats are taken as they are


# ------------------------------------------------------------------------------------ empirical privacy


def _cp_bounds(k: np.ndarray, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided Clopper-Pearson interval for k successes out of n (each side alpha/2)."""
    lower = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
    upper = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    return lower, upper


def empirical_epsilon_lower_bound(mechanism, x0: int, x1: int, n: int, seed: int, alpha: float = 1e-6) -> float:
    """High-confidence lower bound on the privacy loss between inputs x0 and x1 (one element).

    For each output o, P(o|x0) >= CP lower and P(o|x1) <= CP upper, so
    ln(lower/upper) is a lower bound on ln P(o|x0)/P(o|x1) <= eps; Bonferroni over
    the outputs and both directions keeps the overall confidence at 1 - alpha.
    """
    a = mechanism.release(torch.full((n, 1), x0), generator=gen(seed)).values.numpy().ravel().astype(np.int64)
    b = mechanism.release(torch.full((n, 1), x1), generator=gen(seed + 1)).values.numpy().ravel().astype(np.int64)
    outs = np.unique(np.concatenate([a, b]))
    ka = np.array([(a == o).sum() for o in outs])
    kb = np.array([(b == o).sum() for o in outs])
    level = alpha / (2 * len(outs))
    la, ua = _cp_bounds(ka, n, level)
    lb, ub = _cp_bounds(kb, n, level)
    with np.errstate(divide="ignore"):
        forward = np.log(la) - np.log(ub)
        backward = np.log(lb) - np.log(ua)
    return float(max(forward.max(), backward.max()))


def test_empirical_privacy_loss_does_not_exceed_the_claim():
    dom = Domain(0, 3, integer=True)
    m = discrete_tldp(3.0, p=0.3, domain=dom, per="element")
    claimed = m.guarantee((1,)).epsilon_element
    lb = empirical_epsilon_lower_bound(m, 0, 3, n=150_000, seed=10)
    assert lb <= claimed
    assert lb > 0.9 * claimed  # the test has power: the bound is close to the exact loss


def test_empirical_check_catches_a_miscalibrated_claim():
    dom = Domain(0, 3, integer=True)
    m = discrete_tldp(3.0, p=0.3, domain=dom, per="element")
    b = m.guarantee((1,)).params["b"]
    lb = empirical_epsilon_lower_bound(m, 0, 3, n=150_000, seed=20)
    # (1) forgetting the point mass: claiming only the noise term D/b
    assert lb > 3 / b
    # (2) a claim 20% too small
    assert lb > 0.8 * m.guarantee((1,)).epsilon_element
    # (3) a mechanism whose keep probability is larger than its calibration assumed
    leaky = discrete_tldp(p=0.6, b=b, domain=dom, per="element")
    lb_leaky = empirical_epsilon_lower_bound(leaky, 0, 3, n=150_000, seed=30)
    assert lb_leaky > m.guarantee((1,)).epsilon_element
