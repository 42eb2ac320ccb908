"""The attacker's denoisers: classical filters and a small CNN trained on public/synthetic data.

Every denoiser maps queries ``(N, C, H, W)`` (domain units, noise included) to
estimates of the clean images in the declared domain ``[low, high]``. None of them
ever sees a private record: filter parameters are chosen and the CNN is trained on
queries simulated from synthetic images (:mod:`.synthetic`) with the attacker's
:class:`~.noise_model.NoiseModel` of the client.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .noise_model import NoiseModel
from .synthetic import blur, synthetic_strokes

Denoiser = Callable[[torch.Tensor], torch.Tensor]


def _blur_within(x: torch.Tensor, *, low: float, high: float, sigma: float) -> torch.Tensor:
    """Gaussian blur of ``x`` clamped to ``[low, high]`` first (outliers would smear)."""
    return blur(x.clamp(low, high), sigma)


def median_filter(x: torch.Tensor, k: int = 3) -> torch.Tensor:
    """k x k median filter per channel, reflect/replicate padding."""
    if k < 1 or k % 2 == 0:
        raise ValueError(f"median kernel must be a positive odd integer, got {k}")
    if k == 1:
        return x
    pad = k // 2
    mode = "reflect" if min(x.shape[-2:]) > pad else "replicate"
    patches = F.pad(x, (pad, pad, pad, pad), mode=mode).unfold(2, k, 1).unfold(3, k, 1)
    return patches.reshape(*patches.shape[:4], -1).median(dim=-1).values


def local_wiener(x: torch.Tensor, k: int, noise_var: float) -> torch.Tensor:
    """Adaptive (Lee/scipy-style) Wiener filter with k x k local statistics and known noise variance."""
    pad = k // 2
    mode = "reflect" if min(x.shape[-2:]) > pad else "replicate"
    c = x.shape[1]
    w = torch.full((c, 1, k, k), 1.0 / (k * k), dtype=x.dtype)
    xp = F.pad(x, (pad, pad, pad, pad), mode=mode)
    mean = F.conv2d(xp, w, groups=c)
    var = (F.conv2d(xp * xp, w, groups=c) - mean**2).clamp_min(0)
    gain = (var - noise_var).clamp_min(0) / var.clamp_min(max(noise_var, 1e-12))
    return mean + gain * (x - mean)


class DenoiseCNN(nn.Module):
    """Small dilated CNN (receptive field 21 px) predicting the clean image in [low, high].

    Inputs are clamped to ``[low - 4s, high + 4s]`` and scaled by ``1 / (s + width)``
    where ``s`` is the noise standard deviation it was trained for, so the same
    architecture works from no noise to very heavy noise.
    """

    def __init__(self, channels: int = 1, width: int = 24, low: float = 0.0, high: float = 1.0, noise_std: float = 1.0):
        super().__init__()
        self.low, self.high, self.noise_std = float(low), float(high), float(noise_std)
        layers: list[nn.Module] = []
        cin = channels
        for d in (1, 2, 4, 2, 1):
            layers += [nn.Conv2d(cin, width, 3, padding=d, dilation=d), nn.ReLU(inplace=True)]
            cin = width
        layers.append(nn.Conv2d(width, channels, 3, padding=1))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        span = self.high - self.low
        s = self.noise_std
        z = x.clamp(self.low - 4 * s, self.high + 4 * s)
        z = (z - (self.low + self.high) / 2) / (s + span)
        return self.low + span * torch.sigmoid(self.net(z))


def train_denoiser_cnn(
    model: NoiseModel,
    augment: str,
    shape: tuple[int, int, int],
    *,
    low: float = 0.0,
    high: float = 1.0,
    steps: int = 200,
    batch_size: int = 32,
    pool_size: int = 2048,
    width: int = 24,
    lr: float = 2e-3,
    seed: int = 0,
) -> DenoiseCNN:
    """Train a :class:`DenoiseCNN` on synthetic strokes noised by ``model`` (queries of ``augment``).

    Synthetic images in [0, 1] are mapped to ``[low, high]``. A fresh noise draw
    per step; MSE loss; Adam with the learning rate divided by 10 for the last third.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    g = torch.Generator().manual_seed(seed)
    pool = low + (high - low) * synthetic_strokes(pool_size, shape, generator=g)
    probe_q, probe_t = model.simulate(pool[:256], augment, g)
    noise_std = float((probe_q - probe_t).std().item())
    with torch.random.fork_rng(devices=[]):  # default init draws must not move the caller's global RNG
        net = DenoiseCNN(shape[0], width, low, high, noise_std)
    for m in net.modules():  # deterministic init from the seed
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_uniform_(m.weight, a=5**0.5, generator=g)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, [max(1, 2 * steps // 3)], 0.1)
    net.train()
    for _ in range(steps):
        idx = torch.randint(0, pool_size, (batch_size,), generator=g)
        q, t = model.simulate(pool[idx], augment, g)
        loss = F.mse_loss(net(q), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    net.eval()
    return net


@dataclass
class DenoiserBank:
    """Candidate denoisers and their MSE on simulated synthetic queries (the attacker's choice).

    ``candidates``: name -> denoiser. ``validation_mse``: name -> MSE against the
    clean synthetic targets (domain units squared). ``best``: the name with the
    lowest validation MSE, i.e. what an attacker without private data would pick.
    """

    candidates: dict[str, Denoiser]
    validation_mse: dict[str, float] = field(default_factory=dict)
    noise_std: float = 0.0

    @property
    def best(self) -> str:
        return min(self.validation_mse, key=self.validation_mse.__getitem__)


def build_denoisers(
    model: NoiseModel,
    augment: str,
    shape: tuple[int, int, int],
    *,
    low: float = 0.0,
    high: float = 1.0,
    cnn_steps: int = 200,
    validation_size: int = 512,
    seed: int = 0,
) -> DenoiserBank:
    """Filters (clip, Gaussian blur, median, local Wiener) and, if ``cnn_steps > 0``, a CNN.

    Filter parameters are swept and each is scored on ``validation_size`` synthetic
    queries; all outputs are clipped to ``[low, high]``.
    """
    g = torch.Generator().manual_seed(seed + 7919)
    clean = low + (high - low) * synthetic_strokes(validation_size, shape, generator=g)
    q, t = model.simulate(clean, augment, g)
    noise_var = float((q - t).var().item())

    def clipped(fn: Callable[[torch.Tensor], torch.Tensor]) -> Denoiser:
        return lambda x: fn(x.float()).clamp(low, high)

    cands: dict[str, Denoiser] = {"clip": clipped(lambda x: x)}
    spread = 3 * noise_var**0.5
    for s in (0.5, 1.0, 1.5, 2.0, 3.0):
        cands[f"blur(sigma={s:g})"] = clipped(
            functools.partial(_blur_within, low=low - spread, high=high + spread, sigma=s)
        )
    for k in (3, 5):
        cands[f"median({k}x{k})"] = clipped(functools.partial(median_filter, k=k))
    for k in (3, 5, 7):
        cands[f"wiener({k}x{k})"] = clipped(functools.partial(local_wiener, k=k, noise_var=noise_var))
    if cnn_steps > 0:
        net = train_denoiser_cnn(model, augment, shape, low=low, high=high, steps=cnn_steps, seed=seed)

        def cnn(x: torch.Tensor, net: DenoiseCNN = net) -> torch.Tensor:
            with torch.no_grad():
                return torch.cat([net(c.float()) for c in x.split(512)]).clamp(low, high)

        cands["cnn"] = cnn
    bank = DenoiserBank(cands, noise_std=noise_var**0.5)
    for name, fn in cands.items():
        bank.validation_mse[name] = float(((fn(q) - t) ** 2).mean().item())
    return bank
