"""Open Inference Protocol v2 bodies: parse infer requests (JSON and binary tensor extension), encode responses.

Wire units: FP32 values are in the model's value range (clipped to it before the
model); UINT8 bytes 0..255 mean that range scaled to bytes. Labels go back as INT64.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Wire datatypes accepted for the input tensor, as little-endian numpy dtypes.
INPUT_DTYPES: dict[str, np.dtype] = {"FP32": np.dtype("<f4"), "UINT8": np.dtype("u1")}
OUTPUT_NAME = "label"
INPUT_NAME = "input"
HEADER_LENGTH = "Inference-Header-Content-Length"


class ProtocolError(Exception):
    """A request the server must refuse: HTTP ``status`` and a message naming the problem."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class InferRequest:
    """A parsed, validated infer request. ``tensor`` is as received (wire dtype), shape ``(N, C, H, W)``."""

    id: str | None
    datatype: str
    tensor: np.ndarray
    binary_output: bool

    @property
    def batch(self) -> int:
        return int(self.tensor.shape[0])

    def model_input(self, value_range: tuple[float, float]) -> np.ndarray:
        """float32 in ``value_range``: FP32 clipped to it, UINT8 scaled from 0..255 onto it."""
        low, high = value_range
        if self.datatype == "UINT8":
            return (self.tensor.astype(np.float32) * np.float32((high - low) / 255.0) + np.float32(low))
        return np.clip(self.tensor, low, high).astype(np.float32, copy=False)


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ProtocolError(400, f"{what} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(400, f"{what} must be a JSON object, got {type(obj).__name__}")
    return obj


def _short(v: Any) -> str:
    """repr for error messages, cut to 60 characters."""
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _params(obj: dict[str, Any], where: str) -> dict[str, Any]:
    params = obj.get("parameters", {})
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise ProtocolError(400, f"{where} 'parameters' must be an object")
    return params


def parse_infer_request(
    body: bytes,
    header_length: str | None,
    *,
    input_shape: tuple[int, ...],
    max_batch_size: int,
) -> InferRequest:
    """Validate an infer body against the model's ``input_shape`` (without batch axis).

    ``header_length`` is the ``Inference-Header-Content-Length`` header (binary
    extension) or None for a pure JSON body. Raises ``ProtocolError`` 400 for any
    malformed, mis-shaped or mistyped request and 413 for a batch over ``max_batch_size``.
    """
    if header_length is not None:
        try:
            hlen = int(header_length.strip())
        except ValueError:
            raise ProtocolError(400, f"{HEADER_LENGTH} must be an integer, got {header_length[:40]!r}") from None
        if not 0 < hlen <= len(body):
            raise ProtocolError(400, f"{HEADER_LENGTH} {hlen} is outside the body of {len(body)} bytes")
        head, binary = body[:hlen], body[hlen:]
    else:
        head, binary = body, None
    req = _json_object(head, "request body" if binary is None else "inference header")
    rid = req.get("id")
    if rid is not None and not isinstance(rid, str):
        raise ProtocolError(400, "'id' must be a string")

    inputs = req.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise ProtocolError(400, "missing input: 'inputs' must be a non-empty list")
    if len(inputs) != 1:
        raise ProtocolError(400, f"expected exactly one input named {INPUT_NAME!r}, got {len(inputs)}")
    inp = inputs[0]
    if not isinstance(inp, dict):
        raise ProtocolError(400, "each entry of 'inputs' must be an object")
    if inp.get("name") != INPUT_NAME:
        raise ProtocolError(400, f"missing input {INPUT_NAME!r} (got input named {_short(inp.get('name'))})")
    datatype = inp.get("datatype")
    if not isinstance(datatype, str) or datatype not in INPUT_DTYPES:
        raise ProtocolError(400, f"unsupported datatype {_short(datatype)} for input {INPUT_NAME!r}; use FP32 or UINT8")
    shape = inp.get("shape")
    expected = [-1, *input_shape]
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise ProtocolError(400, f"input 'shape' must be a list of non-negative ints, got {_short(shape)}")
    if len(shape) != len(expected) or shape[1:] != list(input_shape):
        raise ProtocolError(400, f"wrong shape {_short(shape)} for input {INPUT_NAME!r}; expected {expected}")
    n = shape[0]
    if n == 0:
        raise ProtocolError(400, "empty batch: shape[0] must be >= 1")
    if n > max_batch_size:
        raise ProtocolError(413, f"batch of {n} exceeds max_batch_size {max_batch_size}")
    count = math.prod(shape)
    dtype = INPUT_DTYPES[datatype]
    params = _params(inp, "input")

    if binary is not None and "binary_data_size" in params:
        size = params["binary_data_size"]
        if not _is_int(size) or size != count * dtype.itemsize:
            raise ProtocolError(
                400, f"binary_data_size {_short(size)} does not match shape {shape} of {datatype} "
                f"({count * dtype.itemsize} bytes)")
        if len(binary) != size:
            raise ProtocolError(400, f"binary section holds {len(binary)} bytes, binary_data_size says {size}")
        if "data" in inp:
            raise ProtocolError(400, "input has both 'data' and binary_data_size")
        tensor = np.frombuffer(binary, dtype=dtype).reshape(shape).copy()
    else:
        if binary:
            raise ProtocolError(400, "binary section present but input has no parameters.binary_data_size")
        if "data" not in inp:
            raise ProtocolError(400, f"input {INPUT_NAME!r} has no 'data' (and no binary_data_size)")
        tensor = _json_tensor(inp["data"], shape, count, datatype)

    if datatype == "FP32" and not np.isfinite(tensor).all():
        raise ProtocolError(400, "input contains NaN or infinite values")
    return InferRequest(rid, datatype, tensor, _wants_binary_output(req))


def _json_tensor(data: Any, shape: list[int], count: int, datatype: str) -> np.ndarray:
    if not isinstance(data, list):
        raise ProtocolError(400, "input 'data' must be a (flat, row-major) list of numbers")
    try:
        arr = np.asarray(data, dtype=np.float64)
    except (ValueError, TypeError, OverflowError):
        raise ProtocolError(400, "input 'data' must hold only numbers (a flat or regularly nested list)") from None
    if arr.size != count:
        raise ProtocolError(400, f"input 'data' has {arr.size} values; shape {shape} needs {count}")
    arr = arr.reshape(shape)
    if datatype == "UINT8":
        if not (np.isfinite(arr).all() and (arr == np.floor(arr)).all() and arr.min() >= 0 and arr.max() <= 255):
            raise ProtocolError(400, "UINT8 input 'data' must hold integers 0..255")
        return arr.astype(np.uint8)
    with np.errstate(over="ignore"):
        return arr.astype(np.float32)


def _wants_binary_output(req: dict[str, Any]) -> bool:
    binary = bool(_params(req, "request").get("binary_data_output", False))
    outputs = req.get("outputs")
    if outputs is None:
        return binary
    if not isinstance(outputs, list):
        raise ProtocolError(400, "'outputs' must be a list")
    for out in outputs:
        if not isinstance(out, dict) or not isinstance(out.get("name"), str):
            raise ProtocolError(400, "each entry of 'outputs' must be an object with a 'name'")
        if out["name"] != OUTPUT_NAME:
            raise ProtocolError(
                400, f"unknown output {_short(out['name'])}: this teacher returns hard labels only "
                f"(output {OUTPUT_NAME!r})")
        flag = _params(out, "output").get("binary_data")
        if flag is not None:
            binary = bool(flag)
    return binary


def encode_infer_response(
    request_id: str | None, model_name: str, labels: np.ndarray, *, binary: bool, billed_images: int
) -> tuple[bytes, dict[str, str]]:
    """Response body and its content headers (JSON, or JSON header + raw little-endian INT64 labels)."""
    labels = np.ascontiguousarray(labels, dtype="<i8")
    output: dict[str, Any] = {"name": OUTPUT_NAME, "shape": [int(labels.shape[0])], "datatype": "INT64"}
    doc: dict[str, Any] = {}
    if request_id is not None:
        doc["id"] = request_id
    doc.update(model_name=model_name, model_version="1", outputs=[output],
               parameters={"billed_images": billed_images})
    if not binary:
        output["data"] = labels.tolist()
        return json.dumps(doc, separators=(",", ":")).encode(), {"Content-Type": "application/json"}
    payload = labels.tobytes()
    output["parameters"] = {"binary_data_size": len(payload)}
    head = json.dumps(doc, separators=(",", ":")).encode()
    return head + payload, {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(head))}
