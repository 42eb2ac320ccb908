"""ldpclient against real MLServer and KServe servers (``make interop``), with default options.

Each case runs ``ldpclient label`` (a subprocess, as a user would) and the Python API against one
served model, passing only the facts the server cannot publish, and then checks every label the
teacher returned (the journal keeps them per batch) against ``digits_model`` applied to exactly the
tensor the server logged for that request.
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
# Facts a server does not publish: neither MLServer nor KServe has a place for the number of classes.
CLASSES = ["--num-classes", "10"]
BARE = ["--input-name", "input", "--output-name", "label", "--input-shape", "1,28,28", "--datatype", "FP32"]

CASES = [
    # (server fixture, model, extra CLI facts, wire the client should settle on)
    ("mlserver", "digits-label", CLASSES, "json"),  # MLServer's REST API has no binary extension
    ("mlserver", "digits-scores", [], "json"),  # scores [N, 10]: the class count is the output's width
    ("mlserver", "digits-uint8", CLASSES, "json"),
    ("kserve", "digits-label", CLASSES, "binary"),
    ("kserve", "digits-scores", [], "binary"),
    ("kserve", "digits-bare", CLASSES + BARE, "binary"),  # declares "inputs": [] and "outputs": []
]


@pytest.fixture(scope="module")
def private(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("private")
    rng = np.random.default_rng(7)
    for k in range(N_IMAGES):
        Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8)).save(folder / f"img{k:02d}.png")
    return folder


def _journal(state: Path) -> dict[str, np.ndarray]:
    with sqlite3.connect(state / "journal.sqlite") as db:
        rows = db.execute("SELECT batch_id, labels FROM batches").fetchall()
    return {bid: np.frombuffer(blob, dtype="<i8") for bid, blob in rows}


def _check_against_log(server, model: str, answered: dict[str, np.ndarray]) -> int:
    """Every answered batch equals the model applied to exactly what the server received for it."""
    logged: dict[str, list[dict]] = {}
    for entry in server.logged(model):
        logged.setdefault(str(entry["id"]).split(".")[0], []).append(entry)
    checked = 0
    for bid, labels in answered.items():
        entries = logged.get(bid)
        assert entries, f"batch {bid} answered but the server logged no request with its id"
        received = np.concatenate([
            np.asarray(e["input"], dtype=np.uint8 if e["dtype"] == "uint8" else np.float32).reshape(e["shape"])
            for e in entries[-1:]  # the request that was answered (an earlier binary probe was refused)
        ])
        assert received.shape == (len(labels), 1, 28, 28)
        np.testing.assert_array_equal(digits_model.labels(received), labels)
        checked += len(labels)
    return checked


@pytest.mark.parametrize("server_name, model, facts, wire", CASES)
def test_cli_label_with_default_options(request, private, tmp_path, server_name, model, facts, wire):
    server = request.getfixturevalue(server_name)
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
    assert sum(len(v) for v in answered.values()) == report["queries"]["sent"] > 0
    assert _check_against_log(server, model, answered) == report["queries"]["sent"]


@pytest.mark.parametrize("server_name, model, facts, wire", CASES)
def test_python_api(request, tmp_path, server_name, model, facts, wire):
    server = request.getfixturevalue(server_name)
    options = {"num_classes": 10} if "--num-classes" in facts else {}
    if "--input-shape" in facts:
        options.update(input_name="input", output_name="label", input_shape=(1, 28, 28), datatype="FP32")
    teacher = connect(f"{server.url}/v2/models/{model}", state_dir=tmp_path, **options)
    g = torch.Generator().manual_seed(3)
    release = laplace(2.0).release(torch.rand(12, 1, 28, 28, generator=g), generator=g)
    plan = QueryPlan("sup", 12, num_queries=30, seed=1, batch_size=8)
    client = QueryClient(teacher)
    answered = {bid: labels.numpy() for bid, labels in client.label_batches(plan.batches(release))}
    assert len(answered) == plan.num_batches
    assert _check_against_log(server, model, answered) == 30
    assert ("binary" if teacher.binary else "json") == wire
    teacher.close()
