"""Public synthetic images (random pen strokes and rings) for training the attacker's denoiser.

The attacker must not see the private records, so its denoiser learns from images
it can make itself: thick antialiased strokes (polylines and ellipses), softly
blurred, on a dark background, values in [0, 1]. They resemble handwriting without
being drawn from any data set.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _segment_distance(px: torch.Tensor, py: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance from pixel grid (H, W) to segments a->b given as (N, 2) endpoints: (N, H, W)."""
    ax, ay = a[:, 0, None, None], a[:, 1, None, None]
    dx, dy = (b[:, 0] - a[:, 0])[:, None, None], (b[:, 1] - a[:, 1])[:, None, None]
    t = ((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy + 1e-9)
    t = t.clamp(0, 1)
    return torch.sqrt((px - ax - t * dx) ** 2 + (py - ay - t * dy) ** 2)


def blur(images: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur of ``(N, C, H, W)`` with reflect padding (sigma in pixels)."""
    if sigma <= 0:
        return images
    radius = max(1, int(round(3 * sigma)))
    coords = torch.arange(-radius, radius + 1, dtype=images.dtype, device=images.device)
    k = torch.exp(-(coords**2) / (2 * sigma**2))
    k = k / k.sum()
    c = images.shape[1]
    pad_mode = "reflect" if min(images.shape[-2:]) > radius else "replicate"
    x = F.pad(images, (radius, radius, 0, 0), mode=pad_mode)
    x = F.conv2d(x, k.view(1, 1, 1, -1).repeat(c, 1, 1, 1), groups=c)
    x = F.pad(x, (0, 0, radius, radius), mode=pad_mode)
    return F.conv2d(x, k.view(1, 1, -1, 1).repeat(c, 1, 1, 1), groups=c)


def synthetic_strokes(
    n: int,
    shape: tuple[int, int, int] = (1, 28, 28),
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``n`` random stroke images ``(n, *shape)`` float32 in [0, 1] (public, data-free).

    Each image holds a 2-4 segment polyline and, half the time, an ellipse, drawn
    with a random pen width (relative to the image size), then blurred.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if len(shape) != 3:
        raise ValueError(f"shape must be (C, H, W), got {shape}")
    c, h, w = shape
    g = generator
    ys, xs = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
    dist = torch.full((n, h, w), float("inf"))
    points = torch.rand(n, 5, 2, generator=g)
    points[..., 0] = 0.2 + 0.6 * points[..., 0]
    points[..., 1] = 0.08 + 0.84 * points[..., 1]
    n_seg = torch.randint(2, 5, (n,), generator=g)
    for s in range(4):
        d = _segment_distance(xs, ys, points[:, s], points[:, s + 1])
        d[n_seg <= s] = float("inf")
        dist = torch.minimum(dist, d)
    centre = 0.3 + 0.4 * torch.rand(n, 2, generator=g)
    axes = 0.15 + 0.25 * torch.rand(n, 2, generator=g)
    r = torch.sqrt(((xs - centre[:, 0, None, None]) / axes[:, 0, None, None]) ** 2
                   + ((ys - centre[:, 1, None, None]) / axes[:, 1, None, None]) ** 2)
    ring = (r - 1).abs() * axes.min(1).values[:, None, None]
    has_ring = torch.rand(n, generator=g) < 0.5
    dist = torch.where(has_ring[:, None, None], torch.minimum(dist, ring), dist)
    pen = (0.05 + 0.07 * torch.rand(n, generator=g))[:, None, None]
    soft = 1.5 / max(h, w)
    img = ((pen - dist) / soft + 0.5).clamp(0, 1)
    img = img * (0.6 + 0.4 * torch.rand(n, 1, 1, generator=g))
    img = img[:, None].repeat(1, c, 1, 1)
    img = blur(img, sigma=(0.015 + 0.04 * float(torch.rand((), generator=g))) * max(h, w))
    return img.clamp(0, 1).float()
