"""In-process teacher: a torch module or any callable, behind the Teacher interface.

Useful for tests, for the demo, and for teachers you run yourself. It still only
accepts LDP queries (Release or Derived) and still goes through the same wire
encoding as a remote teacher, so what the model sees is exactly what a server
would see (e.g. UINT8-quantised bytes).
"""

from __future__ import annotations

import threading
from typing import Callable, Sequence, Union

import numpy as np
import torch

from .base import Queries, Teacher, TeacherMetadata
from .billing import BillingGuard
from .encoding import INPUT_DATATYPES, from_wire_uint8, to_wire
from .result import InferResult, validate_labels

ModelLike = Union[torch.nn.Module, Callable[[torch.Tensor], object]]


class LocalTeacher(Teacher):
    """A teacher that runs ``model`` in this process.

    ``model``: a ``torch.nn.Module`` (put in eval mode, run under ``no_grad``) or a
    callable taking a float32 tensor ``(B, *input_shape)`` in ``value_range`` units
    and returning either int labels ``(B,)`` or scores/logits ``(B, num_classes)``
    (argmax taken here). ``input_shape``: per-query shape without the batch axis.
    ``num_classes``: labels must lie in ``[0, num_classes)``. ``datatype``: the
    wire datatype simulated before the model sees the queries (``"UINT8"``
    quantises to 0..255 and back, as a byte-taking server would). ``max_batch_size``:
    largest chunk handed to the model at once (None = whole batch).
    """

    def __init__(
        self,
        model: ModelLike,
        input_shape: Sequence[int],
        num_classes: int,
        *,
        datatype: str = "FP32",
        value_range: tuple[float, float] = (0.0, 1.0),
        class_names: Sequence[str] | None = None,
        max_batch_size: int | None = None,
        name: str = "local",
        device: Union[str, torch.device] = "cpu",
    ) -> None:
        if not callable(model):
            raise TypeError(f"LocalTeacher needs a torch module or callable, got {type(model).__name__}")
        if int(num_classes) < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        if datatype not in INPUT_DATATYPES:
            raise ValueError(f"datatype must be one of {INPUT_DATATYPES}, got {datatype!r}")
        if class_names is not None and len(class_names) != int(num_classes):
            raise ValueError(f"{len(class_names)} class_names for num_classes={num_classes}")
        if max_batch_size is not None and int(max_batch_size) < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self._model = model
        self._device = torch.device(device)
        self._lock = threading.Lock()  # one forward pass at a time (modules are not re-entrant-safe)
        if isinstance(model, torch.nn.Module):
            model.eval()
            model.to(self._device)
        self._meta = TeacherMetadata(
            name=name,
            input_shape=tuple(int(s) for s in input_shape),
            datatype=datatype,
            num_classes=int(num_classes),
            class_names=tuple(class_names) if class_names is not None else None,
            max_batch_size=int(max_batch_size) if max_batch_size is not None else None,
            value_range=(float(value_range[0]), float(value_range[1])),
        )
        self.journal_scope = f"local:{name}"

    def metadata(self) -> TeacherMetadata:
        return self._meta

    def classify(self, queries: Queries) -> torch.Tensor:
        """Hard labels int64 ``(Q,)``; raw tensors raise TypeError."""
        return self.infer(queries).labels

    def infer(
        self, queries: Queries, *, request_id: str | None = None, billing: BillingGuard | None = None
    ) -> InferResult:
        """Labels plus accounting (``billed`` is None: nothing is billed locally)."""
        meta = self._meta
        wire = to_wire(queries, meta)  # TypeError for raw tensors, ValueError for wrong shapes
        n = wire.shape[0]
        step = meta.max_batch_size or max(n, 1)
        out: list[torch.Tensor] = []
        chunks = 0
        for start in range(0, n, step):
            part = wire[start : start + step]
            if meta.datatype == "UINT8":
                part = from_wire_uint8(part, meta.value_range)
            x = torch.from_numpy(np.ascontiguousarray(part, dtype=np.float32)).to(self._device)
            with self._lock, torch.no_grad():
                y = self._model(x)
            out.append(_labels_from_output(y, part.shape[0], meta))
            chunks += 1
        labels = torch.cat(out) if out else torch.zeros(0, dtype=torch.int64)
        return InferResult(labels=labels, requests=chunks, billed=None)

    def __repr__(self) -> str:
        m = self._meta
        return f"LocalTeacher(name={m.name!r}, input_shape={m.input_shape}, num_classes={m.num_classes})"


def _labels_from_output(y: object, n: int, meta: TeacherMetadata) -> torch.Tensor:
    if isinstance(y, torch.Tensor):
        t = y.detach().cpu()
        if t.is_floating_point() and t.ndim == 2:
            if t.shape[1] != meta.num_classes:
                from .errors import MalformedResponse

                raise MalformedResponse(
                    f"local teacher {meta.name!r} returned {t.shape[1]} scores per query, "
                    f"expected num_classes={meta.num_classes}",
                    transient=False,
                )
            t = t.argmax(dim=1)
        return validate_labels(t.numpy(), n, meta.num_classes, meta.name)
    return validate_labels(np.asarray(y), n, meta.num_classes, meta.name)
