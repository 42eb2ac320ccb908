"""The ``pca`` release basis (``--basis pca``): the leading principal components of the user's public images.

A record-level release like ``dct`` (:mod:`.basis`), in another orthonormal basis: the record (clipped to the
domain) is taken relative to the public images' mean and projected on their K leading principal components per
channel; colour records are first rotated into the opponent space (luminance keeps K, each chroma axis ``K // 4``,
at least 1). The coefficient vector is clipped to the norm ball of radius C (L1 for Laplace noise, L2 for
Gaussian), so two records' vectors differ by at most 2C: the same record-level sensitivity as ``dct``, and the same
guarantee for the same K, C and epsilon. The components put most of a record's energy in the first few
coefficients, so far fewer are needed than DCT frequencies (:data:`DEFAULT_PCA_COEFFICIENTS`), and the same clip
bound buys less noise per image.

The basis is a function of the public images alone (:func:`fit_pca`): fitting it reads no private record, and
a release in it costs what a ``dct`` release costs. It is named by :attr:`PcaBasis.digest`, computed from the public
images' values and K, so a mechanism's configuration (its ledger key, a decoder's key) changes with the images.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

import torch

from .basis import CoefficientLayout, default_clip_norm, opponent
from .guarantee import Domain

#: Luminance components a default keeps: measured on MNIST (benchmarks/decoder.md), 16 read best at 100 per image.
DEFAULT_PCA_COEFFICIENTS = 16
#: Most values per channel (height x width) a basis is fitted for: the fit holds the public images as one
#: ``(images, H x W)`` float64 matrix (64x64: 32 KiB per image).
PCA_MAX_VALUES = 64 * 64
#: Public images a basis is fitted on at most (the first ones, in the order given): 4,096 images of 64x64 values
#: are 128 MiB per channel.
PCA_MAX_IMAGES = 4096


def _record_shape(shape: Sequence[int]) -> tuple[int, int, int]:
    dims = tuple(int(s) for s in shape)
    if len(dims) != 3 or dims[0] not in (1, 3) or min(dims) < 1:
        raise ValueError(f"basis pca takes images of shape (1, H, W) or (3, H, W), got {dims}")
    return dims[0], dims[1], dims[2]


@dataclass(frozen=True, eq=False)
class PcaBasis:
    """Principal components of public images ``(P, C, H, W)``, float64.

    ``mean``: ``(C, H * W)``, per (opponent) channel; ``components``: per channel, ``(k, H * W)`` orthonormal rows,
    the leading first, each signed so that its largest-magnitude value is positive; ``digest``: 16 hex characters
    of the public images' float32 values, their shape and K (what names the basis in a mechanism's configuration).
    """

    record_shape: tuple[int, int, int]
    mean: torch.Tensor
    components: tuple[torch.Tensor, ...]
    digest: str

    @classmethod
    def unfitted(cls, record_shape: Sequence[int], coefficients: int | None = None) -> PcaBasis:
        """A basis that states its coefficient counts (so a mechanism's guarantee, which depends on them alone) but
        is not fitted yet: what a run plans with before its public images are read. Releasing through it is
        refused (ValueError); :func:`fit_pca` gives the basis a run releases in."""
        c, h, w = _record_shape(record_shape)
        counts = _counts(c, h, w, coefficients)
        return cls((c, h, w), torch.zeros(c, h * w, dtype=torch.float64),
                   tuple(torch.zeros(k, h * w, dtype=torch.float64) for k in counts), "")

    @property
    def fitted(self) -> bool:
        """Whether the basis was fitted on public images (:meth:`unfitted`: not yet)."""
        return bool(self.digest)

    @property
    def luminance_coefficients(self) -> int:
        """K: the components kept of the (luminance) channel."""
        return int(self.components[0].shape[0])

    def layout(self, record_shape: Sequence[int], domain: Domain, norm: str, clip_norm: float | None) -> PcaLayout:
        """The release layout of records of ``record_shape`` (the basis's own) with clip bound ``clip_norm`` (None:
        :func:`~ldpclient.privacy.basis.default_clip_norm` of the record shape and the coefficient count)."""
        shape = tuple(int(s) for s in record_shape)
        if shape != self.record_shape:
            raise ValueError(f"basis pca was fitted on public images of shape {self.record_shape}, but the records "
                             f"have shape {shape}")
        total = sum(int(v.shape[0]) for v in self.components)
        bound = default_clip_norm(shape, domain, norm, total) if clip_norm is None else float(clip_norm)
        return PcaLayout(shape, bound, norm, self)


def luminance_components(coefficients: int | None) -> int:
    """K, the components a basis keeps of the (luminance) channel: ``coefficients``, or
    :data:`DEFAULT_PCA_COEFFICIENTS` when None."""
    return DEFAULT_PCA_COEFFICIENTS if coefficients is None else int(coefficients)


def _counts(c: int, h: int, w: int, coefficients: int | None) -> list[int]:
    """Components per (opponent) channel: K (:func:`luminance_components`), and ``K // 4`` (at least 1) per chroma
    axis."""
    if h * w > PCA_MAX_VALUES:
        raise ValueError(f"basis pca is fitted for images of at most {PCA_MAX_VALUES} values per channel, got "
                         f"{h}x{w}; use --basis dct")
    k = luminance_components(coefficients)
    if k < 1 or k > h * w:
        raise ValueError(f"basis pca: {k} components asked, but a {h}x{w} channel has {h * w} values")
    return [k] + ([max(1, k // 4)] * 2 if c == 3 else [])


def fit_pca(public: torch.Tensor, domain: Domain, coefficients: int | None = None) -> PcaBasis:
    """The basis of public images ``(P, C, H, W)`` in ``domain``'s units (clipped to it first; the first
    :data:`PCA_MAX_IMAGES`): K (``coefficients``, default :data:`DEFAULT_PCA_COEFFICIENTS`) luminance components,
    ``K // 4`` (at least 1) per chroma axis. ValueError when there are not more public images than components, or
    more components asked than a channel has values."""
    c, h, w = _record_shape(public.shape[1:])
    counts = _counts(c, h, w, coefficients)
    public = public[:PCA_MAX_IMAGES]
    if len(public) <= counts[0]:
        raise ValueError(f"basis pca: {counts[0]} components need more public images than that, got {len(public)}")
    values = public.detach().to(torch.float64).clamp(domain.low, domain.high).reshape(len(public), c, h * w)
    digest = hashlib.sha256(f"ldpclient.pca.v1:{(c, h, w)}:{counts[0]}".encode())
    digest.update(public.detach().to(torch.float32).contiguous().numpy().tobytes())
    y = opponent(values) if c == 3 else values
    mean = y.mean(dim=0)
    components = []
    for channel, count in enumerate(counts):
        _, _, vh = torch.linalg.svd(y[:, channel] - mean[channel], full_matrices=False)
        top = vh[:count]
        sign = torch.sign(top.gather(1, top.abs().argmax(dim=1, keepdim=True)))
        components.append((top * sign).contiguous())
    return PcaBasis((c, h, w), mean, tuple(components), digest.hexdigest()[:16])


@dataclass(frozen=True, eq=False)
class PcaLayout(CoefficientLayout):
    """The ``pca`` release of one record shape: the fitted basis and the clip bound (in the domain's units)."""

    record_shape: tuple[int, ...]
    clip_norm: float
    norm: str
    basis: PcaBasis

    @property
    def channel_coefficients(self) -> tuple[int, ...]:
        return tuple(int(v.shape[0]) for v in self.basis.components)

    def describe(self) -> str:
        return (f"the record's {self.coefficients} coefficients on the leading principal components of the public "
                f"images (basis {self.basis.digest}), relative to their mean")

    def _fitted(self) -> PcaBasis:
        if not self.basis.fitted:
            raise ValueError("basis pca is not fitted yet: a release needs the basis fitted on the public images")
        return self.basis

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c, h, w = self._fitted().record_shape
        y = x.to(torch.float64).reshape(x.shape[0], c, h * w)
        if c == 3:
            y = opponent(y)
        y = y - self.basis.mean
        return torch.cat([y[:, ch] @ v.T for ch, v in enumerate(self.basis.components)], dim=1)

    def inverse(self, coef: torch.Tensor, *, origin: bool = True) -> torch.Tensor:
        """The other components taken as 0; ``origin=False`` leaves out the public images' mean."""
        n = coef.shape[0]
        coef = coef.to(torch.float64)
        self._fitted()
        bounds = [0, *torch.tensor(self.channel_coefficients).cumsum(0).tolist()]
        y = torch.stack([coef[:, bounds[ch]:bounds[ch + 1]] @ v for ch, v in enumerate(self.basis.components)],
                        dim=1)
        if origin:
            y = y + self.basis.mean
        if self.basis.record_shape[0] == 3:
            y = opponent(y, inverse=True)
        return y.reshape(n, *self.record_shape)


__all__ = ["DEFAULT_PCA_COEFFICIENTS", "PCA_MAX_IMAGES", "PCA_MAX_VALUES", "PcaBasis", "PcaLayout", "fit_pca",
           "luminance_components"]
