"""The model every interop server serves: a fixed random linear classifier on 1x28x28 inputs.

Numpy only (the servers' venvs have no torch). ``scores(x)``: float64 ``(N, 10)`` for inputs in
[0, 1] (UINT8 inputs are divided by 255 first); ``labels(x)``: their argmax. The interop tests apply
the same functions to the exact tensors each server logged, and compare with what ldpclient got.
"""

from __future__ import annotations

import json
import os
import threading

import numpy as np

INPUT_SHAPE = (1, 28, 28)
NUM_CLASSES = 10
_W = np.random.default_rng(20261122).standard_normal((int(np.prod(INPUT_SHAPE)), NUM_CLASSES))
_lock = threading.Lock()


def scores(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    v = x.astype(np.float64) / 255.0 if x.dtype == np.uint8 else x.astype(np.float64)
    return v.reshape(len(v), -1) @ _W


def labels(x: np.ndarray) -> np.ndarray:
    return scores(x).argmax(axis=1).astype(np.int64)


def log_request(model: str, request_id: str | None, x: np.ndarray, answer: np.ndarray) -> None:
    """Append what the server received and answered to ``$INTEROP_LOG`` (JSONL), if set."""
    path = os.environ.get("INTEROP_LOG")
    if not path:
        return
    entry = {"model": model, "id": request_id, "dtype": str(x.dtype), "shape": list(x.shape),
             "input": np.asarray(x).reshape(-1).tolist(), "answer": np.asarray(answer).reshape(-1).tolist()}
    with _lock, open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry) + "\n")
