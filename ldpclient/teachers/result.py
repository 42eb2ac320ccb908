"""What one teacher call returns besides labels, and the shared label checks.

A teacher that can decline to answer (a chat model saying it cannot tell, a refusal, a content-policy error on
one image, a vision API without a label that maps to a class) answers :data:`ABSTAINED` for that query: an
answer like any other (journaled, paid for when billed, never asked again), never trained on as a class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from .errors import MalformedResponse
from .retry import Waits

if TYPE_CHECKING:
    from .transport import CallInfo

#: The label of a query the teacher declined to answer (only from teachers whose metadata says ``abstains``).
ABSTAINED = -1


@dataclass
class InferResult:
    """Labels for one batch of queries plus accounting for the client.

    ``labels``: int64 ``(Q,)`` in ``[0, num_classes)``. ``requests``: HTTP requests
    that were answered (a batch larger than the teacher's max batch, or an image
    API taking one image per request, needs several). ``billed``: units (images)
    the server says it billed, summed over requests, or None when it did not say.
    ``bytes_sent``/``bytes_received``: body bytes on the wire (headers excluded).
    ``attempts``: HTTP attempts including retries. ``cost``: money the answered requests cost as the
    server counted it (its reported token ``usage`` at the adapter's prices), or None when the adapter
    does not know (the client then prices the batch per query and per request).
    ``input_tokens``/``output_tokens``: tokens the server reported (0 for adapters that bill per image).
    ``waits``: the busy server's answers waited out (429, 503) and the seconds waited, pacing included.
    ``declined``: of the queries answered :data:`ABSTAINED`, how many for each reason the adapter knows (keys of
    :data:`ldpclient.names.DECLINE_KINDS`).
    """

    labels: torch.Tensor
    requests: int = 1
    billed: int | None = None
    bytes_sent: int = 0
    bytes_received: int = 0
    attempts: int = 1
    cost: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    waits: Waits = field(default_factory=Waits)
    declined: dict[str, int] = field(default_factory=dict)
    #: answers whose ``usage`` was missing or not believable, charged at their booking
    unbilled: int = 0
    #: answers collected from a Batch API job an earlier run sent (paid then, once)
    collected_earlier: int = 0

    def decline(self, kind: str) -> None:
        """Count one query declined for ``kind`` (a key of :data:`ldpclient.names.DECLINE_KINDS`)."""
        self.declined[kind] = self.declined.get(kind, 0) + 1

    def count_call(self, info: "CallInfo") -> None:
        """Add one answered request's attempts, body bytes and waits (an adapter's call of ``HttpTransport.call``)."""
        self.requests += 1
        self.attempts += info.attempts
        self.bytes_sent += info.bytes_sent
        self.bytes_received += info.bytes_received
        self.waits.add(info.waits)


def validate_labels(labels: object, n: int, num_classes: int, teacher: str, *, abstains: bool = False) -> torch.Tensor:
    """Check one integer label per query in ``[0, num_classes)`` (or :data:`ABSTAINED` when ``abstains``);
    return int64 ``(n,)``.

    Anything else raises :class:`MalformedResponse` (never a silently wrong label).
    """
    arr = np.asarray(labels)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1 or arr.shape[0] != n:
        raise MalformedResponse(
            f"teacher {teacher!r} returned {arr.shape[0] if arr.ndim else 'a scalar'} label(s) "
            f"shaped {tuple(arr.shape)} for {n} queries"
        )
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise MalformedResponse(f"teacher {teacher!r} returned non-integer labels", transient=False)
        arr = arr.astype(np.int64)
    elif arr.dtype.kind not in "iu":
        raise MalformedResponse(f"teacher {teacher!r} returned labels of type {arr.dtype}, not integers")
    arr = arr.astype(np.int64, copy=False)
    low = ABSTAINED if abstains else 0
    if n and (arr.min() < low or arr.max() >= num_classes):
        bad = arr[(arr < low) | (arr >= num_classes)][:5].tolist()
        raise MalformedResponse(
            f"teacher {teacher!r} returned labels {bad} outside [0, {num_classes})"
        )
    return torch.from_numpy(arr.copy())


def name_key(text: str) -> str:
    """A class name as a teacher's free-form answer is matched to it: case and runs of white space aside."""
    return " ".join(str(text).split()).casefold()


def label_to_index(label: object, names: "dict[str, int] | None", num_classes: int, teacher: str) -> int:
    """Map a teacher's label (name or index) to a class index.

    ``names``: label name -> index (from the teacher's class list / ``id2label``).
    Integers, and strings of digits when no name matches, are taken as indices.
    An unknown name is a :class:`MalformedResponse` (not transient): it will not go
    away by asking again, and guessing would give a silently wrong label.
    """
    if isinstance(label, bool):
        raise MalformedResponse(f"teacher {teacher!r} returned a boolean label", transient=False)
    if isinstance(label, (int, np.integer)):
        idx = int(label)
    elif isinstance(label, str):
        if names is not None and label in names:
            idx = names[label]
        elif label.strip().lstrip("-").isdigit():
            idx = int(label)
        else:
            hint = "" if names else "; pass class_names= (or id2label=) to map names to indices"
            raise MalformedResponse(f"teacher {teacher!r} returned unknown label {label!r}{hint}", transient=False)
    else:
        raise MalformedResponse(f"teacher {teacher!r} returned label {label!r} of type {type(label).__name__}")
    if not 0 <= idx < num_classes:
        raise MalformedResponse(f"teacher {teacher!r} returned label {idx} outside [0, {num_classes})", transient=False)
    return idx


def best_of_scores(pred: object, teacher: str) -> object:
    """The label with the highest score in ``{label: score}`` or ``[{"label", "score"}, ...]``."""
    if isinstance(pred, dict) and "label" in pred and "score" in pred and len(pred) <= 3:
        return pred["label"]
    if isinstance(pred, dict) and pred:
        try:
            return max(pred.items(), key=lambda kv: float(kv[1]))[0]
        except (TypeError, ValueError):
            raise MalformedResponse(f"teacher {teacher!r} returned non-numeric scores: {str(pred)[:100]}") from None
    if isinstance(pred, list) and pred and all(isinstance(p, dict) for p in pred):
        try:
            return max(pred, key=lambda p: float(p["score"]))["label"]
        except (KeyError, TypeError, ValueError):
            raise MalformedResponse(f"teacher {teacher!r} returned entries without label/score: "
                                    f"{str(pred)[:100]}") from None
    raise MalformedResponse(f"teacher {teacher!r} returned an unusable prediction: {str(pred)[:100]}")
