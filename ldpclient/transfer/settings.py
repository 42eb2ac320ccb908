"""The settings of a knowledge transfer, grouped by concern (in the style of httpx's ``Timeout``/``Limits``).

:class:`~ldpclient.transfer.pipeline.KnowledgeTransfer` takes three small frozen objects
instead of two dozen keywords: :class:`PlanSettings` (which queries are sent),
:class:`TrainingSettings` (how the student learns from the teacher's labels) and
:class:`AdaptationSettings` (what happens on the device afterwards). A field left
``None`` is resolved once per run, against its records and public images
(:mod:`ldpclient.transfer.resolve`, on :mod:`ldpclient.transfer.defaults`, the functions the CLI uses);
each object checks its values when it is made, with a message naming the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Sequence, Union

from ..names import AUGMENTATIONS, DECODINGS, FREE_IMAGES
from .defaults import MAX_EPOCHS, MAX_QUERY_ROUNDS, MAX_SEED, MAX_STUDENTS, MAX_TRAIN_BATCH, MAX_WARMUP_EPOCHS
from .defaults import adapt as default_adapt
from .defaults import augment as default_augment
from .defaults import decode as default_decode
from .defaults import device as default_device
from .defaults import min_round_gain as default_min_round_gain
from .defaults import warmup as default_warmup

if TYPE_CHECKING:
    from ..privacy.base import Mechanism
    from .adapt import SelfTrainingAdapter
    from .postprocess import Transform


#: The range of each count the settings hold, by setting name: ``(least, most)``, ``most`` None for no bound. The
#: label options that stand for these settings are checked against the same table.
BOUNDS: dict[str, tuple[int, int | None]] = {
    "num_queries": (1, None), "query_batch_size": (1, None), "query_rounds": (1, MAX_QUERY_ROUNDS),
    "epochs": (1, MAX_EPOCHS), "batch_size": (1, MAX_TRAIN_BATCH), "warmup": (0, MAX_WARMUP_EPOCHS),
    "students": (1, MAX_STUDENTS), "public_repeats": (1, None), "crop": (0, None),
}
#: What a count is counted in, where a message should say.
_UNITS = {"warmup": " epochs", "crop": " pixels"}


def check_count(setting: str, value: int | None, option: str | None = None) -> None:
    """ValueError naming ``option`` (default: the ``setting``'s own name) when ``value`` is outside the setting's
    :data:`BOUNDS`; None (the default) passes."""
    if value is None:
        return
    least, most = BOUNDS[setting]
    name, unit = option or setting, _UNITS.get(setting, "")
    if most is None and value < least:
        raise ValueError(f"{name} must be >= {least}{unit}, got {value}")
    if most is not None and not least <= value <= most:
        raise ValueError(f"{name} must be from {least} to {most}{unit}, got {value}")


@dataclass(frozen=True)
class PlanSettings:
    """Which queries are sent.

    ``augment``: ``sup`` | ``rand`` | ``none``. ``num_queries``: Q (None:
    :func:`~ldpclient.transfer.defaults.num_queries`). ``postprocess``: transforms or a spec
    such as ``"blur:1,clip"`` applied to the releases (None: the shape's default).
    ``upsample_mode``: how reduced releases are resized back. ``clip_queries``: clip every
    query to the teacher's value range. ``query_batch_size``: queries per teacher batch
    (None: :func:`~ldpclient.transfer.defaults.query_batch_size`). ``rand_scale``: Rand noise
    multiplier. ``blank_fraction``/``n_blank``: public blank-record queries mixed in.
    ``blank_mechanism``: the mechanism that noises the blank records (public input: its epsilon is a
    noise level, never charged; None: the run's own mechanism). ``free_images``: what the free records of the
    data-free mode and of ``blank_fraction`` are (:data:`~ldpclient.names.FREE_IMAGES`): ``blank`` images noised
    by ``blank_mechanism``, or ``procedural`` images (:mod:`~ldpclient.transfer.procedural`) sent as they are.
    ``query_rounds``: send the plan's queries in up to this many rounds of doubling size and stop when a round
    raised the student's held-out agreement with the teacher by less than ``min_round_gain`` (a share in [0, 1]):
    :mod:`~ldpclient.transfer.rounds` (None: :func:`~ldpclient.transfer.defaults.query_rounds`, 1: all at once).
    ``decode``: send the releases decoded into the public images
    (:mod:`~ldpclient.transfer.decoder`; :data:`~ldpclient.names.DECODINGS`): ``auto`` when the teacher's answers
    on a check say it helps (:mod:`~ldpclient.transfer.decode_check`), ``none`` (the default), ``always``.
    """

    augment: str = field(default_factory=default_augment)
    num_queries: int | None = None
    postprocess: Union[str, Sequence["Transform"], None] = None
    upsample_mode: str = "bilinear"
    clip_queries: bool = True
    query_batch_size: int | None = None
    rand_scale: float = 1.0
    blank_fraction: float = 0.0
    n_blank: int | None = None
    blank_mechanism: Mechanism | None = None
    free_images: str = "blank"
    query_rounds: int | None = None
    min_round_gain: float = field(default_factory=default_min_round_gain)
    decode: str = field(default_factory=default_decode)

    def __post_init__(self) -> None:
        for setting in ("num_queries", "query_batch_size", "query_rounds"):
            check_count(setting, getattr(self, setting))
        if not (math.isfinite(self.min_round_gain) and -1.0 <= self.min_round_gain <= 1.0):
            raise ValueError(f"min_round_gain must be a share from -1 to 1, got {self.min_round_gain}")
        if self.augment not in AUGMENTATIONS:
            raise ValueError(f"augment must be one of {AUGMENTATIONS}, got {self.augment!r}")
        if self.decode not in DECODINGS:
            raise ValueError(f"decode must be one of {DECODINGS}, got {self.decode!r}")
        if self.free_images not in FREE_IMAGES:
            raise ValueError(f"free_images must be one of {FREE_IMAGES}, got {self.free_images!r}")


@dataclass(frozen=True)
class TrainingSettings:
    """How the student learns: ``student`` (a name of ``ldpclient.transfer.student.STUDENTS``; None:
    :func:`~ldpclient.transfer.defaults.student` for the records' shape, with or without public images) built
    with ``student_kwargs``; ``student_weights``: a file the student starts from (a torchvision state dict of
    ``resnet18`` or ``mobilenet_v2``, or a TorchScript feature extractor: :mod:`~ldpclient.transfer.pretrained`),
    frozen under a new head; ``student`` None then means the file's architecture; ``epochs``, ``batch_size``
    (None: the defaults), ``lr``, ``val_fraction`` (held-out teacher labels), ``device``; ``checkpoint``: a path
    to save the trained student to;
    ``public_repeats``: times per epoch each public image is trained on (None:
    :func:`~ldpclient.transfer.defaults.public_repeats`). Each row trained on is shifted at random by up to
    ``crop`` pixels (None: :func:`~ldpclient.transfer.defaults.train_crop` for the records' side, with or
    without public images; 0: not shifted) and, with ``flip``, mirrored left to right half of the time (for
    images whose class a mirror keeps, such as photos of objects; not digits or text). ``flip`` None (the
    default): decided by asking the teacher about mirrored and shifted copies of up to 200 public images
    (:mod:`~ldpclient.transfer.mirror_check`; public queries, no privacy cost); with fewer than 100 public
    images, or on images under 16 pixels a side, not mirrored. ``warmup``: epochs of the rotation pretext on the
    clean private records before training (:mod:`~ldpclient.transfer.warmup`; local, no privacy cost; 0, the
    default: none). ``student_seed``: the seed of the student's side alone (its initial weights, the order and
    shifts of its training rows, the held-out share, adaptation; None, the default: the run's ``seed``, which also
    draws the plan), so that one release and its answers can be learnt from again with other draws.
    ``students``: how many students learn from the same answers, each with
    draws of its own (member ``k`` takes :func:`~ldpclient.transfer.defaults.member_seed` of ``student_seed``;
    member 0 is the one student of ``students=1``), each trained and adapted in turn; the labels come from the mean
    of their outputs (an ensemble: the spread between runs that differ only in the student's draws shrinks, at
    ``students`` times the training and adaptation time; None: :func:`~ldpclient.transfer.defaults.students`); the
    result's ``student`` and the ``checkpoint`` are then all of them, read as one
    (:class:`~ldpclient.transfer.student.StudentMean`)."""

    student: str | None = None
    student_kwargs: dict[str, object] | None = None
    student_weights: str | Path | None = None
    epochs: int | None = None
    batch_size: int | None = None
    lr: float = 1e-3
    val_fraction: float = 0.05
    device: str = field(default_factory=default_device)
    checkpoint: str | Path | None = None
    public_repeats: int | None = None
    crop: int | None = None
    flip: bool | None = None
    warmup: int = field(default_factory=default_warmup)
    student_seed: int | None = None
    students: int | None = None

    def __post_init__(self) -> None:
        for setting in ("students", "warmup", "public_repeats", "crop", "epochs", "batch_size"):
            check_count(setting, getattr(self, setting))
        if self.student_seed is not None and not 0 <= self.student_seed < MAX_SEED:
            raise ValueError(f"student_seed must be an integer from 0 to 2**63-1, got {self.student_seed}")


@dataclass(frozen=True)
class AdaptationSettings:
    """What the device does after training: ``adapt`` (fine-tune on the clean records, with ``adapter`` or the
    default self-training), ``balance`` (without public images, labels in equal class shares rather than the
    teacher's answer shares: adaptation's rounds pseudo-label from the student's outputs aligned to them, and
    without adaptation from its outputs re-weighted to them; :mod:`ldpclient.transfer.prior`)."""

    adapt: bool = field(default_factory=default_adapt)
    adapter: "SelfTrainingAdapter | None" = None
    balance: bool = True

    def balances(self, with_public: bool) -> bool:
        """Whether the labels learn equal class shares: with ``balance`` and no public images (beside them the
        student learns the classes from their answers, and re-weighting did not win)."""
        return self.balance and not with_public


class Given(NamedTuple):
    """The settings objects as given: a kept result is keyed by them, :func:`~ldpclient.transfer.resolve.resolve`
    reads them."""

    plan: PlanSettings
    training: TrainingSettings
    adaptation: AdaptationSettings


SETTINGS: tuple[type, ...] = (PlanSettings, TrainingSettings, AdaptationSettings)


__all__ = ["AdaptationSettings", "BOUNDS", "Given", "check_count", "PlanSettings", "SETTINGS", "TrainingSettings"]
