"""What one teacher call returns besides labels, and the shared label checks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .errors import MalformedResponse


@dataclass
class InferResult:
    """Labels for one batch of queries plus accounting for the client.

    ``labels``: int64 ``(Q,)`` in ``[0, num_classes)``. ``requests``: HTTP requests
    that were answered (a batch larger than the teacher's max batch, or an image
    API taking one image per request, needs several). ``billed``: units (images)
    the server says it billed, summed over requests, or None when it did not say.
    ``bytes_sent``/``bytes_received``: body bytes on the wire (headers excluded).
    ``attempts``: HTTP attempts including retries.
    """

    labels: torch.Tensor
    requests: int = 1
    billed: int | None = None
    bytes_sent: int = 0
    bytes_received: int = 0
    attempts: int = 1


def validate_labels(labels: object, n: int, num_classes: int, teacher: str) -> torch.Tensor:
    """Check one integer label per query in ``[0, num_classes)``; return int64 ``(n,)``.

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
    if n and (arr.min() < 0 or arr.max() >= num_classes):
        bad = arr[(arr < 0) | (arr >= num_classes)][:5].tolist()
        raise MalformedResponse(
            f"teacher {teacher!r} returned labels {bad} outside [0, {num_classes})", transient=False
        )
    return torch.from_numpy(arr.copy())
