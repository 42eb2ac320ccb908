"""Statistics and image metrics used by the audit."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import beta
from sklearn.metrics import roc_auc_score

from ldpclient.audit.metrics import gaussian_window, mean_psnr, mse, psnr, ssim
from ldpclient.audit.stats import clopper_pearson, roc_auc, tpr_at_fpr


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (50, 1000), (12345, 100000), (1, 2_000_000)])
def test_clopper_pearson_matches_scipy(k, n):
    lo, hi = clopper_pearson(k, n, 0.05)
    ref_lo = 0.0 if k == 0 else beta.ppf(0.025, k, n - k + 1)
    ref_hi = 1.0 if k == n else beta.ppf(0.975, k + 1, n - k)
    assert lo == pytest.approx(ref_lo, rel=1e-7, abs=1e-12)
    assert hi == pytest.approx(ref_hi, rel=1e-7, abs=1e-12)


def test_clopper_pearson_rejects_bad_counts():
    with pytest.raises(ValueError, match="successes"):
        clopper_pearson(11, 10)
    with pytest.raises(ValueError, match="trials"):
        clopper_pearson(0, 0)


def test_roc_auc_and_tpr_match_sklearn_with_ties():
    g = torch.Generator().manual_seed(0)
    pos = torch.randn(200, generator=g) + 1
    neg = torch.randn(300, generator=g)
    neg[:20] = pos[:20]  # ties
    ref = roc_auc_score([1] * 200 + [0] * 300, torch.cat([pos, neg]).numpy())
    assert roc_auc(pos, neg) == pytest.approx(ref, abs=1e-12)
    # TPR at 1% FPR: 3 negatives may lie above the threshold
    thr = torch.sort(neg, descending=True).values[3]
    assert tpr_at_fpr(pos, neg, 0.01) == pytest.approx(float((pos > thr).double().mean()))
    assert tpr_at_fpr(pos + 100, neg, 0.0) == 1.0


def _ssim_reference(x: np.ndarray, y: np.ndarray, win: np.ndarray) -> float:
    """Loop implementation of SSIM over valid windows (single channel)."""
    k = win.shape[0]
    c1, c2 = 0.01**2, 0.03**2
    vals = []
    for i in range(x.shape[0] - k + 1):
        for j in range(x.shape[1] - k + 1):
            a, b = x[i : i + k, j : j + k], y[i : i + k, j : j + k]
            ma, mb = (win * a).sum(), (win * b).sum()
            va = (win * a * a).sum() - ma**2
            vb = (win * b * b).sum() - mb**2
            cov = (win * a * b).sum() - ma * mb
            vals.append(((2 * ma * mb + c1) * (2 * cov + c2)) / ((ma**2 + mb**2 + c1) * (va + vb + c2)))
    return float(np.mean(vals))


def test_ssim_matches_loop_reference_and_orders_noise():
    g = torch.Generator().manual_seed(1)
    x = torch.rand(2, 1, 12, 12, generator=g)
    y = (x + 0.2 * torch.randn(2, 1, 12, 12, generator=g)).clamp(0, 1)
    got = ssim(x, y)
    win = gaussian_window(7, 1.5).numpy()
    for i in range(2):
        assert got[i].item() == pytest.approx(
            _ssim_reference(x[i, 0].double().numpy(), y[i, 0].double().numpy(), win), abs=1e-10
        )
    assert torch.allclose(ssim(x, x), torch.ones(2, dtype=torch.float64))
    noisier = (x + 0.6 * torch.randn(2, 1, 12, 12, generator=g)).clamp(0, 1)
    assert (ssim(x, noisier) < got).all()


def test_mse_psnr():
    x = torch.zeros(3, 1, 8, 8)
    y = torch.full((3, 1, 8, 8), 0.1)
    assert torch.allclose(mse(x, y), torch.full((3,), 0.01, dtype=torch.float64))
    assert psnr(x, y)[0].item() == pytest.approx(20.0)
    assert mean_psnr(x, x) == math.inf
    with pytest.raises(ValueError, match="same shape"):
        mse(x, y[:2])
    with pytest.raises(ValueError, match="smaller than the SSIM window"):
        ssim(torch.zeros(1, 1, 5, 5), torch.zeros(1, 1, 5, 5))
