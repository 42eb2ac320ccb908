"""What the teacher labels in one run, in named segments of the label store's ids.

A run's label store (:class:`~ldpclient.transfer.student.LabelStore`) holds one int8 answer per query, by id.
The ids are laid out in segments, each owning its range: ``plan`` (the private or blank queries, ids from 0),
then, with public images, ``public`` (each image once, as it is) and ``mirror_check`` (mirrored and shifted copies
of some of them; never trained on). :class:`QueryBook` holds the segments and builds the plan's batches from the
releases, for the teacher and for each training epoch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

import numpy as np
import torch

from ..io.document import JSONDict
from ..privacy.base import Mechanism
from ..privacy.release import Derived
from .augment import QueryPlan
from .mirror_check import MirrorCheck
from .postprocess import ClipToDomain, ReleaseRows
from .result import SAMPLE_SIZE, SentSample
from .student import LabelStore

#: Most bytes of built query batches kept between sending them and training on them (64 MB for the
#: defaults' 20,000 28x28 queries); above it every epoch builds its batches again.
QUERY_CACHE_BYTES = 256 * 2**20

#: Query ids per training chunk: an epoch shuffles the chunks, and the student shuffles within each one. Fixed
#: here, not the teacher's batch size, so that neither the order nor the optimiser's batches depend on how many
#: queries one request carried (16 to Cloud Vision, 256 over the Open Inference Protocol).
TRAIN_CHUNK = 256


def _id_chunks(total: int) -> list[tuple[int, int]]:
    """``[0, total)`` cut into :data:`TRAIN_CHUNK`-id ranges ``(start, stop)``, in order."""
    return [(a, min(a + TRAIN_CHUNK, total)) for a in range(0, total, TRAIN_CHUNK)]


@dataclass
class Segment:
    """The queries of ``plan`` in the label store: query ``k`` is id ``offset + k``. ``rows``: what they are built
    from (None until released)."""

    name: str
    plan: QueryPlan
    offset: int
    rows: Optional[ReleaseRows] = None

    @property
    def end(self) -> int:
        """The first id after this segment's."""
        return self.offset + self.plan.total

    def ids(self, local: np.ndarray | None = None) -> np.ndarray:
        """The store ids of this segment's queries ``local`` (default: all of them, in order)."""
        return (np.arange(self.plan.total) if local is None else np.asarray(local)) + self.offset

    def built_rows(self) -> ReleaseRows:
        """:attr:`rows`; RuntimeError before they are released."""
        if self.rows is None:
            raise RuntimeError(f"the {self.name} queries' releases are made when the run starts")
        return self.rows


@dataclass
class PublicQueries:
    """The queries of the images the user declared public, after the plan's ids: ``images`` (an identity plan over
    their public releases, not post-processed), then ``mirror_check`` (the check's copies, with ``check``) when the
    run makes it."""

    images: Segment
    #: Times per training epoch each public image is trained on.
    repeats: int = 1
    #: public images (their index in ``images.plan``) neither trained on nor anchoring the adaptation: the
    #: student's agreement with the teacher's labels of them scores it
    held_out: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    check: Optional[MirrorCheck] = None
    mirror_check: Optional[Segment] = None

    def segments(self) -> list[Segment]:
        """What the teacher labels, in id order: the images, the check's copies."""
        return [s for s in (self.images, self.mirror_check) if s is not None]

    @property
    def labelled_total(self) -> int:
        """Queries of the public images and of the mirror check's copies."""
        return sum(s.plan.total for s in self.segments())

    def trained_mask(self, ids: np.ndarray) -> np.ndarray:
        """Which of the store ids ``ids`` (public images') training may read."""
        return ~np.isin(ids - self.images.offset, self.held_out)


@dataclass
class QueryBook:
    """The plan's queries (segment ``plan``, ids from 0) and what their batches are built from: the releases
    (``source``), blank releases, the clip to the teacher's domain, the mechanism that noises Rand copies.

    ``built``: the batches as built when they were sent (query ids, values), by batch index, kept when they fit
    :data:`QUERY_CACHE_BYTES`; training epochs and adaptation's anchors then read them instead of building them
    again (the same values: the batches are a deterministic function of the plan).
    """

    plan: QueryPlan
    source: ReleaseRows
    blank_source: Optional[ReleaseRows]
    clip: Optional[ClipToDomain]
    mechanism: Mechanism
    noise_mode: str
    built: Optional[dict[int, tuple[np.ndarray, torch.Tensor]]] = None
    #: the first :data:`SAMPLE_SIZE` queries of the plan as sent: (query ids, values)
    first_sent: Optional[tuple[np.ndarray, torch.Tensor]] = None
    #: the public images' queries, labelled and trained on beside the plan's (None: no public images)
    public: Optional[PublicQueries] = None
    #: whether the plan's rows are decoded, and why (:mod:`~.stages.decode`; None: not asked)
    decoding: Optional[JSONDict] = None
    #: the plan's batches the teacher has answered, a prefix of the plan (query rounds); None: every batch
    sent_batches: Optional[int] = None

    @property
    def batches_sent(self) -> int:
        """The plan's batches answered so far (its first ones): all of them unless query rounds stopped early."""
        return self.plan.num_batches if self.sent_batches is None else self.sent_batches

    @property
    def queries_sent(self) -> int:
        """The plan's queries answered so far: those of its first :attr:`batches_sent` batches."""
        return min(self.batches_sent * self.plan.batch_size, self.plan.total)

    @property
    def labelled_total(self) -> int:
        """Ids in the label store: the plan's queries, then the public segments'."""
        return self.plan.total + (self.public.labelled_total if self.public is not None else 0)

    @property
    def trained_per_epoch(self) -> int:
        """Rows one training epoch reads: the plan's queries sent, and each public image ``public.repeats`` times."""
        public = self.public
        return self.queries_sent + (public.images.plan.total * public.repeats if public is not None else 0)

    def stream(self, order: Sequence[int] | None = None) -> Iterator[tuple[str, Derived]]:
        """The plan's query batches ``(batch id, queries)`` in ``order`` (default: plan order), clipped if asked."""
        for bid, d in self.plan.batches(self.source, mechanism=self.mechanism, blank_releases=self.blank_source,
                                        order=order, noise_mode=self.noise_mode):
            yield bid, (self.clip(d) if self.clip is not None else d)

    def keeping(self, stream: Iterator[tuple[str, Derived]], start: int = 0) -> Iterator[tuple[str, Derived]]:
        """``stream`` (the plan's batches in plan order from batch ``start``), keeping each batch in :attr:`built`
        when all of them fit :data:`QUERY_CACHE_BYTES`, and the first :data:`SAMPLE_SIZE` queries sent."""
        size = self.plan.total * math.prod(self.source.record_shape) * 4  # float32 values
        if start == 0:
            self.built = {} if size <= QUERY_CACHE_BYTES else None
        for b, (bid, d) in enumerate(stream, start):
            if self.built is not None and d.ids is not None:
                self.built[b] = (d.ids.numpy(), d.values)
            if b == 0 and d.ids is not None:
                self.first_sent = (d.ids[:SAMPLE_SIZE].numpy().copy(), d.values[:SAMPLE_SIZE].clone())
            yield bid, d

    def private_batches(self, order: list[int]) -> Iterator[tuple[np.ndarray, torch.Tensor]]:
        """The plan's batches ``order`` as ``(query ids, values)``: kept ones when all were kept, else built."""
        built = self.built
        if built is not None and len(built) == self.batches_sent:
            for b in order:
                yield built[b]
            return
        for _, d in self.stream(order):
            assert d.ids is not None
            yield d.ids.numpy(), d.values

    def epoch_batches(self, epoch: int, seed: int) -> Iterator[tuple[np.ndarray, torch.Tensor]]:
        """Training chunks ``(store ids, values)`` for one epoch, in an order seeded by ``seed`` (a student's) and
        ``epoch``: the plan's queries sent and the public images (each chunk ``public.repeats`` times, the held-out
        images left out), mixed. A chunk is :data:`TRAIN_CHUNK` consecutive ids, whatever batch size the teacher
        took: the same answers train the same student however they travelled."""
        g = torch.Generator().manual_seed((seed * 1_000_003 + epoch) % 2**63)
        private = _id_chunks(self.queries_sent)
        public = self.public
        public_chunks = _id_chunks(public.images.plan.total) if public is not None else []
        repeats = public.repeats if public is not None else 0
        order = torch.randperm(len(private) + len(public_chunks) * repeats, generator=g).tolist()
        for c in order:
            if c < len(private):
                yield self.private_rows(*private[c])
            else:
                assert public is not None
                images = public.images
                local = np.arange(*public_chunks[(c - len(private)) % len(public_chunks)])
                local = local[public.trained_mask(images.ids(local))]  # the held-out images stay unseen
                if len(local):
                    yield images.ids(local), images.built_rows().rows(torch.from_numpy(local)).values

    def private_rows(self, start: int, stop: int) -> tuple[np.ndarray, torch.Tensor]:
        """The plan's queries ``start`` to ``stop`` (ids, values as sent): sliced from the kept batches when all
        were kept, else built again."""
        ids = np.arange(start, stop, dtype=np.int64)
        built, size = self.built, self.plan.batch_size
        if built is not None and len(built) == self.batches_sent:
            parts = [built[b][1][max(start - b * size, 0) : stop - b * size]
                     for b in range(start // size, (stop - 1) // size + 1)]
            return ids, parts[0] if len(parts) == 1 else torch.cat(parts)
        d = self.plan.queries(self.source, ids, mechanism=self.mechanism, blank_releases=self.blank_source,
                              noise_mode=self.noise_mode)
        return ids, (self.clip(d) if self.clip is not None else d).values

    def sent_sample(self, store: LabelStore) -> Optional[SentSample]:
        """The first releases (post-processed) and the first queries as sent, with the teacher's answers."""
        if self.first_sent is None:
            return None
        ids, values = self.first_sent
        first = self.source.released(SAMPLE_SIZE)
        recipe = self.plan.recipes(ids)
        sources = tuple(
            () if blank else tuple(int(k) for k in (i, j) if k >= 0)
            for blank, i, j in zip(recipe["blank"], recipe["i"], recipe["j"], strict=True)
        )
        return SentSample(
            release_indices=first.numpy(),
            releases=self.source.rows(first).values.detach().float().clone(),
            query_ids=ids,
            queries=values.detach().float(),
            query_labels=store.get(ids).astype(np.int64),
            query_sources=sources,
        )

    def answers_apart(self, store: LabelStore) -> Optional[dict[str, list[int]]]:
        """With public images: the teacher's answers per class to the plan's queries sent and to the public images
        (:attr:`~.result.TransferResult.answers_apart`); None without public images."""
        if self.public is None:
            return None
        return {"queries": store.histogram(np.arange(self.queries_sent)).tolist(),
                "public": store.histogram(self.public.images.ids()).tolist()}


__all__ = ["QUERY_CACHE_BYTES", "PublicQueries", "QueryBook", "Segment"]
