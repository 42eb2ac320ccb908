"""Step 3: the teacher labels the public segments (when there are public images), then the plan's queries (all
at once, or the first query round's batches; later rounds through :func:`label_private`). Only the answers
are kept: int8 per query id in a :class:`~ldpclient.transfer.student.LabelStore`."""

from __future__ import annotations

import time

from ..context import RunContext
from ..query_book import QueryBook
from ..student import LabelStore
from .decode import decode_releases


def label_queries(ctx: RunContext, book: QueryBook, end: int) -> tuple[LabelStore, dict[str, int]]:
    """Have the teacher label the public segments, then the plan's first ``end`` batches; timings["label"] in s.
    Also the public images' counts: ``public_queries`` (the images, in the store), ``mirror_check_queries`` (their
    copies the mirror check sent), ``public_repeats`` (times per epoch training sees each)
    and, through a client, ``public_sent`` and ``public_from_journal`` (the public segments' queries, billed apart
    by the caller)."""
    t = time.perf_counter()
    store = LabelStore(book.labelled_total, ctx.meta.num_classes)
    counts: dict[str, int] = {}
    public = book.public
    if public is not None:
        before = ctx.client_counts()
        for segment in public.segments():
            stream = segment.plan.batches(segment.built_rows(), mechanism=ctx.mechanism,
                                          noise_mode=ctx.settings.upsample_mode)
            for ids, labels in ctx.answers(segment.plan, stream):
                store.set(segment.ids(ids), labels)
                ctx.report("label", store.num_answered, book.labelled_total)
        after = ctx.client_counts()
        counts = {"public_queries": public.images.plan.total, "public_sent": after[0] - before[0],
                  "public_from_journal": after[1] - before[1], "public_repeats": public.repeats,
                  "mirror_check_queries": public.mirror_check.plan.total if public.mirror_check is not None else 0}
    book.decoding = decode_releases(ctx, book, store)
    if book.decoding is not None and book.decoding.get("check_queries"):
        counts["decode_check_queries"] = ctx.settings.decoding.check_queries
    label_private(ctx, book, store, 0, end)
    ctx.timings["label"] = time.perf_counter() - t
    return store, counts


def label_private(ctx: RunContext, book: QueryBook, store: LabelStore, start: int, end: int) -> float:
    """Have the teacher label the plan's batches ``start`` to ``end`` (in plan order; the batches before
    ``start`` already answered), recorded in ``store`` and ``book.sent_batches``; returns the seconds."""
    t = time.perf_counter()
    whole = (start, end) == (0, book.plan.num_batches)
    stream = book.keeping(book.stream(None if whole else range(start, end)), start)
    for ids, labels in ctx.answers(book.plan, stream):
        store.set(ids, labels)
        ctx.report("label", store.num_answered, book.labelled_total)
    book.sent_batches = None if end == book.plan.num_batches else end
    return time.perf_counter() - t


__all__ = ["label_private", "label_queries"]
