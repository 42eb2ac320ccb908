"""How much memory a run will need, from the teacher's declared input shape, checked before anything is sized.

A teacher decides how large the client's tensors are: every private image is decoded to
its declared input shape, and every query, training batch and prediction batch has that
shape. ``TeacherLimits`` stops absurd declarations (``[1, 100000, 100000]``); a shape
inside them can still be too large for this machine (``1x4096x4096`` is 67 MB a record,
and training the default student on 64 of them needs hundreds of GB). So a run
estimates its peak from the shape and its batch sizes, and refuses before decoding
anything when the estimate exceeds ``--max-memory`` (default: half of this machine's RAM).

The estimate is deliberately simple and on the high side: float32 values (4 bytes) for
the largest of the stages that hold batches at once, plus what the student keeps for
its backward pass (:data:`ACTIVATION_FLOATS_PER_PIXEL` floats per input pixel, measured
for the default ``small_cnn``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Sequence

#: Floats the default student keeps per input pixel (H x W) for one training example (forward
#: activations, their gradients, the optimiser's step): measured 125-129 for ``small_cnn`` on 1x256x256
#: and 1x512x512 batches (peak RSS of one Adam step), rounded up.
ACTIVATION_FLOATS_PER_PIXEL = 160
#: Floats the student keeps per input pixel for one example in inference (no gradients): measured 65 for
#: ``small_cnn`` on a 64 x 3x224x224 batch under ``torch.inference_mode`` (peak RSS), rounded up.
INFERENCE_FLOATS_PER_PIXEL = 72
#: Copies of a query batch alive at once (the batch, its post-processed rows, its wire encoding).
QUERY_COPIES = 4
#: Records predicted at once (``ldpclient.transfer.student.predict_proba``'s batch).
PREDICT_BATCH = 512
#: Bytes of one float32 value.
FLOAT_BYTES = 4


def physical_memory_bytes() -> int | None:
    """This machine's RAM in bytes (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return None


def default_max_memory_gib() -> float:
    """The ``--max-memory`` default: half of this machine's RAM, in GiB (8 where the OS does not say)."""
    ram = physical_memory_bytes()
    return ram / 2 / 2**30 if ram else 8.0


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak bytes by stage for records of ``shape`` (the largest of them is the run's estimate)."""

    shape: tuple[int, ...]
    stages: dict[str, int]

    @property
    def peak(self) -> int:
        return max(self.stages.values())

    @property
    def largest(self) -> str:
        return max(self.stages, key=lambda k: self.stages[k])


def estimate_run_memory(
    shape: Sequence[int], *, query_batch: int, train_batch: int | None, decode_chunk: int, release_chunk: int
) -> MemoryEstimate:
    """Estimated peak bytes of a run on records of ``shape`` (C, H, W): decoding, releasing, querying and,
    when ``train_batch`` is given, training the student and predicting with it."""
    elements = math.prod(int(s) for s in shape)
    pixels = int(shape[-1]) * int(shape[-2]) if len(shape) >= 2 else elements
    record = elements * FLOAT_BYTES
    stages = {
        "decoding": 2 * decode_chunk * record,  # decoded records + their converted copy
        "releasing": 3 * release_chunk * record,  # clean chunk, noise, released values
        "querying": QUERY_COPIES * query_batch * record,
    }
    if train_batch is not None:
        stages["training the student"] = train_batch * (2 * record + ACTIVATION_FLOATS_PER_PIXEL * pixels * FLOAT_BYTES)
        stages["predicting"] = PREDICT_BATCH * (record + INFERENCE_FLOATS_PER_PIXEL * pixels * FLOAT_BYTES)
    return MemoryEstimate(tuple(int(s) for s in shape), stages)


def check_run_memory(estimate: MemoryEstimate, max_memory_gib: float, teacher: str) -> None:
    """ValueError (one line) when the estimate exceeds ``max_memory_gib``: nothing has been decoded yet."""
    if not (math.isfinite(max_memory_gib) and max_memory_gib > 0):
        raise ValueError(f"--max-memory must be a number of GiB > 0, got {max_memory_gib}")
    limit = max_memory_gib * 2**30
    if estimate.peak > limit:
        shape = "x".join(str(s) for s in estimate.shape)
        raise ValueError(
            f"teacher {teacher} declares {shape} inputs: {estimate.largest} would need about "
            f"{estimate.peak / 2**30:,.1f} GiB, over --max-memory {max_memory_gib:.3g} GiB; lower --batch-size or "
            "--train-batch-size, or raise --max-memory if this machine has the memory"
        )


def check_memory_for_shape(
    shape: Sequence[int], teacher: str, max_memory_gib: float | None, *, query_batch: int, train_batch: int | None
) -> MemoryEstimate:
    """Estimate a run on ``shape`` with the batch sizes it will use and refuse it when over ``max_memory_gib``
    (None: :func:`default_max_memory_gib`). Returns the estimate."""
    from ..io.folders import spool_chunk
    from ..transfer.stages.release import release_chunk

    estimate = estimate_run_memory(
        shape, query_batch=query_batch, train_batch=train_batch, decode_chunk=spool_chunk(shape),
        release_chunk=release_chunk(shape),
    )
    check_run_memory(estimate, max_memory_gib if max_memory_gib is not None else default_max_memory_gib(), teacher)
    return estimate


__all__ = [
    "MemoryEstimate",
    "check_memory_for_shape",
    "check_run_memory",
    "default_max_memory_gib",
    "estimate_run_memory",
    "physical_memory_bytes",
]
