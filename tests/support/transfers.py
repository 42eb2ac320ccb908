"""A knowledge transfer on a small synthetic task with an in-process teacher: the label is the brightest quadrant
of an 8x8 grey image (4 classes)."""

from __future__ import annotations

from typing import Any

import torch

from ldpclient.privacy import laplace
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer.pipeline import KnowledgeTransfer
from ldpclient.transfer.settings import AdaptationSettings, PlanSettings, TrainingSettings

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


def quadrant_transfer(
    mode: str = "ldpkit", aug: str = "sup", *, plan: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None, adaptation: dict[str, Any] | None = None, **transfer: Any,
) -> KnowledgeTransfer:
    """A seeded transfer of the quadrant task (epsilon 0.5 per element) with small settings: ``plan``, ``training``
    and ``adaptation`` name the fields of each settings object set on top of them, ``transfer`` the transfer's
    other keywords (``ledger=``, ``client=``, ``seed=``, ...)."""
    opts: dict[str, Any] = {"seed": 0, "release_generator": torch.Generator().manual_seed(7), **transfer}
    return KnowledgeTransfer(
        quadrant_teacher(), laplace(0.5, per="element"), mode=mode,
        plan=PlanSettings(**{"augment": aug, "num_queries": 1200, **(plan or {})}),
        training=TrainingSettings(**{"epochs": 3, "batch_size": 64, "lr": 3e-3, "device": "cpu",
                                     "student_kwargs": {"width": 8}, **(training or {})}),
        adaptation=AdaptationSettings(**(adaptation or {})), **opts,
    )
