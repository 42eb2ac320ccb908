"""The one place where a transfer's settings become the values its stages read.

:func:`resolve` takes the settings as given (:class:`~.settings.Given`, a field left ``None`` meaning "the
default") and the run's :class:`Facts` (its records' count and shape, how many public images there are, what
the teacher publishes) and returns :class:`Resolved`: every default filled in through
:mod:`ldpclient.transfer.defaults` (one function per default), the post-processing parsed. The stages read
:class:`Resolved` and decide nothing; :mod:`ldpclient.run.plan` resolves through the same function, so a dry run
states the values the run uses. What only the teacher's answers decide (whether training mirrors rows, when
:attr:`Resolved.mirror_check_images` asks it; how many query rounds are sent) is measured by the stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import torch

from ..names import NO_DECODING, PLAN_KINDS, Mode
from ..privacy.base import Mechanism
from ..privacy.release import Release
from . import defaults
from .augment import check_sup_queries
from .decoder import decodable
from .postprocess import ReleaseRows, Transform, parse_postprocess
from .pretrained import weights_info
from .settings import Given
from .student import build_student

if TYPE_CHECKING:
    from ..teachers.base import TeacherMetadata
    from .adapt import SelfTrainingAdapter


@dataclass(frozen=True)
class Facts:
    """What a transfer's settings resolve from besides themselves: ``records`` private records of ``record_shape``
    ``(C, H, W)``, ``public`` public images (0: none) and what the teacher publishes (``meta``: its batch limits,
    its classes)."""

    records: int
    record_shape: tuple[int, ...]
    public: int
    meta: TeacherMetadata

    @property
    def side(self) -> int:
        """The records' smaller side, in pixels."""
        return min(int(self.record_shape[-2]), int(self.record_shape[-1]))


@dataclass(frozen=True)
class Decoding:
    """Whether a run sends its releases decoded (:mod:`.decoder`): ``decode`` ``auto`` (ask the teacher, on
    ``check_images`` public images held out of the decoder and ``check_records`` private releases),
    ``always`` or ``none``; ``note``: why a run asked to decode does not (None: it does, or was not asked)."""

    decode: str = NO_DECODING
    note: Optional[str] = None
    check_images: int = 0
    check_records: int = 0

    @property
    def check_queries(self) -> int:
        """Queries the check sends: each of its public images and private releases, raw and decoded."""
        return 2 * (self.check_images + self.check_records)


@dataclass(frozen=True)
class Resolved:
    """A transfer's settings as its stages read them, none left to decide.

    ``kind``: the query plan's kind (``identity`` for SIDP, else the augment's: :data:`~ldpclient.names.PLAN_KINDS`);
    ``queries``: the plan's queries Q (SIDP: one per record); ``n_blank`` blank releases mixed in at
    ``blank_fraction`` (0 and 0.0: none); ``student``: the zoo name; ``crop``: pixels a training row is shifted by;
    ``flip``: train on mirrored rows, unless ``mirror_check_images`` (> 0) public images' mirrored and shifted
    copies are sent for the teacher to decide it; ``public_shift``: the shift of the warm-up and the check's
    copies; ``public_repeats``, ``public_held_out``: per public image, times trained on per epoch, and how many are
    held out (0 without public images); ``students``: how many students learn from the same answers (each with
    draws of its own: :func:`member_seeds`); ``facts``: what the settings were resolved for.
    ``decoding``: whether the releases are sent decoded (:class:`Decoding`).
    ``checkpoint`` None: the student is not saved; ``adapter`` None: the built-in self-training adapts.
    """

    kind: str
    queries: int
    transforms: tuple[Transform, ...]
    upsample_mode: str
    clip_queries: bool
    query_batch_size: int
    rand_scale: float
    blank_fraction: float
    n_blank: int
    blank_mechanism: Mechanism
    free_images: str
    query_rounds: int
    min_round_gain: float
    student: str
    student_kwargs: dict[str, object]
    epochs: int
    batch_size: int
    lr: float
    val_fraction: float
    device: str
    checkpoint: Optional[Path]
    public_repeats: int
    public_held_out: int
    crop: int
    flip: bool
    mirror_check_images: int
    public_shift: int
    warmup: int
    students: int
    adapt: bool
    adapter: Optional[SelfTrainingAdapter]
    facts: Facts
    decoding: Decoding = field(default_factory=Decoding)

    def postprocessed(self, release: Release) -> ReleaseRows:
        """``release`` post-processed on demand as the private releases are (the transforms, the resize back)."""
        return ReleaseRows(release, self.transforms, self.upsample_mode)


def check_given(given: Given, mode: Mode, *, elsewhere: bool = False) -> None:
    """ValueError where the settings as given cannot run in ``mode`` whatever the records: a student that cannot
    be built, query rounds without a student or a held-out share to judge them by, a student from a weights file
    whose passes would run ``elsewhere`` (a cluster's workers)."""
    t = given.training
    if t.student_weights is not None:  # the file read and checked now, before anything is noised or sent
        weights_info(t.student_weights, t.student)
        if elsewhere:
            raise ValueError("student_weights: a student from a weights file trains and labels on this machine, not "
                             "on a cluster (stages=)")
    elif t.student is not None:
        with torch.random.fork_rng(devices=[]):  # fail fast on a bad name/kwargs; its init draws stay local
            build_student(t.student, **{**(t.student_kwargs or {}), "num_classes": 2})
    rounds = given.plan.query_rounds if given.plan.query_rounds is not None else defaults.query_rounds()
    if rounds > 1 and mode == Mode.SIDP:
        raise ValueError("query_rounds: SIDP sends each release once and trains no student to judge rounds by")
    if rounds > 1 and t.val_fraction <= 0:
        raise ValueError("query_rounds: the rounds are judged on held-out queries; val_fraction must be > 0")


def resolve(given: Given, facts: Facts, *, mechanism: Mechanism, mode: Mode) -> Resolved:
    """The settings of a run in ``mode`` on ``facts``, whose private records ``mechanism`` noises; ValueError where
    they contradict the facts (:func:`check_given`, which needs none, is the transfer's to call once). A run resolves
    once: the stages read what this returns, and nothing here depends on the run's seed."""
    p, t, a = given
    kind = "identity" if mode == Mode.SIDP else PLAN_KINDS[p.augment]
    queries = _queries(p.num_queries, facts.records, kind)
    n_blank = (p.n_blank or facts.records) if p.blank_fraction > 0 and kind != "identity" else 0
    public = facts.public > 0
    student = t.student or defaults.student(facts.record_shape, public, data_free=mode == Mode.DATA_FREE)
    kwargs = dict(t.student_kwargs or {})
    if t.student_weights is not None:
        weights = weights_info(t.student_weights, t.student)
        student = weights.architecture
        kwargs.update(weights=str(Path(t.student_weights).expanduser()), weights_sha256=weights.sha256,
                      value_range=[float(v) for v in facts.meta.value_range])
    transforms = parse_postprocess(p.postprocess) if p.postprocess is None or isinstance(p.postprocess, str) \
        else list(p.postprocess)
    return Resolved(
        kind=kind, queries=queries, transforms=tuple(transforms),
        upsample_mode=p.upsample_mode, clip_queries=p.clip_queries,
        query_batch_size=query_batch_size(p.query_batch_size, facts.meta),
        rand_scale=p.rand_scale, blank_fraction=p.blank_fraction if n_blank else 0.0, n_blank=n_blank,
        blank_mechanism=p.blank_mechanism if p.blank_mechanism is not None else mechanism,
        free_images=p.free_images,
        query_rounds=p.query_rounds if p.query_rounds is not None else defaults.query_rounds(),
        min_round_gain=p.min_round_gain,
        student=student,
        student_kwargs=kwargs,
        epochs=t.epochs if t.epochs is not None else defaults.epochs(),
        batch_size=t.batch_size if t.batch_size is not None else defaults.train_batch_size(),
        lr=t.lr, val_fraction=t.val_fraction, device=t.device,
        checkpoint=Path(t.checkpoint) if t.checkpoint is not None else None,
        public_repeats=(t.public_repeats or defaults.public_repeats(queries, facts.public)) if public else 0,
        public_held_out=defaults.public_held_out(facts.public),
        crop=t.crop if t.crop is not None else defaults.train_crop(facts.side, public),
        flip=bool(t.flip),
        mirror_check_images=defaults.mirror_check_images(facts.public, facts.side) if t.flip is None and public else 0,
        public_shift=defaults.train_crop(facts.side, True),
        warmup=t.warmup,
        students=t.students if t.students is not None else defaults.students(),
        adapt=bool(a.adapt), adapter=a.adapter, facts=facts,
        decoding=decoding(p.decode, mechanism, facts.record_shape, facts.public, mode=mode,
                          records=facts.records),
    )


def member_seeds(students: int, student_seed: int | None, run_seed: int) -> tuple[int, ...]:
    """The seed of each of ``students`` students' draws (its initial weights, rows, held-out share, adaptation) in a
    run drawn from ``run_seed``: from ``student_seed`` (``TrainingSettings.student_seed``), else ``run_seed``
    (:func:`~.defaults.member_seed`); the first is the one student of ``students=1``."""
    first = student_seed if student_seed is not None else int(run_seed)
    return tuple(defaults.member_seed(first, m) for m in range(students))


def decoding(decode: str, mechanism: Mechanism, record_shape: tuple[int, ...], public: int, *,
             mode: Mode = Mode.LDPKIT, records: int = 0) -> Decoding:
    """Whether a run asked to ``decode`` releases of ``record_shape`` beside ``public`` public images does, and with
    what check (on at most ``records`` private releases, ``mode`` LDPKiT); why not, when it cannot (``label`` and
    ``noise`` alike)."""
    if decode == "none":
        return Decoding()
    why = ("SIDP (augment 'none') has no public images to learn from" if mode == Mode.SIDP
           else decodable(mechanism, record_shape))
    if why is None and public < defaults.DECODE_MIN_PUBLIC:
        why = f"a decoder decodes into {defaults.DECODE_MIN_PUBLIC} public images or more (--public)"
    if why is not None:
        return Decoding(note=why)
    if decode == "always":
        return Decoding(decode)
    return Decoding(decode, None, defaults.decode_check_images(public),
                    defaults.decode_check_records(records) if mode == Mode.LDPKIT else 0)


def query_batch_size(given: int | None, meta: TeacherMetadata) -> int:
    """Queries per plan batch: ``given``, else the default for the teacher's largest request (a Batch API job's
    size for a teacher that has one). Apart from :func:`resolve` because a run checks its memory with it before it
    builds anything."""
    return given or defaults.query_batch_size(meta.max_batch_size, meta.batch_api)


def _queries(given: int | None, n_records: int, kind: str) -> int:
    """The plan's queries: ``given``, else the default for ``n_records`` and the plan ``kind``; SIDP's plan sends
    each record once. ValueError for more Sup queries than the records make pairs."""
    if kind == "identity":
        return n_records
    queries = given if given is not None else defaults.num_queries(n_records, kind) or 0
    if kind == "sup":
        check_sup_queries(queries, n_records, option="num_queries", instead="augment='rand'")
    return queries


__all__ = ["Decoding", "Facts", "Resolved", "check_given", "decoding", "member_seeds", "query_batch_size", "resolve"]
