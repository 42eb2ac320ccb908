"""Step 2: the query plan, the lazy post-processing of the releases it is built from, the blank releases, and
the public images' segments (each image once, the mirror check's copies)."""

from __future__ import annotations

import time

import numpy as np
import torch

from ...io.records import RecordSource, as_record_source
from ...names import Mode
from ...privacy.guarantee import Domain
from ...privacy.public import public_release, public_seed
from ...privacy.release import Release, ReleaseBuilder
from ..augment import QueryPlan
from ..context import RunContext
from ..mirror_check import mirror_check
from ..postprocess import ClipToDomain, ReleaseRows, SubsetRows
from ..query_book import PublicQueries, QueryBook, Segment
from .release import release_all, release_in_chunks


def plan_for(ctx: RunContext) -> QueryPlan:
    """The private (or blank) queries' plan for the run's N records, as the settings resolved it (kind, queries,
    batch size, blank share); drawn from the run's seed and nothing else."""
    settings = ctx.settings
    return QueryPlan(kind=settings.kind, n=ctx.n, num_queries=None if settings.kind == "identity" else settings.queries,
                     seed=ctx.seed, batch_size=settings.query_batch_size, rand_scale=settings.rand_scale,
                     n_blank=settings.n_blank, blank_fraction=settings.blank_fraction)


def prepare_queries(ctx: RunContext, release: Release, plan: QueryPlan, used: np.ndarray | None = None) -> QueryBook:
    """Set up the (lazy) post-processing of ``plan``'s releases, release its blanks; timings["postprocess"] in s.
    ``used``: the records ``release`` holds, when it holds only some."""
    t = time.perf_counter()
    settings = ctx.settings
    if used is None:
        source = settings.postprocessed(release)
    else:
        source = SubsetRows(release, used, ctx.n, list(settings.transforms), settings.upsample_mode)
    blank_source = None
    if plan.num_blank:
        blank_source = settings.postprocessed(release_all(ctx, None, plan.n_blank, ctx.records.record_shape))
    ctx.timings["postprocess"] = time.perf_counter() - t
    lo, hi = ctx.meta.value_range
    clip = ClipToDomain(Domain(lo, hi)) if settings.clip_queries else None
    return QueryBook(plan, source, blank_source, clip, ctx.mechanism, settings.upsample_mode)


def prepare_public(ctx: RunContext, public: RecordSource, plan: QueryPlan) -> PublicQueries:
    """The public images as releases without noise (:func:`~ldpclient.privacy.public.public_release`) and
    their identity plan, seeded by their values alone: the same images get the same batch ids in every run
    (the baseline's included), so a journal answers them once and they are paid once; other images, other
    batch ids. Their ids follow ``plan``'s."""
    shape = ctx.records.record_shape
    if tuple(public.record_shape) != tuple(shape):
        raise ValueError(f"public images have shape {tuple(public.record_shape)} per image, the private ones "
                         f"{tuple(shape)}")
    if len(public) < 1:
        raise ValueError("no public images")
    settings, domain = ctx.settings, ctx.mechanism.domain
    whole = ReleaseBuilder(len(public))
    for _, release in release_in_chunks(public, lambda chunk, _ids: public_release(chunk, domain)):
        whole.add(release)
    released = whole.build()
    seed = public_seed(released.values)
    images = Segment("public", QueryPlan(kind="identity", n=len(public), seed=seed, batch_size=plan.batch_size),
                     plan.total, ReleaseRows(released, (), settings.upsample_mode))
    out = PublicQueries(images, repeats=settings.public_repeats)
    held = settings.public_held_out
    if held:  # drawn from the images' values alone, as their batch ids: the same images, the same hold-out
        order = torch.randperm(len(public), generator=torch.Generator().manual_seed(seed))
        out.held_out = np.sort(order[:held].numpy())
    check = mirror_check(released, seed, settings.mirror_check_images, settings.public_shift)
    end = images.end
    if check is not None:  # the copies' plan seeded like the public images': by their values alone
        copies = public_release(check.images, domain)
        out.check = check
        out.mirror_check = Segment(
            "mirror_check",
            QueryPlan(kind="identity", n=len(copies), seed=public_seed(copies.values), batch_size=plan.batch_size),
            end,
            ReleaseRows(copies, (), settings.upsample_mode),
        )
        end = out.mirror_check.end
    return out


class Prepared:
    """What planning prepares once per transfer and the run and the checks before it share: the records a plan
    releases, and the public images' queries (the same images given again: the same preparation)."""

    def __init__(self) -> None:
        #: the last :meth:`records_used`: (plan fingerprint, the records or None)
        self._used: tuple[str, np.ndarray | None] | None = None
        #: the last :meth:`public`: (the images given, plan fingerprint, their queries)
        self._public: tuple[object, str, PublicQueries] | None = None

    def records_used(self, plan: QueryPlan, mode: Mode) -> np.ndarray | None:
        """The private records ``plan``'s queries are made from, sorted indices, when they are not all of them
        (None: every record; SIDP and data-free runs). Decided by the plan alone, never by the records' values."""
        if mode != Mode.LDPKIT or plan.kind not in ("sup", "rand"):
            return None
        if self._used is None or self._used[0] != plan.fingerprint:
            used = plan.private_records_used()
            self._used = (plan.fingerprint, None if len(used) == plan.n else used)
        return self._used[1]

    def public(self, ctx: RunContext, public: torch.Tensor | RecordSource, plan: QueryPlan) -> PublicQueries:
        """:func:`prepare_public` of ``public`` for ``plan``, prepared once for the same images and plan."""
        kept = self._public
        if kept is not None and kept[0] is public and kept[1] == plan.fingerprint:
            return kept[2]
        prepared = prepare_public(ctx, as_record_source(public), plan)
        self._public = (public, plan.fingerprint, prepared)
        return prepared


__all__ = ["Prepared", "plan_for", "prepare_public", "prepare_queries"]
