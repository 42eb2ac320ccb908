"""Step 5 (``adapt``): fine-tune each trained student on its own confident labels of the clean records, anchored
to the teacher-labelled queries (:mod:`ldpclient.transfer.adapt`; local, nothing is sent, no privacy cost)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, Optional

import torch

from ..adapt import AdaptHistory, SelfTrainingAdapter
from ..context import RunContext
from ..prior import balanced, training_prior
from ..query_book import PublicQueries, QueryBook
from ..student import LabelStore
from .train import Trained


@dataclass
class Adapted:
    """A student after adaptation: its softmax outputs on the records before (float32 ``(N, K)``; ``None`` when
    not computed) and the adaptation history (``None`` when off)."""

    unadapted: Optional[torch.Tensor]
    adaptation: Optional[AdaptHistory]


def label_prior(
    ctx: RunContext, store: LabelStore, public: Optional[PublicQueries], classes: int
) -> Optional[torch.Tensor]:
    """Where :meth:`~..settings.AdaptationSettings.balances`: the prior the student learnt (the teacher's answer
    shares, :func:`~..prior.training_prior`), which the labels are not to keep; else None."""
    if not ctx.given.adaptation.balances(public is not None):
        return None
    return training_prior(store.histogram().tolist(), classes)


def balanced_output(
    ctx: RunContext, probs: torch.Tensor, store: LabelStore, public: Optional[PublicQueries]
) -> torch.Tensor:
    """Where :meth:`~..settings.AdaptationSettings.balances`: the student's outputs ``probs`` re-weighted from the
    teacher's answer shares (which it learnt) to equal ones (:mod:`..prior`), in ``probs``' dtype; else ``probs``."""
    prior = label_prior(ctx, store, public, probs.shape[1])
    return probs if prior is None else balanced(probs, prior)


def adapt_student(ctx: RunContext, trained: Trained, book: QueryBook, store: LabelStore) -> Adapted:
    """Fine-tune on the clean records, anchored to the queries (``adapt`` off: nothing); adds its seconds to
    timings["adapt"], and those of its prediction passes to timings["adapt_predict"]."""
    settings = ctx.settings
    if not settings.adapt:
        return Adapted(None, None)
    t = time.perf_counter()
    model = trained.trainer.model
    adapter = settings.adapter or SelfTrainingAdapter(
        seed=trained.seed, device=trained.trainer.device,
        predictor=ctx.stages.predict_proba if ctx.stages is not None else None)
    # the unadapted labels of every record cost a full pass: above the adapter's selection sample they are
    # not computed (the rounds predict on the sample), so that only the final pass reads every record
    sampled = isinstance(adapter, SelfTrainingAdapter) and adapter.samples(ctx.n)
    before = None if sampled else ctx.predict_all(model)
    first_pass = time.perf_counter() - t

    def anchor(rnd: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for ids, values in book.epoch_batches(10_000 + rnd, trained.seed):
            y = torch.from_numpy(store.get(ids))
            keep = y >= 0
            if bool(keep.any()):
                yield values[keep], y[keep]

    rounds = len(adapter.schedule)
    # where the labels are not to keep the teacher's answer shares, the rounds learn the records' own
    prior = label_prior(ctx, store, book.public, ctx.meta.num_classes)
    ctx.report("adapt", 0, rounds)
    adaptation = adapter.adapt(model, ctx.records, anchor, probs=before,
                               on_round=lambda done: ctx.report("adapt", done, rounds), prior=prior)
    ctx.add_time("adapt", time.perf_counter() - t)
    # of which the prediction passes (the benchmarks set them beside a bare model loop)
    ctx.add_time("adapt_predict", first_pass + adaptation.predict_seconds)
    return Adapted(before, adaptation)


__all__ = ["Adapted", "adapt_student", "balanced_output", "label_prior"]
