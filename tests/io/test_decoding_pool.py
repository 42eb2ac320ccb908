"""Decoding a folder with a pool of processes: same order, records and skips as one process; a dying
process is one line; Ctrl-C stops the pool."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import ldpclient.io.folders as data
from ldpclient.io.folders import DataError, load_private_folder, spool_private_folder

TESTS = Path(__file__).resolve().parents[1]


def folder(root: Path, n: int = 40) -> Path:
    rng = np.random.default_rng(3)
    for k in range(n):
        sub = root / f"{k % 3}"
        sub.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (9, 7), dtype=np.uint8)).save(sub / f"{k:03d}.png")
    (root / "1" / "broken.png").write_bytes(b"\x89PNG not really")
    (root / "2" / "empty.png").write_bytes(b"")
    return root


def test_a_pool_gives_the_order_records_ids_and_skips_of_one_process(tmp_path, monkeypatch):
    root = folder(tmp_path / "p")
    monkeypatch.setattr(data, "SPOOL_CHUNK", 5)  # several runs per process
    one = load_private_folder(root, (1, 8, 8), workers=1)
    calls: list[tuple[int, int]] = []
    two = load_private_folder(root, (1, 8, 8), workers=2, progress=lambda d, t: calls.append((d, t)))
    assert two.paths == one.paths and two.skipped == one.skipped and torch.equal(two.records, one.records)
    assert [s.path for s in two.skipped] == ["1/broken.png", "2/empty.png"]
    assert calls[-1] == (41, 41) and [d for d, _ in calls] == sorted(d for d, _ in calls)
    with spool_private_folder(root, (1, 8, 8), workers=1) as a, spool_private_folder(root, (1, 8, 8), workers=2) as b:
        idx = np.arange(len(a.records))
        assert torch.equal(a.records.read(idx), b.records.read(idx))
        assert a.records.source_ids(idx) == b.records.source_ids(idx)


def test_a_decoding_process_that_dies_is_one_line(tmp_path, monkeypatch):
    root = folder(tmp_path / "p", 12)
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(root / "0" / "die.png")
    monkeypatch.setattr(data, "SPOOL_CHUNK", 4)
    monkeypatch.syspath_prepend(str(TESTS))
    from support import decoding_helpers

    monkeypatch.setattr(data, "decode_files", decoding_helpers.die_on_bad)
    with pytest.raises(DataError, match="a decoding process died") as info:
        spool_private_folder(root, (1, 8, 8), workers=2)
    assert "\n" not in str(info.value)


def test_the_pool_is_used_for_large_folders_only():
    assert data.decoding_workers(data.POOL_MIN_FILES - 1) == 1
    assert data.decoding_workers(data.POOL_MIN_FILES) == data.available_cores()
    assert data.decoding_workers(10, workers=3) == 3
    with pytest.raises(ValueError, match="workers"):
        data.decoding_workers(10, workers=0)


CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from support import decoding_helpers
    import ldpclient.io.folders as data
    data.SPOOL_CHUNK = 4
    data.decode_files = decoding_helpers.slow
    def progress(done, total):
        print("progress", done, flush=True)
    try:
        data.spool_private_folder({root!r}, (1, 8, 8), workers=2, progress=progress)
        print("finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
""")


def test_ctrl_c_stops_the_pool_at_once(tmp_path):
    root = folder(tmp_path / "p", 200)  # 50 runs of 4 files at 0.2 s each: 5 s with two processes
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(tests=str(TESTS), root=str(root))],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("progress"), line
    os.kill(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert "interrupted" in out and "finished" not in out
    # the runs in flight finish (two a process, 4 files a run; two more runs' margin for any that ended between the
    # first line and the signal), the queued ones are cancelled: counted in files, not timed (a busy machine slows
    # the pool and the clock alike; all 200 would take 5 s)
    # (a line the signal cut short, "progress" without its count, is left out)
    done = [int(m.group(1)) for m in re.finditer(r"^progress (\d+)$", out, re.MULTILINE)]
    assert max(done, default=0) <= int(line.split()[1]) + (2 * 2 + 2) * 4 < 200, out
    assert proc.returncode == 0
