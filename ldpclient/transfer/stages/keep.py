"""What a run keeps for later: its trained result, keyed by everything the training depends on (a run that
would train on the same finds it again), and the student's checkpoint when one was asked for."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..augment import QueryPlan
from ..context import RunContext
from ..query_book import QueryBook
from ..result_cache import ResultCache
from ..student import LabelStore, save_checkpoint, select_device
from .release import Released
from .train import Trained


def result_key(ctx: RunContext, released: Released, book: QueryBook, store: LabelStore) -> str | None:
    """What the student's training, adaptation and labels depend on, as a :class:`~..result_cache.ResultCache`
    key (None: not kept: no cache, or a checkpoint of the run's own to write)."""
    settings = ctx.settings
    if ctx.result_cache is None or settings.checkpoint is not None:
        return None
    from ...io.output import versions

    parts: list[str | np.ndarray] = [
        repr(sorted(versions().items())), str(select_device(settings.device)), ctx.mode, str(ctx.scope),
        str(ctx.seed), str(ctx.member_seeds[0]), *(repr(given) for given in ctx.given),
        settings.student, repr(sorted(settings.student_kwargs.items())),
        repr(ctx.mechanism), repr(ctx.meta), ctx.result_cache.data_key, book.plan.fingerprint,
        released.release.values.detach().to(torch.float32).contiguous().numpy(), store.labels,
    ]
    if book.public is not None:
        parts.append(book.public.images.built_rows().release.values.detach().to(torch.float32).contiguous().numpy())
    return ResultCache.key(parts)


def save_student(ctx: RunContext, trained: Trained, student: nn.Module, plan: QueryPlan, released: Released) -> None:
    """Save the (adapted) ``student`` (several: their :class:`~..student.StudentMean`) to ``checkpoint`` when one
    was given."""
    settings = ctx.settings
    if settings.checkpoint is None:
        return
    students = settings.students
    save_checkpoint(settings.checkpoint, student, trained.student_name, trained.student_kwargs, extra={
        "mode": str(ctx.mode), "plan": plan.fingerprint, "guarantee": released.release.guarantee.as_dict(),
        "students": students,
        "labels_from": "this student" if students == 1 else f"the mean output of these {students} students",
        "adapted_on_clean_private_records": settings.adapt,
        "warmed_up_on_clean_private_records": bool(settings.warmup)})


__all__ = ["result_key", "save_student"]
