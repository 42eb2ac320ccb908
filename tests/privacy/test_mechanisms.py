"""Mechanisms: noise scale (KS), keep fractions of TLDP, guarantee figures, reduction, validation."""

import math

import pytest
import torch
from scipy import stats

from ldpclient.privacy import (
    Domain,
    Release,
    calibrate_sigma,
    discrete_tldp,
    epsilon_for_sigma,
    gaussian,
    laplace,
    make_mechanism,
    tldp_gaussian,
    tldp_laplace,
    weighted_tldp,
)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def ks(sample: torch.Tensor, dist: str, *args) -> float:
    return float(stats.kstest(sample.double().flatten().numpy(), dist, args=args).pvalue)


def keep_tolerance(p: float, n: int) -> float:
    return 5 * math.sqrt(p * (1 - p) / n)


# ------------------------------------------------------------------------------------ Laplace


def test_laplace_noise_scale_ks_and_guarantee():
    # b = 2 / 2 = 1 (float path: continuous law)
    m = laplace(2.0, domain=Domain(-1.0, 1.0), secure=False, per="element")
    x = torch.full((100, 1, 10, 10), 0.25)
    r = m.release(x, generator=gen(1))
    assert isinstance(r, Release) and r.values.dtype == torch.float32 and r.values.shape == x.shape
    assert ks(r.values - 0.25, "laplace", 0.0, 1.0) > 1e-3
    g = r.guarantee
    assert (g.epsilon_element, g.delta_element) == (2.0, 0.0)
    assert (g.epsilon_record, g.delta_record) == (200.0, 0.0)
    assert g.elements_per_record == 100 and g.params["b"] == 1.0 and g.is_pure


def test_laplace_per_record_solves_the_element_scale_and_reduction_counts_released_elements():
    m = laplace(98.0, per="record", reduction=2)
    g = m.guarantee((1, 28, 28))
    assert g.elements_per_record == 196
    assert g.epsilon_record == pytest.approx(98.0) and g.epsilon_element == pytest.approx(0.5)
    assert g.params["b"] == pytest.approx(2.0)
    x = torch.rand(3, 1, 28, 28, generator=gen(2))
    r = m.release(x, generator=gen(3))
    assert r.released_shape == (1, 14, 14) and r.record_shape == (1, 28, 28)
    assert r.upsampled().values.shape == (3, 1, 28, 28)


def test_reduction_is_average_pooling_before_noise():
    x = torch.rand(2, 3, 8, 8, generator=gen(4))
    r = laplace(1e9, reduction=4, secure=False, per="element").release(x, generator=gen(5))  # negligible noise
    pooled = torch.nn.functional.avg_pool2d(x, 4)
    assert torch.allclose(r.values, pooled, atol=1e-6)
    assert r.guarantee.elements_per_record == 3 * 2 * 2


def test_secure_laplace_is_on_a_grid_with_exact_sensitivity():
    m = laplace(1.0, secure=True, grid_bits=8, per="element")
    x = torch.full((200, 100), 0.3)
    r = m.release(x, generator=gen(6))
    gamma = 1 / 256
    units = r.values.double() / gamma
    assert torch.allclose(units, units.round(), atol=1e-3)  # released values lie on the grid
    g = r.guarantee
    assert g.epsilon_element <= 1.0 and g.epsilon_element == pytest.approx(1.0, rel=1e-8)
    assert g.epsilon_record <= 100.0 and g.params["secure"] is True
    assert g.params["b"] == pytest.approx(1.0, rel=1e-8)
    noise = (r.values.double() - round(0.3 / gamma) * gamma).numpy().ravel()
    # the discrete Laplace on a fine grid is close to Laplace(1): KS with a grid-sized tolerance
    d = stats.kstest(noise, "laplace", args=(0.0, 1.0)).statistic
    assert d < 1.63 / math.sqrt(noise.size) + gamma


# ------------------------------------------------------------------------------------ Gaussian


def test_gaussian_is_analytic_and_record_figure_is_exact_l2():
    m = gaussian(1.0, 1e-5, secure=False, per="element")
    x = torch.full((200, 1, 10, 10), 0.5)
    r = m.release(x, generator=gen(7))
    sigma = calibrate_sigma(1.0, 1e-5, 1.0)
    assert ks(r.values - 0.5, "norm", 0.0, sigma) > 1e-3
    g = r.guarantee
    assert g.params["sigma"] == pytest.approx(sigma)
    assert (g.epsilon_element, g.delta_element, g.delta_record) == (1.0, 1e-5, 1e-5)
    assert g.epsilon_record == pytest.approx(epsilon_for_sigma(sigma, 1e-5, 10.0))
    assert g.epsilon_record < 100 * 1.0  # much tighter than basic composition
    assert g.params["basic_composition_epsilon_record"] == pytest.approx(100.0)


def test_gaussian_per_record():
    g = gaussian(20.0, 1e-6, per="record", secure=False).guarantee((1, 28, 28))
    assert g.epsilon_record == 20.0
    assert g.params["sigma"] == pytest.approx(calibrate_sigma(20.0, 1e-6, 28.0))
    assert g.epsilon_element == pytest.approx(epsilon_for_sigma(g.params["sigma"], 1e-6, 1.0))


# ------------------------------------------------------------------------------------ TLDP


def test_tldp_laplace_keep_fraction_equals_published_p():
    # one element per record: p = e^0 / (2b + 1) with b = 1/eps = 1  ->  p = 1/3
    m = tldp_laplace(1.0, secure=False, per="element")
    n = 30_000
    x = torch.rand(n, 1, generator=gen(8))
    r = m.release(x, generator=gen(9))
    kept = r.values == x
    p = 1 / 3
    assert r.guarantee.params["p"] == pytest.approx(p)
    assert float(kept.double().mean()) == pytest.approx(p, abs=keep_tolerance(p, n))
    assert ks(r.values[~kept] - x[~kept], "laplace", 0.0, 1.0) > 1e-3
    g = r.guarantee
    assert (g.epsilon_element, g.delta_element) == (1.0, pytest.approx(p))
    assert (g.epsilon_record, g.delta_record) == (1.0, pytest.approx(p))


def test_tldp_laplace_two_elements_guarantee_composes_with_point_mass():
    eps = 2.0
    g = tldp_laplace(eps, per="element").guarantee((2,))
    b = 1 / eps
    expo = eps - 2 / b
    p = math.exp(expo) / (2 * b + math.exp(expo))
    assert g.params["p"] == pytest.approx(p, rel=1e-12)
    assert g.epsilon_record == pytest.approx(4.0) and g.delta_record == pytest.approx(1 - (1 - p) ** 2)


def test_tldp_gaussian_keep_fraction_and_true_guarantee():
    eps, delta = 1.0, 1e-5
    m = tldp_gaussian(eps, delta, secure=False, per="element")
    n = 20_000
    x = torch.rand(n, 2, generator=gen(10))
    r = m.release(x, generator=gen(11))
    sigma = 1 / math.sqrt(2 * eps)
    expo = eps - 2 * 1 / (2 * sigma**2)
    p = math.exp(expo) / (sigma * math.sqrt(2 * math.pi) + math.exp(expo))
    kept = r.values == x
    assert float(kept.double().mean()) == pytest.approx(p, abs=keep_tolerance(p, 2 * n))
    assert ks(r.values[~kept] - x[~kept], "norm", 0.0, sigma) > 1e-3
    g = r.guarantee
    q = 1 - (1 - p) ** 2
    assert g.epsilon_element == pytest.approx(epsilon_for_sigma(sigma, delta, 1.0))
    assert g.delta_element == pytest.approx(p + (1 - p) * delta)
    assert g.epsilon_record == pytest.approx(epsilon_for_sigma(sigma, delta, math.sqrt(2)))
    assert g.delta_record == pytest.approx(q + (1 - q) * delta)


def test_weighted_tldp_keep_fraction_per_position_and_channel_broadcast():
    w = torch.tensor([[0.0, 0.5], [1.0, 0.25]])
    eps = 0.5
    m = weighted_tldp(eps, w, secure=False, per="element")
    n = 15_000
    x = torch.rand(n, 2, 2, 2, generator=gen(12))  # 2 channels share the weights
    r = m.release(x, generator=gen(13))
    i = 8
    b = 1 / eps
    expo = eps * (1 - i)
    p = math.exp(expo) / (2 * b + math.exp(expo))
    kept = (r.values == x).double().mean(dim=(0, 1))
    for (row, col), wv in {(0, 0): 0.0, (0, 1): 0.5, (1, 0): 1.0, (1, 1): 0.25}.items():
        pe = p * (1 - wv)
        assert float(kept[row, col]) == pytest.approx(pe, abs=keep_tolerance(pe, 2 * n) + 1e-12)
    assert float(kept[1, 0]) == 0.0  # weight 1: never kept
    g = r.guarantee
    pes = [p * (1 - v) for v in (0.0, 0.5, 1.0, 0.25)] * 2
    assert g.delta_element == pytest.approx(p)
    assert g.delta_record == pytest.approx(1 - math.prod(1 - v for v in pes))
    assert g.epsilon_record == pytest.approx(i * eps)


def test_weighted_tldp_weights_are_pooled_with_the_reduction():
    w = torch.zeros(4, 4)
    w[:2, :2] = 1.0
    g = weighted_tldp(0.5, w, reduction=2, per="element").guarantee((1, 4, 4))
    assert g.params["weights_released_shape"] == [2, 2]
    assert g.params["weights_max"] == 1.0 and g.params["weights_min"] == 0.0


def test_published_p_underflows_for_a_28x28_image_and_is_still_reported():
    g = tldp_laplace(1.0, secure=False, per="element").guarantee((1, 28, 28))
    # log p = eps(1 - I) - log(2b + e^(eps(1 - I))) = -783 - ln 2
    assert g.params["log_p"] == pytest.approx(-783 - math.log(2.0), rel=1e-12)
    assert g.params["p"] == 0.0
    assert 0.0 < g.delta_record < 1e-300 and not g.is_pure  # positive, rounded up from ~e^-776.5
    assert g.params["log_delta_keep_record"] == pytest.approx(-783 - math.log(2.0) + math.log(784), rel=1e-12)
    assert g.epsilon_record == 784.0
    assert any("point mass" in n for n in g.notes) and any("plain" in n for n in g.notes)


# ------------------------------------------------------------------------------------ shared behaviour


def test_clipping_is_counted_per_record_and_applied_before_noise():
    x = torch.tensor([[[-1.0, 0.5], [2.0, 0.2]], [[0.1, 0.2], [0.3, 0.4]]])
    r = laplace(1e9, secure=False, per="element").release(x, generator=gen(14))
    assert r.clipped_elements.tolist() == [2, 0]
    assert torch.allclose(r.values[0], torch.tensor([[0.0, 0.5], [1.0, 0.2]]), atol=1e-6)


def test_public_input_same_noise_zero_cost():
    m = laplace(1.0, secure=False, per="element")
    x = torch.zeros(4, 1, 4, 4)
    a = m.release(x, generator=gen(15))
    b = m.release(x, generator=gen(15), public=True)
    assert torch.equal(a.values, b.values)
    assert b.guarantee.epsilon_record == 0.0 and b.guarantee.public_input
    assert a.guarantee.epsilon_record == 16.0


def test_default_generator_is_fresh_and_explicit_generator_reproduces():
    m = tldp_laplace(1.0, secure=False, per="element")
    x = torch.rand(2, 1, 4, 4, generator=gen(16))
    assert not torch.equal(m.release(x).values, m.release(x).values)
    assert torch.equal(m.release(x, generator=gen(1)).values, m.release(x, generator=gen(1)).values)


def test_noise_for_ldpkit_rand_uses_the_noising_branch():
    m = laplace(2.0, secure=False, per="element")
    z = m.noise((400, 50), generator=gen(17))
    assert z.shape == (400, 50) and z.dtype == torch.float32
    assert ks(z, "laplace", 0.0, 0.5) > 1e-3
    mr = laplace(100.0, per="record")
    assert float(mr.noise((10, 1, 10, 10), generator=gen(1)).abs().mean()) == pytest.approx(1.0, rel=0.2)
    zt = tldp_laplace(1.0, secure=False, per="element").noise((1000, 10), generator=gen(18))
    assert bool((zt != 0).all())  # no keep branch in the noise
    zd = discrete_tldp(5.0, per="element").noise((100, 10), generator=gen(19))
    assert torch.equal(zd, zd.round())


def test_make_mechanism_maps_cli_names():
    assert make_mechanism("laplace", epsilon=1.0, per="element").name == "laplace"
    assert make_mechanism("gaussian", epsilon=1.0, delta=1e-6, per="element").name == "gaussian"
    assert make_mechanism("tldp-laplace", epsilon=1.0, per="element").name == "tldp-laplace"
    assert make_mechanism("tldp_gaussian", epsilon=1.0, per="element").name == "tldp-gaussian"
    assert (
        make_mechanism("tldp-weighted", epsilon=1.0, weights=torch.zeros(2, 2), per="element").name == "tldp-weighted"
    )
    assert make_mechanism("discrete-tldp", epsilon=5.0, per="element").name == "discrete-tldp"
    with pytest.raises(ValueError, match="unknown mechanism"):
        make_mechanism("laplacian", epsilon=1.0, per="element")
    with pytest.raises(ValueError, match="bad arguments"):
        make_mechanism("laplace", epsilon=1.0, sigma=2, per="element")


def test_config_is_json_serialisable():
    import json

    for m in (
        laplace(1.0, secure=True, per="element"),
        gaussian(1.0, per="element"),
        weighted_tldp(1.0, torch.rand(3, 3), per="element"),
        discrete_tldp(5.0, per="element"),
    ):
        json.dumps(m.config())
        json.dumps(m.guarantee((1, 3, 3)).as_dict())


# ------------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    "factory,match",
    [
        (lambda: laplace(0.0, per="element"), "epsilon"),
        (lambda: laplace(-1.0, per="element"), "epsilon"),
        (lambda: laplace(float("nan"), per="element"), "epsilon"),
        (lambda: laplace(float("inf"), per="element"), "epsilon"),
        (lambda: laplace("x", per="element"), "epsilon"),
        (lambda: laplace(1.0, per="pixel"), "per"),
        (lambda: laplace(1.0, reduction=0, per="element"), "reduction"),
        (lambda: laplace(1.0, reduction=1.5, per="element"), "reduction"),
        (lambda: laplace(1.0, reduction=True, per="element"), "reduction"),
        (lambda: laplace(1.0, grid_bits=0, per="element"), "grid_bits"),
        (lambda: gaussian(1.0, 0.0, per="element"), "delta"),
        (lambda: gaussian(1.0, 1.5, per="element"), "delta"),
        (lambda: tldp_gaussian(1.0, -1e-5, per="element"), "delta"),
        (lambda: weighted_tldp(1.0, torch.tensor([[0.0, 1.5]]), per="element"), r"\[0, 1\]"),
        (lambda: weighted_tldp(1.0, torch.tensor([[float("nan"), 0.5]]), per="element"), "NaN"),
        (lambda: weighted_tldp(1.0, torch.zeros(4), per="element"), "2-D"),
        (lambda: discrete_tldp(5.0, domain=Domain(0.0, 1.0), per="element"), "integer domain"),
        (lambda: discrete_tldp(), "epsilon"),
        (lambda: discrete_tldp(1.0, p=0.1, b=3.0, per="element"), "at most two"),
        (lambda: discrete_tldp(1.0, b=100.0, per="element"), "infeasible"),
        (lambda: discrete_tldp(1.0, p=0.5, per="element"), "infeasible"),
        (lambda: discrete_tldp(p=1.0, b=3.0, per="element"), "p must be"),
    ],
)
def test_bad_configuration_raises_value_error(factory, match):
    with pytest.raises(ValueError, match=match):
        factory()


@pytest.mark.parametrize(
    "records,match",
    [
        (torch.tensor([[0.1, float("nan")]]), "NaN/inf"),
        (torch.tensor([[0.1, float("inf")]]), "NaN/inf"),
        (torch.zeros(0, 1, 4, 4), "empty"),
        (torch.zeros(2, 0), "empty"),
        (torch.zeros(3), "batch axis"),
        ([[0.1, 0.2]], "torch.Tensor"),
        (torch.zeros(2, 2, dtype=torch.complex64), "real"),
    ],
)
def test_bad_records_raise_value_error(records, match):
    with pytest.raises(ValueError, match=match):
        laplace(1.0, per="element").release(records)


def test_shape_dependent_errors():
    with pytest.raises(ValueError, match="does not divide"):
        laplace(1.0, reduction=3, per="element").release(torch.zeros(1, 1, 28, 28))
    with pytest.raises(ValueError, match=">= 2 axes"):
        laplace(1.0, reduction=2, per="element").release(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="does not match"):
        weighted_tldp(1.0, torch.zeros(3, 3), per="element").release(torch.zeros(1, 1, 4, 4))
    with pytest.raises(ValueError, match="does not match"):
        weighted_tldp(1.0, torch.zeros(3, 3), per="element").guarantee((9,))


def test_non_contiguous_and_integer_inputs():
    x = torch.rand(4, 3, 3, 1, generator=gen(20)).permute(0, 3, 2, 1)  # (4, 1, 3, 3), not contiguous
    for m in (
        tldp_laplace(1.0, per="element"),
        weighted_tldp(0.5, torch.zeros(3, 3), per="element"),
        laplace(1.0, secure=True, per="element"),
        gaussian(1.0, per="element"),
    ):
        assert m.release(x, generator=gen(21)).values.shape == (4, 1, 3, 3)
    pair = torch.rand(2, 6000, generator=gen(22)).t()  # (6000, 2) non-contiguous view; I = 2
    assert not pair.is_contiguous()
    p = math.exp(-1.0) / (2.0 + math.exp(-1.0))  # eps = 1, b = 1: e^(eps - 2 eps) / (2b + ...)
    kept = tldp_laplace(1.0, secure=False, per="element").release(pair, generator=gen(23)).values == pair
    assert float(kept.double().mean()) == pytest.approx(p, abs=keep_tolerance(p, 12000))
    pixels = torch.randint(0, 256, (3, 1, 4, 4), dtype=torch.uint8, generator=gen(24))
    r = laplace(1.0, domain=Domain.uint8(), per="element").release(pixels, generator=gen(25))
    assert r.values.dtype == torch.float32 and r.clipped_elements.tolist() == [0, 0, 0]


@pytest.mark.parametrize("factory, kwargs", [
    ("laplace", {}), ("laplace", {"secure": True}), ("gaussian", {"delta": 1e-6}), ("tldp_laplace", {}),
    ("tldp_gaussian", {}), ("discrete_tldp", {}),
])
@pytest.mark.parametrize("per", ["element", "record"])
def test_an_unrepresentable_noise_scale_is_refused_before_any_sampling(factory, kwargs, per):
    """--epsilon 1e-300 is refused before any sampling, not failed on ('queries contain NaN') after the ledger
    charged the records."""
    import ldpclient.privacy as privacy

    with pytest.raises(ValueError, match="too large for a release"):  # at construction or first use
        getattr(privacy, factory)(1e-300, per=per, **kwargs).guarantee((1, 8, 8))
