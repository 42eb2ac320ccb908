"""The query-log format: every query tensor a teacher received, one JSON line per infer request.

Line format: {"ts": unix seconds, "request_id": the request's "id" (or null),
"seq": server arrival number, "key_id": API-key fingerprint, "model": name,
"shape": [N, C, H, W], "datatype": "FP32"|"UINT8", "data_b64": base64 of the
raw little-endian tensor bytes as received}.

The bundled mock teacher writes it (``ldpclient serve-mock --query-log``); ``ldpclient audit``
reads it with :func:`read_query_log` to attack what a teacher saw. The reader lives here, in the
library, so that the library never depends on its test server.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

#: Wire datatypes of logged query tensors and their little-endian numpy dtypes.
LOG_DTYPES: dict[str, np.dtype] = {"FP32": np.dtype("<f4"), "UINT8": np.dtype("u1")}


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
                dtype = LOG_DTYPES[rec["datatype"]]
                raw = base64.b64decode(rec.pop("data_b64"), validate=True)
                tensor = np.frombuffer(raw, dtype=dtype).reshape(rec["shape"]).astype(dtype.newbyteorder("="))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a query-log line ({exc})") from None
            yield rec, tensor


__all__ = ["LOG_DTYPES", "read_query_log"]
