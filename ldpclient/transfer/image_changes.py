"""Changes of an image that the student's labels keep: the views adaptation fine-tunes on besides its small
rotation and shift.

Some images keep their class under a large change: a photo of a shoe under a left-right mirror; a digit drawn
in colour under another order of its colour channels, inverted, or in grey. Others do not: a mirrored 3 is not a
3. The tool is not told which kind of image it labels; the student it has just trained knows as much as it
knows anything. So before adapting, the student labels a sample of the clean records (at most
:data:`CHECK_IMAGES`) as they are, shifted by up to :data:`CHECK_SHIFT` pixels, and under each candidate
change (:data:`CHANGES`), and a change is kept when it keeps the label at least
:data:`~ldpclient.transfer.mirror_check.MIRROR_KEEPS_SHARE` times as often as the shift does: the mirror check's
rule, with the student in the teacher's place. Adaptation then shows each pseudo-labelled record as it is or
under one of the kept changes, each as likely (:meth:`KeptChanges.transform`), and the adapted student labels
the records it is unsure of under the same changes too (:mod:`~ldpclient.transfer.label_views`). A kept mirror is
trained on as the colour changes are: measured (3 seeds, half the anchor rows per step), against the mirror as a
label view only, Fashion-MNIST gained +1.8 and +1.3 (a small CNN and a residual teacher) and CIFAR-10 lost 0.4.

The candidates (values in any range; each image is changed within its own range):

* ``mirror``: left to right;
* ``channels``: the colour channels in a random order (three-channel images only);
* ``invert``: ``min + max - value``, the image's own minimum and maximum;
* ``grey``: every channel set to the channels' mean (three-channel images only).

Images smaller than :data:`~ldpclient.transfer.affine.MIN_AUGMENT_SIDE` are not checked (nothing kept), as
they get no shift in adaptation either. The check uses a generator of its own: where nothing is kept, the
adaptation draws exactly what it drew without the check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch

from ..names import IMAGE_CHANGES
from .affine import MIN_AUGMENT_SIDE, flip_crop
from .mirror_check import MIRROR_KEEPS_SHARE

Change = Callable[[torch.Tensor, "torch.Generator | None"], torch.Tensor]

#: Most clean records the check labels under each change (a sample when there are more).
CHECK_IMAGES = 500
#: Pixels by which the check shifts each record (the reference the changes are measured against).
CHECK_SHIFT = 2


def _mirror(images: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    return images.flip(-1)


def _channels(images: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    n, c = images.shape[:2]
    order = torch.rand(n, c, generator=generator).argsort(dim=1)
    return images[torch.arange(n)[:, None], order]


def _invert(images: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    low = images.amin(dim=(1, 2, 3), keepdim=True)
    high = images.amax(dim=(1, 2, 3), keepdim=True)
    return low + high - images


def _grey(images: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    return images.mean(dim=1, keepdim=True).expand_as(images).contiguous()


#: The candidate changes by name (:data:`ldpclient.names.IMAGE_CHANGES`, in the order checked), each
#: ``(images (N, C, H, W), generator) -> images``.
CHANGES: Mapping[str, Change] = dict(zip(IMAGE_CHANGES, (_mirror, _channels, _invert, _grey), strict=True))
#: Changes that only apply to three-channel (colour) images.
COLOUR_ONLY = frozenset({"channels", "grey"})


def known(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` as a tuple, each one of :data:`CHANGES` (ValueError naming the others)."""
    unknown = [n for n in names if n not in CHANGES]
    if unknown:
        raise ValueError(f"unknown image change(s) {unknown}; choose from {list(CHANGES)}")
    return tuple(names)


def candidates(names: tuple[str, ...], channels: int, side: int) -> tuple[str, ...]:
    """The changes of ``names`` that apply to images of ``channels`` channels and smaller side ``side`` pixels."""
    known(names)
    if side < MIN_AUGMENT_SIDE:
        return ()
    return tuple(n for n in names if channels == 3 or n not in COLOUR_ONLY)


@dataclass(frozen=True)
class KeptChanges:
    """What the check found: ``kept`` (the changes adaptation shows), the share of the ``images`` checked whose
    label the student kept under each candidate (``shares``, in [0, 1]) and under the shift (``shift``)."""

    kept: tuple[str, ...]
    shares: Mapping[str, float]
    shift: float
    images: int

    def transform(self) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """A batch ``(N, C, H, W)`` with each image as it is or under one of :attr:`kept`, each as likely (draws
        from the global RNG); None when nothing is kept."""
        if not self.kept:
            return None
        changes = [CHANGES[name] for name in self.kept]

        def changed(images: torch.Tensor) -> torch.Tensor:
            pick = torch.randint(0, len(changes) + 1, (len(images),))
            out = images
            for k, change in enumerate(changes, start=1):
                chosen = pick == k
                if bool(chosen.any()):
                    out = out.clone() if out is images else out
                    out[chosen] = change(images[chosen], None)
            return out

        return changed

    def as_dict(self) -> dict[str, object]:
        return {"kept": list(self.kept), "shares": {k: round(v, 4) for k, v in self.shares.items()},
                "shift": round(self.shift, 4), "images": self.images}


def check_changes(
    labels_of: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor, labels: torch.Tensor,
    names: tuple[str, ...], seed: int,
) -> KeptChanges:
    """Which of ``names`` the student keeps: ``labels_of(batch)`` gives its labels (int64 ``(N,)``) of a batch,
    ``images`` ``(N, C, H, W)`` are the sampled clean records and ``labels`` its labels of them as they are. The
    shift and the random changes draw from a generator seeded with ``seed``."""
    g = torch.Generator().manual_seed(int(seed) % 2**63)
    n = len(images)
    if n == 0 or not names:
        return KeptChanges((), {}, 0.0, n)
    shift = float((labels_of(flip_crop(images, CHECK_SHIFT, flip=False, generator=g)) == labels).float().mean())
    shares = {name: float((labels_of(CHANGES[name](images, g)) == labels).float().mean()) for name in names}
    kept = tuple(name for name in names if shift > 0 and shares[name] >= MIRROR_KEEPS_SHARE * shift)
    return KeptChanges(kept, shares, shift, n)


__all__ = ["CHANGES", "CHECK_IMAGES", "CHECK_SHIFT", "KeptChanges", "candidates", "check_changes", "known"]
