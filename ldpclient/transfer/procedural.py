"""Procedural images: public queries drawn from nothing private, so they cost no privacy.

A data-free run asks the teacher about blank images under noise; their answers teach the student what the teacher
does on noise. Procedural images (dead leaves, 1/f noise, stripes, blobs) reach past the release's subspace and
past pure noise: they have edges, textures, colours and shapes at every scale, and a teacher answers them with
other classes than it answers noise. They are generated on the device from a seed, never from data, and sent as
they are (:func:`~ldpclient.privacy.public.public_release`: epsilon 0, no ledger).

Every image is in ``[0, 1]`` (the caller maps it to the teacher's value range), float32 ``(N, C, H, W)``; kind
``i % 4`` of :data:`KINDS` for image ``i``, so any ``N`` mixes the four evenly.
"""

from __future__ import annotations

import math

import torch

#: The four kinds, in the order images take them.
KINDS: tuple[str, ...] = ("dead-leaves", "pink-noise", "stripes", "blobs")


def _colours(n: int, channels: int, g: torch.Generator) -> torch.Tensor:
    """``(n, C, 1, 1)`` random colours (grey levels for one channel) in [0, 1]."""
    return torch.rand(n, channels, 1, 1, generator=g)


def _grid(h: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    ys = torch.arange(h, dtype=torch.float32).view(1, h, 1)
    xs = torch.arange(w, dtype=torch.float32).view(1, 1, w)
    return ys, xs


def dead_leaves(n: int, channels: int, h: int, w: int, g: torch.Generator, leaves: int = 40) -> torch.Tensor:
    """Occluding discs of random colour, radii from a power law (``P(r) ~ r**-3`` between 1 px and half the
    side): the scale-invariant statistics of natural images (Lee, Mumford & Huang 2001)."""
    ys, xs = _grid(h, w)
    image = _colours(n, channels, g).expand(n, channels, h, w).clone()
    r_min, r_max = 1.0, max(h, w) / 2.0
    for _ in range(leaves):
        u = torch.rand(n, 1, 1, generator=g)
        radius = 1.0 / torch.sqrt((1 - u) / r_min**2 + u / r_max**2)  # inverse CDF of r**-3 on [r_min, r_max]
        cy = torch.rand(n, 1, 1, generator=g) * h
        cx = torch.rand(n, 1, 1, generator=g) * w
        inside = ((ys - cy) ** 2 + (xs - cx) ** 2 <= radius**2).unsqueeze(1)
        image = torch.where(inside, _colours(n, channels, g), image)
    return image


def pink_noise(n: int, channels: int, h: int, w: int, g: torch.Generator) -> torch.Tensor:
    """Noise with amplitude ``1/f**a`` (``a`` uniform in [1, 2] per image), a shared luminance field plus weaker
    independent colour fields, each image stretched to [0, 1]."""
    fy = torch.fft.fftfreq(h).view(1, 1, h, 1)
    fx = torch.fft.rfftfreq(w).view(1, 1, 1, -1)
    f = torch.sqrt(fy**2 + fx**2).clamp_min(1.0 / max(h, w))
    a = 1.0 + torch.rand(n, 1, 1, 1, generator=g)
    def field(c: int) -> torch.Tensor:
        spectrum = torch.randn(n, c, h, w // 2 + 1, 2, generator=g)
        return torch.fft.irfft2(torch.view_as_complex(spectrum) / f**a, s=(h, w))
    x = field(1) + 0.5 * field(channels) if channels > 1 else field(1)
    lo = x.amin(dim=(1, 2, 3), keepdim=True)
    hi = x.amax(dim=(1, 2, 3), keepdim=True)
    return (x - lo) / (hi - lo).clamp_min(1e-12)


def stripes(n: int, channels: int, h: int, w: int, g: torch.Generator) -> torch.Tensor:
    """Sinusoidal gratings between two random colours: 1 to ``side / 4`` cycles across the image, any
    orientation and phase, sharpened to bars in half of the images."""
    ys, xs = _grid(h, w)
    theta = torch.rand(n, 1, 1, generator=g) * math.pi
    cycles = 1.0 + torch.rand(n, 1, 1, generator=g) * (max(h, w) / 4.0 - 1.0)
    phase = torch.rand(n, 1, 1, generator=g) * 2 * math.pi
    t = torch.sin(2 * math.pi * cycles * (xs * torch.cos(theta) + ys * torch.sin(theta)) / max(h, w) + phase)
    bars = torch.rand(n, 1, 1, generator=g) < 0.5
    t = torch.where(bars, torch.sign(t), t)
    mix = ((t + 1) / 2).unsqueeze(1)
    return _colours(n, channels, g) * mix + _colours(n, channels, g) * (1 - mix)


def blobs(n: int, channels: int, h: int, w: int, g: torch.Generator, count: int = 4) -> torch.Tensor:
    """One to ``count`` Gaussian blobs of random colour, position and width on a random background."""
    ys, xs = _grid(h, w)
    image = _colours(n, channels, g).expand(n, channels, h, w).clone()
    present = torch.arange(count).view(1, count) < torch.randint(1, count + 1, (n, 1), generator=g)
    for k in range(count):
        cy = torch.rand(n, 1, 1, generator=g) * h
        cx = torch.rand(n, 1, 1, generator=g) * w
        sigma = (0.05 + 0.25 * torch.rand(n, 1, 1, generator=g)) * max(h, w)
        weight = torch.exp(-((ys - cy) ** 2 + (xs - cx) ** 2) / (2 * sigma**2)).unsqueeze(1)
        weight = weight * present[:, k].view(n, 1, 1, 1)
        image = image * (1 - weight) + _colours(n, channels, g) * weight
    return image


def procedural_images(n: int, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """``n`` procedural images of ``shape`` ``(C, H, W)``, float32 in [0, 1], kinds :data:`KINDS` in turn."""
    if n < 0 or len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"procedural images need n >= 0 and a shape (C, H, W), got {n} and {shape}")
    c, h, w = (int(s) for s in shape)
    out = torch.empty(n, c, h, w, dtype=torch.float32)
    makers = (dead_leaves, pink_noise, stripes, blobs)
    for kind, make in enumerate(makers):
        idx = torch.arange(kind, n, len(makers))
        if len(idx):
            out[idx] = make(len(idx), c, h, w, generator).clamp(0.0, 1.0).to(torch.float32)
    return out


__all__ = ["KINDS", "blobs", "dead_leaves", "pink_noise", "procedural_images", "stripes"]
