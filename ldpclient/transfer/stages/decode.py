"""Step 3a, with ``decode`` asked and public images: train the release decoder on the public images, ask the
teacher whether it helps (:mod:`..decode_check`), and make the plan's rows with it when it does.

Runs after the public images are labelled (the check's truth is their clean answers) and before any of the plan's
queries is sent. The decoder learns from the public images outside the check's (all of them with ``always``),
drawn by their values alone; it is kept in the state directory under its key (:func:`~..decoder.decoder_key`),
so a re-run trains nothing. A plan sent decoded has other batch ids than the same plan sent raw.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from ...io.document import JSONDict
from ...privacy.public import public_seed
from ...privacy.release import Derived
from ..augment import QueryPlan
from ..context import RunContext
from ..decode_check import DecodeVerdict, decode_verdict
from ..decoder import ReleaseDecoder, decoder_key, train_decoder, untrained_decoder
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
    seed = public_seed(public)
    order = torch.randperm(len(public), generator=torch.Generator().manual_seed((seed + 2) % 2**63))
    check, train = order[:asked.check_images].sort().values, order[asked.check_images:].sort().values
    decoder, key, reused = _decoder(ctx, public[train], seed)
    verdict = _check(ctx, book, store, decoder, key, check, seed) if asked.decode == "auto" else None
    chosen = verdict is None or verdict.chosen
    if chosen:
        book.source = book.source.with_decoder(decoder)
        if book.blank_source is not None and ctx.settings.blank_mechanism.config() == ctx.mechanism.config():
            book.blank_source = book.blank_source.with_decoder(decoder)  # noised as the private ones: decoded too
        book.plan = replace(book.plan, decoder=key)
    ctx.add_time("decode", time.perf_counter() - t)
    out: JSONDict = {"asked": True, "chosen": chosen, "decoder": key, "public_images": len(train),
                     "reused": reused, "check_queries": asked.check_queries}
    if verdict is None:
        return {**out, "reason": "decode 'always': used without a check"}
    return {**out, **verdict.as_dict()}


def _decoder(ctx: RunContext, public: torch.Tensor, seed: int) -> tuple[ReleaseDecoder, str, bool]:
    """The decoder of ``public`` images for the run's mechanism, its key, and whether it was kept from a run
    before (in the state directory, beside the kept results)."""
    key = decoder_key(ctx.mechanism, public, seed)
    path = ctx.result_cache.directory / "decoders" / f"{key}.pt" if ctx.result_cache is not None else None
    decoder = untrained_decoder(ctx.mechanism, public, torch.Generator().manual_seed(0))
    if path is not None and _load(decoder, path):
        return decoder.eval(), key, True
    decoder = train_decoder(ctx.mechanism, public, seed=seed)
    if path is not None:
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            torch.save(decoder.state_dict(), path.with_suffix(".tmp"))
            path.with_suffix(".tmp").replace(path)
        except OSError:  # not keeping it costs a re-run the training, nothing else
            pass
    return decoder, key, False


def _load(decoder: ReleaseDecoder, path: Path) -> bool:
    """Whether ``decoder`` now holds the weights kept in ``path`` (False: none, or not a decoder of its shape)."""
    try:
        decoder.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    except Exception:  # noqa: BLE001 - missing, damaged or of another shape: trained anew
        return False
    return True


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
