"""Step 6: label the clean private records with the students' mean output, locally; and score the students on the
public images held out of training."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ..context import RunContext
from ..query_book import PublicQueries, QueryBook
from ..student import LabelStore, predict_proba
from .adapt import Adapted, balanced_output
from .train import Trained


@dataclass
class Predicted:
    """The labels: int64 ``(N,)`` labels, float32 ``(N,)`` confidences."""

    labels: torch.Tensor
    confidences: torch.Tensor


def mean_output(outputs: list[torch.Tensor]) -> torch.Tensor:
    """The mean of the students' softmax outputs (each float ``(N, K)``); one student's, as it is."""
    return outputs[0] if len(outputs) == 1 else torch.stack(outputs).mean(0)


def predict_records(
    ctx: RunContext, members: list[Trained], adapted: list[Adapted], book: QueryBook, store: LabelStore
) -> Predicted:
    """Label the clean records with the students' mean output; timings["predict"] in s."""
    t = time.perf_counter()
    n = ctx.n
    ctx.report("predict", 0, n)
    # each adapted model's outputs on the records where adaptation computed them already (one pass fewer)
    probs = mean_output([
        a.adaptation.probs if a.adaptation is not None and a.adaptation.probs is not None
        else ctx.predict_all(m.trainer.model)
        for m, a in zip(members, adapted, strict=True)
    ])
    if adapted[0].adaptation is None:  # an adapted student learnt balanced labels in its rounds already
        probs = balanced_output(ctx, probs, store, book.public)
    conf, labels = probs.max(dim=1)
    ctx.report("predict", n, n)
    ctx.timings["predict"] = time.perf_counter() - t
    return Predicted(labels, conf)


def score_held_out(
    ctx: RunContext, members: list[Trained], public: Optional[PublicQueries], store: LabelStore
) -> Optional[dict[str, int]]:
    """The final students' agreement (their mean output's) with the teacher's labels of the held-out public
    images: ``images`` answered, and on how many the two ``agree`` (None: none held out)."""
    if public is None or not len(public.held_out):
        return None
    values = public.images.built_rows().rows(torch.from_numpy(public.held_out)).values
    probs = mean_output([predict_proba(m.trainer.model, values, device=ctx.settings.device) for m in members])
    teacher = torch.from_numpy(store.get(public.images.ids(public.held_out)).astype(np.int64))
    answered = teacher >= 0
    agree = int((probs.argmax(1)[answered] == teacher[answered]).sum())
    return {"images": int(answered.sum()), "agree": agree}


__all__ = ["Predicted", "mean_output", "predict_records", "score_held_out"]
