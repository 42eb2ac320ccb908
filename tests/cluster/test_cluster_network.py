"""What ``--cluster`` opens on the host: a Ray the run starts listens on loopback only and lives in a
session directory of its own; ``auto`` joins only the cluster ``RAY_ADDRESS`` names or one this user announced; an
address where nothing answers fails in one line within the network timeout."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ldpclient.cli.errors import EXIT_USAGE
from ldpclient.cluster.ray_engine import RayEngine, announced_cluster, check_reachable
from ldpclient.state import StateError
from support.cli_runs import invoke, label_args, mock_teacher, private_folder

#: Run in a process of its own: start the engine as ``--cluster auto`` does, run a stage on its workers, then list
#: the listening TCP sockets of this process and every process below it (Ray's GCS, raylet, workers), as
#: ``ss -ltnp`` would, from /proc.
_PROBE = r"""
import json, os, sys
import numpy as np
from ldpclient.cluster.engine import LocalEngine
from ldpclient.cluster.ray_engine import RayEngine

class Double:
    def __init__(self): pass
    def __call__(self, block): return {"start": block["start"], "x": block["x"] * 2}

def descendants(root):
    children = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(pid))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out

def listening(pids):
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            cells = line.split()
            if cells[3] == "0A" and cells[9] in inodes:  # LISTEN
                found.append(cells[1])
    return found

engine = RayEngine("auto")
out = list(engine.map_blocks(Double, {}, [{"start": 0, "x": np.arange(3)}]))
assert [list(b["x"]) for b in out] == [[0, 2, 4]], out
session = engine._session_root
print(json.dumps({"joined": engine.joined, "listening": listening(descendants(os.getpid())),
                  "session": session, "session_existed": bool(session) and os.path.isdir(session)}))
engine.close()
print(json.dumps({"session_left": bool(session) and os.path.exists(session)}))
"""

_LOOPBACK = ("0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000")


def _address(hex_address: str) -> str:
    return hex_address.rsplit(":", 1)[0]


def test_a_ray_the_run_starts_listens_on_loopback_only_in_a_session_directory_of_its_own() -> None:
    pytest.importorskip("ray")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    # where Ray's shared directory would be (nothing announced there), short enough for Ray's socket paths
    tmp_path = Path(tempfile.mkdtemp(prefix="ldp-t-", dir="/tmp"))
    env["TMPDIR"] = str(tmp_path)
    res = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    during, after = (json.loads(line) for line in res.stdout.strip().splitlines()[-2:])
    assert during["joined"] == "a Ray started for this run, on 127.0.0.1 only"
    assert len(during["listening"]) >= 3, during  # GCS, raylet, workers: what is checked is there
    assert all(_address(a) in _LOOPBACK for a in during["listening"]), during["listening"]
    assert during["session_existed"] and Path(during["session"]).parent == tmp_path
    assert not after["session_left"]
    assert not (tmp_path / "ray").exists()  # nothing in the machine's shared Ray directory
    shutil.rmtree(tmp_path)


def test_auto_joins_ray_address_or_a_cluster_this_user_announced_and_nothing_else(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert RayEngine._target("auto") == (None, "a Ray started for this run, on 127.0.0.1 only")
    shared = tmp_path / "ray"
    shared.mkdir(mode=0o700)
    announced = shared / "ray_current_cluster"
    announced.write_text("127.0.0.1:6379\n")
    announced.chmod(0o644)
    assert announced_cluster() == "127.0.0.1:6379"
    assert RayEngine._target("auto") == ("127.0.0.1:6379", "the Ray cluster this user started at 127.0.0.1:6379")
    shared.chmod(0o777)  # a folder every local user can write: its announcement could be anyone's
    assert announced_cluster() is None
    shared.chmod(0o700)
    announced.chmod(0o666)
    assert announced_cluster() is None
    announced.chmod(0o644)
    if os.getuid() == 0:  # another user's announcement (root can make one)
        os.chown(announced, 65534, 65534)
        assert announced_cluster() is None
        os.chown(announced, 0, 0)
    announced.unlink()
    (shared / "elsewhere").write_text("10.0.0.9:6379")
    announced.symlink_to(shared / "elsewhere")
    assert announced_cluster() is None
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6380")
    assert RayEngine._target("auto") == ("127.0.0.1:6380", "the Ray cluster at 127.0.0.1:6380 (RAY_ADDRESS)")
    assert RayEngine._target("ray://127.0.0.1:10001") == ("ray://127.0.0.1:10001",
                                                          "the Ray cluster at ray://127.0.0.1:10001")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_cluster_address_where_nothing_answers_fails_in_one_line_within_the_timeout(
        tmp_path: Path, postgres_url: str) -> None:
    port = _closed_port()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(StateError, match="nothing answers there"):
            check_reachable(address, 2.0)
    with pytest.raises(StateError, match="is not a Ray address"):
        check_reachable("no-port-here", 2.0)
    folder = private_folder(tmp_path)
    with mock_teacher() as srv:
        started = time.monotonic()
        res = invoke(
            [
                *label_args(folder, srv.model_url, tmp_path),
                "--cluster",
                f"127.0.0.1:{port}",
                "--state",
                postgres_url,
                "--timeout",
                "3",
            ]
        )
        assert time.monotonic() - started < 60
        assert res.exit_code == EXIT_USAGE, res.output
        line = res.stderr.strip().splitlines()[-1]  # after the loading bar
        assert line.startswith(f"error: --cluster '127.0.0.1:{port}': nothing answers there"), res.stderr
        assert "Traceback" not in res.output
        assert srv.usage()["total"]["images"] == 0
