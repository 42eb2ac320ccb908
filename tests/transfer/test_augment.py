"""LDPKiT query plan: pair bijection, sampling without replacement, determinism, Rand noise, type boundary."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from ldpclient.privacy import Derived, laplace
from ldpclient.transfer.augment import FeistelPermutation, QueryPlan, num_pairs, pair_from_index, pair_to_index


def _release(n: int = 12, shape=(1, 6, 6), eps: float = 1.0, reduction: int = 1, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    records = torch.rand((n, *shape), generator=g)
    return laplace(eps, reduction=reduction, per="element").release(records, generator=g)


def test_pair_index_bijection_small_n():
    for n in (2, 3, 5, 17, 64):
        k = np.arange(num_pairs(n))
        i, j = pair_from_index(k)
        assert np.all(i >= 0) and np.all(i < j) and np.all(j < n)
        assert len(set(zip(i.tolist(), j.tolist(), strict=True))) == num_pairs(n)
        assert np.array_equal(pair_to_index(i, j), k)


def test_pair_index_large_values_exact():
    k = np.array([10**12, 10**12 + 1, 2**50 + 12345, num_pairs(3_000_000) - 1])
    i, j = pair_from_index(k)
    assert np.all(i < j)
    assert np.array_equal(pair_to_index(i, j), k)


def test_pair_to_index_rejects_unordered():
    with pytest.raises(ValueError):
        pair_to_index([3], [3])
    with pytest.raises(ValueError):
        pair_to_index([4], [2])


@pytest.mark.parametrize("size", [1, 2, 3, 7, 16, 17, 1000, 4099])
def test_feistel_is_permutation(size):
    p = FeistelPermutation(size, seed=11)(np.arange(size))
    assert sorted(p.tolist()) == list(range(size))


def test_feistel_shuffles_and_depends_on_seed():
    a = FeistelPermutation(1000, seed=1)(np.arange(1000))
    b = FeistelPermutation(1000, seed=2)(np.arange(1000))
    assert not np.array_equal(a, np.arange(1000))
    assert not np.array_equal(a, b)
    with pytest.raises(ValueError):
        FeistelPermutation(10, 0)([10])


def test_sup_queries_distinct_pairs_in_range():
    n, q = 40, 500
    plan = QueryPlan("sup", n, num_queries=q, seed=3, batch_size=64)
    r = plan.recipes(np.arange(q))
    i, j = r["i"], r["j"]
    assert np.all(i >= 0) and np.all(i < j) and np.all(j < n)
    assert len(set(zip(i.tolist(), j.tolist(), strict=True))) == q  # without replacement


def test_sup_all_pairs_when_num_queries_none():
    plan = QueryPlan("sup", 9, seed=0, batch_size=5)
    assert plan.total == 36
    r = plan.recipes(np.arange(36))
    assert set(zip(r["i"].tolist(), r["j"].tolist(), strict=True)) == {(a, b) for b in range(9) for a in range(b)}


def test_sup_too_many_queries_rejected():
    with pytest.raises(ValueError, match="unordered pairs"):
        QueryPlan("sup", 5, num_queries=11)


def test_sup_values_are_pair_averages_and_keep_guarantee():
    rel = _release(10)
    plan = QueryPlan("sup", 10, num_queries=30, seed=1, batch_size=8)
    vals = rel.values
    seen = 0
    for bid, d in plan.batches(rel):
        assert isinstance(d, Derived)
        assert bid.startswith(plan.fingerprint + ":")
        i, j = d.sources[:, 0], d.sources[:, 1]
        assert torch.allclose(d.values, (vals[i] + vals[j]) / 2)
        assert d.guarantee == rel.guarantee  # post-processing costs nothing
        assert d.steps[-1] == "ldpkit-sup"
        seen += len(d)
    assert seen == 30


def test_batches_have_stable_ids_and_cover_plan():
    plan = QueryPlan("sup", 20, num_queries=100, seed=5, batch_size=32)
    assert plan.num_batches == 4
    assert [plan.batch_id(b) for b in range(4)] == [f"{plan.fingerprint}:{b}" for b in range(4)]
    ids = np.concatenate([plan.batch_ids(b) for b in range(4)])
    assert np.array_equal(ids, np.arange(100))
    other = QueryPlan("sup", 20, num_queries=100, seed=6, batch_size=32)
    assert other.fingerprint != plan.fingerprint


_CHILD = """
import sys, numpy as np, torch
from ldpclient.transfer.augment import QueryPlan
plan = QueryPlan(sys.argv[1], 30, num_queries=200, seed=42, batch_size=50)
r = plan.recipes(np.arange(200))
print(plan.fingerprint, r["i"].tolist(), r["j"].tolist(), r["noise_seed"].tolist())
"""


@pytest.mark.parametrize("kind", ["sup", "rand"])
def test_plan_deterministic_across_processes(kind):
    outs = [
        subprocess.run([sys.executable, "-c", _CHILD, kind], capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    ]
    assert outs[0] == outs[1]
    plan = QueryPlan(kind, 30, num_queries=200, seed=42, batch_size=50)
    r = plan.recipes(np.arange(200))
    assert outs[0].strip() == f'{plan.fingerprint} {r["i"].tolist()} {r["j"].tolist()} {r["noise_seed"].tolist()}'


def test_rand_queries_reproducible_and_independent_of_batching():
    rel = _release(8)
    mech = laplace(1.0, per="element")
    a = QueryPlan("rand", 8, num_queries=40, seed=9, batch_size=40).queries(rel, np.arange(40), mechanism=mech)
    b_plan = QueryPlan("rand", 8, num_queries=40, seed=9, batch_size=7)
    b = torch.cat([d.values for _, d in b_plan.batches(rel, mechanism=mech)])
    assert torch.equal(a.values, b)


def test_rand_noise_scale_matches_base_mechanism():
    eps = 2.0  # Laplace b = 1/2: std = sqrt(2) * b
    rel = _release(10, eps=eps)
    plan = QueryPlan("rand", 10, num_queries=2000, seed=1, batch_size=500)
    d = plan.queries(rel, np.arange(2000), mechanism=laplace(eps, per="element"))
    extra = d.values - rel.values[d.sources[:, 0]]
    b = 1.0 / eps
    assert abs(extra.std().item() - np.sqrt(2) * b) < 0.02
    assert abs(extra.abs().mean().item() - b) < 0.02  # E|Laplace(b)| = b
    half = QueryPlan("rand", 10, num_queries=2000, seed=1, batch_size=500, rand_scale=0.5)
    extra_half = (
        half.queries(rel, np.arange(2000), mechanism=laplace(eps, per="element")).values - rel.values[d.sources[:, 0]]
    )
    assert abs(extra_half.std().item() - np.sqrt(2) * b / 2) < 0.01


def test_rand_each_record_used_evenly():
    plan = QueryPlan("rand", 10, num_queries=100, seed=0)
    counts = np.bincount(plan.recipes(np.arange(100))["i"], minlength=10)
    assert counts.tolist() == [10] * 10


def test_rand_noise_drawn_at_reduced_shape_then_resized():
    rel = _release(6, shape=(1, 8, 8), reduction=2)
    up = rel.upsampled("nearest")
    plan = QueryPlan("rand", 6, num_queries=12, seed=0)
    d = plan.queries(up, np.arange(12), mechanism=laplace(1.0, reduction=2, per="element"), noise_mode="nearest")
    assert d.values.shape == (12, 1, 8, 8)
    extra = d.values - up.values[d.sources[:, 0]]
    assert torch.equal(extra[:, :, ::2, ::2], extra[:, :, 1::2, 1::2])  # 2x2 blocks share one draw


def test_raw_tensors_rejected():
    plan = QueryPlan("sup", 4, num_queries=3)
    with pytest.raises(TypeError):
        plan.queries(torch.rand(4, 1, 6, 6), np.arange(3))
    with pytest.raises(TypeError):
        next(plan.batches(torch.rand(4, 1, 6, 6)))


def test_mixing_blank_queries():
    n = 10
    rel = _release(n)
    blank = laplace(1.0, per="element").release(
        torch.zeros(6, 1, 6, 6), generator=torch.Generator().manual_seed(1), public=True
    )
    plan = QueryPlan("sup", n, num_queries=40, seed=2, n_blank=6, blank_fraction=0.25)
    d = plan.queries(rel, np.arange(40), blank_releases=blank)
    r = plan.recipes(np.arange(40))
    assert r["blank"].sum() == 10
    assert torch.all(d.sources[torch.from_numpy(r["blank"])] == -1)  # no private record in blank queries
    assert torch.all(d.sources[torch.from_numpy(~r["blank"])] >= 0)
    with pytest.raises(ValueError, match="blank_releases"):
        plan.queries(rel, np.arange(40))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "nope", "n": 3},
        {"kind": "sup", "n": 1},
        {"kind": "rand", "n": 3},
        {"kind": "sup", "n": 3, "num_queries": 0},
        {"kind": "sup", "n": 3, "blank_fraction": 0.5},
        {"kind": "rand", "n": 3, "num_queries": 5, "rand_scale": -1},
    ],
)
def test_bad_plans_rejected(kwargs):
    with pytest.raises(ValueError):
        QueryPlan(**kwargs)
