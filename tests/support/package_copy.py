"""Run a probe against a copy of the ldpclient package with one file added (tests of "one new file" registries)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import ldpclient


def probe_with_added_file(tmp_path: Path, relative: str, text: str, probe: str) -> Any:
    """Copy the package under ``tmp_path``, write ``text`` to ``ldpclient/<relative>``, run ``probe`` (Python
    source printing one JSON line last) against the copy and return that JSON. Fails the test on an error."""
    copy = tmp_path / "ldpclient"
    shutil.copytree(Path(ldpclient.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / relative).write_text(text)
    out = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(tmp_path)},
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
