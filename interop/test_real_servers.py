"""ldpclient against real MLServer, KServe and Triton servers (``make interop``), default options.

Each case runs ``ldpclient label`` (a subprocess, as a user would) and the Python API against one
served model, passing only the facts the server cannot publish, and then checks every label the
teacher returned (the journal keeps them per batch, in the order they were answered) against
``digits_model`` applied to exactly the tensors the server logged, in arrival order.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import digits_model
from ldpclient.privacy import laplace
from ldpclient.teachers import QueryClient, connect
from ldpclient.transfer.augment import QueryPlan

N_IMAGES = 24
# Facts a server does not publish: none of them has a place for the number of classes of a label output.
CLASSES = ["--num-classes", "10"]
BARE = ["--input-name", "input", "--output-name", "label", "--input-shape", "1,28,28", "--datatype", "FP32"]

CASES = [
    # (server fixture, model, facts to pass, wire the client should settle on)
    ("mlserver", "digits-label", CLASSES, "json"),  # MLServer's REST API has no binary extension
    ("mlserver", "digits-scores", [], "json"),  # scores [N, 10]: the class count is the output's width
    ("mlserver", "digits-uint8", CLASSES, "json"),  # UINT8 input
    ("kserve", "digits-label", CLASSES, "binary"),  # fresh response ids
    ("kserve", "digits-scores", [], "binary"),
    ("kserve", "digits-bare", CLASSES + BARE, "binary"),  # declares "inputs": [] and "outputs": []
    ("triton", "digits-scores", [], "binary"),  # Triton's classification extension; batches split at 64
    ("triton", "digits-label", CLASSES, "binary"),
]


@pytest.fixture(scope="module")
def private(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("private")
    rng = np.random.default_rng(7)
    for k in range(N_IMAGES):
        Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8)).save(folder / f"img{k:02d}.png")
    return folder


def _journal(state: Path) -> list[np.ndarray]:
    """Labels of every answered batch, in the order they were answered."""
    with sqlite3.connect(state / "journal.sqlite") as db:
        rows = db.execute("SELECT labels FROM batches ORDER BY rowid").fetchall()
    return [np.frombuffer(blob, dtype="<i8") for (blob,) in rows]


def _server_labels(entry: dict) -> np.ndarray:
    """What the server answered for one logged request, as class indices (scores -> argmax)."""
    rows = entry["shape"][0]
    answer = np.asarray(entry["answer"])
    return answer.reshape(rows, -1).argmax(axis=1) if answer.size == rows * digits_model.NUM_CLASSES else answer


def _check_against_log(entries: list[dict], answered: list[np.ndarray]) -> int:
    """The labels ldpclient got equal what the server answered and the model applied to exactly what
    the server received (requests in arrival order; ldpclient sends one at a time by default)."""
    received = np.concatenate([
        np.asarray(e["input"], dtype=np.uint8 if e["dtype"] == "uint8" else np.float32).reshape(e["shape"])
        for e in entries
    ])
    got = np.concatenate(answered)
    assert received.shape == (len(got), 1, 28, 28), (received.shape, len(got))
    np.testing.assert_array_equal(digits_model.labels(received), got)
    np.testing.assert_array_equal(np.concatenate([_server_labels(e) for e in entries]), got)
    return len(got)


@pytest.mark.parametrize("server_name, model, facts, wire", CASES)
def test_cli_label_with_default_options(request, private, tmp_path, server_name, model, facts, wire):
    server = request.getfixturevalue(server_name)
    seen = len(server.logged(model))
    out = tmp_path / "labels.csv"
    proc = subprocess.run(
        [sys.executable, "-m", "ldpclient.cli", "label", str(private), "--teacher", f"{server.url}/v2/models/{model}",
         "--state-dir", str(tmp_path / "state"), "--output", str(out), "--quiet", *facts],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.with_name("labels.report.json").read_text())
    assert report["teacher"]["wire"] == wire
    assert report["counts"]["labelled"] == N_IMAGES
    answered = _journal(tmp_path / "state")
    assert _check_against_log(server.logged(model)[seen:], answered) == report["queries"]["sent"] > 0


@pytest.mark.parametrize("server_name, model, facts, wire", CASES)
def test_python_api(request, tmp_path, server_name, model, facts, wire):
    server = request.getfixturevalue(server_name)
    seen = len(server.logged(model))
    options = {"num_classes": 10} if "--num-classes" in facts else {}
    if "--input-shape" in facts:
        options.update(input_name="input", output_name="label", input_shape=(1, 28, 28), datatype="FP32")
    teacher = connect(f"{server.url}/v2/models/{model}", state_dir=tmp_path, **options)
    g = torch.Generator().manual_seed(3)
    release = laplace(2.0, per="element").release(torch.rand(12, 1, 28, 28, generator=g), generator=g)
    plan = QueryPlan("sup", 12, num_queries=30, seed=1, batch_size=8)
    client = QueryClient(teacher)
    answered = [labels.numpy() for _, labels in client.label_batches(plan.batches(release))]
    assert len(answered) == plan.num_batches
    assert _check_against_log(server.logged(model)[seen:], answered) == 30
    assert ("binary" if teacher.binary else "json") == wire
    teacher.close()
