"""Whether to train on mirrored images, asked of the teacher with a few public images (``label --public``).

A left-right mirror keeps the class of a photo of a car or a cat, and changes a digit's or a letter's.
The tool cannot tell the two kinds apart by their shape, but the teacher can: a sample of the public
images is sent twice more, once mirrored and once shifted by the training shift
(the settings' ``public_shift``), and the teacher's answers to each copy are compared
with its answer to the image itself. When the mirror keeps the teacher's label nearly as often as the
shift does (a change the student is trained with anyway), the student is trained on mirrored rows too
(:func:`flip`).

Only public images are used: their copies are public too (no noise, no privacy cost, never in the
ledger); they are counted, sent and billed as public queries. Their answers decide the flip and are not
trained on. The sample, the shifts and so the batch ids follow from the public images' values alone,
so a baseline run over the same public images asks the same queries (a journal answers them once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import torch

from ..io.document import number
from ..privacy.release import Release
from .affine import flip_crop

#: Share of the shift's agreement that the mirror's must reach for :func:`flip` (see there).
MIRROR_KEEPS_SHARE = 0.75


def flip(mirror_agreement: float, shift_agreement: float) -> bool:
    """Whether training also mirrors rows, from a check on public images (this module):
    yes when the teacher kept an image's label under a left-right mirror at least :data:`MIRROR_KEEPS_SHARE` times
    as often as under the training shift (both shares in [0, 1], over the same images).

    The shift is the reference because the student is trained with it anyway, and because it calibrates the rule
    to how steady the teacher is. Measured with the benchmark teachers: the
    mirror kept the label as often as the shift on CIFAR-10 photos (ratio 0.94-1.13 over six samples of 200, with
    either teacher), and 0.33-0.59 times as often on colour digits, MNIST and scikit-learn digits, where a mirror
    changes the class.
    """
    return float(mirror_agreement) >= MIRROR_KEEPS_SHARE * float(shift_agreement) and float(shift_agreement) > 0


@dataclass(frozen=True)
class MirrorCheck:
    """The copies a check sends: ``images`` ``(2K, C, H, W)`` (the ``K`` sampled public images mirrored, then the
    same ``K`` shifted by up to ``pad`` pixels), and ``sample``: the ``K`` public images' indices."""

    images: torch.Tensor
    sample: np.ndarray
    pad: int

    @property
    def size(self) -> int:
        """Public images checked (``K``; the check sends twice as many queries)."""
        return len(self.sample)

    def verdict(self, original: np.ndarray, copies: np.ndarray) -> "MirrorVerdict":
        """The decision from the teacher's labels of the ``K`` sampled public images (``original``) and of the
        ``2K`` copies, in :attr:`images`' order (``copies``); an unanswered query (label < 0) counts as a
        change."""
        k = self.size
        original = np.asarray(original)
        copies = np.asarray(copies)
        if original.shape != (k,) or copies.shape != (2 * k,):
            raise ValueError(f"need {k} labels of the sampled images and {2 * k} of their copies, got "
                             f"{original.shape} and {copies.shape}")
        answered = original >= 0
        mirror = float(np.mean((copies[:k] == original) & answered))
        shift = float(np.mean((copies[k:] == original) & answered))
        return MirrorVerdict(flip(mirror, shift), mirror, shift, k)


@dataclass(frozen=True)
class MirrorVerdict:
    """What a check found: ``flip`` (train on mirrored rows), the shares of the ``images`` checked whose label
    the teacher kept under the mirror (``mirror_agreement``) and under the shift (``shift_agreement``), in [0, 1]."""

    flip: bool
    mirror_agreement: float
    shift_agreement: float
    images: int

    def as_dict(self) -> dict[str, float | int]:
        return {"mirror_agreement": round(self.mirror_agreement, 4), "shift_agreement": round(self.shift_agreement, 4),
                "images": self.images}


def mirror_check(public: Release, seed: int, images: int, shift: int) -> MirrorCheck | None:
    """The check's copies of ``images`` of the public images ``public`` (a public release, values in the domain's
    units, ``(N, C, H, W)``), shifted by up to ``shift`` pixels, their sample and shifts drawn from ``seed``; None
    when the run checks none (``images`` or ``shift`` 0: too few images to decide on, or too small for the
    training shift that the mirror is compared with)."""
    n = len(public)
    k = min(int(images), n)
    if k < 1 or shift < 1:
        return None
    g = torch.Generator().manual_seed(int(seed) % 2**63)
    sample = torch.randperm(n, generator=g)[:k].sort().values
    chosen = public[sample].values
    copies = torch.cat([chosen.flip(-1), flip_crop(chosen, shift, flip=False, generator=g)])
    return MirrorCheck(copies, sample.numpy(), shift)


def mirror_note(flip: bool, check: Mapping[str, object] | None) -> str:
    """How a run's training treated mirrors, in words (the terminal summary and the page): ``flip`` and, when the
    mirror check decided it, the check's :meth:`MirrorVerdict.as_dict` (numbers only, none from a peer's text)."""
    done = "trained on mirrored images too" if flip else "not trained on mirrored images"
    if not check:
        return done + (" (--flip)" if flip else "")
    return (f"{done} (the teacher kept {100 * number(check, 'mirror_agreement'):.0f}% of "
            f"{int(number(check, 'images'))} public images' labels under a mirror, "
            f"{100 * number(check, 'shift_agreement'):.0f}% under a shift)")


__all__ = ["MIRROR_KEEPS_SHARE", "MirrorCheck", "MirrorVerdict", "flip", "mirror_check", "mirror_note"]
