"""The attacker's model of how a query is made from clean records (public knowledge).

A curious teacher knows the client's software and its published settings, so it
can simulate queries from any images it likes (public or synthetic, never the
private records): release a record with the mechanism, then augment like
LDPKiT-SIDP (the release itself), -Rand (release + a fresh noise layer) or -Sup
(average of two releases). This module holds that simulator; the denoisers train
on its output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from ..privacy.release import upsample

KINDS = ("sidp", "rand", "sup")

ReleaseFn = Callable[[torch.Tensor, Optional[torch.Generator]], torch.Tensor]
ExtraNoiseFn = Callable[[tuple, Optional[torch.Generator]], torch.Tensor]


@dataclass
class NoiseModel:
    """Simulate queries from clean images ``(N, C, H, W)`` in the domain's units.

    ``release_fn(x, generator)``: one LDP release of each row, at the released
    (possibly reduced) shape. ``extra_noise_fn(shape, generator)``: the Rand layer
    (same distribution as the base noise), drawn at the released shape.
    ``postprocess``: the client's own post-processing of releases before
    augmentation (e.g. clip or blur), applied to released values.
    ``upsample_mode``: how a reduced release is resized back to the record shape.
    ``rand_scale``: multiplier of the Rand layer (as in the query plan).
    """

    release_fn: ReleaseFn
    extra_noise_fn: ExtraNoiseFn | None = None
    postprocess: Callable[[torch.Tensor], torch.Tensor] | None = None
    upsample_mode: str = "bilinear"
    rand_scale: float = 1.0
    name: str = "custom"

    @classmethod
    def from_mechanism(cls, mechanism: Any, **kwargs: Any) -> "NoiseModel":
        """Wrap an :class:`ldpclient.privacy.Mechanism` (releases flagged ``public=True``:
        the simulator only ever noises public/synthetic images)."""

        def release_fn(x: torch.Tensor, g: torch.Generator | None) -> torch.Tensor:
            return mechanism.release(x, generator=g, public=True).values.float()

        def extra(shape: tuple, g: torch.Generator | None) -> torch.Tensor:
            return mechanism.noise(shape, generator=g).float()

        kwargs.setdefault("name", getattr(mechanism, "name", type(mechanism).__name__))
        return cls(release_fn=release_fn, extra_noise_fn=extra, **kwargs)

    def releases(self, clean: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Released values (after the client's post-processing), at the released shape."""
        r = self.release_fn(clean, generator)
        return self.postprocess(r) if self.postprocess is not None else r

    def to_record_shape(self, values: torch.Tensor, record_shape: tuple[int, ...]) -> torch.Tensor:
        return upsample(values, record_shape, self.upsample_mode)

    def simulate(
        self, clean: torch.Tensor, kind: str, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries of ``kind`` made from ``clean`` and the clean image each one stands for.

        Returns ``(queries, targets)``, both ``(N, C, H, W)`` at the record shape. For
        Sup the rows are paired with a random other row and the target is the clean
        average of the two (what the query represents).
        """
        if kind not in KINDS:
            raise ValueError(f"query kind must be one of {KINDS}, got {kind!r}")
        if clean.dim() != 4:
            raise ValueError(f"expected clean images (N, C, H, W), got shape {tuple(clean.shape)}")
        shape = tuple(clean.shape[1:])
        r = self.releases(clean, generator)
        target = clean
        if kind == "rand":
            if self.extra_noise_fn is None:
                raise ValueError("Rand queries need extra_noise_fn (the mechanism's noise)")
            r = r + self.rand_scale * self.extra_noise_fn(tuple(r.shape), generator)
        elif kind == "sup":
            n = clean.shape[0]
            if n < 2:
                raise ValueError("Sup queries need at least 2 images")
            shift = torch.randint(1, n, (), generator=generator).item()
            perm = (torch.arange(n) + shift) % n
            r = (r + r[perm]) / 2
            target = (clean + clean[perm]) / 2
        return self.to_record_shape(r, shape), target


def identity_noise_model() -> NoiseModel:
    """No noise at all (the attacks' no-noise baseline)."""
    return NoiseModel(
        release_fn=lambda x, g: x.float(),
        extra_noise_fn=lambda shape, g: torch.zeros(shape),
        name="none",
    )
