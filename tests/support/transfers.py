"""A knowledge transfer on a small synthetic task with an in-process teacher: the label is the brightest quadrant
of an 8x8 grey image (4 classes)."""

from __future__ import annotations

from typing import Any

import torch

from ldpclient.privacy import laplace
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer.pipeline import KnowledgeTransfer

SIZE = 8


def quadrant_teacher() -> LocalTeacher:
    """Label = brightest quadrant (4 classes): a fixed 'proprietary' rule."""

    def model(x: torch.Tensor) -> torch.Tensor:
        q = x.unfold(2, SIZE // 2, SIZE // 2).unfold(3, SIZE // 2, SIZE // 2).mean(dim=(-1, -2))
        return q.reshape(x.shape[0], 4)

    return LocalTeacher(model, (1, SIZE, SIZE), 4, name="quadrants")


def quadrant_records(n: int = 60, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` records (float ``(n, 1, 8, 8)`` in [0, 1]) with one bright quadrant each, and their classes."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    x = torch.rand(n, 1, SIZE, SIZE, generator=g) * 0.2
    h = SIZE // 2
    for k in range(4):
        r, c = divmod(k, 2)
        x[y == k, :, r * h : (r + 1) * h, c * h : (c + 1) * h] += 0.8
    return x.clamp(0, 1), y


def quadrant_transfer(mode: str = "ldpkit", aug: str = "sup", **kw: Any) -> KnowledgeTransfer:
    """A seeded transfer of the quadrant task (epsilon 0.5 per element; ``kw`` on top of small settings)."""
    opts: dict[str, Any] = dict(
        mode=mode, augment=aug, num_queries=1200, epochs=3, batch_size=64, lr=3e-3, seed=0, device="cpu",
        student_kwargs={"width": 8}, release_generator=torch.Generator().manual_seed(7),
    )
    opts.update(kw)
    return KnowledgeTransfer(quadrant_teacher(), laplace(0.5, per="element"), **opts)
