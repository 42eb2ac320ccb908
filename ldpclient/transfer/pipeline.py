"""KnowledgeTransfer: label private records with a remote teacher that never sees them.

The six steps (release, post-process, label, train, adapt, label locally), in-process and resumable through the query journal
of a :class:`~ldpclient.teachers.client.QueryClient`:

1. **release** each private record once with an LDP mechanism (through the
   :class:`~ldpclient.privacy.ledger.Ledger` when given: stored releases are
   reused for free, fresh ones are charged per record and capped);
2. **post-process** the releases (resize back after reduce-before-noise, clip,
   denoise; free), lazily: only the rows a query batch uses, when it is built;
3. **plan and label** Q queries built from the releases (LDPKiT-Sup pairs,
   LDPKiT-Rand noise copies, or the releases themselves) in batches with stable
   ids; only the labels are kept (int8 per query), never the query tensors;
4. **train** a local student on the hard labels, recomputing the queries from
   the plan each epoch (memory O(batch)); with ``warmup`` epochs, first warmed up on the
   clean private records by a rotation pretext (:mod:`ldpclient.transfer.warmup`; local, no
   privacy cost; that student too has seen the clean records and stays on the device);
5. **adapt** (``adapt=True``, default): fine-tune the student on its own confident
   labels of the clean private records, anchored to the teacher-labelled queries
   (:mod:`ldpclient.transfer.adapt`; local, nothing is sent, no privacy cost, but the
   adapted student has seen the clean records and stays on the device);
6. **label** the clean private records with the student, locally (with ``balance``, default, and no public
   images, labels from equal class shares, not the teacher's answer shares (:mod:`ldpclient.transfer.prior`):
   adaptation's rounds pseudo-label from the outputs aligned to them and the adapted student's outputs are
   the labels; without adaptation, the trained student's outputs re-weighted).

Memory: the clean records come from a :class:`~ldpclient.io.records.RecordSource`
(a tensor, or a folder spooled to disk by :func:`~ldpclient.io.folders.spool_private_folder`)
read in batches; they are released in chunks of about :data:`RELEASE_CHUNK_ELEMENTS`
input elements, and only the releases are held (n x released elements). Peak memory
is O(batch + n x released elements), not O(n x record).

Modes (``mode=``):

* ``"ldpkit"`` (default): the steps above;
* ``"sidp"``: send the n (post-processed) releases and take the teacher's labels
  as the answer (no student);
* ``"data-free"``: the same pipeline and query budget, with every private record
  replaced by a blank record (the domain's low value) released with
  ``public=True``: epsilon 0, no private information. What a run gains over this
  baseline is what the private data contributed.

The guarantee in the result is the cost of releasing one record once, per
element and per record; augmentation and post-processing add nothing.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional, Protocol, Sequence

import numpy as np
import torch
from torch import nn

from ..io.records import RecordSource, SubsetRecords, as_record_source, iter_batches, source_ids
from ..names import PLAN_KINDS
from ..privacy.base import Mechanism
from ..privacy.guarantee import Domain, Guarantee
from ..privacy.public import public_release
from ..privacy.release import Derived, Release, ReleaseBuilder
from ..teachers.identity import merge_scope_aliases
from . import defaults
from .adapt import AdaptHistory, SelfTrainingAdapter
from .affine import flip_crop
from .augment import QueryPlan, check_sup_queries
from .confusion import Confusion, estimate_confusion
from .evidence import fuse_pair_evidence
from .mirror_check import MirrorCheck, MirrorVerdict, mirror_check
from .postprocess import ClipToDomain, ReleaseRows, SubsetRows, Transform, parse_postprocess
from .prior import balanced, training_prior
from .procedural import procedural_images
from .result_cache import ResultCache
from .rounds import QueryRound, learnt_too_little, round_ends
from .settings import AdaptationSettings, PlanSettings, TrainingSettings, fold_keywords
from .student import (
    LabelStore,
    Progress,
    StudentMean,
    Trainer,
    TrainHistory,
    build_student,
    predict_proba,
    save_checkpoint,
    select_device,
    validation_mask,
)
from .warmup import rotation_warmup

if TYPE_CHECKING:
    from ..teachers.base import TeacherMetadata

MODES = ("ldpkit", "sidp", "data-free")
AUGMENTATIONS = PLAN_KINDS  # augmentation name -> query-plan kind (ldpclient.names)
#: Input elements released per chunk (2**21: 2,674 28x28 grey records): bounds the noising's working memory.
RELEASE_CHUNK_ELEMENTS = 2**21
#: Most bytes of built query batches kept between sending them and training on them (64 MB for the
#: defaults' 20,000 28x28 queries); above it every epoch builds its batches again.
QUERY_CACHE_BYTES = 256 * 2**20


#: Releases and queries a run keeps for a person to look at (:class:`SentSample`, the HTML report).
SAMPLE_SIZE = 16


@dataclass(frozen=True)
class SentSample:
    """A few of what the teacher was given, kept for a person to look at (``label --html``).

    Values are in the teacher's value range, float32 ``(k, C, H, W)``. ``release_indices``:
    the first ``k`` records (input order); ``releases``: their releases after the free
    post-processing, what every query is built from (with ``augment="none"`` exactly what was
    sent). ``queries``: the first ``k`` queries of the plan exactly as handed to the teacher's
    client (after the clip to the domain; a UINT8 wire then rounds them to 8 bits, as the page's
    PNGs do), ``query_ids`` their ids, ``query_labels`` the teacher's answers (-1: none),
    ``query_sources``: per query the record indices it was built from (Sup: two, Rand and
    SIDP: one; empty for a blank query).
    """

    release_indices: np.ndarray
    releases: torch.Tensor
    query_ids: np.ndarray
    queries: torch.Tensor
    query_labels: np.ndarray
    query_sources: tuple[tuple[int, ...], ...]


def release_chunk(record_shape: Sequence[int]) -> int:
    """Records released (and charged) per chunk: about :data:`RELEASE_CHUNK_ELEMENTS` input elements, at least 1."""
    return max(1, RELEASE_CHUNK_ELEMENTS // max(1, math.prod(record_shape)))


def release_in_chunks(
    source: RecordSource, release: Callable[[torch.Tensor, list[Any] | None], Release]
) -> Iterator[tuple[np.ndarray, Release]]:
    """Read ``source`` in chunks of :func:`release_chunk` records and ``release(records, source_ids)`` each, in
    order: ``(indices, release)`` per chunk. Each chunk is charged (through a ledger) before the next is read,
    so memory is O(chunk) and a stop loses at most the chunk being sampled. ``label`` and ``noise`` both use it."""
    for idx, records in iter_batches(source, release_chunk(source.record_shape)):
        yield idx, release(records, source_ids(source, idx))


@dataclass
class TransferResult:
    """What a run produced.

    ``labels``: int64 ``(N,)`` labels of the private records, in input order.
    ``confidences``: float32 ``(N,)`` student softmax max in [0, 1] (``None`` in
    ``sidp`` mode: the teacher returns hard labels only). ``student``: the trained
    model (several students: their :class:`~ldpclient.transfer.student.StudentMean`; ``None`` for ``sidp``).
    ``guarantee``: cost of the one release of each
    record (per element and per record; epsilon 0 for ``data-free``).
    ``counts``: records, releases_fresh, releases_reused, queries (labelled by the
    teacher in this run's plan), batches. ``timings``: seconds per stage.
    ``teacher_label_histogram``: how often the teacher answered each class.
    """

    labels: torch.Tensor
    confidences: Optional[torch.Tensor]
    student: Optional[nn.Module]
    guarantee: Guarantee
    mode: str
    counts: dict[str, int]
    timings: dict[str, float]
    history: Optional[TrainHistory] = None
    teacher_label_histogram: list[int] = field(default_factory=list)
    plan: Optional[QueryPlan] = None
    #: labels of the student before on-device adaptation (``None`` when adaptation was off or not applicable)
    unadapted_labels: Optional[torch.Tensor] = None
    adaptation: Optional[AdaptHistory] = None
    #: labels of the (adapted) student before fusing the pair evidence (``None`` when fusion was off)
    unfused_labels: Optional[torch.Tensor] = None
    #: how informative the pair answers were (FusionResult.informativeness; ``None`` without fusion)
    fusion_informativeness: Optional[float] = None
    #: the first releases and queries as the teacher got them, for a person to look at
    sent_sample: Optional[SentSample] = None
    #: how the student was trained: ``student`` (zoo name), ``crop_pixels`` (most shift of a row), ``flip``,
    #: ``mirror_check`` (what decided ``flip`` when it was not given: :meth:`MirrorVerdict.as_dict`, else None)
    training: dict[str, Any] = field(default_factory=dict)
    #: the final student against the teacher on the public images held out of training (``images``, ``agree``:
    #: how many, and on how many the two gave the same class); None without held-out public images
    public_held_out: Optional[dict[str, int]] = None
    #: the query rounds as they went (:mod:`~ldpclient.transfer.rounds`; empty when every query went at once)
    query_rounds: list[QueryRound] = field(default_factory=list)
    #: with public images, the teacher's answers per class to the plan's queries and, apart, to the public images
    #: (each image once; the mirror check's copies in neither): ``{"queries": [...], "public": [...]}``; else None
    answers_apart: Optional[dict[str, list[int]]] = None
    #: the teacher's confusion on noised queries the student was trained through (``TrainingSettings.confusion``):
    #: :meth:`~.confusion.Confusion.as_dict`; None without
    confusion: Optional[dict[str, Any]] = None

    @property
    def epsilon_record(self) -> float:
        return self.guarantee.epsilon_record

    @property
    def epsilon_element(self) -> float:
        return self.guarantee.epsilon_element

    def summary(self) -> dict[str, Any]:
        """JSON-serialisable summary (for reports and the CLI)."""
        out: dict[str, Any] = {
            "mode": self.mode,
            "guarantee": self.guarantee.as_dict(),
            "counts": dict(self.counts),
            "timings_s": {k: round(v, 3) for k, v in self.timings.items()},
            "teacher_label_histogram": list(self.teacher_label_histogram),
        }
        if self.plan is not None:
            out["plan"] = {"kind": self.plan.kind, "queries": self.plan.total, "fingerprint": self.plan.fingerprint}
        if self.query_rounds:
            out["query_rounds"] = [r.as_dict() for r in self.query_rounds]
        if self.confusion is not None:
            out["confusion"] = dict(self.confusion)
        if self.adaptation is not None:
            out["adaptation"] = {
                "selected": list(self.adaptation.selected),
                "loss": list(self.adaptation.loss),
                "labels_changed": self.adaptation.changed[-1] if self.adaptation.changed else 0.0,
                "seconds": round(self.adaptation.seconds, 3),
            }
        if self.history is not None:
            out["training"] = {
                **self.training,
                "loss": self.history.loss,
                "train_accuracy": self.history.train_accuracy,
                "val_accuracy": [None if v != v else v for v in self.history.val_accuracy],
                "images_per_second": self.history.images_per_second,
            }
        return out


@dataclass
class _Released:
    """Step 1's output: the release of the records and the counts ``records``/``releases_fresh``/``releases_reused``."""

    release: Release
    counts: dict[str, int]


@dataclass
class _Queries:
    """Step 2's output: the query plan and what its batches are built from (releases, blank releases, clip).

    ``built``: the batches as built when they were sent (query ids, values), by batch index, kept when
    they fit :data:`QUERY_CACHE_BYTES`; training epochs and adaptation's anchors then read them instead
    of building them again (the same values: the batches are a deterministic function of the plan).
    """

    plan: QueryPlan
    source: ReleaseRows
    blank_source: Optional[ReleaseRows]
    clip: Optional[ClipToDomain]
    built: Optional[dict[int, tuple[np.ndarray, torch.Tensor]]] = None
    #: the first :data:`SAMPLE_SIZE` queries of the plan as sent: (query ids, values)
    first_sent: Optional[tuple[np.ndarray, torch.Tensor]] = None
    #: the public images' queries, labelled and trained on beside the plan's (None: no public images)
    public: Optional["_Public"] = None
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
        """Queries the teacher labels: the plan's, then the public images' (their ids after the plan's), then the
        mirror check's copies of some of them (after the public images')."""
        return self.plan.total + (self.public.labelled_total if self.public is not None else 0)

    @property
    def trained_per_epoch(self) -> int:
        """Rows one training epoch reads: the plan's queries sent, and each public image ``public.repeats`` times."""
        return self.queries_sent + (self.public.plan.total * self.public.repeats if self.public is not None else 0)


@dataclass
class _Public:
    """The queries of the images the user declared public: each image once, as it is (``plan``: identity over
    ``rows``, their public releases, not post-processed). In the label store and in training their ids follow
    the private plan's: query ``k`` of this plan is id ``offset + k``."""

    plan: QueryPlan
    rows: ReleaseRows
    offset: int
    #: Times per training epoch each public image is trained on.
    repeats: int = 1
    #: the mirror check's copies (``flip`` None), labelled after the public images and never trained on: query
    #: ``k`` of ``check_plan`` is id ``check_offset + k`` (None: no check)
    check: Optional[MirrorCheck] = None
    check_plan: Optional[QueryPlan] = None
    check_rows: Optional[ReleaseRows] = None
    #: public images (their index in ``plan``) neither trained on nor anchoring the adaptation: the student's
    #: agreement with the teacher's labels of them scores it (``defaults.public_held_out``)
    held_out: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: with ``TrainingSettings.confusion``: queries made from the images released through the run's mechanism (as
    #: the private ones are: public, no charge), labelled after the check's copies and never trained on; their
    #: answers measure the teacher's confusion. ``confusion_rows`` is released when the run starts (None before).
    confusion_plan: Optional[QueryPlan] = None
    confusion_rows: Optional[ReleaseRows] = None

    def trained_mask(self, ids: np.ndarray) -> np.ndarray:
        """Which of the store ids ``ids`` (public images', offset included) training may read."""
        return ~np.isin(ids - self.offset, self.held_out)

    @property
    def check_offset(self) -> int:
        """The first mirror check query's id: after the public images'."""
        return self.offset + self.plan.total

    @property
    def confusion_offset(self) -> int:
        """The first confusion query's id: after the check's copies'."""
        return self.check_offset + (self.check_plan.total if self.check_plan is not None else 0)

    @property
    def labelled_total(self) -> int:
        """Queries of the public images, of the mirror check's copies and of the confusion's noised images."""
        return sum(plan.total for plan in self.plans())

    def plans(self) -> list[QueryPlan]:
        """The plans of what the teacher labels, in order: the images, the check's copies, the confusion's."""
        return [plan for plan in (self.plan, self.check_plan, self.confusion_plan) if plan is not None]

    def labelled_parts(self) -> list[tuple[QueryPlan, ReleaseRows, int]]:
        """What the teacher labels, in order, as ``(plan, rows, first id)``: the images, then the check's copies,
        then the confusion's queries (once released)."""
        parts = [(self.plan, self.rows, self.offset)]
        if self.check_plan is not None and self.check_rows is not None:
            parts.append((self.check_plan, self.check_rows, self.check_offset))
        if self.confusion_plan is not None:
            if self.confusion_rows is None:
                raise RuntimeError("the confusion's public releases are made when the run starts")
            parts.append((self.confusion_plan, self.confusion_rows, self.confusion_offset))
        return parts


@dataclass
class _Trained:
    """Step 4's output: the trainer (holding the student), the student's zoo name and factory kwargs, the
    training history."""

    trainer: Trainer
    student_name: str
    student_kwargs: dict[str, Any]
    history: TrainHistory
    crop_pixels: int
    flip: bool
    #: the seed of this student's draws (its initial weights, rows, held-out share, adaptation)
    seed: int
    #: what the mirror check found (None: no check; ``flip`` was given or there were no public images)
    mirror_check: Optional[MirrorVerdict] = None
    #: the teacher's confusion the student was trained through on the noised queries (None: plain loss)
    confusion: Optional[Confusion] = None


@dataclass
class _Adapted:
    """Step 5's output: the student's softmax outputs on the records before adaptation (float32 ``(N, K)``; ``None``
    when not computed) and the adaptation history (``None`` when off)."""

    unadapted: Optional[torch.Tensor]
    adaptation: Optional[AdaptHistory]


@dataclass
class _Predicted:
    """Step 6's output: int64 ``(N,)`` labels, float32 ``(N,)`` confidences, pre-fusion labels, informativeness."""

    labels: torch.Tensor
    confidences: torch.Tensor
    unfused_labels: Optional[torch.Tensor]
    informativeness: Optional[float]


def _mean(outputs: list[torch.Tensor]) -> torch.Tensor:
    """The mean of the students' softmax outputs (each float ``(N, K)``); one student's, as it is."""
    return outputs[0] if len(outputs) == 1 else torch.stack(outputs).mean(0)


def _add_time(timings: dict[str, float], stage: str, seconds: float) -> None:
    """Add ``seconds`` to ``timings[stage]``: a stage that runs once per student or query round sums its runs."""
    timings[stage] = timings.get(stage, 0.0) + seconds


def _teacher_and_client(teacher: Any, client: Any) -> tuple[Any, Any]:
    """``(teacher, client)`` from what was given: a teacher, a QueryClient (its teacher is used), or a teacher
    and the QueryClient that talks to it; ValueError when a client talks to another teacher."""
    from ..teachers.client import QueryClient

    if isinstance(teacher, QueryClient):
        if client is not None and client is not teacher:
            raise ValueError("give the teacher or a QueryClient, not a QueryClient and another client")
        return teacher.teacher, teacher
    own = getattr(client, "teacher", None)  # a duck-typed client (label_batches only) cannot be checked
    if own is not None:
        if teacher is not own and teacher is not getattr(own, "wrapped", own):
            raise ValueError(
                "client= talks to another teacher than the one given; pass the QueryClient alone "
                "(KnowledgeTransfer(client, mechanism, ...))"
            )
    return teacher, client


class StageRunner(Protocol):
    """Runs the stages whose work grows with the private records elsewhere (:mod:`ldpclient.cluster`)."""

    def release(
        self, mechanism: Mechanism, scope: str, records: RecordSource, on_block: Callable[[int], None]
    ) -> np.ndarray:
        """Noise and charge every record through the shared ledger under ``scope`` (``on_block(records done)`` per
        block); a bool ``(N,)`` array: True where a record was noised now, False where a stored release held."""
        ...

    def predict_proba(self, model: nn.Module, records: RecordSource) -> torch.Tensor:
        """``model``'s softmax (float32 ``(N, K)``) on every record, in order (:func:`~.student.predict_proba`)."""
        ...


class KnowledgeTransfer:
    """Wires release -> post-process -> plan -> teacher labels -> student -> labels.

    ``teacher``: a Teacher (``metadata()``, ``classify()``), or a
    :class:`~ldpclient.teachers.QueryClient` (batching, retries, cost, journal) that talks to
    one; ``client=`` beside a teacher must talk to that same teacher. ``mechanism``: the LDP
    mechanism for the private records. ``ledger``: optional Ledger (records are then
    charged/reused per image under ``scope``, default the teacher's identity, its
    ``journal_scope``). ``mode``: ``ldpkit`` | ``sidp`` | ``data-free``.

    ``plan``, ``training``, ``adaptation``: :class:`~ldpclient.transfer.settings.PlanSettings`,
    :class:`~ldpclient.transfer.settings.TrainingSettings` and
    :class:`~ldpclient.transfer.settings.AdaptationSettings` (defaults: the CLI's). Any of
    their fields may also be given as a plain keyword (``num_queries=1500``, ``epochs=5``),
    applied on top. ``seed``: plan and training seed (the release noise still comes from the
    OS CSPRNG unless ``release_generator`` is given, for tests and benchmarks only).
    ``progress(stage, done, total, metrics)``: stages ``release``, ``label``, ``train``,
    ``epoch``, ``round`` (query rounds), ``predict``. ``stages``: a :class:`StageRunner` that releases the private records and
    predicts on all of them elsewhere (:mod:`ldpclient.cluster`: a Ray cluster; needs ``ledger``).
    """

    def __init__(
        self,
        teacher: Any,
        mechanism: Mechanism,
        *,
        ledger: Any = None,
        scope: str | None = None,
        mode: str = "ldpkit",
        plan: PlanSettings | None = None,
        training: TrainingSettings | None = None,
        adaptation: AdaptationSettings | None = None,
        seed: int = 0,
        release_generator: torch.Generator | None = None,
        progress: Optional[Progress] = None,
        client: Any = None,
        stages: Optional["StageRunner"] = None,
        result_cache: Optional[ResultCache] = None,
        **settings: Any,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not isinstance(mechanism, Mechanism):
            raise TypeError(f"mechanism must be an ldpclient.privacy Mechanism, got {type(mechanism).__name__}")
        self.teacher, self.client = _teacher_and_client(teacher, client)
        self.plan_settings, self.training, self.adaptation = fold_keywords(plan, training, adaptation, settings)
        self.mechanism = mechanism
        self.ledger = ledger
        self.scope = scope
        self.mode = mode
        self.seed = int(seed)
        self.release_generator = release_generator
        self.progress = progress
        if stages is not None and release_generator is not None:
            raise ValueError("stages= (a cluster) refuses a release generator: a shared noise seed would give "
                             "different images identical noise")
        #: where the release of the private records and the passes over all of them run (None: here)
        self.stages = stages
        #: where a run keeps its trained result, found again by a run that would train on the same (None: nowhere)
        self.result_cache = result_cache
        #: :meth:`records_to_release` for one plan and record count: ((plan fingerprint, n), the records or None)
        self._used: tuple[tuple[str, int], np.ndarray | None] | None = None
        #: the public images as :meth:`_public_for` prepared them last: (the images given, plan fingerprint, queries)
        self._prepared_public: tuple[Any, str, _Public] | None = None
        self._unpack_settings()

    def _unpack_settings(self) -> None:
        """The settings as the stages read them (defaults resolved; the student's name checked by a trial build)."""
        p, t, a = self.plan_settings, self.training, self.adaptation
        self.augmentation, self.num_queries = p.augmentation, p.num_queries
        self.transforms: list[Transform] = (
            parse_postprocess(p.postprocess) if p.postprocess is None or isinstance(p.postprocess, str)
            else list(p.postprocess)
        )
        self.upsample_mode, self.clip_queries, self.query_batch_size = p.upsample_mode, p.clip_queries, p.query_batch_size
        self.rand_scale, self.blank_fraction, self.n_blank = p.rand_scale, p.blank_fraction, p.n_blank
        self.blank_mechanism: Mechanism = p.blank_mechanism if p.blank_mechanism is not None else self.mechanism
        self.free_images = p.free_images
        self.query_rounds = p.query_rounds if p.query_rounds is not None else defaults.query_rounds()
        self.min_round_gain = p.min_round_gain
        self.student_name = t.student  # None: chosen from the records' shape when training starts
        self.student_kwargs = dict(t.student_kwargs or {})
        if t.student is not None:
            with torch.random.fork_rng(devices=[]):  # fail fast on a bad name/kwargs; its init draws stay local
                build_student(t.student, **{**self.student_kwargs, "num_classes": 2})
        self.epochs = t.epochs if t.epochs is not None else defaults.epochs()
        self.batch_size = t.batch_size if t.batch_size is not None else defaults.train_batch_size()
        self.lr, self.val_fraction, self.device = t.lr, t.val_fraction, t.device
        self.checkpoint = Path(t.checkpoint) if t.checkpoint is not None else None
        self.public_repeats = t.public_repeats
        self.crop, self.flip, self.warmup, self.confusion = t.crop, t.flip, t.warmup, t.confusion
        #: the seed of every draw on the student's side (the plan's stay with ``seed``)
        self.student_seed = t.student_seed if t.student_seed is not None else self.seed
        self.students = t.students if t.students is not None else defaults.students()
        self.adapt, self.adapter, self.fuse = bool(a.adapt), a.adapter, bool(a.fuse)
        if self.query_rounds > 1 and self.mode == "sidp":
            raise ValueError("query_rounds: SIDP sends each release once and trains no student to judge rounds by")
        if self.query_rounds > 1 and self.val_fraction <= 0:
            raise ValueError("query_rounds: the rounds are judged on held-out queries; val_fraction must be > 0")

    # ------------------------------------------------------------------ helpers
    def _report(self, stage: str, done: int, total: int, **metrics: Any) -> None:
        if self.progress is not None:
            self.progress(stage, done, total, metrics)

    def _scope(self) -> str:
        """Who the releases are for: ``scope`` when given, else the teacher's identity (its journal scope)."""
        from ..teachers.base import as_teacher

        return self.scope or str(as_teacher(self.teacher).journal_scope)

    def _release(self, records: torch.Tensor, *, public: bool, sources: list[Any] | None = None) -> Release:
        """Noise ``records``: through the ledger when there is one (``sources``: their source ids, see
        :func:`~ldpclient.io.records.source_ids`); ``public`` blank inputs are neither charged nor stored."""
        g = self.release_generator
        if public:
            return self.blank_mechanism.release(records, generator=g, public=True)
        if self.ledger is not None:
            return self.ledger.release(self.mechanism, records, scope=self._scope(), generator=g, sources=sources)
        return self.mechanism.release(records, generator=g)

    def _release_all(
        self, source: RecordSource | None, n: int, shape: tuple[int, ...], *, report: bool = False
    ) -> Release:
        """Release ``n`` records of ``shape`` in chunks of ~RELEASE_CHUNK_ELEMENTS input elements, in order.

        ``source`` None: ``n`` public free records (data-free, blank queries): blank records of the domain's low
        value noised by the blank mechanism, or procedural images sent as they are (``free_images``).
        """
        if source is None and self.free_images == "procedural":
            procedural = self._procedural_release(n, shape)
            if report:
                self._report("release", n, n)
            return procedural
        whole = ReleaseBuilder(n)
        if source is None:  # public blank records: neither charged nor stored
            chunk = release_chunk(shape)
            for start in range(0, n, chunk):
                blank = torch.full((min(chunk, n - start), *shape), self.blank_mechanism.domain.low,
                                   dtype=torch.float32)
                whole.add(self._release(blank, public=True))
                if report:  # the data-free run's bar ends as the private run's does
                    self._report("release", start + len(blank), n)
        else:
            for idx, release in release_in_chunks(source, lambda r, ids: self._release(r, public=False, sources=ids)):
                whole.add(release)
                if report:
                    self._report("release", int(idx[-1]) + 1, n)
        return whole.build()

    def _procedural_release(self, n: int, shape: tuple[int, ...]) -> Release:
        """``n`` procedural images of ``shape`` (drawn from the run's seed: public, nothing private) on the blank
        mechanism's domain, released without noise (epsilon 0, no ledger)."""
        domain = self.blank_mechanism.domain
        images = procedural_images(n, shape, torch.Generator().manual_seed((self.seed * 7919 + 17) % 2**63))
        return public_release(domain.low + (domain.high - domain.low) * images, domain)

    def _postprocess(self, release: Release) -> ReleaseRows:
        return ReleaseRows(release, self.transforms, self.upsample_mode)

    def _plan(self, n: int, q_batch: int) -> QueryPlan:
        kind = "identity" if self.mode == "sidp" else AUGMENTATIONS[self.augmentation]
        q = None
        if kind == "sup":
            q = self.num_queries if self.num_queries is not None else defaults.num_queries(n, "sup")
            if q is not None:
                check_sup_queries(q, n, option="num_queries", instead="augmentation='rand'")
        elif kind == "rand":
            q = self.num_queries if self.num_queries is not None else defaults.num_queries(n, "rand")
        n_blank = 0
        if self.blank_fraction > 0 and kind != "identity":
            n_blank = self.n_blank or n
        return QueryPlan(
            kind=kind,
            n=n,
            num_queries=q,
            seed=self.seed,
            batch_size=q_batch,
            rand_scale=self.rand_scale,
            n_blank=n_blank,
            blank_fraction=self.blank_fraction if n_blank else 0.0,
        )

    # ------------------------------------------------------------------ run
    def query_plans(
        self, records: torch.Tensor | RecordSource, public: torch.Tensor | RecordSource | None = None
    ) -> list[QueryPlan]:
        """The query plans :meth:`run` would have the teacher label for ``records`` (and ``public``), in the order it
        sends them: the public images' and the mirror check's copies', then the private (or blank) queries'. Each
        batch ``b`` of a plan is sent as ``plan.batch_id(b)`` (a journal that answered it is not paid again).
        Nothing is released, sent or charged; the public images are read (their batch ids come from their values)
        and what that prepared is kept for :meth:`run` on the same ``public``."""
        plan, prepared = self._plans_for(records, public)
        return [plan] if prepared is None else prepared.plans() + [plan]

    def mirror_check(
        self, records: torch.Tensor | RecordSource, public: torch.Tensor | RecordSource
    ) -> MirrorCheck | None:
        """The mirrored and shifted copies of ``public`` images that :meth:`run` would send for the mirror check
        (None: it sends none), prepared as :meth:`query_plans` prepares them. Nothing is released or sent."""
        prepared = self._plans_for(records, public)[1]
        return prepared.check if prepared is not None else None

    def _plans_for(
        self, records: torch.Tensor | RecordSource, public: torch.Tensor | RecordSource | None
    ) -> tuple[QueryPlan, _Public | None]:
        """The private (or blank) queries' plan for ``records``, and the public images' queries (None without
        them, or in ``sidp`` mode), prepared once for :meth:`run`."""
        meta = self.teacher.metadata()
        source = as_record_source(records)
        plan = self._plan(self._check_records(source, meta), self._query_batch_size(meta))
        if public is None or self.mode == "sidp":
            return plan, None
        return plan, self._public_for(public, source.record_shape, plan)

    def run(
        self, records: torch.Tensor | RecordSource, public: torch.Tensor | RecordSource | None = None
    ) -> TransferResult:
        """Label ``records``: float ``(N, *teacher input shape)`` in the teacher's value range,
        as a tensor or a :class:`~ldpclient.io.records.RecordSource` (read in batches).

        ``public``: images the user declared not private, in the same shape and units: each is sent once as
        it is (no noise, no charge, never in the ledger), its answer trains the student beside the private
        queries' (and anchors the adaptation). Not with ``mode="sidp"`` (no student). With ``flip`` None, mirrored
        and shifted copies of up to 200 of them (when there are 100 or more) are sent too, to decide whether
        training mirrors rows (:mod:`~ldpclient.transfer.mirror_check`)."""
        timings: dict[str, float] = {}
        meta = self.teacher.metadata()
        records = as_record_source(records)
        n = self._check_records(records, meta)
        if public is not None and self.mode == "sidp":
            raise ValueError("public images train a student: SIDP (augment 'none') has none")
        used = self.records_to_release(records)  # only the records a query is made from are released
        released = self._release_records(records, n, timings, used)  # 1. release
        queries = self._prepare_queries(records, released.release, meta, n, timings, used)  # 2. post-process, plan
        if public is not None:
            queries.public = self._public_for(public, records.record_shape, queries.plan)
            if queries.public.confusion_plan is not None:
                self._release_confusion(queries.public)
        elif self.confusion:
            raise ValueError("confusion: the teacher's confusion is measured on public images; give some")
        ends = round_ends(queries.plan.num_batches, self.query_rounds if self.mode != "sidp" else 1)
        store, public_counts = self._label_queries(queries, meta, timings, ends[0])  # 3. label the queries
        if self.mode == "sidp":
            return TransferResult(
                labels=torch.from_numpy(store.get(np.arange(n))),
                confidences=None,
                student=None,
                guarantee=released.release.guarantee,
                mode=self.mode,
                counts=self._counts(released, queries, store, public_counts),
                timings=timings,
                teacher_label_histogram=store.histogram().tolist(),
                plan=queries.plan,
                sent_sample=self._sent_sample(queries, store),
            )
        kept_key = self._result_key(meta, released, queries, store) if len(ends) == 1 else None
        kept = self.result_cache.load(self.mode, kept_key) if self.result_cache and kept_key else None
        if kept is not None:  # the same records, releases, answers and settings: the result trained before
            kept["training"] = {**(kept.get("training") or {}), "reused": True}
            return TransferResult(
                **kept, guarantee=released.release.guarantee, mode=self.mode,
                counts=self._counts(released, queries, store, public_counts), timings=timings,
                teacher_label_histogram=store.histogram().tolist(), plan=queries.plan,
                sent_sample=self._sent_sample(queries, store), answers_apart=self._answers_apart(queries, store))
        confusion = self._confusion(queries, store)
        trained = self._train_student(records, meta, queries, store, timings, confusion)  # 4. train the student
        trained, rounds = self._query_rounds(records, meta, queries, store, timings, trained, ends)  # 3-4, in rounds
        members = [trained, *(self._train_student(records, meta, queries, store, timings, trained.confusion, member)
                              for member in range(1, self.students))]  # 4, students > 1: each on every answer
        adapted = [self._adapt_student(records, m, queries, store, timings) for m in members]  # 5. adapt (local)
        student = trained.trainer.model if len(members) == 1 else StudentMean(m.trainer.model for m in members)
        self._save_student(trained, student, queries.plan, released.release)
        predicted = self._predict_records(records, members, adapted, queries, store, timings)  # 6. label locally
        held_out = self._score_held_out(members, queries.public, store)
        before = [a.unadapted for a in adapted if a.unadapted is not None]  # the students' outputs, unadapted
        result = TransferResult(
            labels=predicted.labels,
            confidences=predicted.confidences,
            student=student,
            guarantee=released.release.guarantee,
            mode=self.mode,
            counts=self._counts(released, queries, store, public_counts),
            timings=timings,
            history=trained.history,
            teacher_label_histogram=store.histogram().tolist(),
            plan=queries.plan,
            unadapted_labels=_mean(before).argmax(1) if before and len(before) == len(adapted) else None,
            adaptation=adapted[0].adaptation,
            unfused_labels=predicted.unfused_labels,
            fusion_informativeness=predicted.informativeness,
            training={"student": trained.student_name, "crop_pixels": trained.crop_pixels, "flip": trained.flip,
                      "warmup_epochs": self.warmup, "students": len(members),
                      "mirror_check": trained.mirror_check.as_dict() if trained.mirror_check is not None else None},
            sent_sample=self._sent_sample(queries, store),
            public_held_out=held_out,
            query_rounds=rounds,
            answers_apart=self._answers_apart(queries, store),
            confusion=trained.confusion.as_dict() if trained.confusion is not None else None,
        )
        if self.result_cache is not None and kept_key is not None:
            self.result_cache.save(self.mode, kept_key, result, trained.student_name, trained.student_kwargs)
        return result

    def _result_key(self, meta: TeacherMetadata, released: _Released, queries: _Queries, store: LabelStore) -> str | None:
        """What the student's training, adaptation and labels depend on, as a :class:`ResultCache` key (None: not
        kept: no cache, or a checkpoint of the run's own to write)."""
        if self.result_cache is None or self.checkpoint is not None:
            return None
        from ..io.output import versions

        public = queries.public
        parts: list[str | np.ndarray] = [
            repr(sorted(versions().items())), str(select_device(self.device)), self.mode, str(self.scope),
            str(self.seed), str(self.student_seed), repr(self.plan_settings), repr(self.training),
            repr(self.adaptation), repr(self.mechanism), repr(meta), self.result_cache.data_key, queries.plan.fingerprint,
            released.release.values.detach().to(torch.float32).contiguous().numpy(), store.labels,
        ]
        if public is not None:
            parts.append(public.rows.release.values.detach().to(torch.float32).contiguous().numpy())
        return ResultCache.key(parts)

    @staticmethod
    def _answers_apart(queries: _Queries, store: LabelStore) -> Optional[dict[str, list[int]]]:
        """With public images: the teacher's answers per class to the plan's queries sent and to the public images
        (:attr:`TransferResult.answers_apart`); None without public images."""
        public = queries.public
        if public is None:
            return None
        return {"queries": store.histogram(np.arange(queries.queries_sent)).tolist(),
                "public": store.histogram(np.arange(public.plan.total) + public.offset).tolist()}

    @staticmethod
    def _counts(released: _Released, queries: _Queries, store: LabelStore, public: dict[str, int]) -> dict[str, int]:
        """The result's counts: releases, queries labelled (the plan's sent and the public images'), the plan's
        batches sent, the public images' counts."""
        return {**released.counts, "queries": store.num_labelled, "batches": queries.batches_sent, **public}

    def _query_rounds(
        self, records: RecordSource, meta: TeacherMetadata, queries: _Queries, store: LabelStore,
        timings: dict[str, float], trained: _Trained, ends: list[int],
    ) -> tuple[_Trained, list[QueryRound]]:
        """Steps 3-4 in rounds (:mod:`.rounds`; only with more than one ``ends``): ``trained`` learnt from the plan's
        first ``ends[0]`` batches; send each next round, train a student on every answer so far, score it and the
        previous one on the same held-out queries, and stop sending when it gained less than ``min_round_gain``.
        Returns the last round's student and the rounds; timings["label"], ["train"], ["warmup"] sum the rounds'."""
        if len(ends) < 2:
            return trained, []
        held, (first,) = self._agreement([trained], queries, store)
        rounds = [QueryRound(queries.queries_sent, held, first)]
        for r in range(1, len(ends)):
            timings["label"] += self._label_private(queries, store, ends[r - 1], ends[r])
            latest = self._train_student(records, meta, queries, store, timings, trained.confusion)  # trained anew
            held, (now, before) = self._agreement([latest, trained], queries, store)
            rounds.append(QueryRound(queries.queries_sent, held, now, before))
            trained = latest
            self._report("round", r + 1, len(ends), queries=queries.queries_sent, agreement=now, gain=now - before)
            if r + 1 < len(ends) and learnt_too_little(rounds[-1], self.min_round_gain):
                break
        return trained, rounds

    def _agreement(self, students: list[_Trained], queries: _Queries, store: LabelStore) -> tuple[int, list[float]]:
        """How many of the plan's queries sent so far training held out (:func:`~.student.validation_mask`, by id),
        and each student's agreement with the teacher's answers to them (a share in [0, 1]; 0 when none)."""
        agree = [0] * len(students)
        held = 0
        for ids, values in self._private_batches(queries, list(range(queries.batches_sent))):
            mask = validation_mask(ids, self.val_fraction, self.student_seed)
            teacher = torch.from_numpy(store.get(ids[mask]))
            mask[mask] = (teacher >= 0).numpy()
            teacher = teacher[teacher >= 0]
            if not len(teacher):
                continue
            held += len(teacher)
            for k, student in enumerate(students):
                probs = predict_proba(student.trainer.model, values[torch.from_numpy(mask)], device=self.device)
                if student.confusion is not None:  # the teacher's answers, as the student reads them
                    probs = probs.double() @ torch.from_numpy(student.confusion.matrix)
                agree[k] += int((probs.argmax(1) == teacher).sum())
        return held, [a / held if held else 0.0 for a in agree]

    def _label_prior(self, store: LabelStore, public: Optional[_Public], classes: int) -> Optional[torch.Tensor]:
        """Where :meth:`AdaptationSettings.balances`: the prior the student learnt (the teacher's answer shares,
        :func:`~.prior.training_prior`), which the labels are not to keep; else None."""
        if not self.adaptation.balances(public is not None):
            return None
        return training_prior(store.histogram().tolist(), classes)

    def _balanced(self, probs: torch.Tensor, store: LabelStore, public: Optional[_Public]) -> torch.Tensor:
        """Where :meth:`AdaptationSettings.balances`: the student's outputs ``probs`` re-weighted from the teacher's
        answer shares (which it learnt) to equal ones (:mod:`.prior`), in ``probs``' dtype; else ``probs``."""
        prior = self._label_prior(store, public, probs.shape[1])
        return probs if prior is None else balanced(probs, prior)

    def _score_held_out(
        self, members: list[_Trained], public: Optional[_Public], store: LabelStore
    ) -> Optional[dict[str, int]]:
        """The final students' agreement (their mean output's) with the teacher's labels of the held-out public
        images (None: none)."""
        if public is None or not len(public.held_out):
            return None
        ids = torch.from_numpy(public.held_out)
        values = public.rows.rows(ids).values
        probs = _mean([predict_proba(m.trainer.model, values, device=self.device) for m in members])
        teacher = torch.from_numpy(store.get(public.held_out + public.offset).astype(np.int64))
        answered = teacher >= 0
        agree = int((probs.argmax(1)[answered] == teacher[answered]).sum())
        return {"images": int(answered.sum()), "agree": agree}

    @staticmethod
    def _sent_sample(queries: _Queries, store: LabelStore) -> Optional[SentSample]:
        """The first releases (post-processed) and the first queries as sent, with the teacher's answers."""
        if queries.first_sent is None:
            return None
        ids, values = queries.first_sent
        first = queries.source.released(SAMPLE_SIZE)
        recipe = queries.plan.recipes(ids)
        sources = tuple(
            () if blank else tuple(int(k) for k in (i, j) if k >= 0)
            for blank, i, j in zip(recipe["blank"], recipe["i"], recipe["j"], strict=True)
        )
        return SentSample(
            release_indices=first.numpy(),
            releases=queries.source.rows(first).values.detach().float().clone(),
            query_ids=ids,
            queries=values.detach().float(),
            query_labels=store.get(ids).astype(np.int64),
            query_sources=sources,
        )

    def _check_records(self, records: RecordSource, meta: TeacherMetadata) -> int:
        """Validate ``records`` against the teacher's input shape; return N (raises ValueError)."""
        if tuple(records.record_shape) != tuple(meta.input_shape):
            raise ValueError(
                f"records have shape {tuple(records.record_shape)} per record but the teacher "
                f"{meta.name!r} expects {tuple(meta.input_shape)}"
            )
        n = len(records)
        if n < 1:
            raise ValueError("no records to label")
        return n

    def records_to_release(self, records: torch.Tensor | RecordSource) -> np.ndarray | None:
        """The private records this run releases (and charges), sorted indices, when its queries use only some of
        them (a query budget the folder could carry many times over: LDPKiT-Sup pairs or Rand copies of fewer
        records than there are); None when it releases them all (every record is used, SIDP, data-free). The plan
        decides it from the record count, the query budget and the seed alone, never from the records' values;
        every record is labelled by the student either way. Nothing is released or charged."""
        if self.mode != "ldpkit":
            return None
        meta = self.teacher.metadata()
        source = as_record_source(records)
        plan = self._plan(self._check_records(source, meta), self._query_batch_size(meta))
        if plan.kind not in ("sup", "rand"):
            return None
        key = (plan.fingerprint, len(source))
        if self._used is None or self._used[0] != key:
            used = plan.private_records_used()
            self._used = (key, None if len(used) == plan.n else used)
        return self._used[1]

    def _release_records(
        self, records: RecordSource, n: int, timings: dict[str, float], used: np.ndarray | None = None
    ) -> _Released:
        """Step 1: release the N records (blank ones for ``data-free``; only ``used`` when given) once, in chunks;
        timings["release"] in s."""
        t = time.perf_counter()
        m = n if used is None else len(used)
        self._report("release", 0, m)
        public = self.mode == "data-free"
        if self.ledger is not None and not public:  # releases stored under other spellings of this teacher
            merge_scope_aliases(self.ledger, self._scope())
        source = records if used is None else SubsetRecords(records, used)
        fresh = None if public else self._release_on_stages(source)
        release = self._release_all(None if public else source, m, records.record_shape, report=fresh is None)
        timings["release"] = time.perf_counter() - t
        # what the workers noised now (the driver read every release back: stored) or, here, what was not reused
        reused = m - int(fresh.sum()) if fresh is not None else int(release.reused.sum())
        counts = {"records": n, "releases_fresh": 0 if public else m - reused, "releases_reused": reused,
                  "not_released": n - m}
        return _Released(release, counts)

    def _release_on_stages(self, records: RecordSource) -> np.ndarray | None:
        """With :attr:`stages`: the workers noise and charge ``records`` (the driver then reads the releases back,
        stored and free); per record, whether it was noised now. None without stages."""
        if self.stages is None:
            return None
        done = 0

        def on_block(count: int) -> None:
            nonlocal done
            done += count
            self._report("release", done, len(records))

        return self.stages.release(self.mechanism, self._scope(), records, on_block)

    def _prepare_queries(
        self, records: RecordSource, release: Release, meta: TeacherMetadata, n: int, timings: dict[str, float],
        used: np.ndarray | None = None,
    ) -> _Queries:
        """Step 2: set up the (lazy) post-processing, plan the queries, release the blanks; timings in s.
        ``used``: the records ``release`` holds, when it holds only some."""
        t = time.perf_counter()
        if used is None:
            source = self._postprocess(release)
        else:
            source = SubsetRows(release, used, n, self.transforms, self.upsample_mode)
        plan = self._plan(n, self._query_batch_size(meta))
        blank_source = None
        if plan.num_blank:
            blank_source = self._postprocess(self._release_all(None, plan.n_blank, records.record_shape))
        timings["postprocess"] = time.perf_counter() - t

        lo, hi = meta.value_range
        clip = ClipToDomain(Domain(lo, hi)) if self.clip_queries else None
        return _Queries(plan, source, blank_source, clip)

    def _query_batch_size(self, meta: TeacherMetadata) -> int:
        """Queries per plan batch: the setting, else the default for the teacher's largest batch."""
        return self.query_batch_size or defaults.query_batch_size(meta.max_batch_size, meta.batch_api)

    def _public_for(self, public: torch.Tensor | RecordSource, shape: tuple[int, ...], plan: QueryPlan) -> _Public:
        """:meth:`_prepare_public` of ``public`` for ``plan``, prepared once: :meth:`query_plans` and :meth:`run`
        on the same images share it."""
        kept = self._prepared_public
        if kept is not None and kept[0] is public and kept[1] == plan.fingerprint:
            return kept[2]
        prepared = self._prepare_public(as_record_source(public), shape, plan)
        self._prepared_public = (public, plan.fingerprint, prepared)
        return prepared

    def _prepare_public(self, public: RecordSource, shape: tuple[int, ...], plan: QueryPlan) -> _Public:
        """The public images as releases without noise (:func:`~ldpclient.privacy.public.public_release`) and
        their identity plan, seeded by their values alone: the same images get the same batch ids in every run
        (the baseline's included), so a journal answers them once and they are paid once; other images, other
        batch ids."""
        from ..privacy.public import public_seed

        if tuple(public.record_shape) != tuple(shape):
            raise ValueError(f"public images have shape {tuple(public.record_shape)} per image, the private ones "
                             f"{tuple(shape)}")
        if len(public) < 1:
            raise ValueError("no public images")
        whole = ReleaseBuilder(len(public))
        for _, release in release_in_chunks(public, lambda chunk, _ids: public_release(chunk, self.mechanism.domain)):
            whole.add(release)
        released = whole.build()
        seed = public_seed(released.values)
        public_plan = QueryPlan(kind="identity", n=len(public), seed=seed, batch_size=plan.batch_size)
        repeats = self.public_repeats or defaults.public_repeats(plan.total, len(public))
        out = _Public(public_plan, ReleaseRows(released, (), self.upsample_mode), offset=plan.total, repeats=repeats)
        held = defaults.public_held_out(len(public))
        if held:  # drawn from the images' values alone, as their batch ids: the same images, the same hold-out
            order = torch.randperm(len(public), generator=torch.Generator().manual_seed(seed))
            out.held_out = np.sort(order[:held].numpy())
        check = mirror_check(released, seed) if self.flip is None else None
        if check is not None:  # the copies' plan seeded like the public images': by their values alone
            copies = public_release(check.images, self.mechanism.domain)
            out.check, out.check_rows = check, ReleaseRows(copies, (), self.upsample_mode)
            out.check_plan = QueryPlan(kind="identity", n=len(copies), seed=public_seed(copies.values),
                                       batch_size=plan.batch_size)
        if self.confusion:  # seeded by the images' values too, apart from their identity plan's batch ids
            count = defaults.confusion_queries(self.teacher.metadata().num_classes, len(public), plan.kind)
            out.confusion_plan = QueryPlan(kind=plan.kind, n=len(public), num_queries=None if plan.kind == "identity"
                                           else count, seed=(seed + 1) % 2**63, batch_size=plan.batch_size,
                                           rand_scale=plan.rand_scale)
        return out

    def _release_confusion(self, public: _Public) -> None:
        """The public images released through the mechanism the plan's queries are noised by (the run's; the
        blank mechanism in data-free mode), ``public=True``: no charge, no ledger. Post-processed as the private
        releases are, for :attr:`_Public.confusion_plan`'s queries."""
        mechanism = self.blank_mechanism if self.mode == "data-free" else self.mechanism
        images = as_record_source(public.rows.release.values)
        whole = ReleaseBuilder(len(images))
        for _, release in release_in_chunks(
                images, lambda chunk, _ids: mechanism.release(chunk, generator=self.release_generator, public=True)):
            whole.add(release)
        public.confusion_rows = self._postprocess(whole.build())

    def _confusion(self, queries: _Queries, store: LabelStore) -> Optional[Confusion]:
        """The teacher's confusion measured from its answers to the confusion's queries, each made from public
        images whose class is its answer to them clean (:func:`~.confusion.estimate_confusion`); None without."""
        public = queries.public
        if public is None or public.confusion_plan is None:
            return None
        plan = public.confusion_plan
        ids = np.arange(plan.total)
        answers = store.get(ids + public.confusion_offset)
        recipe = plan.recipes(ids)
        first = store.get(recipe["i"] + public.offset)
        second = store.get(recipe["j"] + public.offset) if plan.kind == "sup" else None
        known = (answers >= 0) & (first >= 0) & (second >= 0 if second is not None else True)  # a declined answer
        matrix = estimate_confusion(store.num_classes, answers[known], first[known],
                                    second[known] if second is not None else None)
        images = store.histogram(np.arange(public.plan.total) + public.offset)
        return Confusion(matrix, int(plan.total), images.tolist())

    def _stream(self, queries: _Queries, order: Sequence[int] | None = None) -> Iterator[tuple[str, Derived]]:
        """The plan's query batches ``(batch id, queries)`` in ``order`` (default: plan order), clipped if asked."""
        for bid, d in queries.plan.batches(
            queries.source,
            mechanism=self.mechanism,
            blank_releases=queries.blank_source,
            order=order,
            noise_mode=self.upsample_mode,
        ):
            yield bid, (queries.clip(d) if queries.clip is not None else d)

    def _epoch_batches(self, queries: _Queries, epoch: int, seed: int) -> Iterator[tuple[np.ndarray, torch.Tensor]]:
        """Query batches ``(query ids, values)`` for one training epoch, in a shuffled batch order seeded by ``seed``
        (a student's) and ``epoch``: the plan's batches sent and the public images' (their ids after the plan's; each
        batch ``public.repeats`` times), mixed."""
        g = torch.Generator().manual_seed((seed * 1_000_003 + epoch) % 2**63)
        n_private = queries.batches_sent
        public = queries.public
        n_public = public.plan.num_batches * public.repeats if public else 0
        order = torch.randperm(n_private + n_public, generator=g).tolist()
        private = self._private_batches(queries, [b for b in order if b < n_private])
        for b in order:
            if b < n_private:
                yield next(private)
            else:
                assert public is not None
                ids = public.plan.batch_ids((b - n_private) % public.plan.num_batches)
                ids = ids[public.trained_mask(ids + public.offset)]  # the held-out images stay unseen
                if len(ids):
                    yield ids + public.offset, public.rows.rows(torch.from_numpy(ids)).values

    def _private_batches(self, queries: _Queries, order: list[int]) -> Iterator[tuple[np.ndarray, torch.Tensor]]:
        """The plan's batches ``order`` as ``(query ids, values)``: kept ones when all were kept, else built."""
        built = queries.built
        if built is not None and len(built) == queries.batches_sent:
            for b in order:
                yield built[b]
            return
        for _, d in self._stream(queries, order):
            assert d.ids is not None
            yield d.ids.numpy(), d.values

    @staticmethod
    def _keeping(
        queries: _Queries, stream: Iterator[tuple[str, Derived]], start: int = 0
    ) -> Iterator[tuple[str, Derived]]:
        """``stream`` (the plan's batches in plan order from batch ``start``), keeping each batch in
        ``queries.built`` when all of them fit :data:`QUERY_CACHE_BYTES`."""
        plan = queries.plan
        size = plan.total * math.prod(queries.source.record_shape) * 4  # float32 values
        if start == 0:
            queries.built = {} if size <= QUERY_CACHE_BYTES else None
        for b, (bid, d) in enumerate(stream, start):
            if queries.built is not None and d.ids is not None:
                queries.built[b] = (d.ids.numpy(), d.values)
            if b == 0 and d.ids is not None:
                queries.first_sent = (d.ids[:SAMPLE_SIZE].numpy().copy(), d.values[:SAMPLE_SIZE].clone())
            yield bid, d

    def _label_queries(
        self, queries: _Queries, meta: TeacherMetadata, timings: dict[str, float], end: int
    ) -> tuple[LabelStore, dict[str, int]]:
        """Step 3: have the teacher label the public images (when given), then the plan's queries (its first ``end``
        batches: the first query round's, all of them without rounds); int8 labels per query; timings["label"] in s. Also the public images' counts:
        ``public_queries`` (the images, in the store), ``mirror_check_queries`` (their copies the mirror check
        sent), ``public_repeats`` (times per epoch training sees each) and, through a client, ``public_sent`` and
        ``public_from_journal`` (the images' and their copies' queries, billed apart by the caller)."""
        t = time.perf_counter()
        public = queries.public
        store = LabelStore(queries.labelled_total, meta.num_classes)
        public_parts = public.labelled_parts() if public is not None else []
        counts: dict[str, int] = {}
        if public is not None:
            before = self._client_counts()
            for part_plan, rows, offset in public_parts:
                stream = part_plan.batches(rows, mechanism=self.mechanism, noise_mode=self.upsample_mode)
                if part_plan is public.confusion_plan and queries.clip is not None:  # noised like the plan's
                    stream = ((bid, queries.clip(d)) for bid, d in stream)
                for ids, labels in self._labelled(part_plan, stream):
                    store.set(ids + offset, labels)
                    self._report("label", store.num_labelled, queries.labelled_total)
            after = self._client_counts()
            counts = {"public_queries": public.plan.total, "public_sent": after[0] - before[0],
                      "public_from_journal": after[1] - before[1], "public_repeats": public.repeats,
                      "mirror_check_queries": public.check_plan.total if public.check_plan is not None else 0,
                      "confusion_queries": public.confusion_plan.total if public.confusion_plan is not None else 0}
        self._label_private(queries, store, 0, end)
        timings["label"] = time.perf_counter() - t
        return store, counts

    def _label_private(self, queries: _Queries, store: LabelStore, start: int, end: int) -> float:
        """Have the teacher label the plan's batches ``start`` to ``end`` (in plan order; the batches before
        ``start`` already answered), recorded in ``store`` and ``queries.sent_batches``; returns the seconds."""
        t = time.perf_counter()
        whole = (start, end) == (0, queries.plan.num_batches)
        stream = self._keeping(queries, self._stream(queries, None if whole else range(start, end)), start)
        for ids, labels in self._labelled(queries.plan, stream):
            store.set(ids, labels)
            self._report("label", store.num_labelled, queries.labelled_total)
        queries.sent_batches = None if end == queries.plan.num_batches else end
        return time.perf_counter() - t

    def _labelled(self, plan: QueryPlan, batches: Iterator[tuple[str, Derived]]) -> Iterator[tuple[np.ndarray, Any]]:
        """The teacher's answers to ``batches`` of ``plan``: ``(query ids, labels)`` per batch, checked."""
        index = {plan.batch_id(b): b for b in range(plan.num_batches)}
        for bid, labels in self._label(batches):
            if bid not in index:
                raise RuntimeError(f"teacher client returned an unknown batch id {bid!r}")
            ids = plan.batch_ids(index[bid])
            labels = torch.as_tensor(labels).reshape(-1)
            if len(labels) != len(ids):
                raise RuntimeError(f"batch {bid}: {len(labels)} labels for {len(ids)} queries")
            yield ids, labels.numpy()

    def _client_counts(self) -> tuple[int, int]:
        """Queries the client has sent and read back from its journal so far ((0, 0) without a client)."""
        stats = getattr(self.client, "stats", None)
        return (int(getattr(stats, "queries_sent", 0)), int(getattr(stats, "queries_from_journal", 0)))

    def _train_student(
        self,
        records: RecordSource,
        meta: TeacherMetadata,
        queries: _Queries,
        store: LabelStore,
        timings: dict[str, float],
        confusion: Optional[Confusion] = None,
        member: int = 0,
    ) -> _Trained:
        """Step 4: build a seeded student (warmed up first with ``warmup`` epochs) and train it on the labelled
        queries, each row shifted (and mirrored with ``flip``, or when the mirror check found the teacher keeps
        labels under a mirror) anew each time it is read; adds its seconds to timings["train"], the warm-up's apart.
        ``member``: which of the run's ``students`` (its draws: :func:`~.defaults.member_seed`)."""
        t = time.perf_counter()
        seed = defaults.member_seed(self.student_seed, member)
        c, h, w = records.record_shape
        public = queries.public is not None
        name = self.student_name or defaults.student(records.record_shape, public)
        pad = self.crop if self.crop is not None else defaults.train_crop(min(h, w), public)
        verdict = self._mirror_verdict(queries, store)
        flip = self.flip if self.flip is not None else (verdict is not None and verdict.flip)
        kwargs = {"num_classes": meta.num_classes, "in_channels": c, "image_size": min(h, w), **self.student_kwargs}
        with torch.random.fork_rng(devices=[]):  # seed the student's init without touching the caller's RNG
            torch.manual_seed(seed)
            model = build_student(name, **kwargs)
            warm = self._warm_student(model, records, min(h, w), timings) if self.warmup else 0.0
        trainer = Trainer(
            model,
            epochs=self.epochs,
            batch_size=self.batch_size,
            lr=self.lr,
            val_fraction=self.val_fraction,
            device=self.device,
            seed=seed,
            progress=self.progress,
            augment=partial(flip_crop, pad=pad, flip=flip) if pad or flip else None,
            confusion=confusion.matrix if confusion is not None else None,
            noised=lambda ids: ids < queries.plan.total,  # the public images' ids follow the plan's
        )
        steps = -(-int(queries.trained_per_epoch * (1 - self.val_fraction)) // self.batch_size)
        history = trainer.fit(lambda epoch: self._epoch_batches(queries, epoch, seed), store, steps_per_epoch=steps)
        _add_time(timings, "train", time.perf_counter() - t - warm)
        return _Trained(trainer, name, kwargs, history, pad, flip, seed, verdict, confusion)

    def _warm_student(self, model: torch.nn.Module, records: RecordSource, side: int, timings: dict[str, float]) -> float:
        """Step 4a (``warmup`` epochs > 0): the rotation pretext on the clean records (:mod:`.warmup`; local, no
        privacy cost), each shifted by the training's shift beside public images; its seconds, also added to
        timings["warmup"].
        Runs inside the student's seeded RNG fork: its order comes from one draw of that RNG, its dropout from it."""
        t = time.perf_counter()
        seed = int(torch.randint(0, 2**31 - 1, (1,)))
        self._report("warmup", 0, self.warmup)
        rotation_warmup(model, records, epochs=self.warmup, pad=defaults.train_crop(side, True), seed=seed,
                        device=select_device(self.device), on_epoch=lambda done: self._report("warmup", done, self.warmup))
        seconds = time.perf_counter() - t
        _add_time(timings, "warmup", seconds)
        return seconds

    @staticmethod
    def _mirror_verdict(queries: _Queries, store: LabelStore) -> Optional[MirrorVerdict]:
        """The mirror check's decision from the teacher's answers (None when the run made no check)."""
        public = queries.public
        if public is None or public.check is None or public.check_plan is None:
            return None
        original = store.get(public.check.sample + public.offset).astype(np.int64)
        copies = store.get(np.arange(public.check_plan.total) + public.check_offset).astype(np.int64)
        return public.check.verdict(original, copies)

    def _adapt_student(
        self,
        records: RecordSource,
        trained: _Trained,
        queries: _Queries,
        store: LabelStore,
        timings: dict[str, float],
    ) -> _Adapted:
        """Step 5 (``adapt=True``): fine-tune on the clean records, anchored to the queries; adds its seconds to
        timings["adapt"]."""
        if not self.adapt:
            return _Adapted(None, None)
        t = time.perf_counter()
        model = trained.trainer.model
        adapter = self.adapter or SelfTrainingAdapter(
            seed=trained.seed, device=trained.trainer.device,
            predictor=self.stages.predict_proba if self.stages is not None else None)
        # the unadapted labels of every record cost a full pass: above the adapter's selection sample they are
        # not computed (the rounds predict on the sample), so that only the final pass reads every record
        sampled = isinstance(adapter, SelfTrainingAdapter) and adapter.samples(len(records))
        before = None if sampled else self._predict_all(model, records)
        first_pass = time.perf_counter() - t

        clean_only = trained.confusion is not None  # the noised queries' answers are not their images' classes

        def anchor(rnd: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            for ids, values in self._epoch_batches(queries, 10_000 + rnd, trained.seed):
                y = torch.from_numpy(store.get(ids))
                keep = (y >= 0) & torch.from_numpy(ids >= queries.plan.total) if clean_only else y >= 0
                if bool(keep.any()):
                    yield values[keep], y[keep]

        rounds = len(adapter.schedule)
        # where the labels are not to keep the teacher's answer shares, the rounds learn the records' own
        prior = self._label_prior(store, queries.public, int(trained.student_kwargs["num_classes"]))
        self._report("adapt", 0, rounds)
        adaptation = adapter.adapt(model, records, anchor, probs=before,
                                   on_round=lambda done: self._report("adapt", done, rounds), prior=prior)
        _add_time(timings, "adapt", time.perf_counter() - t)
        # of which the prediction passes (the benchmarks set them beside a bare model loop)
        _add_time(timings, "adapt_predict", first_pass + adaptation.predict_seconds)
        return _Adapted(before, adaptation)

    def _save_student(self, trained: _Trained, student: nn.Module, plan: QueryPlan, release: Release) -> None:
        """Save the (adapted) ``student`` (several: their :class:`StudentMean`) to ``checkpoint`` when one was
        given."""
        if self.checkpoint is not None:
            save_checkpoint(
                self.checkpoint,
                student,
                trained.student_name,
                trained.student_kwargs,
                extra={"mode": self.mode, "plan": plan.fingerprint, "guarantee": release.guarantee.as_dict(),
                       "students": self.students, "labels_from": "this student" if self.students == 1
                       else f"the mean output of these {self.students} students",
                       "adapted_on_clean_private_records": self.adapt,
                       "warmed_up_on_clean_private_records": bool(self.warmup)},
            )

    def _predict_all(self, model: nn.Module, records: RecordSource) -> torch.Tensor:
        """The student's softmax on every clean private record: on the :class:`StageRunner` when there is one."""
        if self.stages is not None:
            return self.stages.predict_proba(model, records)
        return predict_proba(model, records, device=self.device)

    def _predict_records(
        self,
        records: RecordSource,
        members: list[_Trained],
        adapted: list[_Adapted],
        queries: _Queries,
        store: LabelStore,
        timings: dict[str, float],
    ) -> _Predicted:
        """Step 6: label the clean records with the students' mean output (fused with Sup pair answers if asked);
        seconds."""
        plan = queries.plan
        t = time.perf_counter()
        n = len(records)
        self._report("predict", 0, n)
        # each adapted model's outputs on the records where adaptation computed them already (one pass fewer)
        probs = _mean([
            a.adaptation.probs if a.adaptation is not None and a.adaptation.probs is not None
            else self._predict_all(m.trainer.model, records)
            for m, a in zip(members, adapted, strict=True)
        ])
        if adapted[0].adaptation is None:  # an adapted student learnt balanced labels in its rounds already
            probs = self._balanced(probs, store, queries.public)
        conf, labels = probs.max(dim=1)
        unfused, alpha = None, None
        if self.fuse and self.mode == "ldpkit" and plan.kind == "sup":
            ids = np.arange(queries.queries_sent)
            recipe = plan.recipes(ids)
            private = ~recipe["blank"]
            fused = fuse_pair_evidence(
                probs,
                recipe["i"][private], recipe["j"][private], store.get(ids)[private].astype(np.int64),
            )
            unfused, alpha = labels, fused.informativeness
            conf_t, labels = fused.posterior.max(dim=1)
            conf = conf_t.float()
        self._report("predict", n, n)
        timings["predict"] = time.perf_counter() - t
        return _Predicted(labels, conf, unfused, alpha)

    def _label(self, batches: Iterable[tuple[str, Derived]]) -> Iterator[tuple[str, torch.Tensor]]:
        if self.client is not None:
            yield from self.client.label_batches(batches)
            return
        for bid, d in batches:
            yield bid, self.teacher.classify(d)


__all__ = ["AUGMENTATIONS", "MODES", "RELEASE_CHUNK_ELEMENTS", "SAMPLE_SIZE", "KnowledgeTransfer", "SentSample",
           "TransferResult", "release_chunk"]
