"""A student that starts from pretrained weights the user has on disk: the file's network, frozen, as a feature
extractor, and a new linear head for the teacher's classes trained on its answers.

Two kinds of file are read; nothing is ever downloaded:

* **a torchvision state dict** of ``resnet18`` or ``mobilenet_v2``: the file
  ``torchvision.models.resnet18(weights="DEFAULT")`` caches (``~/.cache/torch/hub/checkpoints/resnet18-*.pth``),
  copied from a connected machine. Its classifier layer is dropped. Images are resized to 224x224 (bilinear,
  antialiased), grey ones repeated into three channels, and normalised with ImageNet's mean and deviation, as
  those weights expect: the photos are resized for the backbone, not the backbone for the photos.
* **a TorchScript feature extractor** (``torch.jit.save``; student name ``torchscript``), a user's own model: it
  takes RGB ``(N, 3, S, S)`` in ``[0, 1]`` and returns features ``(N, D)``, its normalisation inside. ``S`` is
  ``input_size`` in the JSON extra file :data:`METADATA_FILE` saved with it
  (``torch.jit.save(m, path, _extra_files={"ldpclient.json": '{"input_size": 64}'})``); a file without it is
  refused.

A file that is missing, unreadable, of another architecture or that fails on its input size is refused in one
line naming what was expected (:class:`WeightsError`, a ValueError), when the student is first built: the run
builds one before anything is noised or sent. :func:`weights_info` names the file a student started from (its
name and SHA-256), for the report.
"""

from __future__ import annotations

import hashlib
import json
import warnings
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..names import PRETRAINED_STUDENTS

#: The JSON extra file of a TorchScript feature extractor that says its input side (``{"input_size": S}``).
METADATA_FILE = "ldpclient.json"
#: What torchvision's ImageNet weights expect: the side of the square input, per-channel mean and deviation.
TORCHVISION_INPUT = 224
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: The student name of a TorchScript feature extractor (the torchvision architectures keep their own names).
TORCHSCRIPT = PRETRAINED_STUDENTS[-1]
#: Largest input side a weights file may ask for (a bigger one would cost more memory than any student here).
MAX_INPUT_SIZE = 1024
#: Largest weights file read (ResNet-18's is 45 MB): a file past it is refused before it is read into memory.
MAX_FILE_BYTES = 4 * 2**30


class WeightsError(ValueError):
    """A weights file that cannot start the student; the message is one line naming what was expected."""


@dataclass(frozen=True)
class WeightsInfo:
    """Which file started a student: its ``name`` (no folder), ``sha256`` (hex), ``architecture`` (a torchvision
    name or :data:`TORCHSCRIPT`), the ``input_size`` (pixels a side) and ``features`` (per image) of its
    extractor."""

    name: str
    sha256: str
    architecture: str
    input_size: int
    features: int

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "sha256": self.sha256, "architecture": self.architecture,
                "input_size": self.input_size, "features": self.features}


def _torchvision_body(architecture: str) -> tuple[nn.Module, int]:
    """The torchvision network without its classifier (random init) and its features per image."""
    from torchvision import models

    if architecture == "resnet18":
        net = models.resnet18(weights=None)
        net.fc = nn.Identity()
        return net, 512
    net = models.mobilenet_v2(weights=None)
    net.classifier = nn.Identity()
    return net, 1280


#: The torchvision architectures a state dict may hold, and the layers of their classifiers (dropped).
ARCHITECTURES: dict[str, tuple[str, ...]] = {"resnet18": ("fc.",), "mobilenet_v2": ("classifier.",)}


@dataclass(frozen=True)
class _Loaded:
    body: nn.Module
    info: WeightsInfo
    normalise: bool


#: The files read (by path, size and modification time), the last four.
_LOADED: dict[tuple[str, int, int], _Loaded] = {}


def _first_line(exc: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0][:160]}" if lines else type(exc).__name__


def _size(n: int) -> str:
    """A file size in words: bytes, MiB or GiB."""
    return f"{n} bytes" if n < 2**20 else f"{n / 2**20:.0f} MiB" if n < 2**30 else f"{n / 2**30:.1f} GiB"


def _fail(path: Path, why: str) -> WeightsError:
    return WeightsError(f"student weights {path.name}: {why}")


def _expected(architecture: str | None) -> str:
    if architecture in ARCHITECTURES:
        return f"a torchvision {architecture} state dict"
    if architecture == TORCHSCRIPT:
        return "a TorchScript feature extractor"
    return f"a torchvision state dict ({', '.join(ARCHITECTURES)}) or a TorchScript feature extractor"


def _is_torchscript(path: Path) -> bool:
    """Whether ``path`` is a TorchScript archive (a zip with a ``code/`` folder); torch.save's zips have none."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any("/code/" in f"/{name}" for name in archive.namelist())


def _state_dict(path: Path, architecture: str | None) -> dict[str, torch.Tensor]:
    with path.open("rb") as f:
        head = f.read(4)
    if head == b"PK\x03\x04" and not zipfile.is_zipfile(path):
        raise _fail(path, f"is cut short or damaged (a zip archive without its end); expected "
                          f"{_expected(architecture)}")
    if head[:1] != b"\x80" and not zipfile.is_zipfile(path):  # b"\x80": a pickle, torch.save's format before zips
        raise _fail(path, f"is not a PyTorch file (neither torch.save's zip nor a pickle); expected "
                          f"{_expected(architecture)}")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # not a torch file, truncated, or a pickle that is not plain tensors
        raise _fail(path, f"cannot be read as {_expected(architecture)} ({_first_line(exc)})") from None
    if isinstance(blob, dict) and isinstance(blob.get("state_dict"), dict):
        blob = blob["state_dict"]
    if not isinstance(blob, dict) or not blob or not all(isinstance(v, torch.Tensor) for v in blob.values()):
        raise _fail(path, f"holds no state dict of tensors; expected {_expected(architecture)}")
    return blob


def _shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(d) for d in t.shape) + "]"


def _mismatch(state: dict[str, torch.Tensor], architecture: str, body: nn.Module) -> str | None:
    """Where ``state`` differs from the layers of ``body``, an ``architecture`` network (None: it fits), as one
    clause."""
    want = body.state_dict()
    head = ARCHITECTURES[architecture]
    have = {k: v for k, v in state.items() if not k.startswith(head)}
    missing = [k for k in want if k not in have]
    extra = [k for k in have if k not in want]
    shapes = [k for k in want if k in have and have[k].shape != want[k].shape]
    if shapes:
        k = shapes[0]
        return (f"layer {k} is {_shape(have[k])} in the file, {architecture} expects {_shape(want[k])} "
                f"({len(shapes)} layer{'s' if len(shapes) > 1 else ''} of other shapes; "
                f"{architecture} takes RGB images resized to {TORCHVISION_INPUT}x{TORCHVISION_INPUT})")
    if missing or extra:
        parts = ([f"{len(missing)} of its {len(want)} layers missing (first {missing[0]})"] if missing else []) + (
            [f"{len(extra)} layers it does not have (first {extra[0]})"] if extra else [])
        return f"not {architecture} weights: {', '.join(parts)}"
    return None


def _load_state_dict(path: Path, architecture: str | None) -> tuple[nn.Module, str, int]:
    state = _state_dict(path, architecture)
    candidates = [architecture] if architecture in ARCHITECTURES else list(ARCHITECTURES)
    if architecture is not None and architecture not in ARCHITECTURES:
        raise _fail(path, f"is a state dict; the {architecture} student takes {_expected(architecture)}")
    whys = []
    for arch in candidates:
        body, features = _torchvision_body(arch)
        why = _mismatch(state, arch, body)
        if why is None:
            body.load_state_dict({k: v for k, v in state.items() if not k.startswith(ARCHITECTURES[arch])})
            return body, arch, features
        whys.append(why)
    if len(candidates) == 1:
        raise _fail(path, whys[0])
    raise _fail(path, f"fits none of {', '.join(ARCHITECTURES)} ({whys[0]})")


def _script_metadata(path: Path, extra: dict[str, str]) -> int:
    text = extra.get(METADATA_FILE) or ""
    if not text:
        raise _fail(path, f"says no input size: save it with torch.jit.save(model, path, _extra_files="
                          f'{{"{METADATA_FILE}": \'{{"input_size": <pixels>}}\'}})')
    try:
        meta = json.loads(text)
        size = meta["input_size"]
    except (ValueError, KeyError, TypeError):
        raise _fail(path, f'its {METADATA_FILE} is not {{"input_size": <pixels>}}') from None
    if not isinstance(size, int) or isinstance(size, bool) or not 8 <= size <= MAX_INPUT_SIZE:
        raise _fail(path, f"its {METADATA_FILE} input_size must be a whole number of pixels from 8 to "
                          f"{MAX_INPUT_SIZE}, got {size!r}")
    return size


def _load_script(path: Path) -> tuple[nn.Module, int, int]:
    extra = {METADATA_FILE: ""}
    try:
        with warnings.catch_warnings():  # torch marks TorchScript deprecated; it is the format users have
            warnings.simplefilter("ignore", FutureWarning)
            body = torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
    except Exception as exc:
        raise _fail(path, f"cannot be read as a TorchScript feature extractor ({_first_line(exc)})") from None
    size = _script_metadata(path, extra)
    said = f"its {METADATA_FILE} says input_size {size}"
    body.eval()
    try:
        with torch.no_grad():
            out = body(torch.zeros(2, 3, size, size))
    except Exception as exc:
        raise _fail(path, f"failed on RGB input (2, 3, {size}, {size}) ({said}): {_first_line(exc)}") from None
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != 2 or out.shape[1] < 1:
        got = _shape(out) if isinstance(out, torch.Tensor) else type(out).__name__
        raise _fail(path, f"returned {got} for RGB input (2, 3, {size}, {size}); a feature extractor returns "
                          "(N, features)")
    return body, size, int(out.shape[1])


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_weights(path: str | Path, architecture: str | None = None, *, sha256: str | None = None) -> _Loaded:
    """The frozen extractor in ``path`` and what it is (:class:`WeightsInfo`), read once per file and version
    (kept by path, size and modification time). ``architecture``: the student name it must be (None: whatever
    the file holds); ``sha256``: the digest it must have (a student rebuilt from a checkpoint: the file it
    started from). WeightsError (one line) when it cannot start a student."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise _fail(path, f"no such file ({path}); expected {_expected(architecture)}")
    stat = path.stat()
    if stat.st_size > MAX_FILE_BYTES:
        raise _fail(path, f"is {_size(stat.st_size)}, more than the {_size(MAX_FILE_BYTES)} a weights file may be; "
                          f"expected {_expected(architecture)}")
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _LOADED:
        _LOADED[key] = _load(path, architecture)
        if len(_LOADED) > 4:
            _LOADED.pop(next(iter(_LOADED)))
    loaded = _LOADED[key]
    if architecture is not None and loaded.info.architecture != architecture:
        loaded = _load(path, architecture)  # raises, naming where the file differs from ``architecture``
    if sha256 is not None and loaded.info.sha256 != sha256:
        raise _fail(path, f"has changed: the student started from the file of SHA-256 {sha256[:12]}..., this one "
                          f"is {loaded.info.sha256[:12]}...")
    return loaded


def _load(path: Path, architecture: str | None) -> _Loaded:
    if _is_torchscript(path):
        if architecture is not None and architecture != TORCHSCRIPT:
            raise _fail(path, f"is a TorchScript model, not {_expected(architecture)}: give the student "
                              f"{TORCHSCRIPT}")
        body, size, features = _load_script(path)
        arch, normalise = TORCHSCRIPT, False
    else:
        body, arch, features = _load_state_dict(path, architecture)
        size, normalise = TORCHVISION_INPUT, True
    for parameter in body.parameters():
        parameter.requires_grad_(False)
    return _Loaded(body.eval(), WeightsInfo(path.name, _digest(path), arch, size, features), normalise)


def weights_info(path: str | Path, architecture: str | None = None) -> WeightsInfo:
    """What the file at ``path`` is (:func:`load_weights`)."""
    return load_weights(path, architecture).info


#: Most bytes of features the extractors keep (:meth:`PretrainedStudent.features`), the oldest dropped first.
FEATURE_CACHE_BYTES = 512 * 2**20


class _FeatureCache:
    """Features by (weights digest, image digest), at most :data:`FEATURE_CACHE_BYTES` of them, least recently
    used dropped first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.bytes = 0
        self.rows: OrderedDict[tuple[str, bytes], torch.Tensor] = OrderedDict()

    def __contains__(self, key: tuple[str, bytes]) -> bool:
        return key in self.rows

    def get(self, key: tuple[str, bytes]) -> torch.Tensor:
        self.rows.move_to_end(key)
        return self.rows[key]

    def put(self, keys: list[tuple[str, bytes]], features: torch.Tensor) -> None:
        """Keep each row of ``features`` (float ``(len(keys), D)``) under its key, each in a storage of its own (so
        that dropping a row frees it); then drop the least recently used rows past the limit."""
        for key, row in zip(keys, features, strict=True):
            if key not in self.rows:  # an image twice in one batch is kept once
                self.rows[key] = row.clone()
                self.bytes += row.numel() * row.element_size()
        while self.bytes > self.limit and self.rows:
            _, old = self.rows.popitem(last=False)
            self.bytes -= old.numel() * old.element_size()


_FEATURES = _FeatureCache(FEATURE_CACHE_BYTES)


class _Prepare(nn.Module):
    """Records in ``value_range`` (``(N, C, H, W)``, C 1 or 3) to the extractor's input: [0, 1], RGB, resized to
    ``size`` a side, normalised with ImageNet's statistics when ``normalise``."""

    def __init__(self, size: int, value_range: tuple[float, float], normalise: bool) -> None:
        super().__init__()
        self.size = size
        self.low, self.span = float(value_range[0]), float(value_range[1] - value_range[0])
        self.mean: torch.Tensor
        self.std: torch.Tensor
        mean = torch.tensor(IMAGENET_MEAN if normalise else (0.0, 0.0, 0.0)).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD if normalise else (1.0, 1.0, 1.0)).view(1, 3, 1, 1)
        self.register_buffer("mean", mean, persistent=False)
        self.register_buffer("std", std, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x.float() - self.low) / self.span
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        if x.shape[-2:] != (self.size, self.size):
            x = nn.functional.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False,
                                          antialias=x.shape[-1] > self.size)
        return (x - self.mean) / self.std


class PretrainedStudent(nn.Module):
    """A frozen feature extractor (kept in eval mode, no gradients) and a trainable linear ``head``:
    ``(N, C, H, W)`` records in ``value_range`` to ``(N, num_classes)`` logits. :meth:`features` gives the
    extractor's output for the same records."""

    def __init__(self, loaded: _Loaded, num_classes: int, value_range: tuple[float, float]) -> None:
        super().__init__()
        self.prepare = _Prepare(loaded.info.input_size, value_range, loaded.normalise)
        self.backbone = loaded.body
        self.head = nn.Linear(loaded.info.features, num_classes)
        self.info = loaded.info

    def train(self, mode: bool = True) -> "PretrainedStudent":
        super().train(mode)
        self.backbone.eval()
        return self

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The frozen extractor's features of ``x`` (float ``(N, D)``, no gradient), each distinct image's
        computed once while :data:`FEATURE_CACHE_BYTES` keeps them (the queries come back every epoch, the
        records every pass)."""
        rows = x.detach().to("cpu", torch.float32).contiguous().numpy().reshape(len(x), -1)
        keys = [(self.info.sha256, hashlib.blake2b(row.tobytes(), digest_size=16).digest()) for row in rows]
        kept = {i: _FEATURES.get(key) for i, key in enumerate(keys) if key in _FEATURES}
        missing = [i for i in range(len(keys)) if i not in kept]
        if not missing:
            return torch.stack([kept[i] for i in range(len(keys))]).to(x.device)
        with torch.no_grad():
            fresh = self.backbone(self.prepare(x[missing])).float().cpu()
        out = torch.empty((len(keys), fresh.shape[1]), dtype=torch.float32)
        out[missing] = fresh
        for i, row in kept.items():
            out[i] = row
        _FEATURES.put([keys[i] for i in missing], fresh)  # after the batch is built: it may drop some of it
        return out.to(x.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def pretrained_student(architecture: str | None, weights: str | Path, *, num_classes: int, in_channels: int,
                       value_range: tuple[float, float] | list[float] = (0.0, 1.0),
                       weights_sha256: str | None = None) -> nn.Module:
    """The student ``architecture`` (None: the file's) started from the file ``weights`` (of digest
    ``weights_sha256``, when given) for records of ``in_channels`` in ``value_range``; WeightsError (one line)
    when the file cannot start it, ValueError for records it cannot take (not 1 or 3 channels)."""
    if in_channels not in (1, 3):
        raise ValueError(f"a student from pretrained weights takes grey or RGB images, not {in_channels} channels")
    lo, hi = (float(v) for v in value_range)
    if not hi > lo:
        raise ValueError(f"value_range must rise, got {list(value_range)}")
    loaded = load_weights(weights, architecture, sha256=weights_sha256)
    return PretrainedStudent(loaded, num_classes, (lo, hi))


__all__ = ["ARCHITECTURES", "METADATA_FILE", "PretrainedStudent", "TORCHSCRIPT", "WeightsError", "WeightsInfo",
           "load_weights", "pretrained_student", "weights_info"]
