"""A release decoder: what the teacher should see of a release in a reduced basis, learnt from public images only.

A release in a basis (the DCT's low-frequency coefficients, :mod:`ldpclient.privacy.basis`) is rebuilt into an
image by the basis's inverse today: the noise comes back as a blur of speckles the teacher reads poorly. The noise
is no secret (its distribution follows from the mechanism, epsilon, clip norm and basis, all public), so a model
trained on public images, each released through the run's own mechanism, learns to map a release to the image it
most likely came from. Computed from a release alone, its output is post-processing: no privacy cost.

The decoder never sees a private image: it is trained on the public images the user gave (``label --public``),
released with ``public=True`` (the mechanism's noise, epsilon 0), from a seed drawn from the images' values, so its
weights are a function of the public images, the mechanism and the seed alone. Whether a run sends decoded
releases is decided by asking the teacher (:mod:`.decode_check`).

The model: an MLP from the release's values (flattened) to the record, two hidden layers of
:data:`DECODER_HIDDEN` units, a sigmoid scaled to the domain; trained with mean squared error against the clean
image, on a fresh release of every public image each epoch. Measured in benchmarks/decoder.md.
"""

from __future__ import annotations

import hashlib
import math
from typing import Sequence

import torch
from torch import nn

from ..privacy.base import Mechanism
from ..privacy.guarantee import Domain
from ..privacy.release import Derived, Release

#: Hidden units of each of the decoder's two hidden layers.
DECODER_HIDDEN = 256
#: Epochs over the public images (each a fresh release of every one), and the most optimiser steps in all: 150
#: epochs of the benchmark's 258 images are 750 steps; 1,000 images stop at 2,400.
DECODER_EPOCHS = 150
DECODER_MAX_STEPS = 2_400
#: Public images per optimiser step.
DECODER_BATCH = 64
#: Most values (channels x height x width) of a record a decoder is built for: its output layer holds
#: ``DECODER_HIDDEN`` weights per value (3 M at 64x64 RGB).
DECODER_MAX_VALUES = 64 * 64 * 3
#: The layout of the decoder and its training; part of its key (:func:`decoder_key`).
DECODER_VERSION = 1


class ReleaseDecoder(nn.Module):
    """Maps released values ``(N, *released_shape)`` to records ``(N, *record_shape)`` in ``domain``'s units.

    Row-wise (no batch statistics), so :meth:`decoded` is post-processing that
    :meth:`~ldpclient.privacy.release.Derived.map` accepts."""

    def __init__(self, released_values: int, record_shape: Sequence[int], domain: Domain,
                 hidden: int = DECODER_HIDDEN) -> None:
        super().__init__()
        self.record_shape = tuple(int(s) for s in record_shape)
        self.low, self.high = float(domain.low), float(domain.high)
        self.net = nn.Sequential(
            nn.Linear(int(released_values), hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, math.prod(self.record_shape)), nn.Sigmoid(),
        )

    def forward(self, released: torch.Tensor) -> torch.Tensor:
        out = self.net(released.flatten(1).to(torch.float32))
        return (self.low + (self.high - self.low) * out).reshape(len(released), *self.record_shape)

    def decoded(self, release: Release) -> Derived:
        """``release`` decoded (post-processing: one more step on a :class:`~ldpclient.privacy.release.Derived`)."""
        def decode(values: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                return self(values)
        return Derived.from_release(release).map(decode, "decode(public-image decoder)")


def decodable(mechanism: Mechanism, record_shape: Sequence[int]) -> str | None:
    """Why releases of ``record_shape`` by ``mechanism`` are not decoded (None: they can be): a decoder is for
    releases in a basis, on records of at most :data:`DECODER_MAX_VALUES` values."""
    if mechanism.reconstruction(tuple(record_shape)) is None:
        return "the releases are pixels, not coefficients of a basis"
    if math.prod(record_shape) > DECODER_MAX_VALUES:
        return f"records of more than {DECODER_MAX_VALUES} values"
    return None


def training_steps(public_images: int) -> int:
    """Optimiser steps :func:`train_decoder` takes on ``public_images`` images (what a dry run states of its
    cost; 750 steps took 9 s on 2 cores for 28x28 images)."""
    batches = math.ceil(int(public_images) / DECODER_BATCH)
    return batches * max(1, min(DECODER_EPOCHS, DECODER_MAX_STEPS // max(batches, 1))) if batches else 0


def decoder_key(mechanism: Mechanism, public: torch.Tensor, seed: int) -> str:
    """16 hex characters naming a decoder by everything that shapes it: the mechanism's configuration, the public
    images it is trained on (their float32 values), the seed and :data:`DECODER_VERSION`."""
    h = hashlib.sha256(f"ldpclient.decoder.v{DECODER_VERSION}:{mechanism!r}:{sorted(mechanism.config().items())!r}:"
                       f"{int(seed)}".encode())
    h.update(public.detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def untrained_decoder(mechanism: Mechanism, public: torch.Tensor, generator: torch.Generator) -> ReleaseDecoder:
    """A decoder sized for ``mechanism``'s releases of records like ``public`` ``(N, C, H, W)`` (the released shape
    read off one public release, its noise drawn from ``generator``), with fresh weights from the global generator."""
    probe = mechanism.release(public[:1], generator=generator, public=True)
    return ReleaseDecoder(math.prod(probe.released_shape), public.shape[1:], mechanism.domain)


def train_decoder(mechanism: Mechanism, public: torch.Tensor, *, seed: int) -> ReleaseDecoder:
    """A decoder for ``mechanism``'s releases, trained on ``public`` images ``(N, C, H, W)`` in the mechanism's
    domain, each released anew every epoch (``public=True``: epsilon 0); the same images, mechanism and ``seed``
    give the same weights. The global random state is left as it was."""
    if len(public) < 1:
        raise ValueError("a decoder needs public images to learn from")
    public = public.detach().to(torch.float32)
    noise = torch.Generator().manual_seed(int(seed) % 2**63)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed) % 2**63)
        decoder = untrained_decoder(mechanism, public, noise)
        optimiser = torch.optim.Adam(decoder.parameters(), lr=1e-3)
        target = public.clamp(mechanism.domain.low, mechanism.domain.high)
        for _ in range(training_steps(len(public)) // math.ceil(len(public) / DECODER_BATCH)):
            released = mechanism.release(public, generator=noise, public=True).values
            for index in torch.randperm(len(public)).split(DECODER_BATCH):
                loss = nn.functional.mse_loss(decoder(released[index]), target[index])
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
    return decoder.eval()


__all__ = ["DECODER_MAX_VALUES", "ReleaseDecoder", "decodable", "decoder_key", "train_decoder",
           "training_steps", "untrained_decoder"]
