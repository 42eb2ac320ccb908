"""Real inference servers from PyPI, started on 127.0.0.1 in their own virtual environments.

``make interop`` creates the environments (MLServer, KServe and PyTriton have pins of their own
that must never touch the project's) and points these fixtures at them through
``INTEROP_MLSERVER`` (the ``mlserver`` executable), ``INTEROP_KSERVE_PYTHON`` and
``INTEROP_TRITON_PYTHON`` (those venvs' pythons). Triton runs on the CPU through PyTriton, whose
wheel carries the ``tritonserver`` binary and its Python backend. Each server
serves the numpy model of ``runtimes/digits_model.py`` and logs every tensor it received with its
answer to a JSONL file, so a test can check each label against the model applied to exactly
what was sent.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
import requests
import torch

HERE = Path(__file__).resolve().parent
RUNTIMES = HERE / "runtimes"
sys.path.insert(0, str(RUNTIMES))

torch.set_num_threads(1)
os.environ.setdefault("LDPCLIENT_STATE_DIR", tempfile.mkdtemp(prefix="ldpclient-interop-"))

MLSERVER_MODELS = {
    # name: (input datatype, output name, output datatype, output shape)
    "digits-label": ("FP32", "label", "INT64", [-1]),
    "digits-scores": ("FP32", "scores", "FP32", [-1, 10]),
    "digits-uint8": ("UINT8", "label", "INT64", [-1]),
}


@dataclass
class RealServer:
    name: str
    url: str
    log: Path

    def logged(self, model: str) -> list[dict]:
        """Every request ``model`` received, in order: id, input tensor, answer."""
        if not self.log.exists():
            return []
        rows = [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]
        return [r for r in rows if r["model"] == model]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, proc: subprocess.Popen, out: Path, models: list[str], timeout: float = 180.0) -> None:
    """Until the server is ready and every model in ``models`` answers its metadata request."""
    deadline = time.monotonic() + timeout
    paths = ["/v2/health/ready", *(f"/v2/models/{m}" for m in models)]
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {out.read_text()[-2000:]}")
        try:
            if all(requests.get(f"{url}{p}", timeout=2).status_code == 200 for p in paths):
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"server at {url} not ready after {timeout:.0f} s: {out.read_text()[-2000:]}")


def _start(name: str, cmd: list[str], cwd: Path, url: str, log: Path, models: list[str],
           **env_extra: str) -> Iterator[RealServer]:
    out = cwd / "server.out"
    env = {**os.environ, "INTEROP_LOG": str(log), "PYTHONPATH": str(RUNTIMES), **env_extra}
    with open(out, "wb") as fh:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        _wait_ready(url, proc, out, models)
        yield RealServer(name, url, log)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _needs(var: str) -> str:
    value = os.environ.get(var)
    if not value or not Path(value).exists():
        pytest.fail(f"{var} is not set to an installed server: run these tests with `make interop`")
    return os.path.abspath(value)  # the servers start in their own working directories


@pytest.fixture(scope="session")
def mlserver(tmp_path_factory) -> Iterator[RealServer]:
    """MLServer 1.7.1 serving three custom-runtime models (label, scores, UINT8 input)."""
    exe = _needs("INTEROP_MLSERVER")
    repo = tmp_path_factory.mktemp("mlserver")
    http, grpc, metrics = _free_port(), _free_port(), _free_port()
    (repo / "settings.json").write_text(json.dumps({
        "host": "127.0.0.1", "http_port": http, "grpc_port": grpc, "metrics_port": metrics, "parallel_workers": 0,
    }))
    for model, (in_dt, out_name, out_dt, out_shape) in MLSERVER_MODELS.items():
        (repo / model).mkdir()
        (repo / model / "model-settings.json").write_text(json.dumps({
            "name": model,
            "implementation": "mlserver_runtime.DigitsRuntime",
            "parameters": {"extra": {"output": out_name}},
            "inputs": [{"name": "input", "datatype": in_dt, "shape": [-1, 1, 28, 28]}],
            "outputs": [{"name": out_name, "datatype": out_dt, "shape": out_shape}],
        }))
    yield from _start("mlserver", [exe, "start", str(repo)], repo, f"http://127.0.0.1:{http}", repo / "log.jsonl",
                      list(MLSERVER_MODELS))


@pytest.fixture(scope="session")
def kserve(tmp_path_factory) -> Iterator[RealServer]:
    """KServe 0.21.0's ModelServer with three custom models (label, scores, one that declares nothing)."""
    python = _needs("INTEROP_KSERVE_PYTHON")
    root = tmp_path_factory.mktemp("kserve")
    http, grpc = _free_port(), _free_port()
    cmd = [python, str(RUNTIMES / "kserve_server.py"), "--http_port", str(http), "--grpc_port", str(grpc)]
    yield from _start("kserve", cmd, root, f"http://127.0.0.1:{http}", root / "log.jsonl",
                      ["digits-label", "digits-scores", "digits-bare"])


@pytest.fixture(scope="session")
def triton(tmp_path_factory) -> Iterator[RealServer]:
    """Triton Inference Server 2.51 (CPU) via PyTriton 0.7.0: scores (classification extension) and labels."""
    python = _needs("INTEROP_TRITON_PYTHON")
    root = tmp_path_factory.mktemp("triton")
    http, grpc, metrics = _free_port(), _free_port(), _free_port()
    # Triton's Python-backend stub must load the same libpython as the venv's interpreter
    libdir = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    ld = ":".join(p for p in (libdir, os.environ.get("LD_LIBRARY_PATH", "")) if p)
    cmd = [python, str(RUNTIMES / "triton_server.py"), "--http-port", str(http), "--grpc-port", str(grpc),
           "--metrics-port", str(metrics)]
    yield from _start("triton", cmd, root, f"http://127.0.0.1:{http}", root / "log.jsonl",
                      ["digits-scores", "digits-label"], LD_LIBRARY_PATH=ld, HOME=str(root))
