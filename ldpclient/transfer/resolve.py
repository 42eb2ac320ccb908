"""The one place where a transfer's unset settings become values.

A setting left ``None`` resolves from the run's facts (record count and shape, the teacher's batch limits, how
many public images there are) through :mod:`ldpclient.transfer.defaults` (one function per default).
:class:`Resolved` holds a run's settings after that, as the stages read them; the functions below resolve
the settings that need a fact only a running stage knows. :mod:`ldpclient.run.plan` builds on the same
functions, so a dry run states the values the run uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import torch

from ..names import PLAN_KINDS, Mode
from ..privacy.base import Mechanism
from ..privacy.release import Release
from . import defaults
from .postprocess import ReleaseRows, Transform, parse_postprocess
from .settings import AdaptationSettings, PlanSettings, TrainingSettings
from .student import build_student

if TYPE_CHECKING:
    from ..teachers.base import TeacherMetadata
    from .adapt import SelfTrainingAdapter


def query_batch_size(given: int | None, meta: TeacherMetadata) -> int:
    """Queries per plan batch: ``given``, else the default for the teacher's largest request (a Batch API job's
    size for a teacher that has one)."""
    return given or defaults.query_batch_size(meta.max_batch_size, meta.batch_api)


def num_queries(given: int | None, n_records: int, kind: str) -> int | None:
    """The plan's query budget: ``given``, else the default for ``n_records`` and the plan ``kind``."""
    return given if given is not None else defaults.num_queries(n_records, kind)


def student(given: str | None, record_shape: Sequence[int], public: bool) -> str:
    """The student's zoo name: ``given``, else the default for the records' shape, beside public images or not."""
    return given or defaults.student(record_shape, public)


def train_crop(given: int | None, image_size: int, public: bool) -> int:
    """Most pixels a training row is shifted by: ``given``, else the default for the records' side."""
    return given if given is not None else defaults.train_crop(image_size, public)


def public_shift(image_size: int) -> int:
    """The shift beside public images (the warm-up's, and the mirror check's shifted copies)."""
    return defaults.train_crop(image_size, True)


def public_repeats(given: int | None, n_queries: int, n_public: int) -> int:
    """Times per training epoch each public image is trained on: ``given``, else the default for the plan's
    ``n_queries`` and the ``n_public`` images."""
    return given or defaults.public_repeats(n_queries, n_public)


def public_held_out(n_public: int) -> int:
    """Public images held out of training to score the student by (0: none)."""
    return defaults.public_held_out(n_public)


def confusion_queries(classes: int, n_public: int, kind: str) -> int:
    """Queries that measure the teacher's confusion on noised images, for ``classes`` and ``n_public`` images."""
    return defaults.confusion_queries(classes, n_public, kind)


def mirror_check_images(n_public: int, image_size: int) -> int:
    """Public images the mirror check copies (0: no check)."""
    return defaults.mirror_check_images(n_public, image_size)


def mirror_flip(mirror_agreement: float, shift_agreement: float) -> bool:
    """Whether training mirrors rows, from the mirror check's agreements (shares in [0, 1])."""
    return defaults.flip(mirror_agreement, shift_agreement)


def member_seed(student_seed: int, member: int) -> int:
    """The seed of the run's ``member``-th student's draws (member 0: ``student_seed`` itself)."""
    return defaults.member_seed(student_seed, member)


@dataclass(frozen=True)
class Resolved:
    """A transfer's settings as its stages read them: every default that needs no fact of the run resolved,
    the post-processing parsed, the student's name checked by a trial build. The fields that stay ``None``
    (``num_queries``, ``query_batch_size``, ``student``, ``crop``, ``public_repeats``, ``flip``) resolve through
    the module's functions once the stage that needs them knows its facts."""

    augment: str
    num_queries: Optional[int]
    transforms: tuple[Transform, ...]
    upsample_mode: str
    clip_queries: bool
    query_batch_size: Optional[int]
    rand_scale: float
    blank_fraction: float
    n_blank: Optional[int]
    blank_mechanism: Mechanism
    free_images: str
    query_rounds: int
    min_round_gain: float
    student: Optional[str]
    student_kwargs: dict[str, Any]
    epochs: int
    batch_size: int
    lr: float
    val_fraction: float
    device: str
    checkpoint: Optional[Path]
    public_repeats: Optional[int]
    crop: Optional[int]
    flip: Optional[bool]
    warmup: int
    confusion: bool
    student_seed: int
    students: int
    adapt: bool
    adapter: Optional[SelfTrainingAdapter]
    fuse: bool

    @classmethod
    def of(
        cls, plan: PlanSettings, training: TrainingSettings, adaptation: AdaptationSettings, *,
        mechanism: Mechanism, mode: Mode, seed: int,
    ) -> Resolved:
        """The settings of a run in ``mode`` whose private records are noised by ``mechanism`` and whose plan is
        drawn from ``seed``; ValueError where they contradict each other."""
        t = training
        if t.student is not None:
            with torch.random.fork_rng(devices=[]):  # fail fast on a bad name/kwargs; its init draws stay local
                build_student(t.student, **{**(t.student_kwargs or {}), "num_classes": 2})
        transforms = (
            parse_postprocess(plan.postprocess)
            if plan.postprocess is None or isinstance(plan.postprocess, str)
            else list(plan.postprocess)
        )
        resolved = cls(
            augment=plan.augment, num_queries=plan.num_queries, transforms=tuple(transforms),
            upsample_mode=plan.upsample_mode, clip_queries=plan.clip_queries, query_batch_size=plan.query_batch_size,
            rand_scale=plan.rand_scale, blank_fraction=plan.blank_fraction, n_blank=plan.n_blank,
            blank_mechanism=plan.blank_mechanism if plan.blank_mechanism is not None else mechanism,
            free_images=plan.free_images,
            query_rounds=plan.query_rounds if plan.query_rounds is not None else defaults.query_rounds(),
            min_round_gain=plan.min_round_gain, student=t.student, student_kwargs=dict(t.student_kwargs or {}),
            epochs=t.epochs if t.epochs is not None else defaults.epochs(),
            batch_size=t.batch_size if t.batch_size is not None else defaults.train_batch_size(),
            lr=t.lr, val_fraction=t.val_fraction, device=t.device,
            checkpoint=Path(t.checkpoint) if t.checkpoint is not None else None,
            public_repeats=t.public_repeats, crop=t.crop, flip=t.flip, warmup=t.warmup, confusion=t.confusion,
            student_seed=t.student_seed if t.student_seed is not None else int(seed),
            students=t.students if t.students is not None else defaults.students(),
            adapt=bool(adaptation.adapt), adapter=adaptation.adapter, fuse=bool(adaptation.fuse),
        )
        if resolved.query_rounds > 1 and mode == Mode.SIDP:
            raise ValueError("query_rounds: SIDP sends each release once and trains no student to judge rounds by")
        if resolved.query_rounds > 1 and resolved.val_fraction <= 0:
            raise ValueError("query_rounds: the rounds are judged on held-out queries; val_fraction must be > 0")
        return resolved

    def postprocessed(self, release: Release) -> ReleaseRows:
        """``release`` post-processed on demand as the private releases are (the transforms, the resize back)."""
        return ReleaseRows(release, self.transforms, self.upsample_mode)

    def plan_kind(self, mode: Mode) -> str:
        """The query plan's kind: ``identity`` for SIDP, else the augment's (:data:`~ldpclient.names.PLAN_KINDS`)."""
        return "identity" if mode == Mode.SIDP else PLAN_KINDS[self.augment]


__all__ = ["Resolved", "confusion_queries", "member_seed", "mirror_check_images", "mirror_flip", "num_queries",
           "public_held_out", "public_repeats", "public_shift", "query_batch_size", "student", "train_crop"]
