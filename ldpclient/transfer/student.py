"""The local student: model zoo, trainer on the teacher's hard labels, checkpoints, labelling.

Model zoo (factory functions like torchvision's, never downloading weights):

* :func:`small_cnn` - three conv layers, suited to small images (8x8 to 64x64): the default, except
* :func:`pooled_cnn` - the same on the image averaged over 2x2 pixels: the default for grey images of 24 px and
  more trained on noised queries alone;
* :func:`small_resnet` - a small residual network with a stride-1 stem: the default for colour images of 16 px
  and more beside public images (:func:`~ldpclient.transfer.defaults.student`);
* :func:`resnet18` and :func:`mobilenet_v2` - torchvision's architectures
  (``weights=None``) with the stem adapted to ``in_channels`` and, for small
  images (< 64 px), a stride-1 stem without the first max-pool; from a file of torchvision's weights with
  ``weights=`` (:mod:`~ldpclient.transfer.pretrained`);
* :func:`torchscript` - a user's TorchScript feature extractor from a file, under a new head.

:func:`build_student` picks one by name. :class:`Trainer` trains (with :class:`StudentAdam`) on labelled
queries streamed batch by batch (the queries are recomputed from the query plan
each epoch, so memory stays O(batch)); labels live in a compact
:class:`LabelStore` (int16 per query id, -1 = unlabelled). :func:`predict` labels
the clean private records locally and returns the softmax confidence.
Input values are in the teacher's value range (e.g. [0, 1] per element).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

import numpy as np
import torch
from torch import nn
from torch.optim.adam import adam as torch_adam

from ..io.output import atomic_torch_save
from ..io.records import RecordSource, TensorRecords, iter_batches
from .pretrained import TORCHSCRIPT, pretrained_student

Progress = Callable[[str, int, int, Mapping[str, float]], None]
"""``progress(stage, done, total, metrics)``; the CLI draws it as a bar."""


# ---------------------------------------------------------------- model zoo
def _check_dims(num_classes: int, in_channels: int, image_size: int) -> None:
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    if in_channels < 1:
        raise ValueError(f"in_channels must be >= 1, got {in_channels}")
    if image_size < 4:
        raise ValueError(f"image_size must be >= 4 pixels, got {image_size}")


class _AveragedTo(nn.AdaptiveAvgPool2d):
    """``nn.AdaptiveAvgPool2d(side)`` (an int ``output_size``) that passes a map already ``side`` x ``side`` through as
    it is: the same values (the mean of one value is that value) without the pooling and its backward pass, about a
    twentieth of a :func:`pooled_cnn` training step on 28 px images (whose last map is 3x3)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2] == x.shape[-1] == self.output_size:
            return x
        return super().forward(x)


class SmallCNN(nn.Module):
    """conv(w)-pool-conv(2w)-pool-conv(2w)-fc(128)-fc; for 4x4 to ~64x64 inputs.

    Each max-pool comes before its ReLU: the same values and gradients as ReLU first (the largest of four values
    after a ReLU is the ReLU of their largest, and both orders pass the gradient to the same one), with the ReLU and
    its backward pass on a map a quarter of the size.

    The first max-pool is skipped below 16 px so that 8x8 inputs keep their detail. With ``input_pool`` above 1
    the image is first averaged over ``input_pool`` x ``input_pool`` pixels and the convolutions run on that
    smaller image, both max-pools kept (:func:`pooled_cnn`).
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1, image_size: int = 28, width: int = 32,
                 input_pool: int = 1) -> None:
        super().__init__()
        _check_dims(num_classes, in_channels, image_size)
        if width < 1:
            raise ValueError(f"width must be >= 1, got {width}")
        if input_pool < 1 or (input_pool > 1 and image_size // input_pool < 8):
            raise ValueError(f"input_pool {input_pool} leaves fewer than 8 of {image_size} pixels a side")
        w = width
        self.input_pool = nn.AvgPool2d(input_pool) if input_pool > 1 else nn.Identity()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, w, 3, padding=1),
            nn.MaxPool2d(2) if image_size >= 16 else nn.Identity(),
            nn.ReLU(inplace=True),
            nn.Conv2d(w, 2 * w, 3, padding=1),
            nn.MaxPool2d(2),
            nn.ReLU(inplace=True),
            nn.Conv2d(2 * w, 2 * w, 3, padding=1),
            nn.ReLU(inplace=True),
            _AveragedTo(3),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(2 * w * 9, 128),
            nn.ReLU(inplace=True),
            nn.Dropout(0.25),
            nn.Linear(128, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(self.input_pool(x)))


def small_cnn(*, num_classes: int = 10, in_channels: int = 1, image_size: int = 28, width: int = 32) -> nn.Module:
    """A small CNN for ``(in_channels, image_size, image_size)`` inputs: the default student but where
    :func:`~ldpclient.transfer.defaults.student` picks :func:`pooled_cnn` or :func:`small_resnet`."""
    return SmallCNN(num_classes, in_channels, image_size, width)


def pooled_cnn(*, num_classes: int = 10, in_channels: int = 1, image_size: int = 28, width: int = 32) -> nn.Module:
    """:func:`small_cnn` on the image averaged over 2x2 pixels (28 px -> 14; 16 px a side or more): a quarter of
    its convolutions' work. The default student for grey images of 24 px or more trained on noised queries
    alone (:func:`~ldpclient.transfer.defaults.student`)."""
    return SmallCNN(num_classes, in_channels, image_size, width, input_pool=2)


class _ResidualBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity (or 1x1 strided conv) shortcut, ReLU after the sum."""

    def __init__(self, in_width: int, out_width: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(in_width, out_width, 3, stride, 1, bias=False),
            nn.BatchNorm2d(out_width),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_width, out_width, 3, 1, 1, bias=False),
            nn.BatchNorm2d(out_width),
        )
        self.shortcut: nn.Module = (
            nn.Identity()
            if stride == 1 and in_width == out_width
            else nn.Sequential(nn.Conv2d(in_width, out_width, 1, stride, bias=False), nn.BatchNorm2d(out_width))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


def small_resnet(
    *, num_classes: int = 10, in_channels: int = 3, image_size: int = 32, width: int = 16
) -> nn.Module:
    """A small residual network for small photos (the default student for colour images beside public images,
    :func:`~ldpclient.transfer.defaults.student`): a stride-1 3x3 stem of ``width`` channels (no pooling, so a
    32x32 photo keeps its detail), three residual blocks of ``width``, ``2 x width`` and ``4 x width`` channels
    (the last two stride 2), global average pooling and a linear layer (78,000 weights at width 16, 309,000 at 32;
    ``small_cnn`` has 131,000 for 32x32 colour). Width 16: on CIFAR-10 with public photos width 32 labelled about 2
    points better at 2.6x the
    training time."""
    _check_dims(num_classes, in_channels, image_size)
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    w = width
    return nn.Sequential(
        nn.Conv2d(in_channels, w, 3, 1, 1, bias=False),
        nn.BatchNorm2d(w),
        nn.ReLU(inplace=True),
        _ResidualBlock(w, w, 1),
        _ResidualBlock(w, 2 * w, 2),
        _ResidualBlock(2 * w, 4 * w, 2 if image_size >= 8 else 1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * w, num_classes),
    )


def resnet18(*, num_classes: int = 10, in_channels: int = 1, image_size: int = 28, weights: str | None = None,
             value_range: tuple[float, float] | list[float] = (0.0, 1.0), weights_sha256: str | None = None
             ) -> nn.Module:
    """torchvision ResNet-18 (random init) for ``in_channels`` and small images; with ``weights``, a file of
    torchvision's resnet18 weights, frozen under a new head (:mod:`~ldpclient.transfer.pretrained`; records in
    ``value_range``)."""
    from torchvision.models import resnet18 as tv_resnet18

    _check_dims(num_classes, in_channels, image_size)
    if weights is not None:
        return pretrained_student("resnet18", weights, num_classes=num_classes, in_channels=in_channels,
                                  value_range=value_range, weights_sha256=weights_sha256)
    model = tv_resnet18(weights=None, num_classes=num_classes)
    if image_size < 64:
        model.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    elif in_channels != 3:
        model.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
    return model


def mobilenet_v2(*, num_classes: int = 10, in_channels: int = 1, image_size: int = 28, weights: str | None = None,
                 value_range: tuple[float, float] | list[float] = (0.0, 1.0), weights_sha256: str | None = None
                 ) -> nn.Module:
    """torchvision MobileNetV2 (random init) for ``in_channels``; stride-1 stem below 64 px. With ``weights``, as
    :func:`resnet18`'s."""
    from torchvision.models import mobilenet_v2 as tv_mobilenet_v2

    _check_dims(num_classes, in_channels, image_size)
    if weights is not None:
        return pretrained_student("mobilenet_v2", weights, num_classes=num_classes, in_channels=in_channels,
                                  value_range=value_range, weights_sha256=weights_sha256)
    model = tv_mobilenet_v2(weights=None, num_classes=num_classes)
    stride = 1 if image_size < 64 else 2
    model.features[0][0] = nn.Conv2d(in_channels, 32, 3, stride=stride, padding=1, bias=False)
    return model


def torchscript(*, num_classes: int = 10, in_channels: int = 3, image_size: int = 32, weights: str | None = None,
                value_range: tuple[float, float] | list[float] = (0.0, 1.0), weights_sha256: str | None = None
                ) -> nn.Module:
    """A user's own TorchScript feature extractor in the file ``weights``, frozen under a new head
    (:mod:`~ldpclient.transfer.pretrained`)."""
    _check_dims(num_classes, in_channels, image_size)
    if weights is None:
        raise ValueError("the torchscript student is a feature extractor from a file: give its weights "
                         "(--student-weights)")
    return pretrained_student(TORCHSCRIPT, weights, num_classes=num_classes, in_channels=in_channels,
                              value_range=value_range, weights_sha256=weights_sha256)


STUDENTS: dict[str, Callable[..., nn.Module]] = {
    "small_cnn": small_cnn,
    "pooled_cnn": pooled_cnn,
    "small_resnet": small_resnet,
    "resnet18": resnet18,
    "mobilenet_v2": mobilenet_v2,
    TORCHSCRIPT: torchscript,
}


def build_student(name: str, **kwargs: Any) -> nn.Module:
    """Model by zoo name (:data:`ldpclient.names.STUDENT_NAMES`; ``-`` works for ``_``)."""
    key = name.replace("-", "_").lower()
    if key not in STUDENTS:
        raise ValueError(f"unknown student {name!r}; choose from {', '.join(STUDENTS)}")
    return STUDENTS[key](**kwargs)


def select_device(device: str = "auto") -> torch.device:
    """``"auto"`` picks cuda, then mps, then cpu; explicit names must be available."""
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but CUDA is not available")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError("device 'mps' requested but MPS is not available")
    if device not in ("cpu", "mps") and not device.startswith("cuda"):
        raise ValueError(f"unknown device {device!r} (auto, cpu, cuda, cuda:N, mps)")
    return torch.device(device)


# ---------------------------------------------------------------- labels
class LabelStore:
    """Teacher labels by query id ``[0, Q)``, int8 or int16, -1 = unlabelled (not asked, or declined:
    :data:`~ldpclient.teachers.result.ABSTAINED`), and whether each query was answered (2 or 3 bytes per query)."""

    def __init__(self, num_queries: int, num_classes: int) -> None:
        if num_queries < 0:
            raise ValueError("num_queries must be >= 0")
        if not 2 <= num_classes <= 32767:
            raise ValueError(f"num_classes must be in [2, 32767], got {num_classes}")
        self.num_classes = num_classes
        dtype = np.int8 if num_classes <= 127 else np.int16
        self.labels = np.full(num_queries, -1, dtype=dtype)
        self.answered = np.zeros(num_queries, dtype=bool)  # the teacher answered: a class, or declined

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def set(self, ids: np.ndarray | torch.Tensor, labels: np.ndarray | torch.Tensor) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        lab = np.asarray(labels, dtype=np.int64)
        if ids.shape != lab.shape:
            raise ValueError(f"{len(ids)} query ids but {len(lab)} labels")
        if lab.size and (lab.min() < -1 or lab.max() >= self.num_classes):
            raise ValueError(f"teacher label out of range [0, {self.num_classes}) (or -1: declined)")
        self.labels[ids] = lab
        self.answered[ids] = True

    def get(self, ids: np.ndarray | torch.Tensor) -> np.ndarray:
        return self.labels[np.asarray(ids, dtype=np.int64)].astype(np.int64)

    @property
    def num_labelled(self) -> int:
        """Queries the teacher labelled with a class (declined ones apart)."""
        return int(np.count_nonzero(np.asarray(self.labels) >= 0))

    @property
    def num_answered(self) -> int:
        """Queries the teacher answered, declined ones included."""
        return int(np.count_nonzero(self.answered))

    def histogram(self, ids: np.ndarray | None = None) -> np.ndarray:
        """The teacher's answers per class over the labelled queries (of ``ids`` only, when given)."""
        labels = np.asarray(self.labels) if ids is None else self.get(ids)
        lab = labels[labels >= 0].astype(np.int64)
        return np.bincount(lab, minlength=self.num_classes)


def validation_mask(ids: np.ndarray, fraction: float, seed: int = 0) -> np.ndarray:
    """Deterministic per-id hold-out: True for about ``fraction`` of query ids."""
    if fraction <= 0:
        return np.zeros(len(ids), dtype=bool)
    x = np.asarray(ids, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(seed * 2 + 1)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(31)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(29)
    return (x % np.uint64(1_000_000)).astype(np.int64) < int(fraction * 1_000_000)


# ---------------------------------------------------------------- training
Batch = tuple[np.ndarray, torch.Tensor]
"""``(query ids int64 (B,), query values float (B, C, H, W))``."""


@dataclass
class TrainHistory:
    """Per-epoch mean training loss, training accuracy and validation accuracy (teacher agreement)."""

    loss: list[float] = field(default_factory=list)
    train_accuracy: list[float] = field(default_factory=list)
    val_accuracy: list[float] = field(default_factory=list)
    images: int = 0
    seconds: float = 0.0

    @property
    def images_per_second(self) -> float:
        return self.images / self.seconds if self.seconds > 0 else float("nan")


#: Devices whose parameters :class:`StudentAdam` updates with torch's fused kernel (every torch this package takes has
#: it); elsewhere torch's default Adam kernel.
FUSED_ADAM_DEVICES = ("cpu", "cuda")
#: Optimiser steps between two passes of :class:`StudentAdam` that set its moments' subnormal values to 0.
SUBNORMAL_FLUSH_STEPS = 16


class StudentAdam:
    """The Adam optimiser every student trains with (training, adaptation, warm-up): torch's Adam computation
    (:func:`torch.optim.adam.adam`, betas 0.9 and 0.999, eps 1e-8, L2 ``weight_decay``) over ``params``, with its
    fused kernel where they are on :data:`FUSED_ADAM_DEVICES`, and moments that do not stay subnormal.

    It is not a :class:`torch.optim.Optimizer`: those import torch's compiler (``torch._dynamo``) at their first use,
    1.1 s of a default run of 1,000 28 px images, for a compiler a student never uses. Step for step it computes
    what ``torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, fused=...)`` computes: the same state, made
    for a parameter at its first gradient, and the same kernel.

    **Subnormal moments.** Every :data:`SUBNORMAL_FLUSH_STEPS` steps, a moment value below the smallest normal
    number of its dtype (``torch.finfo(dtype).tiny``, 1.2e-38 in float32) is set to 0. A weight whose gradient stays
    0 (a unit that has stopped learning) sees its first moment shrink by 0.9 a step: from about 800 steps on it is
    subnormal, and it stays so, as 0.9 times the smallest subnormal rounds back to it. The CPU computes on subnormal
    numbers many times slower than on normal ones: in a default run on 28 px digits about 50,000 of the student's
    131,000 first moments were subnormal from the 1,000th step on. Setting one to 0 changes the first moment by less
    than 1.2e-38, and every later one by less still (the change shrinks by 0.9 a step); from the 16th step on, an
    update changes by below ``lr`` x 1.5e-30 (its denominator is at least eps), which float32 rounding loses on any
    weight above about 3e-23 x ``lr`` in size. A second moment's change moves the denominator by far less than its
    rounding step. So the weights are those of torch's Adam, value for value, unless a weight comes that close to 0.

    **The fused kernel** makes one pass over each tensor where the plain one makes eight. With it (and the last pooling
    passed through) :func:`pooled_cnn` trained 1.15-1.16x the images a second on 28 px images; its float sums run in
    another order than the plain kernel's, so a student trains to slightly other weights than with the plain kernel
    (the labels over 3 seeds on four sets, 6 on colour digits, stayed within their spread).
    """

    def __init__(self, params: Iterable[nn.Parameter], lr: float, weight_decay: float = 0.0) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.lr = float(lr)
        self.weight_decay = float(weight_decay)
        self.fused = all(p.device.type in FUSED_ADAM_DEVICES for p in self.params) or None
        #: per parameter (by position in :attr:`params`): its step count, first and second moments
        self.state: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self._steps_since_flush = 0

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget every parameter's gradient (``set_to_none`` False: set it to zeros)."""
        for p in self.params:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_().zero_()

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step on every parameter that has a gradient."""
        held, grads = [], []  # the positions in :attr:`params` of the parameters with a gradient, and those
        for k, p in enumerate(self.params):
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("StudentAdam does not take sparse gradients")
            if k not in self.state:
                steps = torch.zeros((), dtype=torch.float32, device=p.device if self.fused else None)
                first = torch.zeros_like(p, memory_format=torch.preserve_format)
                self.state[k] = (steps, first, torch.zeros_like(first))
            held.append(k)
            grads.append(p.grad)
        if not held:
            return
        states = [self.state[k] for k in held]
        torch_adam([self.params[k] for k in held], grads, [s[1] for s in states], [s[2] for s in states], [],
                   [s[0] for s in states], fused=self.fused, amsgrad=False, beta1=0.9, beta2=0.999, lr=self.lr,
                   weight_decay=self.weight_decay, eps=1e-8, maximize=False)
        self._steps_since_flush += 1
        if self._steps_since_flush >= SUBNORMAL_FLUSH_STEPS:
            self._steps_since_flush = 0
            self._flush_subnormal_moments()

    def _flush_subnormal_moments(self) -> None:
        for _, first, second in self.state.values():
            for moment in (first, second):
                moment.masked_fill_(moment.abs() < torch.finfo(moment.dtype).tiny, 0)


class Trainer:
    """Trains a student on hard labels, streaming batches (Adam by default).

    ``epochs``, ``batch_size`` (rows per optimiser step; the stream's batches are
    re-split), ``lr``; ``optimizer`` ``"adam"`` or ``"sgd"`` (momentum 0.9);
    ``val_fraction`` of query ids held out (by a hash of the id) to measure
    agreement with the teacher, after the last epoch (every epoch with
    ``validate_each_epoch``: one more pass over the stream each time); ``device`` see :func:`select_device`;
    ``progress(stage, done, total, metrics)`` called after each step
    (stage ``"train"``) and epoch (stage ``"epoch"``); ``augment``: a transform of each training batch
    ``(B, C, H, W)`` (e.g. :func:`~ldpclient.transfer.affine.flip_crop`), drawing from the global RNG, which
    :meth:`fit` seeds inside a fork (None: the rows as they are; validation rows are never transformed). On the
    CPU ``model`` is converted in place to :func:`compute_layout` (channels-last; values unchanged) and trained
    on batches in that layout.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        epochs: int = 5,
        batch_size: int = 128,
        lr: float = 1e-3,
        optimizer: str = "adam",
        weight_decay: float = 0.0,
        val_fraction: float = 0.05,
        validate_each_epoch: bool = False,
        device: str = "auto",
        seed: int = 0,
        progress: Optional[Progress] = None,
        augment: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        if epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {epochs}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if not 0 <= val_fraction < 1:
            raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
        if optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
        self.device = select_device(device)
        self.model = to_compute_layout(model.to(self.device), self.device)
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.val_fraction = val_fraction
        self.validate_each_epoch = validate_each_epoch
        self.seed = seed
        self.progress = progress
        self.augment = augment
        params = self.model.parameters()
        self.optimizer: StudentAdam | torch.optim.SGD = (
            StudentAdam(params, lr, weight_decay)
            if optimizer == "adam"
            else torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)
        )

    def _chunks(
        self, stream: Iterable[Batch], labels: LabelStore, train: bool
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``(values, teacher labels)`` chunks of ``batch_size`` rows: the training rows (``train``) or the
        held-out ones."""
        gen = torch.Generator().manual_seed(self.seed)
        for ids, x in stream:
            ids = np.asarray(ids, dtype=np.int64)
            y = labels.get(ids)
            keep = (y >= 0) & (validation_mask(ids, self.val_fraction, self.seed) != train)
            if not keep.any():
                continue
            xk = x[torch.from_numpy(np.nonzero(keep)[0])]
            yk = torch.from_numpy(y[keep])
            if train:
                perm = torch.randperm(len(yk), generator=gen)
                xk, yk = xk[perm], yk[perm]
            for s in range(0, len(yk), self.batch_size):
                yield xk[s : s + self.batch_size], yk[s : s + self.batch_size]

    def fit(
        self,
        make_stream: Callable[[int], Iterable[Batch]],
        labels: LabelStore,
        *,
        steps_per_epoch: int | None = None,
    ) -> TrainHistory:
        """Train for ``epochs``; ``make_stream(epoch)`` yields ``(ids, values)`` batches anew each epoch.

        ``steps_per_epoch`` only sizes the progress bar (optimiser steps, estimated). Layers that draw
        randomness (dropout) draw from a generator seeded with ``seed`` inside a fork of the global
        RNG: the caller's global RNG state is left exactly as it was.
        """
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            return self._fit(make_stream, labels, steps_per_epoch)

    def _fit(
        self, make_stream: Callable[[int], Iterable[Batch]], labels: LabelStore, steps_per_epoch: int | None
    ) -> TrainHistory:
        hist = TrainHistory()
        loss_fn = nn.NLLLoss()
        t0 = time.perf_counter()
        total = (steps_per_epoch or 0) * self.epochs
        step = 0
        for epoch in range(self.epochs):
            self.model.train()
            tot_loss, correct, seen = 0.0, 0, 0
            for xb, yb in self._chunks(make_stream(epoch), labels, train=True):
                xb = xb.float() if self.augment is None else self.augment(xb.float())
                xb = batch_in_layout(xb.to(self.device, non_blocking=True), self.device)
                yb = yb.to(self.device)
                self.optimizer.zero_grad(set_to_none=True)
                out = torch.log_softmax(self.model(xb), dim=1)
                loss = loss_fn(out, yb)
                loss.backward()
                self.optimizer.step()
                tot_loss += float(loss.detach()) * len(yb)
                correct += int((out.argmax(1) == yb).sum())
                seen += len(yb)
                step += 1
                if self.progress:
                    self.progress("train", step, max(total, step), {"epoch": epoch + 1, "loss": float(loss.detach())})
            if seen == 0:
                raise ValueError("no labelled training queries (all unlabelled or held out for validation)")
            hist.images += seen
            hist.loss.append(tot_loss / seen)
            hist.train_accuracy.append(correct / seen)
            last = epoch == self.epochs - 1
            validate = self.val_fraction > 0 and (last or self.validate_each_epoch)
            val = self.evaluate(make_stream(epoch), labels) if validate else float("nan")
            hist.val_accuracy.append(val)
            if self.progress:
                self.progress(
                    "epoch",
                    epoch + 1,
                    self.epochs,
                    {"loss": hist.loss[-1], "train_acc": hist.train_accuracy[-1], "val_acc": val},
                )
        hist.seconds = time.perf_counter() - t0
        return hist

    @torch.no_grad()
    def evaluate(self, stream: Iterable[Batch], labels: LabelStore) -> float:
        """Agreement with the teacher on the validation ids of ``stream`` (NaN if none)."""
        self.model.eval()
        correct = seen = 0
        for xb, yb in self._chunks(stream, labels, train=False):
            pred = self.model(xb.to(self.device).float()).argmax(1).cpu()
            correct += int((pred == yb).sum())
            seen += len(yb)
        return correct / seen if seen else float("nan")


# ---------------------------------------------------------------- labelling
#: How training, fine-tuning and the prediction passes lay out a CPU model and its batches: NHWC
#: (``torch.channels_last``). Measured: prediction
#: 1.6-2.5x faster than NCHW for ``small_cnn`` with no label changed on the 797 + 1,500 private records of
#: six students (digits and MNIST, 3 seeds); ``torch.compile`` was slower than it and int8 dynamic
#: quantization changed 2-8 labels while saving nothing. An optimiser step is about 1.4x faster; the
#: float sums run in another order, so a student trains to other weights, and utility over 6 seeds on
#: digits and MNIST stayed within noise. Reports name it
#: (``TransferResult.inference``).
CPU_LAYOUT = "channels_last"


def compute_layout(device: torch.device | str) -> str:
    """The memory layout a student trains and predicts in on ``device``: :data:`CPU_LAYOUT` on the CPU, else NCHW."""
    return CPU_LAYOUT if torch.device(device).type == "cpu" else "contiguous"


def to_compute_layout(model: nn.Module, device: torch.device | str) -> nn.Module:
    """``model``, converted in place to :func:`compute_layout` on ``device`` (values unchanged)."""
    return model.to(memory_format=torch.channels_last) if compute_layout(device) == "channels_last" else model


def batch_in_layout(x: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A 4-D batch ``x`` in :func:`compute_layout` on ``device`` (values unchanged); other tensors as they are."""
    if x.dim() == 4 and compute_layout(device) == "channels_last":
        return x.contiguous(memory_format=torch.channels_last)
    return x


@torch.no_grad()
def predict_proba(
    model: nn.Module, records: torch.Tensor | RecordSource, *, batch_size: int = 512, device: str = "auto"
) -> torch.Tensor:
    """Softmax probabilities (float32 ``(N, K)``, rows in [0, 1] summing to 1) for clean records, locally.

    ``records``: ``(N, C, H, W)`` as a tensor or a :class:`~ldpclient.io.records.RecordSource`
    (read ``batch_size`` records at a time). A copy of ``model`` in :func:`compute_layout` runs the
    pass; ``model`` itself is left as it was.
    """
    if isinstance(records, torch.Tensor):
        if records.dim() != 4:
            raise ValueError("predict needs a (N, C, H, W) tensor of records")
        records = TensorRecords(records.float())
    if len(records.record_shape) != 3:
        raise ValueError(f"predict needs (C, H, W) records, got shape {records.record_shape}")
    dev = select_device(device)
    model = model.to(dev).eval()
    runner = to_compute_layout(copy.deepcopy(model), dev) if compute_layout(dev) == "channels_last" else model
    out: torch.Tensor | None = None  # filled in place: kept per-batch outputs would pin transient buffers in the heap
    for idx, x in iter_batches(records, batch_size):
        x = batch_in_layout(x.to(dev), dev)
        probs = torch.softmax(runner(x), dim=1).float().cpu()
        if out is None:
            out = torch.empty((len(records), probs.shape[1]), dtype=torch.float32)
        out[int(idx[0]) : int(idx[-1]) + 1] = probs
    return out if out is not None else torch.empty(0, 0)


@torch.no_grad()
def predict(
    model: nn.Module, records: torch.Tensor | RecordSource, *, batch_size: int = 512, device: str = "auto"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels (int64 ``(N,)``) and confidences (softmax max, float32 in [0, 1]) for clean records.

    Runs locally on the private records ``(N, C, H, W)`` in the teacher's value range
    (a tensor or a :class:`~ldpclient.io.records.RecordSource`).
    """
    probs = predict_proba(model, records, batch_size=batch_size, device=device)
    if probs.numel() == 0:
        return torch.empty(0, dtype=torch.int64), torch.empty(0)
    conf, labels = probs.max(dim=1)
    return labels.long(), conf


# ---------------------------------------------------------------- checkpoints
#: The newest checkpoint schema this version reads and writes (``"schema"`` in the file): 1 before it was written
#: there, 2 one student (``state_dict``), 3 several students read as one (``members``: their state dicts).
CHECKPOINT_SCHEMA = 3


class StudentMean(nn.Module):
    """Several students read as one model: its output is the log of their mean softmax, so that its softmax
    (:func:`predict_proba`) is the mean of theirs, which is how a run with ``students > 1`` labels (before any
    prior step). ``members``: the students, each mapping ``(N, C, H, W)`` to ``(N, K)`` logits."""

    def __init__(self, members: Iterable[nn.Module]) -> None:
        super().__init__()
        self.members = nn.ModuleList(members)
        if not len(self.members):
            raise ValueError("StudentMean needs at least one student")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logs = torch.stack([torch.log_softmax(m(x), dim=1) for m in self.members])
        return torch.logsumexp(logs, dim=0) - float(np.log(len(self.members)))


def save_checkpoint(
    path: str | Path, model: nn.Module, name: str, config: dict[str, object], extra: dict | None = None
) -> None:
    """Save ``{"schema", "student": name, "config": factory kwargs, "state_dict": ..., "extra": ...}``; a
    :class:`StudentMean` (``model`` of several students, each a ``name`` built from ``config``) is saved as
    ``"members"``, one state dict each, under schema 3. One student is written as schema 2, which ldpclient
    versions before the ``members`` key read too.

    Only tensors and plain Python values are stored, so :func:`load_checkpoint` can
    use ``torch.load(weights_only=True)``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    members = list(model.members) if isinstance(model, StudentMean) else [model]
    states = [{k: v.detach().cpu() for k, v in m.state_dict().items()} for m in members]
    blob: dict[str, object] = {"schema": 2 if len(states) == 1 else 3, "student": name, "config": dict(config),
                            "extra": dict(extra or {})}
    blob.update({"state_dict": states[0]} if len(states) == 1 else {"members": states})
    atomic_torch_save(path, blob)


def load_checkpoint(path: str | Path, *, device: str = "cpu") -> tuple[nn.Module, dict[str, object]]:
    """Rebuild the student from a checkpoint (safe load: ``weights_only=True``): one student, or a
    :class:`StudentMean` of the several a run with ``students > 1`` saved.

    Returns ``(model, info)`` with ``info`` holding ``student``, ``config`` and ``extra``.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint not found: {path}")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # corrupted or unsafe pickle
        raise ValueError(f"cannot load checkpoint {path}: {exc}") from None
    if not isinstance(blob, dict) or "student" not in blob or ("state_dict" not in blob and "members" not in blob):
        raise ValueError(f"{path} is not an ldpclient student checkpoint")
    from ..state import check_schema

    check_schema("student checkpoint", path, blob.get("schema", 1), CHECKPOINT_SCHEMA)
    states = blob["members"] if "members" in blob else [blob["state_dict"]]
    if not isinstance(states, list) or not states or not all(isinstance(st, dict) for st in states):
        raise ValueError(f"{path} is not an ldpclient student checkpoint")
    models = []
    for state in states:
        with torch.random.fork_rng(devices=[]):  # the init draws are overwritten by the weights: keep them local
            model = build_student(blob["student"], **blob.get("config", {}))
        try:
            model.load_state_dict(state)
        except RuntimeError:
            raise ValueError(f"{path}: its weights do not fit the {blob['student']} student built from its config "
                             "(saved by another version of ldpclient?)") from None
        models.append(model)
    model = models[0] if "state_dict" in blob else StudentMean(models)
    return model.to(select_device(device)), {k: blob.get(k) for k in ("student", "config", "extra")}


__all__ = [
    "STUDENTS",
    "LabelStore",
    "SmallCNN",
    "StudentAdam",
    "StudentMean",
    "TrainHistory",
    "Trainer",
    "build_student",
    "load_checkpoint",
    "mobilenet_v2",
    "predict",
    "resnet18",
    "save_checkpoint",
    "select_device",
    "small_cnn",
    "small_resnet",
    "torchscript",
    "validation_mask",
]
