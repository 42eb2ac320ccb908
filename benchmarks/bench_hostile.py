"""Peak memory and time of `ldpclient label` against each hostile teacher of tests/hostile_server.py.

Each case runs the CLI in a fresh process (6 private 8x8 images, defaults otherwise, `--timeout 1`,
`--max-retry-time 0`) and reports its exit code, its one-line error and its peak RSS
(`ru_maxrss`). The target of issue 12: a one-line error, no hang, peak RSS under 1.5 GB.

    .venv/bin/python benchmarks/bench_hostile.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from hostile_server import HostileServer  # noqa: E402
from peak_rss import cli_command, peak_rss_kb, without_peak_line  # noqa: E402

CASES = (
    "huge-shape",
    "gzip-bomb-metadata",
    "big-body",
    "gzip-bomb-infer",
    "trickle",
    "trickle-headers",
    "labels:[1.7]",
)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    private = work / "private"
    private.mkdir()
    rng = np.random.default_rng(0)
    for k in range(6):
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(private / f"{k}.png")
    print(f"{'hostile teacher':<22}{'exit':>5}{'seconds':>9}{'peak RSS MB':>13}  message")
    for case in CASES:
        with HostileServer(case) as srv:
            t0 = time.perf_counter()
            proc = subprocess.run(
                cli_command("label", str(private), "--teacher", f"{srv.url}/v2/models/m",
                            "--state-dir", str(work / case.replace(":", "_")), "--output", str(work / "l.csv"),
                            "--queries", "10", "--epochs", "1", "--timeout", "1", "--max-retry-time", "0", "--quiet"),
                capture_output=True, text=True, timeout=300,
            )
            wall = time.perf_counter() - t0
        rss_mb = peak_rss_kb(proc.stderr) / 1024
        message = " ".join(without_peak_line(proc.stderr.strip()).splitlines())
        print(f"{case:<22}{proc.returncode:>5}{wall:>9.1f}{rss_mb:>13.0f}  {message[:110]}")


if __name__ == "__main__":
    main()
