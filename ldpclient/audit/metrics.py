"""Image similarity figures for reconstructions, per image: MSE, PSNR and SSIM.

All inputs are float tensors ``(N, C, H, W)`` in the domain's units; ``data_range``
is the width of that domain (1.0 for images in [0, 1], 255 for bytes).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _check_pair(x: torch.Tensor, y: torch.Tensor) -> None:
    if x.shape != y.shape:
        raise ValueError(f"image batches must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    if x.dim() != 4:
        raise ValueError(f"expected (N, C, H, W) tensors, got {x.dim()} dimensions")


def mse(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean squared error per image, ``(N,)`` float64."""
    _check_pair(x, y)
    return ((x.double() - y.double()) ** 2).flatten(1).mean(1)


def psnr(x: torch.Tensor, y: torch.Tensor, data_range: float = 1.0) -> torch.Tensor:
    """Peak signal-to-noise ratio per image in dB, ``(N,)``; identical images give +inf."""
    err = mse(x, y)
    return 10.0 * torch.log10(torch.as_tensor(data_range, dtype=torch.float64) ** 2 / err)


def mean_psnr(x: torch.Tensor, y: torch.Tensor, data_range: float = 1.0) -> float:
    """PSNR of the mean squared error over the batch (finite unless every image matches)."""
    err = mse(x, y).mean().item()
    return math.inf if err == 0 else 10.0 * math.log10(data_range**2 / err)


def gaussian_window(size: int = 7, sigma: float = 1.5) -> torch.Tensor:
    """Normalised 2-D Gaussian window ``(size, size)`` float64."""
    if size < 1 or size % 2 == 0:
        raise ValueError(f"window size must be a positive odd integer, got {size}")
    coords = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-(coords**2) / (2 * sigma**2))
    g = g / g.sum()
    return g[:, None] * g[None, :]


def ssim(
    x: torch.Tensor,
    y: torch.Tensor,
    data_range: float = 1.0,
    window_size: int = 7,
    sigma: float = 1.5,
) -> torch.Tensor:
    """Structural similarity (Wang et al. 2004) per image, ``(N,)`` in [-1, 1].

    Gaussian window (default 7x7, sigma 1.5, suited to 28x28 images), constants
    K1 = 0.01, K2 = 0.03, statistics over 'valid' window positions, averaged over
    channels. Identical images give 1.
    """
    _check_pair(x, y)
    n, c, h, w = x.shape
    if h < window_size or w < window_size:
        raise ValueError(f"images {h}x{w} are smaller than the SSIM window {window_size}")
    g1 = gaussian_window(window_size, sigma).sum(0).to(x.device)  # the separable 1-D factor
    row = g1.view(1, 1, 1, -1).repeat(c, 1, 1, 1)
    col = g1.view(1, 1, -1, 1).repeat(c, 1, 1, 1)
    x, y = x.double(), y.double()
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2

    def filt(t: torch.Tensor) -> torch.Tensor:
        return F.conv2d(F.conv2d(t, row, groups=c), col, groups=c)

    mu_x, mu_y = filt(x), filt(y)
    sxx = filt(x * x) - mu_x**2
    syy = filt(y * y) - mu_y**2
    sxy = filt(x * y) - mu_x * mu_y
    num = (2 * mu_x * mu_y + c1) * (2 * sxy + c2)
    den = (mu_x**2 + mu_y**2 + c1) * (sxx + syy + c2)
    return (num / den).flatten(1).mean(1)
