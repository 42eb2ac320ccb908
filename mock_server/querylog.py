"""Honest-but-curious query log: every received query tensor, one JSON line per infer request.

Line format: {"ts": unix seconds, "request_id": the request's "id" (or null),
"seq": server arrival number, "key_id": API-key fingerprint, "model": name,
"shape": [N, C, H, W], "datatype": "FP32"|"UINT8", "data_b64": base64 of the
raw little-endian tensor bytes as received}.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .protocol import INPUT_DTYPES


class QueryLog:
    """Append-only JSONL writer; one flushed line per request, safe across threads."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def record(self, *, request_id: str | None, seq: int, key_id: str, model: str, tensor: np.ndarray,
               datatype: str) -> None:
        raw = np.ascontiguousarray(tensor, dtype=INPUT_DTYPES[datatype]).tobytes()
        line = json.dumps({
            "ts": time.time(), "request_id": request_id, "seq": seq, "key_id": key_id, "model": model,
            "shape": list(tensor.shape), "datatype": datatype, "data_b64": base64.b64encode(raw).decode("ascii"),
        })
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_query_log(path: str | os.PathLike[str]) -> Iterator[tuple[dict, np.ndarray]]:
    """Yield ``(record, tensor)`` per logged request, streaming (constant memory per line).

    ``record`` is the JSON line without ``data_b64``; ``tensor`` has the logged shape
    and wire dtype (float32 for FP32, uint8 for UINT8). A malformed line raises
    ValueError naming its line number; a truncated last line (server killed mid-write)
    is skipped.
    """
    with open(Path(path).expanduser(), encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.endswith("\n"):
                return  # partial final line from an interrupted write
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                dtype = INPUT_DTYPES[rec["datatype"]]
                raw = base64.b64decode(rec.pop("data_b64"), validate=True)
                tensor = np.frombuffer(raw, dtype=dtype).reshape(rec["shape"]).astype(dtype.newbyteorder("="))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a query-log line ({exc})") from None
            yield rec, tensor
