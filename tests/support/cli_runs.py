"""``ldpclient label`` runs against the trivial mock teacher: a small private folder, the mock, the arguments, the
in-process runner, a subprocess stopped mid-run, and what the state holds after."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from typer.testing import CliRunner

import mock_server
from ldpclient.cli.commands import app


def private_folder(tmp_path: Path, n: int = 12, size: int = 8) -> Path:
    """``n`` random grey ``size`` x ``size`` PNGs under ``tmp_path/private``, in two class folders (ignored)."""
    folder = tmp_path / "private"
    rng = np.random.default_rng(0)
    for k in range(n):
        sub = folder / ("cats" if k % 2 else "dogs")  # class folders: ignored, never sent
        sub.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (size, size), dtype=np.uint8)).save(sub / f"img{k:02d}.png")
    return folder


def mock_teacher(**kw: Any) -> Any:
    """The trivial 8x8 grey mock teacher at 0.01 a query, 64 a batch (``kw`` on top), as a context manager."""
    opts: dict[str, Any] = dict(model="trivial", image_size=8, channels=1, price_per_image=0.01, max_batch_size=64)
    opts.update(kw)
    return mock_server.serve(**opts)


def label_args(folder: Path, url: str, tmp_path: Path, *extra: str) -> list[str]:
    """A small, fast ``label`` run of ``folder`` against ``url``: state and output under ``tmp_path``."""
    return [
        "label", str(folder), "--teacher", url, "--state-dir", str(tmp_path / "state"),
        "--output", str(tmp_path / "out" / "labels.csv"), "--epsilon", "4", "--epsilon-unit", "element",
        "--reduce", "2", "--queries", "24", "--batch-size", "8", "--epochs", "1", "--price", "0.01",
        "--max-retry-time", "0", *extra,
    ]


def invoke(args: list[str], **kw: Any) -> Any:
    """The command line run in this process (typer's CliRunner)."""
    return CliRunner().invoke(app, args, **kw)


def cli_command(*args: str) -> list[str]:
    """``python -m ldpclient.cli ARGS`` as a process's argv."""
    return [sys.executable, "-m", "ldpclient.cli", *args]


def wait_for_images(srv: Any, at_least: int, proc: subprocess.Popen[str], timeout: float = 60.0) -> int:
    """Images the mock has answered, once at least ``at_least`` (the process ``proc`` still running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        images = srv.usage()["total"]["images"]
        if images >= at_least:
            return int(images)
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the run did not get going")


def stop_after(srv: Any, args: list[str], env: dict[str, str], at_least: int, sig: int,
               timeout: float = 60.0) -> tuple[int, str]:
    """Run the command line ``args`` in a process, send it ``sig`` once the mock answered ``at_least`` images
    (within ``timeout`` seconds); its exit code and stderr."""
    proc = subprocess.Popen(cli_command(*args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_images(srv, at_least, proc, timeout)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    srv.wait_idle()  # a request that was in flight at the stop is answered (and billed) on the server
    return proc.returncode, err


def _rows(tmp_path: Path, state_file: str, table: str) -> int:
    """Rows of ``table`` in a state file (0 when the file was never created)."""
    path = tmp_path / "state" / state_file
    if not path.exists():
        return 0
    with sqlite3.connect(path) as db:
        return int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def charged_images(tmp_path: Path) -> int:
    """Images the ledger has charged (stored releases)."""
    return _rows(tmp_path, "ledger.sqlite", "releases")


def paid_batches(tmp_path: Path) -> int:
    """Batches the journal has answered."""
    return _rows(tmp_path, "journal.sqlite", "batches")
