"""Step 1: release each private record once (through the ledger when there is one), in chunks; blank and
procedural records for the data-free run and blank queries."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from ...io.records import RecordSource, SubsetRecords, iter_batches, source_ids
from ...names import Mode
from ...privacy.public import public_release
from ...privacy.release import Release, ReleaseBuilder
from ...teachers.identity import merge_scope_aliases
from ..context import RunContext
from ..procedural import procedural_images

#: Input elements released per chunk (2**21: 2,674 28x28 grey records): bounds the noising's working memory.
RELEASE_CHUNK_ELEMENTS = 2**21


def release_chunk(record_shape: Sequence[int]) -> int:
    """Records released (and charged) per chunk: about :data:`RELEASE_CHUNK_ELEMENTS` input elements, at least 1."""
    return max(1, RELEASE_CHUNK_ELEMENTS // max(1, math.prod(record_shape)))


def release_in_chunks(
    source: RecordSource, release: Callable[[torch.Tensor, list[bytes | str] | None], Release]
) -> Iterator[tuple[np.ndarray, Release]]:
    """Read ``source`` in chunks of :func:`release_chunk` records and ``release(records, source_ids)`` each, in
    order: ``(indices, release)`` per chunk. Each chunk is charged (through a ledger) before the next is read,
    so memory is O(chunk) and a stop loses at most the chunk being sampled. ``label`` and ``noise`` both use it."""
    for idx, records in iter_batches(source, release_chunk(source.record_shape)):
        yield idx, release(records, source_ids(source, idx))


@dataclass
class Released:
    """Step 1's output: the release of the records and the counts ``records``/``releases_fresh``/
    ``releases_reused``/``not_released``."""

    release: Release
    counts: dict[str, int]


def release_records(ctx: RunContext, used: np.ndarray | None = None) -> Released:
    """Release the N records (blank ones for ``data-free``; only ``used`` when given) once, in chunks;
    timings["release"] in s."""
    t = time.perf_counter()
    n = ctx.n
    m = n if used is None else len(used)
    ctx.report("release", 0, m)
    public = ctx.mode == Mode.DATA_FREE
    if ctx.ledger is not None and not public:  # releases stored under other spellings of this teacher
        merge_scope_aliases(ctx.ledger, ctx.scope_name())
    source = ctx.records if used is None else SubsetRecords(ctx.records, used)
    fresh = None if public else _release_on_stages(ctx, source)
    release = release_all(ctx, None if public else source, m, ctx.records.record_shape, report=fresh is None)
    ctx.timings["release"] = time.perf_counter() - t
    # what the workers noised now (the driver read every release back: stored) or, here, what was not reused
    reused = m - int(fresh.sum()) if fresh is not None else int(release.reused.sum())
    counts = {"records": n, "releases_fresh": 0 if public else m - reused, "releases_reused": reused,
              "not_released": n - m}
    return Released(release, counts)


def release_all(
    ctx: RunContext, source: RecordSource | None, n: int, shape: tuple[int, ...], *, report: bool = False
) -> Release:
    """Release ``n`` records of ``shape`` in chunks of ~RELEASE_CHUNK_ELEMENTS input elements, in order.

    ``source`` None: ``n`` public free records (data-free, blank queries): blank records of the domain's low
    value noised by the blank mechanism, or procedural images sent as they are (``free_images``).
    """
    if source is None and ctx.settings.free_images == "procedural":
        procedural = _procedural_release(ctx, n, shape)
        if report:
            ctx.report("release", n, n)
        return procedural
    whole = ReleaseBuilder(n)
    if source is None:  # public blank records: neither charged nor stored
        chunk = release_chunk(shape)
        for start in range(0, n, chunk):
            blank = torch.full((min(chunk, n - start), *shape), ctx.settings.blank_mechanism.domain.low,
                               dtype=torch.float32)
            whole.add(ctx.release(blank, public=True))
            if report:  # the data-free run's bar ends as the private run's does
                ctx.report("release", start + len(blank), n)
    else:
        for idx, release in release_in_chunks(source, lambda r, ids: ctx.release(r, public=False, sources=ids)):
            whole.add(release)
            if report:
                ctx.report("release", int(idx[-1]) + 1, n)
    return whole.build()


def _procedural_release(ctx: RunContext, n: int, shape: tuple[int, ...]) -> Release:
    """``n`` procedural images of ``shape`` (drawn from the run's seed: public, nothing private) on the blank
    mechanism's domain, released without noise (epsilon 0, no ledger)."""
    domain = ctx.settings.blank_mechanism.domain
    images = procedural_images(n, shape, torch.Generator().manual_seed((ctx.seed * 7919 + 17) % 2**63))
    return public_release(domain.low + (domain.high - domain.low) * images, domain)


def _release_on_stages(ctx: RunContext, records: RecordSource) -> np.ndarray | None:
    """With a :class:`~..context.StageRunner`: the workers noise and charge ``records`` (the driver then reads the
    releases back, stored and free); per record, whether it was noised now. None without one."""
    if ctx.stages is None:
        return None
    done = 0

    def on_block(count: int) -> None:
        nonlocal done
        done += count
        ctx.report("release", done, len(records))

    return ctx.stages.release(ctx.mechanism, ctx.scope_name(), records, on_block)


__all__ = ["RELEASE_CHUNK_ELEMENTS", "Released", "release_all", "release_chunk", "release_in_chunks",
           "release_records"]
