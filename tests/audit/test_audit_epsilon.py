"""Empirical epsilon: calibrated mechanisms pass, mis-calibrated ones and published TLDP's pure claim are caught."""

import pytest
import torch

from ldpclient.audit.empirical_epsilon import audit_mechanism, empirical_epsilon
from ldpclient.privacy import discrete_tldp, gaussian, laplace, tldp_laplace


def laplace_sampler(b: float, keep: float = 0.0):
    def sample(x, g):
        noise = b * (torch.empty(x.shape).exponential_(generator=g) - torch.empty(x.shape).exponential_(generator=g))
        kept = torch.rand(x.shape, generator=g) < keep
        return torch.where(kept, x, x + noise)

    return sample


def test_calibrated_laplace_is_not_flagged_and_bound_is_tight():
    res = audit_mechanism(laplace(1.0, per="element"), (1, 8, 8), samples=100_000)
    assert not res["violated"]
    assert 0.8 < res["epsilon_lb"] <= 1.0


def test_miscalibrated_mechanism_is_caught():
    # claims eps = 1 per element but uses half the Laplace scale (true eps = 2)
    res = empirical_epsilon(laplace_sampler(0.5), (1, 4, 4), claimed_epsilon=1.0, samples=100_000)
    assert res["violated"] and res["epsilon_lb"] > 1.5


def test_published_tldp_pure_claim_refuted_only_when_keep_probability_matters():
    small = audit_mechanism(tldp_laplace(1.0, per="element"), (2,), paper_epsilon=1.0, samples=100_000)
    p = small["guarantee"]["params"]["p"]
    assert p > 0.1  # two elements: the published keep probability is not negligible
    assert small["paper_claim_violated"] and small["epsilon_lb_pure"] > 3
    assert small["event"].startswith("out ==")  # the point mass gives it away
    assert not small["violated"]  # ...but the reported (eps, delta = p) guarantee holds
    image = audit_mechanism(tldp_laplace(1.0, per="element"), (1, 28, 28), paper_epsilon=1.0, samples=100_000)
    assert image["guarantee"]["params"]["p"] < 1e-100  # p ~ 0 on a real image
    assert not image["paper_claim_violated"] and not image["violated"]


def test_gaussian_and_discrete_tldp_hold_their_reported_guarantee():
    for mech in (gaussian(1.0, per="element"), discrete_tldp(3.0, per="element")):
        res = audit_mechanism(mech, (1, 8, 8), samples=100_000)
        assert not res["violated"], res


def test_insufficient_delta_is_caught():
    # Gaussian sigma = 1, sensitivity 1: at eps = 1 the true delta is ~0.127, so claiming 0.05 is false
    res = empirical_epsilon(lambda x, g: x + torch.randn(x.shape, generator=g), (16,),
                            claimed_epsilon=1.0, claimed_delta=0.05, samples=200_000)
    assert res["violated"]


def test_bad_arguments():
    with pytest.raises(ValueError, match="samples"):
        empirical_epsilon(laplace_sampler(1.0), (4,), claimed_epsilon=1.0, samples=10)
    with pytest.raises(ValueError, match="high must exceed low"):
        empirical_epsilon(laplace_sampler(1.0), (4,), claimed_epsilon=1.0, low=1.0, high=0.0)
