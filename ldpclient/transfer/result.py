"""What a knowledge transfer produced: :class:`TransferResult`, and :class:`SentSample`, a few of the queries as
the teacher got them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, TypedDict

import numpy as np
import torch
from torch import nn

from ..io.document import Document, JSONDict, typed_fields
from ..names import Mode
from ..privacy.guarantee import Guarantee
from .adapt import AdaptHistory
from .augment import QueryPlan
from .rounds import QueryRound
from .student import TrainHistory

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


@dataclass(frozen=True)
class TrainingSummary:
    """How the student was trained: ``student`` (its zoo name; None: no student, as in ``sidp`` mode),
    ``crop_pixels`` (the most a training row was shifted, pixels), ``flip`` (rows mirrored), ``warmup_epochs``,
    ``students`` (how many learnt from the same answers), ``mirror_check`` (what decided ``flip`` when it was not
    given: :meth:`~.mirror_check.MirrorVerdict.as_dict`; else None), ``reused`` (the result was trained by an
    earlier run on the same records, releases and answers: :mod:`~.result_cache`), ``weights`` (the file the
    student started from: :meth:`~.pretrained.WeightsInfo.as_dict`; None: random weights)."""

    student: Optional[str] = None
    crop_pixels: int = 0
    flip: bool = False
    warmup_epochs: int = 0
    students: int = 1
    mirror_check: Optional[Mapping[str, float | int]] = None
    reused: bool = False
    weights: Optional[Mapping[str, object]] = None

    def as_dict(self) -> JSONDict:
        """The summary as the report has it (``reused`` only when true, ``weights`` only when given)."""
        out: JSONDict = {"student": self.student, "crop_pixels": self.crop_pixels, "flip": self.flip,
                               "warmup_epochs": self.warmup_epochs, "students": self.students,
                               "mirror_check": dict(self.mirror_check) if self.mirror_check is not None else None}
        if self.weights is not None:
            out["weights"] = dict(self.weights)
        return {**out, "reused": True} if self.reused else out

    @classmethod
    def from_dict(cls, kept: Document) -> "TrainingSummary":
        """The summary :meth:`as_dict` wrote (keys it does not know are left out); ValueError naming a key whose
        value is not of its field's type."""
        return cls(**typed_fields(cls, kept, "kept training summary"))  # type: ignore[arg-type]  # each checked


class Outcome(TypedDict):
    """The fields of :class:`TransferResult` every run has, whether it trained a student or not."""

    guarantee: Guarantee
    mode: Mode
    counts: dict[str, int]
    timings: dict[str, float]
    teacher_label_histogram: list[int]
    plan: QueryPlan
    sent_sample: Optional[SentSample]
    decoding: Optional[JSONDict]
    release_shift: Optional[JSONDict]


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
    mode: Mode
    counts: dict[str, int]
    timings: dict[str, float]
    history: Optional[TrainHistory] = None
    teacher_label_histogram: list[int] = field(default_factory=list)
    plan: Optional[QueryPlan] = None
    #: labels of the student before on-device adaptation (``None`` when adaptation was off or not applicable)
    unadapted_labels: Optional[torch.Tensor] = None
    adaptation: Optional[AdaptHistory] = None
    #: the first releases and queries as the teacher got them, for a person to look at
    sent_sample: Optional[SentSample] = None
    #: how the student was trained (no student: the defaults, ``student`` None)
    training: TrainingSummary = field(default_factory=TrainingSummary)
    #: the final student against the teacher on the public images held out of training (``images``, ``agree``:
    #: how many, and on how many the two gave the same class); None without held-out public images
    public_held_out: Optional[dict[str, int]] = None
    #: the query rounds as they went (:mod:`~ldpclient.transfer.rounds`; empty when every query went at once)
    query_rounds: list[QueryRound] = field(default_factory=list)
    #: with public images, the teacher's answers per class to the plan's queries and, apart, to the public images
    #: (each image once; the mirror check's copies in neither): ``{"queries": [...], "public": [...]}``; else None
    answers_apart: Optional[dict[str, list[int]]] = None
    #: whether the queries were decoded into the public images, and why
    #: (:func:`~.stages.decode.decode_releases`); None when not asked
    decoding: Optional[JSONDict] = None
    #: how far the private releases sit from releases of the public images (:mod:`~.release_shift`); None without
    #: public images or for releases of pixels
    release_shift: Optional[JSONDict] = None

    @property
    def epsilon_record(self) -> float:
        return self.guarantee.epsilon_record

    @property
    def epsilon_element(self) -> float:
        return self.guarantee.epsilon_element

    def summary(self) -> JSONDict:
        """JSON-serialisable summary (for reports and the CLI)."""
        out: JSONDict = {
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
        if self.decoding is not None:
            out["decoding"] = dict(self.decoding)
        if self.release_shift is not None:
            out["release_shift"] = dict(self.release_shift)
        if self.adaptation is not None:
            out["adaptation"] = {
                "selected": list(self.adaptation.selected),
                "loss": list(self.adaptation.loss),
                "labels_changed": self.adaptation.changed[-1] if self.adaptation.changed else 0.0,
                "seconds": round(self.adaptation.seconds, 3),
                "image_changes": self.adaptation.changes.as_dict() if self.adaptation.changes else None,
                "label_views": self.adaptation.views,
                "labelled_through_views": self.adaptation.viewed,
            }
        if self.history is not None:
            out["training"] = {
                **self.training.as_dict(),
                "loss": self.history.loss,
                "train_accuracy": self.history.train_accuracy,
                "val_accuracy": [None if v != v else v for v in self.history.val_accuracy],
                "images_per_second": self.history.images_per_second,
            }
        return out


__all__ = ["Outcome", "SAMPLE_SIZE", "SentSample", "TrainingSummary", "TransferResult"]
