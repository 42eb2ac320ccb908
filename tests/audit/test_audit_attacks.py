"""Reconstruction, linkage, least squares, denoisers, membership inference, RME.

Each attack must succeed without noise and fall toward chance as noise grows.
Small synthetic records (quadrant blobs, 16x16) keep the file to seconds.
"""

import math

import pytest
import torch
import torch.nn as nn

from ldpclient.audit.denoise import build_denoisers, median_filter
from ldpclient.audit.linkage import linkage_attack
from ldpclient.audit.linking import least_squares_records
from ldpclient.audit.membership import membership_inference
from ldpclient.audit.noise_model import NoiseModel
from ldpclient.audit.reconstruction import reconstruction_attack
from ldpclient.audit.rme import ReverseManifoldEmbedding, rme_linkage_audit
from ldpclient.audit.synthetic import synthetic_strokes

SHAPE = (1, 16, 16)


def _laplace(shape, g, b):
    return b * (torch.empty(shape).exponential_(generator=g) - torch.empty(shape).exponential_(generator=g))


def laplace_model(eps: float) -> NoiseModel:
    b = 1.0 / eps
    return NoiseModel(
        release_fn=lambda x, g: x + _laplace(x.shape, g, b), extra_noise_fn=lambda s, g: _laplace(s, g, b)
    )


def quadrant_records(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Images with a bright blob in one of 4 quadrants (the class) plus faint strokes."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 4, (n,), generator=g)
    x = 0.3 * synthetic_strokes(n, SHAPE, generator=g)
    for k in range(n):
        r, c = divmod(int(labels[k]), 2)
        x[k, :, r * 8 + 2 : r * 8 + 6, c * 8 + 2 : c * 8 + 6] = 1.0
    return x, labels


def quadrant_teacher(x: torch.Tensor) -> torch.Tensor:
    q = torch.stack([x[:, :, :8, :8].mean((1, 2, 3)), x[:, :, :8, 8:].mean((1, 2, 3)),
                     x[:, :, 8:, :8].mean((1, 2, 3)), x[:, :, 8:, 8:].mean((1, 2, 3))], 1)
    return q.argmax(1)


@pytest.fixture(scope="module")
def records():
    return quadrant_records(60)[0]


def test_reconstruction_without_noise_is_perfect_and_teacher_agrees(records):
    bank = build_denoisers(laplace_model(1e9), "none", SHAPE, cnn_steps=0, validation_size=64)
    src = torch.arange(len(records))[:, None]
    res = reconstruction_attack(records, src, records, bank, teacher=quadrant_teacher)
    pq = res["per_query"]
    assert pq["mse"] < 1e-6 and pq["ssim"] > 0.999
    assert pq["teacher_agreement"] == 1.0
    assert res["linked"]["ssim"] > 0.999
    assert pq["chance"]["ssim"] < 0.9  # a random other record is not a reconstruction


def test_reconstruction_falls_toward_chance_with_noise(records):
    g = torch.Generator().manual_seed(1)
    src = torch.arange(len(records))[:, None]
    out = {}
    for eps in (4.0, 0.05):
        model = laplace_model(eps)
        bank = build_denoisers(model, "none", SHAPE, cnn_steps=0, validation_size=64)
        q = model.releases(records, g)
        out[eps] = reconstruction_attack(q, src, records, bank, teacher=quadrant_teacher)["per_query"]
    assert out[4.0]["ssim"] > out[0.05]["ssim"] + 0.2
    assert out[4.0]["teacher_agreement"] >= 0.9
    # at eps 0.05 per element the teacher's verdict on reconstructions is near chance (4 classes)
    n = len(records)
    assert out[0.05]["teacher_agreement"] < 0.25 + 4 * math.sqrt(0.25 * 0.75 / n)


def test_linkage_no_noise_is_certain_and_falls_to_chance(records):
    g = torch.Generator().manual_seed(2)
    n = len(records)
    src = torch.arange(n)[:, None]
    res = linkage_attack(records, src, records)
    assert res["top1_rate"] == 1.0 and res["no_noise_top1"] == 1.0
    assert res["chance_top1"] == pytest.approx(1 / n)
    strong = linkage_attack(laplace_model(4.0).releases(records, g), src, records)
    weak = linkage_attack(laplace_model(0.01).releases(records, g), src, records)
    assert strong["top1_rate"] > 0.85
    # chance 1/60: allow a generous binomial margin
    assert weak["top1_rate"] <= 1 / n + 4 * math.sqrt((1 / n) / n) + 1 / n


def test_linkage_sup_pairs(records):
    g = torch.Generator().manual_seed(3)
    n = len(records)
    i = torch.randint(0, n, (120,), generator=g)
    j = (i + torch.randint(1, n, (120,), generator=g)) % n
    src = torch.stack([i, j], 1)
    clean = (records[i] + records[j]) / 2
    res = linkage_attack(clean, src, records)
    assert res["pair_rate"] > 0.9 and res["top1_rate"] > 0.9
    assert res["chance_pair"] == pytest.approx(1 / math.comb(n, 2))
    rel = laplace_model(0.01).releases(records, g)
    noisy = linkage_attack((rel[i] + rel[j]) / 2, src, records)
    assert noisy["pair_rate"] < 0.05
    assert noisy["top1_rate"] < noisy["chance_top1"] + 4 * math.sqrt(noisy["chance_top1"] / 120) + 0.02


def test_least_squares_recovers_releases_from_sup_pairs():
    g = torch.Generator().manual_seed(4)
    rel = torch.randn(7, 1, 4, 4, generator=g)
    pairs = torch.tensor([[0, 1], [1, 2], [2, 0], [2, 3], [3, 4], [4, 5], [5, 6], [6, 3], [1, 5]])
    q = (rel[pairs[:, 0]] + rel[pairs[:, 1]]) / 2
    est, covered = least_squares_records(q, pairs, 8)
    assert covered[:7].all() and not covered[7]
    assert torch.allclose(est[:7], rel, atol=1e-4)
    # a bipartite pair graph (even cycle only) leaves the records ambiguous
    even = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0]])
    est2, _ = least_squares_records((rel[even[:, 0]] + rel[even[:, 1]]) / 2, even, 4)
    assert not torch.allclose(est2[:4], rel[:4], atol=1e-2)


def test_median_filter_matches_naive():
    x = torch.rand(2, 1, 6, 7, generator=torch.Generator().manual_seed(5))
    got = median_filter(x, 3)
    pad = torch.nn.functional.pad(x, (1, 1, 1, 1), mode="reflect")
    for a in range(6):
        for b in range(7):
            ref = pad[:, :, a : a + 3, b : b + 3].reshape(2, -1).median(1).values
            assert torch.allclose(got[:, 0, a, b], ref)
    with pytest.raises(ValueError, match="odd"):
        median_filter(x, 4)


def test_denoising_cnn_trained_on_synthetic_data_beats_raw_queries():
    bank = build_denoisers(laplace_model(1.0), "none", SHAPE, cnn_steps=40, validation_size=128)
    assert bank.validation_mse["cnn"] < 0.7 * bank.validation_mse["clip"]
    assert bank.validation_mse[bank.best] == min(bank.validation_mse.values())


class _Memoriser(nn.Module):
    """Confident on the exact member images, uniform elsewhere (a maximally overfit student)."""

    def __init__(self, members, labels, classes=4):
        super().__init__()
        self.m, self.y, self.c = members.flatten(1), labels, classes

    def forward(self, x):
        d = torch.cdist(x.flatten(1), self.m, compute_mode="donot_use_mm_for_euclid_dist")
        hit = d.min(1).values < 1e-6
        logits = torch.zeros(x.shape[0], self.c)
        logits[hit, self.y[d.argmin(1)[hit]]] = 20.0
        return logits


def test_membership_inference_detects_memorisation_and_not_a_blind_model():
    x, y = quadrant_records(80, seed=9)
    mem, non = x[:40], x[40:]
    overfit = membership_inference(_Memoriser(mem, y[:40]), mem, y[:40], non, y[40:])
    assert overfit["student"]["auc"] > 0.99 and overfit["student"]["tpr_at_0.01_fpr"] > 0.9
    blind = nn.Sequential(nn.Flatten(), nn.Linear(256, 4))
    nn.init.zeros_(blind[1].weight)
    nn.init.zeros_(blind[1].bias)
    res = membership_inference(blind, mem, y[:40], non, y[40:], baseline_model=_Memoriser(mem, y[:40]))
    assert res["student"]["auc"] == pytest.approx(0.5)
    assert res["no_noise"]["auc"] > 0.99
    assert res["chance"]["auc"] == 0.5


def test_rme_invertible_is_exactly_inverted_and_adds_no_protection():
    g = torch.Generator().manual_seed(6)
    x = torch.rand(50, 12, generator=g, dtype=torch.float64)
    rme = ReverseManifoldEmbedding(12, seed=1, scale=1.0)
    y = rme(x)
    assert not torch.allclose(y, x)
    assert torch.allclose(rme.inverse(y), x, atol=1e-10)
    feats, labels = quadrant_records(80, seed=2)
    res = rme_linkage_audit(feats.flatten(1)[:, ::4], 0.2, labels=labels)
    assert res["invertible"]["max_inversion_error"] < 1e-9
    assert res["invertible"]["attacker_inverts_l1"] == res["plain_l1"]
    assert res["no_noise"]["plain_l1"] == 1.0
    with pytest.raises(ValueError, match="no inverse"):
        ReverseManifoldEmbedding(4, seed=0, mode="folding").inverse(torch.zeros(1, 4))
