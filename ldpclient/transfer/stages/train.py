"""Step 4: train a seeded student on the teacher's answers (warmed up first on the clean records when asked); in
query rounds, send the next round only while the student still learns from them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Optional

import numpy as np
import torch

from ..affine import flip_crop
from ..context import RunContext
from ..mirror_check import MirrorVerdict
from ..query_book import QueryBook
from ..rounds import QueryRound, learnt_too_little
from ..student import LabelStore, Trainer, TrainHistory, build_student, predict_proba, select_device, validation_mask
from ..warmup import rotation_warmup
from .label import label_private


@dataclass
class Trained:
    """A trained student: the trainer (holding the model), its zoo name and factory kwargs, the training history,
    the shift and mirror it was trained with."""

    trainer: Trainer
    student_name: str
    student_kwargs: dict[str, object]
    history: TrainHistory
    crop_pixels: int
    flip: bool
    #: the seed of this student's draws (its initial weights, rows, held-out share, adaptation)
    seed: int
    #: what the mirror check found (None: no check; ``flip`` was given or there were no public images)
    mirror_check: Optional[MirrorVerdict] = None


def mirror_verdict(book: QueryBook, store: LabelStore) -> Optional[MirrorVerdict]:
    """The mirror check's decision from the teacher's answers (None when the run made no check)."""
    public = book.public
    if public is None or public.check is None or public.mirror_check is None:
        return None
    original = store.get(public.images.ids(public.check.sample)).astype(np.int64)
    copies = store.get(public.mirror_check.ids()).astype(np.int64)
    return public.check.verdict(original, copies)


def train_student(ctx: RunContext, book: QueryBook, store: LabelStore, member: int = 0) -> Trained:
    """Build a seeded student (warmed up first with ``warmup`` epochs) and train it on the labelled queries, each
    row shifted (and mirrored with ``flip``, or when the mirror check found the teacher keeps labels under a
    mirror) anew each time it is read; adds its seconds to timings["train"], the warm-up's apart.
    ``member``: which of the run's ``students`` (its draws: the context's ``member_seeds``)."""
    t = time.perf_counter()
    settings = ctx.settings
    seed = ctx.member_seeds[member]
    c, h, w = ctx.records.record_shape
    name, pad = settings.student, settings.crop
    verdict = mirror_verdict(book, store)
    flip = verdict.flip if verdict is not None else settings.flip
    kwargs = {"num_classes": ctx.meta.num_classes, "in_channels": c, "image_size": min(h, w), **settings.student_kwargs}
    with torch.random.fork_rng(devices=[]):  # seed the student's init without touching the caller's RNG
        torch.manual_seed(seed)
        model = build_student(name, **kwargs)
        warm = _warm_student(ctx, model) if settings.warmup else 0.0
    trainer = Trainer(
        model, epochs=settings.epochs, batch_size=settings.batch_size, lr=settings.lr,
        val_fraction=settings.val_fraction, device=settings.device, seed=seed, progress=ctx.progress,
        augment=partial(flip_crop, pad=pad, flip=flip) if pad or flip else None,
    )
    steps = -(-int(book.trained_per_epoch * (1 - settings.val_fraction)) // settings.batch_size)
    history = trainer.fit(lambda epoch: book.epoch_batches(epoch, seed), store, steps_per_epoch=steps)
    ctx.add_time("train", time.perf_counter() - t - warm)
    return Trained(trainer, name, kwargs, history, pad, flip, seed, verdict)


def _warm_student(ctx: RunContext, model: torch.nn.Module) -> float:
    """The rotation pretext on the clean records (:mod:`..warmup`; local, no privacy cost), each shifted by the
    shift beside public images; its seconds, also added to timings["warmup"].
    Runs inside the student's seeded RNG fork: its order comes from one draw of that RNG, its dropout from it."""
    t = time.perf_counter()
    epochs = ctx.settings.warmup
    seed = int(torch.randint(0, 2**31 - 1, (1,)))
    ctx.report("warmup", 0, epochs)
    rotation_warmup(model, ctx.records, epochs=epochs, pad=ctx.settings.public_shift, seed=seed,
                    device=select_device(ctx.settings.device), on_epoch=lambda done: ctx.report("warmup", done, epochs))
    seconds = time.perf_counter() - t
    ctx.add_time("warmup", seconds)
    return seconds


def agreement(ctx: RunContext, students: list[Trained], book: QueryBook, store: LabelStore) -> tuple[int, list[float]]:
    """How many of the plan's queries sent so far training held out (:func:`~..student.validation_mask`, by id),
    and each student's agreement with the teacher's answers to them (a share in [0, 1]; 0 when none)."""
    agree = [0] * len(students)
    held = 0
    settings = ctx.settings
    for ids, values in book.private_batches(list(range(book.batches_sent))):
        mask = validation_mask(ids, settings.val_fraction, ctx.member_seeds[0])
        teacher = torch.from_numpy(store.get(ids[mask]))
        mask[mask] = (teacher >= 0).numpy()
        teacher = teacher[teacher >= 0]
        if not len(teacher):
            continue
        held += len(teacher)
        for k, student in enumerate(students):
            probs = predict_proba(student.trainer.model, values[torch.from_numpy(mask)], device=settings.device)
            agree[k] += int((probs.argmax(1) == teacher).sum())
    return held, [a / held if held else 0.0 for a in agree]


def query_rounds(
    ctx: RunContext, book: QueryBook, store: LabelStore, trained: Trained, ends: list[int]
) -> tuple[Trained, list[QueryRound]]:
    """Steps 3-4 in rounds (:mod:`..rounds`; only with more than one ``ends``): ``trained`` learnt from the plan's
    first ``ends[0]`` batches; send each next round, train a student on every answer so far, score it and the
    previous one on the same held-out queries, and stop sending when it gained less than ``min_round_gain``.
    Returns the last round's student and the rounds; timings["label"], ["train"], ["warmup"] sum the rounds'."""
    if len(ends) < 2:
        return trained, []
    held, (first,) = agreement(ctx, [trained], book, store)
    rounds = [QueryRound(book.queries_sent, held, first)]
    for r in range(1, len(ends)):
        ctx.timings["label"] += label_private(ctx, book, store, ends[r - 1], ends[r])
        latest = train_student(ctx, book, store)  # trained anew
        held, (now, before) = agreement(ctx, [latest, trained], book, store)
        rounds.append(QueryRound(book.queries_sent, held, now, before))
        trained = latest
        ctx.report("round", r + 1, len(ends), queries=book.queries_sent, agreement=now, gain=now - before)
        if r + 1 < len(ends) and learnt_too_little(rounds[-1], ctx.settings.min_round_gain):
            break
    return trained, rounds


__all__ = ["Trained", "agreement", "mirror_verdict", "query_rounds", "train_student"]
