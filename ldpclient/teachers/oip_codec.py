"""The Open Inference Protocol's request and response bodies: JSON, or the binary tensor extension.

:class:`OIPCodec` encodes one chunk of queries (already in the wire datatype) as an infer
request and decodes an infer response into hard labels, checking everything a hostile server
controls: the requested output is there, its declared datatype and shape hold, one label per
query, labels in ``[0, num_classes)``, scores finite; anything else is a
:class:`~ldpclient.teachers.MalformedResponse`. Outputs understood: class indices (an integer
output ``[N]`` or ``[N, 1]``), scores/logits (a float output ``[N, K]``: argmax taken here), and
Triton's classification extension (BYTES ``"score:index[:label]"``). Billed units come from
``X-Billed-Images`` or the response's ``parameters.billed_images``.
"""

from __future__ import annotations

import json
import logging
import struct
from typing import Any

import numpy as np
import requests
import torch

from ..io.text import printable
from .base import TeacherMetadata
from .encoding import FLOAT_DATATYPES, INTEGER_DATATYPES, NUMPY_DTYPES
from .errors import MalformedResponse
from .oip_metadata import ModelDescription
from .result import validate_labels

#: The header giving the JSON part's length in a binary-extension body.
HEADER_LENGTH = "Inference-Header-Content-Length"

log = logging.getLogger("ldpclient.teachers.oip")


class OIPCodec:
    """Bodies for one model (``model``: its :class:`~.oip_metadata.ModelDescription`; ``address``:
    how errors and logs name it)."""

    def __init__(self, model: ModelDescription, address: str) -> None:
        self.model = model
        self.address = address
        self._id_mismatch_logged = False

    def encode_request(
        self, chunk: np.ndarray, request_id: str | None, *, binary: bool
    ) -> tuple[bytes, dict[str, str]]:
        """Request body and headers for one chunk ``(N, *input_shape)`` already in the wire datatype
        (``binary``: use the binary tensor extension)."""
        model = self.model
        inp: dict[str, object] = {"name": model.input_name, "shape": list(chunk.shape), "datatype": model.meta.datatype}
        out: dict[str, object] = {"name": model.output_name}
        if model.use_classification:
            out["parameters"] = {"classification": 1}
        elif binary:
            out["parameters"] = {"binary_data": True}
        header: dict[str, object] = {}
        if request_id is not None:
            header["id"] = request_id
        header["inputs"] = [inp]
        header["outputs"] = [out]
        if binary:
            raw = chunk.tobytes()
            inp["parameters"] = {"binary_data_size": len(raw)}
            head = json.dumps(header, separators=(",", ":")).encode()
            return head + raw, {HEADER_LENGTH: str(len(head)), "Content-Type": "application/octet-stream"}
        inp["data"] = chunk.reshape(-1).tolist()
        return json.dumps(header, separators=(",", ":")).encode(), {"Content-Type": "application/json"}

    def decode_response(
        self, resp: requests.Response, n: int, request_id: str | None
    ) -> tuple[torch.Tensor, int | None]:
        """Labels ``(n,)`` and billed units from an infer response (raises MalformedResponse)."""
        meta = self.model.meta
        content = resp.content
        hlen = resp.headers.get(HEADER_LENGTH)
        try:
            if hlen is not None:
                cut = int(hlen)
                if not 0 < cut <= len(content):
                    raise ValueError(f"{HEADER_LENGTH} {cut} does not fit a {len(content)}-byte body")
                header, binary = json.loads(content[:cut]), content[cut:]
            else:
                header, binary = json.loads(content), b""
        except (ValueError, UnicodeDecodeError) as exc:
            raise MalformedResponse(f"unparseable infer response ({exc}); body starts {content[:80]!r}") from None
        if not isinstance(header, dict) or not isinstance(header.get("outputs"), list):
            raise MalformedResponse(f"infer response has no outputs list: {str(header)[:200]}")
        if request_id is not None and header.get("id") not in (None, request_id) and not self._id_mismatch_logged:
            self._id_mismatch_logged = True  # KServe answers with a fresh id; the answer is checked on its content
            log.info("teacher %s answers with its own response ids (e.g. %r for %r); accepted",
                     self.address, str(header.get("id"))[:60], request_id)
        offset, found = 0, None
        for o in header["outputs"]:
            if not isinstance(o, dict):
                raise MalformedResponse("infer response output is not an object")
            size = (o.get("parameters") or {}).get("binary_data_size")
            piece = None
            if size is not None:
                size = int(size)
                if offset + size > len(binary):
                    raise MalformedResponse(f"binary output {o.get('name')!r} truncated ({len(binary) - offset} of "
                                            f"{size} bytes)")
                piece = binary[offset : offset + size]
                offset += size
            if o.get("name") == self.model.output_name:
                found = (o, piece)
        if found is None:
            names = [o.get("name") for o in header["outputs"]]
            raise MalformedResponse(f"infer response lacks output {self.model.output_name!r} (got {names})")
        o, piece = found
        labels = self._labels_from_output(o, piece, n, meta)
        billed = _billed(resp, header)
        return labels, billed

    def _labels_from_output(
        self, o: dict[str, Any], piece: bytes | None, n: int, meta: TeacherMetadata
    ) -> torch.Tensor:
        dt = str(o.get("datatype", "")).upper()
        shape = [int(s) for s in o.get("shape", [])]
        if self.model.use_classification:
            if dt != "BYTES":
                raise MalformedResponse(f"classification output should be BYTES, got {dt}")
            strings = _bytes_elements(piece) if piece is not None else [str(s) for s in _flat(o.get("data"))]
            return validate_labels(_class_indices(strings), n, meta.num_classes, meta.name)
        declared = self.model.output_datatype
        if declared and dt != declared:
            raise MalformedResponse(f"output {self.model.output_name!r} came as {dt}, metadata declares "
                                    f"{declared}", transient=False)
        if dt not in NUMPY_DTYPES:
            raise MalformedResponse(f"output {self.model.output_name!r} has unusable datatype {dt!r}")
        if piece is not None:
            if len(piece) % NUMPY_DTYPES[dt].itemsize:
                raise MalformedResponse(f"binary output of {len(piece)} bytes is not a whole number of {dt}")
            arr = np.frombuffer(piece, dtype=NUMPY_DTYPES[dt])
        else:
            data = o.get("data")
            if not isinstance(data, list):
                raise MalformedResponse(f"output {self.model.output_name!r} has no data")
            values = _flat(data)
            if dt in INTEGER_DATATYPES and not all(type(v) is int for v in values):
                odd = next(v for v in values if type(v) is not int)
                raise MalformedResponse(
                    f"output {self.model.output_name!r} is {dt} but holds {odd!r} ({type(odd).__name__}); labels "
                    "must be "
                    "JSON integers", transient=False,
                )
            if dt in FLOAT_DATATYPES and not all(type(v) in (int, float) for v in values):
                odd = next(v for v in values if type(v) not in (int, float))
                raise MalformedResponse(
                    f"output {self.model.output_name!r} is {dt} but holds {printable(repr(odd), max_chars=40)} "
                    f"({type(odd).__name__}); scores must be JSON numbers", transient=False,
                )
            try:
                arr = np.asarray(values, dtype=np.float64 if dt in FLOAT_DATATYPES else np.int64)
            except (TypeError, ValueError, OverflowError) as exc:
                raise MalformedResponse(f"output {self.model.output_name!r} data is not usable: "
                                        f"{exc}", transient=False) from None
        if shape and int(np.prod(shape)) != arr.size:
            raise MalformedResponse(f"output shape {shape} does not match its {arr.size} values")
        if dt in FLOAT_DATATYPES:
            k = meta.num_classes
            if arr.size != n * k:
                raise MalformedResponse(f"score output has {arr.size} values for {n} queries x {k} classes")
            scores = arr.reshape(n, k)
            if not np.all(np.isfinite(scores)):
                raise MalformedResponse("score output contains NaN or inf")
            return validate_labels(scores.argmax(axis=1), n, k, meta.name)
        return validate_labels(arr.astype(np.int64), n, meta.num_classes, meta.name)


def _flat(data: object) -> list[object]:
    if isinstance(data, list) and data and isinstance(data[0], list):
        return [x for row in data for x in _flat(row)]
    return data if isinstance(data, list) else []


def _bytes_elements(raw: bytes) -> list[str]:
    """Decode the binary BYTES layout: each element is a 4-byte little-endian length + bytes."""
    out, i = [], 0
    while i < len(raw):
        if i + 4 > len(raw):
            raise MalformedResponse("truncated BYTES element length")
        (ln,) = struct.unpack_from("<I", raw, i)
        i += 4
        if i + ln > len(raw):
            raise MalformedResponse("truncated BYTES element")
        out.append(raw[i : i + ln].decode("utf-8", "replace"))
        i += ln
    return out


def _class_indices(strings: list[str]) -> list[int]:
    """Triton classification strings ``"score:index[:label]"`` -> indices."""
    out = []
    for s in strings:
        parts = s.split(":")
        try:
            float(parts[0])
            out.append(int(parts[1]))
        except (ValueError, IndexError, OverflowError):
            raise MalformedResponse(f"classification entry {s!r} is not 'score:index[:label]'") from None
    return out


def _billed(resp: requests.Response, header: dict[str, Any]) -> int | None:
    h = resp.headers.get("X-Billed-Images")
    p = (header.get("parameters") or {}).get("billed_images")
    try:
        if h is not None:
            return int(h)
        if p is not None:
            return int(p)
    except (TypeError, ValueError):
        raise MalformedResponse(f"unreadable billed units {h if h is not None else p!r}") from None
    return None


__all__ = ["HEADER_LENGTH", "OIPCodec"]
