"""A release decoder: what the teacher should see of a release in a reduced basis, computed from public images only.

A release in a basis (the DCT's low-frequency coefficients, :mod:`ldpclient.privacy.basis`) is rebuilt into an
image by the basis's inverse today: the noise comes back as a blur of speckles the teacher reads poorly. The noise
is no secret (its distribution follows from the mechanism, epsilon, clip norm and basis, all public), so how likely
each public image is to have given a release can be computed exactly. The decoder sends the mean of the public
images weighted by that likelihood: the posterior mean of the record when the records are drawn like the public
images, which is the least mean-squared-error image given the release under that prior. It has nothing to learn and
nothing to tune. Computed from a release alone, its output is post-processing: no privacy cost.

The decoder never sees a private image: it holds the public images the user gave (``label --public``), their
coefficients as the mechanism clips them, and the noise's scale measured on one release of those images
(``public=True``: epsilon 0) drawn from a seed computed from their values. It is a function of the public images,
the mechanism and the seed alone. Whether a run sends decoded releases is decided by asking the teacher
(:mod:`.decode_check`).

The likelihood: Laplace noise for a release clipped in the L1 norm (the ``laplace`` mechanism's), Gaussian for one
clipped in L2 (``gaussian``'s, and an approximation of ``quantised-rr``'s). Measured in benchmarks/decoder.md.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Sequence

import torch

from ..privacy.base import Mechanism
from ..privacy.basis import CoefficientLayout
from ..privacy.release import Derived, Release

#: Most values (channels x height x width) of a record a decoder is built for: each decoded release is a weighted
#: sum of every public image, so its cost grows with their size (64x64 RGB: 12,288 multiply-adds per public image).
DECODER_MAX_VALUES = 64 * 64 * 3
#: Releases decoded at once: their likelihood under every public image is held as one ``(rows, public)`` matrix.
DECODER_ROWS = 256
#: The decoder's method; part of its key (:func:`decoder_key`).
DECODER_VERSION = 2


class ReleaseDecoder:
    """Maps released coefficients ``(N, K)`` to records ``(N, *record_shape)`` in the domain's units: the public
    images ``(P, *record_shape)`` weighted by how likely each is to have given the release.

    ``coefficients``: the public images' clipped coefficients ``(P, K)``, as the mechanism computes them before its
    noise; ``norm``: the mechanism's clipping norm (``"l1"``: Laplace noise of scale ``scale``, ``"l2"``: Gaussian
    of standard deviation ``scale``, per coefficient). Row-wise (each release decoded on its own), so
    :meth:`decoded` is post-processing that :meth:`~ldpclient.privacy.release.Derived.map` accepts."""

    def __init__(self, images: torch.Tensor, coefficients: torch.Tensor, norm: str, scale: float) -> None:
        if len(images) < 1 or len(images) != len(coefficients):
            raise ValueError("a decoder needs public images and one coefficient vector per image")
        if norm not in ("l1", "l2") or not math.isfinite(scale) or scale <= 0:
            raise ValueError(f"a decoder needs an l1 or l2 noise of positive finite scale, got {norm} {scale}")
        self.record_shape = tuple(int(s) for s in images.shape[1:])
        self.images = images.detach().to(torch.float64).flatten(1)
        self.coefficients = coefficients.detach().to(torch.float64)
        self.norm, self.scale = norm, float(scale)

    def __call__(self, released: torch.Tensor) -> torch.Tensor:
        """The posterior mean of the record given each release ``(N, K)``: ``(N, *record_shape)`` float32 (computed
        in float64, so that a row comes out the same whichever rows it is decoded with)."""
        out = [self.posterior(part) @ self.images for part in released.split(DECODER_ROWS)]
        return torch.cat(out).to(torch.float32).reshape(len(released), *self.record_shape)

    def posterior(self, released: torch.Tensor) -> torch.Tensor:
        """``(N, P)`` float64: each public image's probability of having given each release ``(N, K)`` (rows sum
        to 1), when the records are drawn uniformly from the public images."""
        released = released.flatten(1).to(torch.float64)
        if self.norm == "l1":
            log_likelihood = -torch.cdist(released, self.coefficients, p=1) / self.scale
        else:
            log_likelihood = -torch.cdist(released, self.coefficients).square() / (2 * self.scale ** 2)
        return log_likelihood.softmax(dim=1)

    def decoded(self, release: Release) -> Derived:
        """``release`` decoded (post-processing: one more step on a :class:`~ldpclient.privacy.release.Derived`)."""
        return Derived.from_release(release).map(self, "decode(public-image posterior)")


def decodable(mechanism: Mechanism, record_shape: Sequence[int]) -> str | None:
    """Why releases of ``record_shape`` by ``mechanism`` are not decoded (None: they can be): a decoder is for
    releases in a basis, on records of at most :data:`DECODER_MAX_VALUES` values."""
    if mechanism.reconstruction(tuple(record_shape)) is None:
        return "the releases are pixels, not coefficients of a basis"
    if math.prod(record_shape) > DECODER_MAX_VALUES:
        return f"records of more than {DECODER_MAX_VALUES} values"
    return None


def decoder_key(mechanism: Mechanism, public: torch.Tensor, seed: int) -> str:
    """16 hex characters naming a decoder by everything that shapes it: the mechanism's configuration, the public
    images it decodes into (their float32 values), the seed and :data:`DECODER_VERSION`."""
    h = hashlib.sha256(f"ldpclient.decoder.v{DECODER_VERSION}:{mechanism!r}:{sorted(mechanism.config().items())!r}:"
                       f"{int(seed)}".encode())
    h.update(public.detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class PublicCoefficients:
    """Public images ``(P, C, H, W)`` (clipped to the mechanism's domain) as a release in a basis sees them: the
    ``layout``, their clipped ``coefficients`` ``(P, K)`` float64 and the ``noise`` ``(P, K)`` one release of them
    added (``public=True``: epsilon 0)."""

    images: torch.Tensor
    layout: CoefficientLayout
    coefficients: torch.Tensor
    noise: torch.Tensor


def public_coefficients(mechanism: Mechanism, public: torch.Tensor, *, seed: int) -> PublicCoefficients:
    """:class:`PublicCoefficients` of ``public`` images in ``mechanism``'s domain, the noise drawn from ``seed``;
    ValueError without images or for a mechanism that releases pixels."""
    if len(public) < 1:
        raise ValueError("public images are needed")
    layout = mechanism.reconstruction(tuple(public.shape[1:]))
    if not isinstance(layout, CoefficientLayout):
        raise ValueError("the releases are pixels, not coefficients of a basis")
    images = public.detach().clamp(mechanism.domain.low, mechanism.domain.high)
    coefficients, _ = layout.clip(layout.forward(images))
    released = mechanism.release(images, generator=torch.Generator().manual_seed(int(seed) % 2**63), public=True)
    return PublicCoefficients(images, layout, coefficients, released.values.to(torch.float64) - coefficients)


def fit_decoder(mechanism: Mechanism, public: torch.Tensor, *, seed: int) -> ReleaseDecoder:
    """The decoder of ``mechanism``'s releases into ``public`` images ``(N, C, H, W)`` in the mechanism's domain:
    their coefficients, and the noise's scale measured on one release of them (``public=True``: epsilon 0) with
    noise drawn from ``seed``. The same images, mechanism and ``seed`` give the same decoder."""
    seen = public_coefficients(mechanism, public, seed=seed)
    norm, noise = seen.layout.norm, seen.noise
    scale = noise.abs().mean() if norm == "l1" else noise.square().mean().sqrt()
    return ReleaseDecoder(seen.images, seen.coefficients, norm, float(scale))


__all__ = ["DECODER_MAX_VALUES", "PublicCoefficients", "ReleaseDecoder", "decodable", "decoder_key", "fit_decoder",
           "public_coefficients"]
