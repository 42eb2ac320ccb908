"""Step 3a, with ``decode`` asked and public images: fit the release decoder to the public images, ask the
teacher whether it helps (:mod:`..decode_check`), and make the plan's rows with it when it does.

Runs after the public images are labelled (the check's truth is their clean answers) and before any of the plan's
queries is sent. The decoder decodes into the public images outside the check's (all of them with ``always``),
drawn by their values alone; the check's verdict is kept in the state directory under the decoder's key
(:mod:`..decoder_store`), so ``noise --decode auto`` decodes as the run does. A plan sent decoded has other batch
ids than the same plan sent raw.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import torch

from ...io.document import JSONDict
from ...privacy.release import Derived
from ..augment import QueryPlan
from ..context import RunContext
from ..decode_check import DecodeVerdict, decode_verdict
from ..decoder import ReleaseDecoder, decoder_key, fit_decoder
from ..decoder_store import ALWAYS, keep_verdict, public_split
from ..query_book import QueryBook
from ..student import LabelStore


def decode_releases(ctx: RunContext, book: QueryBook, store: LabelStore) -> JSONDict | None:
    """Decide whether ``book``'s plan is sent decoded and set it up (its rows, its blank rows, its plan's
    ``decoder``); what was decided and why (:attr:`~..result.TransferResult.decoding`; None: not asked)."""
    asked = ctx.settings.decoding
    if asked.decode == "none" or book.public is None:
        return None if asked.note is None else {"asked": True, "chosen": False, "reason": asked.note}
    t = time.perf_counter()
    public = book.public.images.built_rows().release.values
    split = public_split(public, asked.check_images)
    students = ctx.result_cache.directory if ctx.result_cache is not None else None
    prior = public[split.prior]
    decoder, key = fit_decoder(ctx.mechanism, prior, seed=split.seed), decoder_key(ctx.mechanism, prior, split.seed)
    verdict = _check(ctx, book, store, decoder, key, split.check, split.seed) if asked.decode == "auto" else None
    if verdict is not None:
        keep_verdict(students, key, ctx.scope_name(), chosen=verdict.chosen, reason=verdict.reason)
    chosen = verdict is None or verdict.chosen
    if chosen:
        book.source = book.source.with_decoder(decoder)
        if book.blank_source is not None and ctx.settings.blank_mechanism.config() == ctx.mechanism.config():
            book.blank_source = book.blank_source.with_decoder(decoder)  # noised as the private ones: decoded too
        book.plan = replace(book.plan, decoder=key)
    ctx.add_time("decode", time.perf_counter() - t)
    out: JSONDict = {"asked": True, "chosen": chosen, "decoder": key, "public_images": len(split.prior),
                     "check_queries": asked.check_queries}
    if verdict is None:
        return {**out, "reason": ALWAYS}
    return {**out, **verdict.as_dict()}


def _check(ctx: RunContext, book: QueryBook, store: LabelStore, decoder: ReleaseDecoder, key: str,
           check: torch.Tensor, seed: int) -> DecodeVerdict:
    """The teacher's verdict on ``decoder``: the public images ``check`` released (noise drawn from ``seed``,
    public) and the first private releases, each sent raw and decoded."""
    assert book.public is not None
    settings = ctx.settings
    public = book.public.images.built_rows().release.values[check]
    released = ctx.mechanism.release(public, generator=torch.Generator().manual_seed((seed + 3) % 2**63), public=True)
    raw = settings.postprocessed(released)
    everything = torch.arange(len(public))
    clean = store.get(book.public.images.ids(check.numpy()))
    labels = [_labels(ctx, book, rows.rows(everything), QueryPlan("identity", len(public), seed=(seed + 4) % 2**63,
                                                                  batch_size=book.plan.batch_size, decoder=d))
              for rows, d in ((raw, ""), (raw.with_decoder(decoder), key))]
    records = book.source.released(settings.decoding.check_records)
    if len(records) == 0:
        return decode_verdict(clean, *labels)
    private = [_labels(ctx, book, rows.rows(records), QueryPlan("identity", len(records), seed=(ctx.seed + 5) % 2**63,
                                                                batch_size=book.plan.batch_size, decoder=d))
               for rows, d in ((book.source, ""), (book.source.with_decoder(decoder), key))]
    return decode_verdict(clean, *labels, *private)


def _labels(ctx: RunContext, book: QueryBook, rows: Derived, plan: QueryPlan) -> np.ndarray:
    """The teacher's labels of ``rows`` (clipped as the plan's queries are), sent as ``plan``'s batches."""
    out = np.full(plan.total, -1, dtype=np.int64)
    stream = ((bid, book.clip(d) if book.clip is not None else d) for bid, d in plan.batches(rows))
    for ids, labels in ctx.answers(plan, stream):
        out[ids] = labels
    return out


__all__ = ["decode_releases"]
