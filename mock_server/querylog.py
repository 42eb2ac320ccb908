"""Honest-but-curious query log: every received query tensor, one JSON line per infer request.

The format and its reader are :mod:`ldpclient.io.querylog` (the library's; the mock server writes it).
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from pathlib import Path

import numpy as np

from ldpclient.io.querylog import read_query_log

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


__all__ = ["QueryLog", "read_query_log"]
