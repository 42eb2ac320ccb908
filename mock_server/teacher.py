"""The mock teacher's model: a small CNN (trained at start-up, cached, or loaded) or a trivial rule.

Inputs everywhere are float32 ``(N, C, H, W)`` in the teacher's value range ``[0, 1]``
(the HTTP layer clips to it and scales UINT8 bytes before calling ``predict``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ldpclient.transfer.affine import flip_crop

from .config import ServerConfig

ARCH = "small_cnn_v1"
#: Checkpoint name of each ``--arch`` (part of the cache key: a new training recipe gets a new name).
ARCHS = {"small_cnn": ARCH, "resnet": "resnet_flipcrop_v1"}
CHECKPOINT_FORMAT = 1
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
#: Training batch size and learning rate of the CNN teacher (fixed: part of the cache key via ARCH).
_BATCH = 32
_LR = 3e-3


class SmallCNN(nn.Module):
    """conv3x3(width)-ReLU-maxpool2 - conv3x3(2*width)-ReLU-maxpool2-adaptive-avgpool(4) - fc(64) - fc(classes).

    Works for any input side >= 2 (8x8 digits, 28x28, larger folders).
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, ceil_mode=True),
            nn.AdaptiveAvgPool2d(4),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(2 * width * 16, 64), nn.ReLU(), nn.Linear(64, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


@dataclass
class TeacherModel:
    """A served model: what it expects, what it returns, and how good it is on clean data.

    ``accuracy`` is the clean top-1 accuracy on ``held_out`` held-out images (None
    when no labelled held-out data exists, e.g. a foreign checkpoint).
    """

    arch: str
    input_shape: tuple[int, int, int]
    class_names: tuple[str, ...]
    predict_fn: Callable[[np.ndarray], np.ndarray]
    source: str
    accuracy: float | None = None
    held_out: int = 0
    module: nn.Module | None = None
    value_range: tuple[float, float] = (0.0, 1.0)
    #: class probabilities for a model that is not a network (None: certainty in the predicted class)
    proba_fn: Callable[[np.ndarray], np.ndarray] | None = None

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Hard labels int64 ``(N,)`` for float32 ``(N, C, H, W)`` in ``value_range``."""
        if x.ndim != 4 or tuple(x.shape[1:]) != self.input_shape:
            raise ValueError(f"expected (N, {', '.join(map(str, self.input_shape))}), got {tuple(x.shape)}")
        return self.predict_fn(x)

    def proba(self, x: np.ndarray) -> np.ndarray:
        """Class probabilities float64 ``(N, K)`` for ``x`` as :meth:`predict` takes it: the network's softmax,
        or certainty in the predicted class for a model without one."""
        if self.module is None:
            return self.proba_fn(x) if self.proba_fn is not None else np.eye(self.num_classes)[self.predict(x)]
        if x.ndim != 4 or tuple(x.shape[1:]) != self.input_shape:
            raise ValueError(f"expected (N, {', '.join(map(str, self.input_shape))}), got {tuple(x.shape)}")
        with torch.inference_mode():
            logits = self.module(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)))
        return torch.softmax(logits.double(), dim=1).numpy()

    def summary(self) -> str:
        c, h, w = self.input_shape
        acc = "n/a" if self.accuracy is None else f"{self.accuracy:.3f} on {self.held_out} held-out images"
        return f"teacher {self.arch} ({c}x{h}x{w}, {self.num_classes} classes) from {self.source}; clean accuracy {acc}"


def _torch_predict(module: nn.Module) -> Callable[[np.ndarray], np.ndarray]:
    module.eval()

    def predict(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))).argmax(1).numpy()

    return predict


def trivial_teacher(input_shape: tuple[int, int, int], num_classes: int) -> TeacherModel:
    """Label = mean-intensity bucket: ``min(K-1, floor(mean(x) * K))`` for x in [0, 1].

    No training, microseconds per image: for benchmarks of the HTTP layer and fast tests.
    """

    def predict(x: np.ndarray) -> np.ndarray:
        means = x.reshape(len(x), -1).mean(axis=1, dtype=np.float64) if len(x) else np.zeros(0)
        return np.clip(np.floor(means * num_classes), 0, num_classes - 1).astype(np.int64)

    def proba(x: np.ndarray) -> np.ndarray:  # surer the nearer the mean is to its bucket's middle
        means = x.reshape(len(x), -1).mean(axis=1, dtype=np.float64) if len(x) else np.zeros(0)
        logits = -4.0 * np.abs(means[:, None] * num_classes - (np.arange(num_classes) + 0.5))
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    names = tuple(str(i) for i in range(num_classes))
    return TeacherModel("trivial", input_shape, names, predict, "a fixed rule (mean-intensity bucket)",
                        proba_fn=proba)


def state_root(config: ServerConfig) -> Path:
    """Root of the mock teacher's cache: ``config.state_dir`` or ldpclient's default state dir."""
    if config.state_dir:
        return Path(config.state_dir).expanduser()
    from ldpclient.state import default_state_dir

    return default_state_dir()


def _cache_path(config: ServerConfig, dataset_key: str) -> Path:
    key = json.dumps(
        {"arch": ARCHS[config.arch], "dataset": dataset_key, "size": config.image_size, "channels": config.channels,
         "seed": config.seed, "epochs": config.epochs, "torch": torch.__version__.split("+")[0]},
        sort_keys=True,
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return state_root(config) / "mock_teacher" / f"{digest}.pt"


def _accuracy(predict: Callable[[np.ndarray], np.ndarray], x: torch.Tensor, y: torch.Tensor) -> float:
    if len(y) == 0:
        return float("nan")
    pred = np.concatenate([predict(x[i : i + 512].numpy()) for i in range(0, len(x), 512)])
    return float((pred == y.numpy()).mean())


def train_cnn(x: torch.Tensor, y: torch.Tensor, num_classes: int, *, epochs: int, seed: int) -> SmallCNN:
    """Train ``SmallCNN`` on float32 images in [0, 1] with Adam; deterministic for a seed.

    Runs on one torch thread (restored afterwards): the same weights on any machine,
    and no thread contention on a busy 2-core box, where one thread is also fastest
    for a model this small.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(x, y, num_classes, epochs=epochs, seed=seed)
    finally:
        torch.set_num_threads(threads)


def _resnet(in_channels: int, num_classes: int) -> nn.Module:
    """The ``resnet`` teacher: ldpclient's ``small_resnet`` at width 32."""
    from ldpclient.transfer.student import small_resnet

    return small_resnet(num_classes=num_classes, in_channels=in_channels, image_size=32, width=32)


def train_resnet(x: torch.Tensor, y: torch.Tensor, num_classes: int, *, epochs: int, seed: int,
                 device: str = "cpu") -> nn.Module:
    """Train the ``resnet`` teacher on float32 images in [0, 1]: SGD (momentum 0.9, weight decay 5e-4), a
    one-cycle learning rate peaking at 0.1, batches of 128, each image flipped at random and shifted by up to
    an eighth of its side. On torch's threads (a larger model than ``SmallCNN``); deterministic for a seed and a
    thread count. ``device`` (e.g. ``"cuda"``) computes the steps there; the order, flips and shifts are drawn
    on the CPU whatever the device, and the model comes back on the CPU."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _resnet(x.shape[1], num_classes).to(device).to(memory_format=torch.channels_last)
        gen = torch.Generator().manual_seed(seed)
        batch = 128
        steps = epochs * -(-len(x) // batch)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
        schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=steps)
        pad = max(1, int(x.shape[-1]) // 8)
        model.train()
        for _ in range(epochs):
            order = torch.randperm(len(x), generator=gen)
            for i in range(0, len(x), batch):
                idx = order[i : i + batch]
                xb = flip_crop(x[idx], pad, generator=gen).to(device, memory_format=torch.channels_last)
                opt.zero_grad(set_to_none=True)
                nn.functional.cross_entropy(model(xb), y[idx].to(device)).backward()
                opt.step()
                schedule.step()
    model.eval()
    return model.to("cpu").to(memory_format=torch.contiguous_format)


def _train(x: torch.Tensor, y: torch.Tensor, num_classes: int, *, epochs: int, seed: int) -> SmallCNN:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = SmallCNN(x.shape[1], num_classes)
        gen = torch.Generator().manual_seed(seed)
        opt = torch.optim.Adam(model.parameters(), lr=_LR)
        model.train()
        for _ in range(epochs):
            order = torch.randperm(len(x), generator=gen)
            for i in range(0, len(x), _BATCH):
                idx = order[i : i + _BATCH]
                opt.zero_grad(set_to_none=True)
                nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
                opt.step()
    model.eval()
    return model


def _load_folder(folder: Path, size: int, channels: int) -> tuple[torch.Tensor, torch.Tensor, tuple[str, ...], str]:
    """Images of ``folder/class_name/*.png`` resized to ``size``; returns (x, y, class_names, content digest)."""
    from PIL import Image, UnidentifiedImageError

    if not folder.is_dir():
        raise ValueError(f"train folder {folder} is not a directory")
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(classes) < 2:
        raise ValueError(f"train folder {folder} needs at least two class sub-folders (class_name/*.png)")
    digest = hashlib.sha256()
    images, labels = [], []
    for label, name in enumerate(classes):
        files = sorted(p for p in (folder / name).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
        if not files:
            raise ValueError(f"class folder {folder / name} has no images ({', '.join(IMAGE_SUFFIXES)})")
        for path in files:
            data = path.read_bytes()
            digest.update(f"{name}/{path.name}:{len(data)}:".encode())
            digest.update(data)
            try:
                with Image.open(path) as im:
                    im = im.convert("L" if channels == 1 else "RGB").resize(  # type: ignore[assignment]
                        (size, size), Image.Resampling.BILINEAR
                    )
                    arr = np.asarray(im, dtype=np.float32) / 255.0
            except (UnidentifiedImageError, OSError) as exc:
                raise ValueError(f"cannot read image {path}: {exc}") from exc
            images.append(arr[None] if channels == 1 else arr.transpose(2, 0, 1))
            labels.append(label)
    x = torch.from_numpy(np.stack(images)).contiguous()
    return x, torch.tensor(labels, dtype=torch.int64), tuple(classes), digest.hexdigest()


def _trained_teacher(
    config: ServerConfig,
    dataset_key: str,
    load: Callable[[], tuple[torch.Tensor, torch.Tensor, tuple[str, ...]]],
    split: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    label: str,
) -> TeacherModel:
    """Train on ``load()`` (or restore the cached weights for the same dataset/size/seed/arch)."""
    cache = None if config.no_cache else _cache_path(config, dataset_key)
    if cache is not None and cache.exists():
        try:
            return load_checkpoint(cache, config, source=f"{label} (cached weights {cache})")
        except (ValueError, RuntimeError, OSError):
            pass  # a corrupt cache entry is retrained and overwritten below
    x, y, class_names = load()
    train_idx, test_idx = split(len(x))
    t0 = time.perf_counter()
    train = train_resnet if config.arch == "resnet" else train_cnn
    module = train(x[train_idx], y[train_idx], len(class_names), epochs=config.epochs, seed=config.seed)
    seconds = time.perf_counter() - t0
    predict = _torch_predict(module)
    acc = _accuracy(predict, x[test_idx], y[test_idx])
    teacher = TeacherModel(
        ARCHS[config.arch], (int(x.shape[1]), int(x.shape[2]), int(x.shape[3])), class_names, predict,
        f"{label} (trained on {len(train_idx)} images in {seconds:.1f} s)", acc, len(test_idx), module,
    )
    if cache is not None:
        save_checkpoint(teacher, cache)
    return teacher


def digits_teacher(config: ServerConfig) -> TeacherModel:
    """Small CNN on the bundled digits at ``image_size`` (split ``DIGITS_TEACHER_SPLIT`` with ``seed``)."""
    from ldpclient.io.datasets import DIGITS_CLASS_NAMES, DIGITS_TEACHER_SPLIT, load_digits_images, split_indices

    if config.channels != 1:
        raise ValueError("the digits teacher has 1 channel; drop --channels")

    def load() -> tuple[torch.Tensor, torch.Tensor, tuple[str, ...]]:
        x, y = load_digits_images(config.image_size)
        return x, y, DIGITS_CLASS_NAMES

    def split(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        train, test, _unseen = split_indices(n, DIGITS_TEACHER_SPLIT, config.seed)
        return train, test

    return _trained_teacher(config, "sklearn-digits", load, split, f"digits {config.image_size}x{config.image_size}")


def folder_teacher(config: ServerConfig) -> TeacherModel:
    """``config.arch`` trained on ``train_folder`` (class_name/*.png), 80 % train / 20 % held out (seeded)."""
    from ldpclient.io.datasets import split_indices

    folder = Path(config.train_folder or "").expanduser()
    x, y, names, digest = _load_folder(folder, config.image_size, config.channels)

    def split(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        train, test = split_indices(n, (0.8, 0.2), config.seed)
        return train, test

    return _trained_teacher(config, f"folder:{digest}", lambda: (x, y, names), split, f"folder {folder}")


def save_checkpoint(teacher: TeacherModel, path: str | os.PathLike[str]) -> Path:
    """Write a CNN teacher as a plain dict of tensors and primitives (loadable with ``weights_only=True``).

    Written atomically (temporary file + rename). Raises ValueError for the trivial teacher.
    """
    if teacher.module is None:
        raise ValueError(f"the {teacher.arch} teacher has no weights to save")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": CHECKPOINT_FORMAT, "arch": teacher.arch, "state_dict": teacher.module.state_dict(),
        "input_shape": list(teacher.input_shape), "class_names": list(teacher.class_names),
        "accuracy": teacher.accuracy, "held_out": teacher.held_out,
    }
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str | os.PathLike[str], config: ServerConfig, *, source: str | None = None) -> TeacherModel:
    """Load a ``SmallCNN`` or ``resnet`` checkpoint safely (``torch.load(weights_only=True)``).

    Accepts this module's format (``save_checkpoint``, which names the arch) or a bare ``SmallCNN`` state_dict;
    for a bare one the input side is ``config.image_size`` and channels/classes come
    from the weight shapes. A 1-channel 10-class model without a stored accuracy is
    evaluated on the digits held-out split at its input size.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"checkpoint {path} does not exist")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # unpickling errors come in many types
        raise ValueError(f"cannot load checkpoint {path} safely: {exc}") from exc
    if not isinstance(blob, dict):
        raise ValueError(f"checkpoint {path} holds a {type(blob).__name__}, expected a dict")
    meta = blob if "state_dict" in blob else {}
    state = blob.get("state_dict", blob)
    arch = meta.get("arch", ARCH)
    if arch not in ARCHS.values():
        raise ValueError(f"checkpoint {path} has arch {arch!r}; this server runs {', '.join(ARCHS.values())}")
    try:
        if arch == ARCH:
            first, last = state["features.0.weight"], state["classifier.3.weight"]
            module: nn.Module = SmallCNN(first.shape[1], last.shape[0], first.shape[0])
        else:
            first, last = state["0.weight"], state["8.weight"]
            module = _resnet(first.shape[1], last.shape[0])
        module.load_state_dict(state)
    except (KeyError, RuntimeError, AttributeError, IndexError) as exc:
        raise ValueError(f"checkpoint {path} is not a {arch} state_dict: {exc}") from exc
    in_ch, classes = int(first.shape[1]), int(last.shape[0])
    shape = tuple(int(v) for v in meta.get("input_shape", (in_ch, config.image_size, config.image_size)))
    names = tuple(str(n) for n in meta.get("class_names", range(classes)))
    if len(shape) != 3 or shape[0] != in_ch or len(names) != classes:
        raise ValueError(f"checkpoint {path}: metadata does not match its weights")
    predict = _torch_predict(module)
    acc, held_out = meta.get("accuracy"), int(meta.get("held_out", 0))
    if acc is None and in_ch == 1 and classes == 10:
        from ldpclient.io.datasets import DIGITS_TEACHER_SPLIT, load_digits_images, split_indices

        if shape[1] == shape[2]:
            x, y = load_digits_images(shape[1])
            test = split_indices(len(x), DIGITS_TEACHER_SPLIT, config.seed)[1]
            acc, held_out = _accuracy(predict, x[test], y[test]), len(test)
    return TeacherModel(arch, shape, names, predict, source or f"checkpoint {path}",
                        None if acc is None else float(acc), held_out, module)


def build_teacher(config: ServerConfig) -> TeacherModel:
    """The teacher ``config`` asks for (may train for a few seconds on first use; then cached)."""
    kind = config.teacher_kind
    if kind == "trivial":
        return trivial_teacher((config.channels, config.image_size, config.image_size), config.num_classes)
    if kind == "checkpoint":
        return load_checkpoint(config.checkpoint or "", config)
    if kind == "folder":
        return folder_teacher(config)
    return digits_teacher(config)
