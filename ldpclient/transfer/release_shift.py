"""Whether the private images are like the public ones, read from the releases alone (no privacy cost).

A run beside public images leans on them being like the private images: the held-out public images stand in for
the private ones when the verdict judges the labels, a decoder decodes into them, a ``--basis pca`` release is
fitted on them. Whether they are can be read from what is already public: the private releases. Noise of known
spread (measured on one release of the public images, ``public=True``) is added to each coefficient, so when the
private images are drawn like the public ones, the mean of the private releases' coefficient ``k`` differs from the
public images' by a normal error of variance ``v_k / P + (v_k + n_k) / N`` (``v_k``: the public coefficients'
variance, ``n_k``: the noise's; ``P`` public images, ``N`` private releases). The **shift** is the mean over the
K coefficients of the squared difference over that variance: about 1 when the images are alike (0.78-1.4 measured
on digits, MNIST, colour digits, Fashion-MNIST and CIFAR-10, DCT and PCA releases at 100 per image), and far above it
when they are not (public images of classes 0-4 only: 2.4-88; of another source: 5.6-318). Where the releases keep
too little of the images it sees nothing (colour digits: 1.0-1.2 beside either; benchmarks/decoder.md).

It is computed from releases and public images only: post-processing, nothing sent, nothing charged. Only for
releases in a basis (``dct``, ``pca``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from ..io.document import JSONDict
from ..privacy.base import Mechanism
from .decoder import public_coefficients

#: How many standard deviations of the alike images' shift (``sqrt(2 / K)`` over K coefficients: the mean of K
#: squared standard normals) above 1 the shift may reach before the images are called unlike.
SHIFT_DEVIATIONS = 4.0


@dataclass(frozen=True)
class ReleaseShift:
    """``shift``: the mean squared standardised difference of the private releases' coefficient means from the
    public images'; ``limit``: the most alike images reach (``1 + SHIFT_DEVIATIONS * sqrt(2 / K)``);
    ``coefficients``: K; ``private``: N releases; ``public``: P images."""

    shift: float
    limit: float
    coefficients: int
    private: int
    public: int

    @property
    def unlike(self) -> bool:
        """Whether the private images are measurably unlike the public ones."""
        return self.shift > self.limit

    def as_dict(self) -> JSONDict:
        return {**asdict(self), "unlike": self.unlike}


def release_shift(mechanism: Mechanism, public: torch.Tensor, released: torch.Tensor, *, seed: int
                  ) -> ReleaseShift | None:
    """The :class:`ReleaseShift` of ``released`` coefficients ``(N, K)`` (the private releases of ``mechanism``)
    from ``public`` images ``(P, C, H, W)`` in its domain (their noise drawn from ``seed``); None for releases of
    pixels, or fewer than 2 of either."""
    if mechanism.reconstruction(tuple(public.shape[1:])) is None or min(len(public), len(released)) < 2:
        return None
    seen = public_coefficients(mechanism, public, seed=seed)
    spread = seen.coefficients.var(dim=0)
    noise = seen.noise.square().mean(dim=0)
    n, p = len(released), len(public)
    difference = released.to(torch.float64).mean(dim=0) - seen.coefficients.mean(dim=0)
    shift = float((difference.square() / (spread / p + (spread + noise) / n).clamp_min(1e-300)).mean())
    k = int(difference.numel())
    return ReleaseShift(shift, 1.0 + SHIFT_DEVIATIONS * math.sqrt(2.0 / k), k, n, p)


__all__ = ["SHIFT_DEVIATIONS", "ReleaseShift", "release_shift"]
