"""Post-processing transforms on LDP releases (free: they never see raw data).

Every transform takes a :class:`~ldpclient.privacy.Release` or
:class:`~ldpclient.privacy.Derived` and returns a ``Derived`` with the same
guarantee and one more entry in ``steps``; raw tensors are rejected with
``TypeError``. They are dataset-independent: their parameters are fixed by the
caller, never fitted to the private data. Values are in the release's domain
units (e.g. [0, 1] for float images); tensors are ``(N, C, H, W)`` (a 2-D
transform on other ranks raises ``ValueError``).

What they buy, measured: on
Laplace-noised 28x28 digits a Gaussian blur followed by clipping to the domain
raises every method's accuracy, because the noise is white while the images are
smooth.

``parse_postprocess("clip,blur:1.5,median:3")`` builds a list from a short spec
(for the CLI).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..privacy.basis import dct_matrix, frequency_band, zigzag
from ..privacy.guarantee import Domain
from ..privacy.release import Derived, Releasable, Release, as_derived

if TYPE_CHECKING:
    from .decoder import ReleaseDecoder


class Transform:
    """Base class: a named, data-independent function applied to every row."""

    name: str = "transform"

    def __call__(self, obj: Releasable) -> Derived:
        derived = as_derived(obj)
        return derived.map(lambda v: self.apply(v, derived), self.describe())

    def apply(self, values: torch.Tensor, origin: Derived) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:
        return self.name


@dataclass(frozen=True)
class ClipToDomain(Transform):
    """Clip every element to the declared domain ``[low, high]``.

    ``domain=None`` uses the domain of the release's guarantee.
    """

    domain: Domain | None = None
    name = "clip"

    def apply(self, values: torch.Tensor, origin: Derived) -> torch.Tensor:
        d = self.domain or origin.guarantee.domain
        return values.clamp(d.low, d.high)

    def describe(self) -> str:
        return "clip" if self.domain is None else f"clip[{self.domain.low},{self.domain.high}]"


def _check_images(values: torch.Tensor, what: str) -> None:
    if values.dim() != 4:
        raise ValueError(f"{what} needs (N, C, H, W) tensors, got shape {tuple(values.shape)}")


@dataclass(frozen=True)
class GaussianBlur(Transform):
    """Depthwise Gaussian blur over the two spatial axes (reflect padding).

    ``sigma`` in pixels (> 0); ``kernel_size`` odd, default ``2*ceil(3*sigma)+1``
    capped at the image size.
    """

    sigma: float = 1.0
    kernel_size: int | None = None
    name = "blur"

    def __post_init__(self) -> None:
        if not (self.sigma > 0 and math.isfinite(self.sigma)):
            raise ValueError(f"blur sigma must be > 0 pixels, got {self.sigma}")
        if self.kernel_size is not None and (self.kernel_size < 1 or self.kernel_size % 2 == 0):
            raise ValueError(f"blur kernel_size must be odd and >= 1, got {self.kernel_size}")

    def apply(self, values: torch.Tensor, origin: Derived) -> torch.Tensor:
        _check_images(values, "blur")
        n, c, h, w = values.shape
        k = self.kernel_size or 2 * math.ceil(3 * self.sigma) + 1
        k = min(k, 2 * ((min(h, w) - 1) // 2) + 1)  # reflect padding needs pad < size
        if k <= 1:
            return values
        x = torch.arange(k, dtype=torch.float32) - (k - 1) / 2
        g = torch.exp(-(x**2) / (2 * self.sigma**2))
        g = (g / g.sum()).to(values.dtype)
        pad = k // 2
        out = F.pad(values.reshape(n * c, 1, h, w), (pad, pad, pad, pad), mode="reflect")
        out = F.conv2d(out, g.view(1, 1, 1, k))
        out = F.conv2d(out, g.view(1, 1, k, 1))
        return out.reshape(n, c, h, w)

    def describe(self) -> str:
        return f"blur(sigma={self.sigma:g})"


@dataclass(frozen=True)
class MedianFilter(Transform):
    """Median over a ``size x size`` window (odd ``size``), reflect padding."""

    size: int = 3
    name = "median"

    def __post_init__(self) -> None:
        if self.size < 1 or self.size % 2 == 0:
            raise ValueError(f"median size must be odd and >= 1, got {self.size}")

    def apply(self, values: torch.Tensor, origin: Derived) -> torch.Tensor:
        _check_images(values, "median")
        n, c, h, w = values.shape
        pad = self.size // 2
        if pad == 0:
            return values
        if pad >= min(h, w):
            raise ValueError(f"median size {self.size} too large for {h}x{w} images")
        x = F.pad(values.reshape(n * c, 1, h, w), (pad, pad, pad, pad), mode="reflect")
        patches = F.unfold(x, self.size)  # (n*c, size*size, h*w)
        return patches.median(dim=1).values.reshape(n, c, h, w)

    def describe(self) -> str:
        return f"median({self.size})"


@dataclass(frozen=True)
class DctLowpass(Transform):
    """Orthonormal projection of each channel onto its ``coefficients`` lowest-frequency 2-D DCT-II basis
    images (zigzag order, as :mod:`ldpclient.privacy.basis` keeps them): the frequencies above are set to 0.

    White noise keeps its per-coefficient variance, so the projection keeps ``coefficients / (H x W)`` of it;
    the constant image is in the band, so values in a domain stay centred. All of a channel's coefficients
    (or more) returns the input unchanged up to rounding.
    """

    coefficients: int = 64
    name = "lowpass"

    def __post_init__(self) -> None:
        if isinstance(self.coefficients, bool) or not isinstance(self.coefficients, int) or self.coefficients < 1:
            raise ValueError(f"lowpass coefficients must be an int >= 1, got {self.coefficients!r}")

    def apply(self, values: torch.Tensor, origin: Derived) -> torch.Tensor:
        _check_images(values, "lowpass")
        h, w = values.shape[-2:]
        rows, cols, (kept,) = frequency_band(w, [zigzag(h, w, min(self.coefficients, h * w))])
        dh, dw = dct_matrix(h)[:rows], dct_matrix(w)[:cols]
        band = dh @ values.to(torch.float64) @ dw.T
        mask = torch.zeros(rows * cols, dtype=torch.float64)
        mask[kept] = 1.0
        out = dh.T @ (band * mask.view(rows, cols)) @ dw
        return out.to(values.dtype)

    def describe(self) -> str:
        return f"lowpass({self.coefficients})"


def apply_all(obj: Releasable, transforms: Iterable[Transform]) -> Derived:
    """Apply ``transforms`` in order; accepts only a Release or Derived."""
    out = as_derived(obj)
    for t in transforms:
        if not isinstance(t, Transform):
            raise TypeError(f"post-processing steps must be Transform objects, got {type(t).__name__}")
        out = t(out)
    return out


class ReleaseRows:
    """A release post-processed on demand, a few rows at a time (what query batches are built from).

    ``rows(index)`` takes records ``index`` of ``release``, restores the record shape
    when the mechanism reduced it (``upsample_mode``) and applies ``transforms``. Every
    step is per record, so the rows equal the same rows of post-processing the whole
    release at once; memory is O(n x released elements) for the release plus
    O(rows x record) per call, instead of O(n x record) for a post-processed copy.
    Post-processing only: no privacy cost.

    ``decoder`` (a :class:`~.decoder.ReleaseDecoder`, see :meth:`with_decoder`): the rows are the releases decoded
    instead, without the transforms (they were chosen for the rebuilt releases).
    """

    def __init__(self, release: Release, transforms: Sequence[Transform] = (), upsample_mode: str = "bilinear") -> None:
        if not isinstance(release, Release):
            raise TypeError(f"expected a Release, got {type(release).__name__}")
        self.release = release
        self.transforms = list(transforms)
        self.upsample_mode = upsample_mode
        self.decoder: ReleaseDecoder | None = None

    def with_decoder(self, decoder: ReleaseDecoder | None) -> "ReleaseRows":
        """The same rows made by ``decoder`` from the releases (None: rebuilt and post-processed as without one)."""
        rows = copy.copy(self)
        rows.decoder = decoder
        return rows

    def __len__(self) -> int:
        return len(self.release)

    @property
    def record_shape(self) -> tuple[int, ...]:
        """Shape of one row (per record): the release's record shape."""
        return self.release.record_shape

    def rows(self, index: torch.Tensor) -> Derived:
        """Post-processed rows ``index`` (int64 ``(K,)``), in that order; ``sources`` index within ``index``."""
        part = self.release[index]
        if self.decoder is not None:
            return self.decoder.decoded(part)
        d = part.upsampled(self.upsample_mode) if part.released_shape != part.record_shape else part
        return apply_all(d, self.transforms)

    def released(self, k: int) -> torch.Tensor:
        """The first ``k`` record indices that have a release (int64): here every record has one."""
        return torch.arange(min(k, len(self)))


class SubsetRows(ReleaseRows):
    """The rows of ``n`` records of which only ``used`` (sorted int64 indices) were released: ``release`` holds
    their releases in that order. ``rows(index)`` takes record indices in ``0..n-1``; asking for a record that was
    not released is a ValueError (a plan's queries use only the records it released)."""

    def __init__(self, release: Release, used: np.ndarray, n: int, transforms: Sequence[Transform] = (),
                 upsample_mode: str = "bilinear") -> None:
        super().__init__(release, transforms, upsample_mode)
        if len(used) != len(release):
            raise ValueError(f"{len(used)} records used, {len(release)} released")
        self.n = int(n)
        self.used = torch.as_tensor(np.asarray(used, dtype=np.int64))
        self._position = torch.full((self.n,), -1, dtype=torch.int64)
        self._position[self.used] = torch.arange(len(self.used))

    def __len__(self) -> int:
        return self.n

    def rows(self, index: torch.Tensor) -> Derived:
        position = self._position[index]
        if bool((position < 0).any()):
            raise ValueError("a query asks for a record that was not released")
        return super().rows(position)

    def released(self, k: int) -> torch.Tensor:
        return self.used[:k].clone()


@dataclass(frozen=True)
class Step:
    """One post-processing step of the spec language: how to build it from ``name[:argument]``."""

    make: Callable[..., Transform]
    parse: Callable[[str], object] | None  # parses the text after ``:``; None: the step takes no argument
    usage: str


#: The post-processing steps by spec name (the one list: parsing and messages derive from it).
STEPS: dict[str, Step] = {
    "clip": Step(ClipToDomain, None, "clip"),
    "blur": Step(GaussianBlur, float, "blur[:sigma]"),
    "median": Step(MedianFilter, int, "median[:size]"),
    "lowpass": Step(DctLowpass, int, "lowpass[:coefficients]"),
}


def parse_postprocess(spec: str | Sequence[str] | None) -> list[Transform]:
    """Build transforms from ``"clip,blur:1.5,median:3"`` (or a list of such items).

    Items: ``clip``; ``blur[:sigma]`` (pixels, default 1.0); ``median[:size]``
    (odd, default 3): the names of :data:`STEPS`. Empty/None -> no transforms.
    """
    if spec is None:
        return []
    items = [s for s in (spec.split(",") if isinstance(spec, str) else spec)]
    out: list[Transform] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        name, _, arg = item.partition(":")
        step = STEPS.get(name)
        try:
            if step is None or (arg and step.parse is None):
                raise ValueError("unknown")
            out.append(step.make(step.parse(arg)) if arg and step.parse else step.make())
        except ValueError as exc:
            detail = "" if str(exc) == "unknown" else f": {exc}"
            usage = ", ".join(s.usage for s in STEPS.values())
            raise ValueError(f"bad post-processing step {item!r} (use {usage}){detail}") from None
    return out


__all__ = [
    "ReleaseRows",
    "Transform",
    "ClipToDomain",
    "GaussianBlur",
    "MedianFilter",
    "DctLowpass",
    "apply_all",
    "parse_postprocess",
    "STEPS",
    "Step",
]
