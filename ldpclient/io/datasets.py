"""Bundled demo data: scikit-learn's digits, as image tensors, plus deterministic splits.

Nothing here touches the network: ``sklearn.datasets.load_digits`` ships its 1,797
8x8 images inside the scikit-learn package (install the ``demo`` extra).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

__all__ = ["load_digits_images", "split_indices", "DIGITS_CLASS_NAMES", "DIGITS_TEACHER_SPLIT"]

#: Class names of the digits data set, by label index.
DIGITS_CLASS_NAMES: tuple[str, ...] = tuple(str(d) for d in range(10))

#: How the bundled mock teacher splits the 1,797 digits:
#: ``split_indices(1797, DIGITS_TEACHER_SPLIT, seed)`` gives (teacher training set,
#: teacher held-out test set, records the teacher never saw). Demos should draw
#: their "private" records from the third part so the teacher has not trained on them.
DIGITS_TEACHER_SPLIT: tuple[float, float, float] = (0.6, 0.2, 0.2)


def load_digits_images(size: int = 28) -> tuple[torch.Tensor, torch.Tensor]:
    """The scikit-learn digits as ``(images, labels)``.

    ``images``: float32 ``(1797, 1, size, size)`` with values in ``[0, 1]`` (the
    native 0..16 grey levels divided by 16). ``size == 8`` returns the native
    images; any other size resizes them with bilinear interpolation
    (``align_corners=False``), which stays inside ``[0, 1]``.
    ``labels``: int64 ``(1797,)`` in ``0..9``.

    Raises ``ValueError`` for a size below 1 and ``ImportError`` with an install
    hint when scikit-learn is missing.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be a positive int (pixels per side), got {size!r}")
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the digits demo data needs scikit-learn: pip install 'ldpclient[demo]'"
        ) from exc
    bunch = load_digits()
    images = torch.as_tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.as_tensor(bunch.target, dtype=torch.int64)
    if size != images.shape[-1]:
        images = F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)
        images = images.clamp_(0.0, 1.0)
    return images.contiguous(), labels


def split_indices(n: int, fractions: Sequence[float], seed: int = 0) -> list[torch.Tensor]:
    """Split ``range(n)`` into disjoint random index sets, deterministically.

    ``fractions``: one fraction of ``n`` per set, each in ``(0, 1]``, summing to at
    most 1. Set ``k`` gets ``round(n * cumsum[k]) - round(n * cumsum[k-1])``
    indices of one seeded permutation, so the sizes add up exactly and, when the
    fractions sum to 1, every index lands in exactly one set. Indices not covered
    (fractions summing below 1) are left out. The same ``(n, fractions, seed)``
    always gives the same sets (a CPU ``torch.Generator`` seeded with ``seed``).

    Returns a list of int64 tensors, one per fraction, each sorted ascending.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    fracs = [float(f) for f in fractions]
    if not fracs:
        raise ValueError("fractions must name at least one split")
    for f in fracs:
        if not math.isfinite(f) or not 0.0 < f <= 1.0:
            raise ValueError(f"each fraction must be in (0, 1], got {f!r}")
    total = math.fsum(fracs)
    if total > 1.0 + 1e-9:
        raise ValueError(f"fractions sum to {total:.6g}, more than 1")
    gen = torch.Generator().manual_seed(int(seed))
    perm = torch.randperm(n, generator=gen)
    out: list[torch.Tensor] = []
    cum = 0.0
    start = 0
    for f in fracs:
        cum += f
        stop = min(n, round(n * min(cum, 1.0)))
        out.append(torch.sort(perm[start:stop]).values)
        start = stop
    return out
