"""The attacker's model of how a query is made from clean records (public knowledge).

A curious teacher knows the client's software and its published settings, so it
can simulate queries from any images it likes (public or synthetic, never the
private records): release a record with the mechanism, then augment like
LDPKiT-SIDP (the release itself: augmentation ``none``), -Rand (release + a fresh noise
layer: ``rand``) or -Sup (average of two releases: ``sup``): the augments
``label --augment`` takes (:data:`ldpclient.names.AUGMENTATIONS`). This module holds that simulator; the denoisers train
on its output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import torch

from ..names import AUGMENTATIONS
from ..privacy.release import upsample

if TYPE_CHECKING:
    from ..privacy.base import Mechanism
    from ..transfer.postprocess import Transform


ReleaseFn = Callable[[torch.Tensor, Optional[torch.Generator]], torch.Tensor]
ExtraNoiseFn = Callable[[tuple, Optional[torch.Generator]], torch.Tensor]


@dataclass
class NoiseModel:
    """Simulate queries from clean images ``(N, C, H, W)`` in the domain's units.

    ``release_fn(x, generator)``: one LDP release of each row, post-processed the
    way the client does it (upsampled back to the record shape, transforms), at
    the record shape. ``extra_noise_fn(shape, generator)``: the Rand layer (same
    distribution as the base noise) at the record shape. ``rand_scale``: its
    multiplier (as in the query plan). ``clip``: the teacher's value range when the
    client clips queries to it before sending, else None.
    """

    release_fn: ReleaseFn
    extra_noise_fn: ExtraNoiseFn | None = None
    rand_scale: float = 1.0
    clip: tuple[float, float] | None = None
    name: str = "custom"

    @classmethod
    def from_mechanism(
        cls,
        mechanism: Mechanism,
        *,
        transforms: Sequence[Transform] = (),
        upsample_mode: str = "bilinear",
        rand_scale: float = 1.0,
        clip: tuple[float, float] | None = None,
    ) -> "NoiseModel":
        """The pipeline's query path for an :class:`ldpclient.privacy.Mechanism`.

        Release (flagged ``public=True``: the simulator only noises public or
        synthetic images), upsample a reduced release with ``upsample_mode``, apply
        the client's post-processing ``transforms`` (e.g. from
        :func:`ldpclient.transfer.postprocess.parse_postprocess`); Rand noise is drawn at the
        released shape and resized the same way.
        """
        from ..transfer.postprocess import apply_all

        def release_fn(x: torch.Tensor, g: torch.Generator | None) -> torch.Tensor:
            rel = mechanism.release(x, generator=g, public=True)
            d = rel.upsampled(upsample_mode) if rel.released_shape != rel.record_shape else rel
            return apply_all(d, list(transforms)).values.float()

        def extra(shape: tuple, g: torch.Generator | None) -> torch.Tensor:
            r = max(1, int(getattr(mechanism, "reduction", 1) or 1))
            base = (shape[0], shape[1], shape[2] // r, shape[3] // r) if r > 1 else tuple(shape)
            noise = mechanism.noise(base, generator=g).float().reshape(base)
            return upsample(noise, shape[1:], upsample_mode) if r > 1 else noise

        name = getattr(mechanism, "name", type(mechanism).__name__)
        return cls(release_fn=release_fn, extra_noise_fn=extra, rand_scale=rand_scale, clip=clip, name=name)

    def simulate(
        self, clean: torch.Tensor, augment: str, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries of ``augment`` made from ``clean`` and the clean image each one stands for.

        Returns ``(queries, targets)``, both ``(N, C, H, W)``. For Sup the rows are
        paired with a random other row and the target is the clean average of the
        two (what the query represents).
        """
        if augment not in AUGMENTATIONS:
            raise ValueError(f"augment must be one of {AUGMENTATIONS}, got {augment!r}")
        if clean.dim() != 4:
            raise ValueError(f"expected clean images (N, C, H, W), got shape {tuple(clean.shape)}")
        r = self.release_fn(clean, generator)
        target = clean
        if augment == "rand":
            if self.extra_noise_fn is None:
                raise ValueError("Rand queries need extra_noise_fn (the mechanism's noise)")
            r = r + self.rand_scale * self.extra_noise_fn(tuple(r.shape), generator)
        elif augment == "sup":
            n = clean.shape[0]
            if n < 2:
                raise ValueError("Sup queries need at least 2 images")
            shift = int(torch.randint(1, n, (), generator=generator))
            perm = (torch.arange(n) + shift) % n
            r = (r + r[perm]) / 2
            target = (clean + clean[perm]) / 2
        if self.clip is not None:
            r = r.clamp(*self.clip)
        return r, target

    def releases(self, clean: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """One post-processed release per row, at the record shape."""
        return self.release_fn(clean, generator)
