"""Randomness: CSPRNG generators, float noise, and the secure integer discrete Laplace sampler."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

import ldpclient.privacy.sampling as sampling
from ldpclient.privacy.sampling import (
    ONE,
    DiscreteLaplaceSampler,
    GeometricSampler,
    bernoulli_positions,
    laplace_noise,
    make_generator,
    uniform_open,
)


def _chi2_pvalue(observed: np.ndarray, expected: np.ndarray) -> float:
    assert observed.sum() == pytest.approx(expected.sum(), rel=1e-9)
    assert expected.min() >= 5, "bins too thin for a chi-square test"
    return float(stats.chisquare(observed, expected).pvalue)


def _binned(z: np.ndarray, pmf, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Counts and expectations for bins (-inf, lo), lo..hi, (hi, inf) under an exact pmf on integers."""
    n = z.size
    support = np.arange(lo, hi + 1)
    probs = np.array([pmf(int(k)) for k in support])
    obs = np.array([(z < lo).sum()] + [(z == k).sum() for k in support] + [(z > hi).sum()], dtype=float)
    left = (1.0 - probs.sum()) / 2.0  # symmetric laws
    exp = np.concatenate([[left], probs, [left]]) * n
    return obs, exp


def test_make_generator_seeds_from_csprng_unless_told():
    a = torch.rand(4, generator=make_generator())
    b = torch.rand(4, generator=make_generator())
    assert not torch.equal(a, b)
    s1 = torch.rand(4, generator=make_generator(seed=7))
    s2 = torch.rand(4, generator=make_generator(seed=7))
    assert torch.equal(s1, s2)
    g = torch.Generator()
    assert make_generator(g) is g
    with pytest.raises(ValueError, match="generator"):
        make_generator("not a generator")
    with pytest.raises(ValueError, match="seed"):
        make_generator(seed=1.5)


def test_uniform_open_excludes_endpoints_and_is_symmetric():
    u = uniform_open((100_000,), make_generator(seed=1))
    assert float(u.min()) > 0.0 and float(u.max()) < 1.0
    assert float(u.mean()) == pytest.approx(0.5, abs=4 * math.sqrt(1 / 12 / 100_000))


def test_float_laplace_noise_matches_the_laplace_cdf_and_reaches_the_tail():
    n = 40_000
    z = laplace_noise((n,), 2.0, make_generator(seed=2)).double().numpy()
    assert stats.kstest(z, "laplace", args=(0.0, 2.0)).pvalue > 1e-3
    # the float64 refinement below 2**-10 keeps the tail: the 1/1024 smallest |v| give |z| > 2 ln(1024)
    frac = float((np.abs(z) > 2.0 * math.log(1024.0)).mean())
    assert frac == pytest.approx(1 / 1024, abs=5 * math.sqrt(1 / 1024 / n))


def test_bernoulli_positions_dense_sparse_and_underflow():
    g = make_generator(seed=3)
    n = 200_000
    for p in (0.2, 3e-4):  # dense and sparse (geometric gaps) branches
        idx = bernoulli_positions(n, math.log(p), g)
        assert idx.unique().numel() == idx.numel() and int(idx.max()) < n
        assert idx.numel() == pytest.approx(n * p, abs=5 * math.sqrt(n * p))
    thin = torch.tensor([1.0, 0.5, 0.0, 0.25], dtype=torch.float64)
    idx = bernoulli_positions(n, math.log(3e-3), g, thin=thin)
    counts = torch.bincount(idx % 4, minlength=4).double()
    for j in range(4):
        mean = n / 4 * 3e-3 * float(thin[j])
        assert float(counts[j]) == pytest.approx(mean, abs=5 * math.sqrt(mean) + 1e-9)
    assert bernoulli_positions(n, -783.7, g).numel() == 0  # p underflows float64: never selected
    assert bernoulli_positions(n, -math.inf, g).numel() == 0


@pytest.mark.parametrize("scale,keep", [(3.0, 0.0), (3.0, 0.3), (0.5, 0.0)])
def test_discrete_laplace_pmf_chi_square(scale, keep):
    s = DiscreteLaplaceSampler(scale, keep)
    z = s.sample((200_000,), make_generator(seed=11)).numpy()
    pmf = lambda k: float(s.pmf(k))  # noqa: E731
    span = int(4 * scale) + 1
    obs, exp = _binned(z, pmf, -span, span)
    assert _chi2_pvalue(obs, exp) > 1e-3
    assert z.dtype == np.int64


def test_alias_table_realises_the_integer_cells_exactly():
    s = DiscreteLaplaceSampler(7.5, 0.2)
    n = s.threshold.numel()
    cap = ONE // n
    realised = torch.zeros(n, dtype=torch.int64)
    realised += s.threshold  # bucket i returns i with weight threshold[i]
    realised.index_add_(0, s.alias, cap - s.threshold)  # ... and alias[i] with the rest
    expected = torch.zeros(n, dtype=torch.int64)
    expected[: s.cells.numel()] = s.cells
    assert torch.equal(realised, expected)
    assert int(s.cells.sum()) == ONE
    assert torch.equal(s.cells, s.cells.flip(0))  # exactly symmetric table


def test_tail_path_is_exact_discrete_laplace(monkeypatch):
    # Force a tiny central table so a third of the draws go through the geometric tail sampler.
    monkeypatch.setattr(sampling, "_MAX_CENTRAL", 3)
    s = DiscreteLaplaceSampler(4.0, 0.0)
    assert s.k == 3
    z = s.sample((150_000,), make_generator(seed=5)).numpy()
    pmf = lambda k: float(s.pmf(k))  # noqa: E731
    obs, exp = _binned(z, pmf, -16, 16)
    assert _chi2_pvalue(obs, exp) > 1e-3
    assert (np.abs(z) >= 3).mean() > 0.3


def test_geometric_sampler_with_digits_and_memoryless_tail():
    g = GeometricSampler(1000.0)  # base-256 digit plus top table
    assert len(g.digits) == 1
    x = g.sample(100_000, make_generator(seed=9)).numpy()
    q = math.exp(-1 / 1000.0)
    # bins of width 250: P(a <= G < a+250) = q**a (1 - q**250)
    edges = np.arange(0, 5000, 250)
    obs = np.array([((x >= a) & (x < a + 250)).sum() for a in edges] + [(x >= 5000).sum()], dtype=float)
    probs = np.array([q**a * (1 - q**250) for a in edges] + [q**5000])
    assert _chi2_pvalue(obs, probs * x.size) > 1e-3


def test_geometric_top_table_tail_redraws_are_exact(monkeypatch):
    monkeypatch.setattr(sampling, "_SPAN", 1.0)  # K = 4 entries, tail mass e^-1: most draws redraw
    g = GeometricSampler(4.0)
    assert g.digits == [] and g.top_k == 4
    y = g.sample(100_000, make_generator(seed=10)).numpy()
    q = math.exp(-1 / 4.0)
    obs = np.array([(y == k).sum() for k in range(20)] + [(y >= 20).sum()], dtype=float)
    probs = np.array([(1 - q) * q**k for k in range(20)] + [q**20])
    assert (y >= 8).mean() > 0.1  # two or more redraws happen
    assert _chi2_pvalue(obs, probs * y.size) > 1e-3


def test_rounding_excess_is_tiny_and_reported():
    for scale in (0.5, 3.0, 102.0, 4096.0):
        s = DiscreteLaplaceSampler(scale, 0.1)
        assert 0.0 < s.epsilon_excess(255) < 1e-9
        assert s.rho_tail > 0  # tail cells are rounded up


def test_scale_out_of_range_raises():
    with pytest.raises(ValueError, match="scale"):
        DiscreteLaplaceSampler(0.01)
    with pytest.raises(ValueError, match="keep probability"):
        DiscreteLaplaceSampler(1.0, 1.0)
