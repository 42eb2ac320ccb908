"""Turning LDP queries into a teacher's wire datatype (post-processing only).

Quantising or clipping a release is post-processing, so it costs no privacy.
Supported datatypes: ``"FP32"`` (float32, little-endian, values clipped to the
teacher's ``value_range``), ``"FP16"`` and ``"FP64"`` likewise, and ``"UINT8"``
(``round((clip(x, lo, hi) - lo) / (hi - lo) * 255)``, i.e. the value range scaled
to bytes 0..255).
"""

from __future__ import annotations

import io
from typing import Sequence

import numpy as np
import torch

from ..privacy.release import Derived, as_derived
from .base import TeacherMetadata

#: numpy little-endian dtype for each OIP datatype we can send or receive.
NUMPY_DTYPES: dict[str, np.dtype] = {
    "FP32": np.dtype("<f4"),
    "FP16": np.dtype("<f2"),
    "FP64": np.dtype("<f8"),
    "UINT8": np.dtype("u1"),
    "INT8": np.dtype("i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
}
INPUT_DATATYPES = ("FP32", "FP16", "FP64", "UINT8")
INTEGER_DATATYPES = ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")
FLOAT_DATATYPES = ("FP16", "FP32", "FP64")


def check_shape(derived: Derived, input_shape: Sequence[int], teacher: str) -> None:
    """Raise ValueError unless every query row has exactly the teacher's input shape.

    An empty ``input_shape`` means the teacher accepts any shape (it resizes itself).
    """
    got = tuple(derived.values.shape[1:])
    want = tuple(int(s) for s in input_shape)
    if want and got != want:
        raise ValueError(
            f"queries have shape {got} per row but teacher {teacher!r} expects {want}; "
            "upsample/resize the release first (post-processing, free)"
        )


def to_wire(queries: object, meta: TeacherMetadata) -> np.ndarray:
    """Encode queries (Release or Derived) as a C-contiguous array in ``meta.datatype``.

    Returns shape ``(Q, *input_shape)``. Raw tensors raise TypeError; NaN queries
    raise ValueError (a release never contains NaN, so this is a bug upstream).
    """
    derived = as_derived(queries)
    check_shape(derived, meta.input_shape, meta.name)
    return quantise(derived.values, meta.datatype, meta.value_range)


def quantise(values: torch.Tensor, datatype: str, value_range: Sequence[float]) -> np.ndarray:
    """Clip to ``value_range`` and convert to ``datatype`` (see module docstring)."""
    if datatype not in INPUT_DATATYPES:
        raise ValueError(f"unsupported teacher input datatype {datatype!r}; supported: {INPUT_DATATYPES}")
    lo, hi = float(value_range[0]), float(value_range[1])
    if not hi > lo:
        raise ValueError(f"teacher value_range must have high > low, got {tuple(value_range)}")
    v = values.detach().to(torch.float32)
    if torch.isnan(v).any():
        raise ValueError("queries contain NaN")
    v = v.clamp(lo, hi)
    if datatype == "UINT8":
        q = torch.round((v - lo) * (255.0 / (hi - lo))).clamp(0, 255).to(torch.uint8)
        return np.ascontiguousarray(q.numpy())
    return np.ascontiguousarray(v.numpy().astype(NUMPY_DTYPES[datatype], copy=False))


def from_wire_uint8(data: np.ndarray, value_range: Sequence[float]) -> np.ndarray:
    """Inverse of UINT8 quantisation: bytes 0..255 back to float32 in ``value_range``."""
    lo, hi = float(value_range[0]), float(value_range[1])
    return (data.astype(np.float32) * ((hi - lo) / 255.0) + lo).astype(np.float32)


def to_png(row: np.ndarray, datatype: str, value_range: Sequence[float]) -> bytes:
    """PNG bytes of one query ``(C, H, W)`` (C = 1 grey, 3 RGB, 4 RGBA), quantised to 8 bits."""
    from PIL import Image

    if row.ndim != 3 or row.shape[0] not in (1, 3, 4):
        raise ValueError(f"image teachers need queries shaped (C, H, W) with C in 1, 3, 4; got {row.shape}")
    if datatype != "UINT8":
        row = quantise(torch.from_numpy(np.asarray(row, dtype=np.float32)), "UINT8", value_range)
    hwc = np.ascontiguousarray(np.moveaxis(row, 0, -1))
    img = Image.fromarray(hwc[..., 0] if hwc.shape[-1] == 1 else hwc)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()
