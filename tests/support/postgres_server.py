"""A throwaway PostgreSQL server for the tests: ``initdb`` into a temp folder, ``pg_ctl`` on a free loopback port.

Found under ``$LDPCLIENT_PG_BIN`` or Debian's ``/usr/lib/postgresql/<version>/bin`` (or on ``PATH``). PostgreSQL
refuses to run as root: as root (CI), the cluster is made and run as the unprivileged ``nobody`` user
(``runuser``), in a folder that user owns. Trust authentication on 127.0.0.1 only; fsync off unless asked for (a
test server: durability is PostgreSQL's, not what the tests measure; the benchmark turns it on). :func:`start`
returns a :class:`Server` (its URL,
``stop()``) or raises :class:`Unavailable` with the reason to skip.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


class Unavailable(RuntimeError):
    """No PostgreSQL (or no psycopg) here: the reason, for a skip."""


@dataclass
class Server:
    url: str
    root: Path
    _run_as: list[str]
    _bin: Path
    _options: str = ""

    def database(self, name: str) -> str:
        """A fresh database on this server; its URL."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def crash(self) -> None:
        """``pg_ctl stop -m immediate``: every connection cut, no shutdown checkpoint (a crash, for the server);
        the data stay for :meth:`start_again`."""
        subprocess.run([*self._run_as, str(self._bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate",
                        "-w", "stop"], capture_output=True, timeout=60)

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every connection cut, the server back at once."""
        subprocess.run([*self._run_as, str(self._bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "fast",
                        "-o", self._options, "-l", str(self.root / "log"), "-w", "restart"], capture_output=True,
                       timeout=90)
        _wait_for_connections(self)

    def start_again(self) -> None:
        """Start the server after :meth:`crash` (it recovers from its write-ahead log), once it takes connections."""
        _pg_ctl_start(self._run_as, self._bin, self.root, self._options)
        _wait_for_connections(self)

    def stop(self) -> None:
        self.crash()
        shutil.rmtree(self.root, ignore_errors=True)


def start_for_tests(*, fsync: bool = False) -> Server:
    """:func:`start`, or the test skipped with the reason where PostgreSQL or psycopg is missing
    (``LDPCLIENT_REQUIRE_POSTGRES=1`` fails it instead, as in .ci/run)."""
    import pytest

    try:
        return start(fsync=fsync)
    except Unavailable as exc:
        if os.environ.get("LDPCLIENT_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL required here: {exc}")
        pytest.skip(str(exc))


def find_bin() -> Path | None:
    explicit = os.environ.get("LDPCLIENT_PG_BIN")
    candidates = [explicit] if explicit else []
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for c in candidates:
        if c and (Path(c) / "initdb").exists() and (Path(c) / "pg_ctl").exists():
            return Path(c)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(*, fsync: bool = False) -> Server:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise Unavailable("psycopg is not installed (pip install 'ldpclient[cluster]')") from None
    bin_dir = find_bin()
    if bin_dir is None:
        raise Unavailable("no PostgreSQL server binaries (initdb, pg_ctl) here")
    run_as: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="ldpclient-pg-"))
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            raise Unavailable("running as root and no runuser to start PostgreSQL as an unprivileged user")
        run_as = [runuser, "-u", "nobody", "--"]
        os.chmod(root, 0o755)
        shutil.chown(root, "nobody")
    data = root / "data"
    init = subprocess.run([*run_as, str(bin_dir / "initdb"), "-D", str(data), "-U", "ldp", "--auth=trust",
                           "-E", "UTF8", "--no-sync"], capture_output=True, text=True, timeout=120)
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise Unavailable(f"initdb failed: {init.stderr.strip()[-300:]}")
    port = _free_port()
    options = f"-h 127.0.0.1 -p {port} -k {root} -c fsync={'on' if fsync else 'off'} -c max_connections=60"
    try:
        _pg_ctl_start(run_as, bin_dir, root, options)
    except Unavailable:
        shutil.rmtree(root, ignore_errors=True)
        raise
    server = Server(f"postgresql://ldp@127.0.0.1:{port}/postgres", root, run_as, bin_dir, options)
    _wait_for_connections(server)
    return server


def _pg_ctl_start(run_as: list[str], bin_dir: Path, root: Path, options: str) -> None:
    started = subprocess.run([*run_as, str(bin_dir / "pg_ctl"), "-D", str(root / "data"), "-o", options,
                              "-l", str(root / "log"), "-w", "-t", "60", "start"], capture_output=True, text=True,
                             timeout=90)
    if started.returncode != 0:
        log = (root / "log").read_text(errors="replace")[-300:] if (root / "log").exists() else started.stderr
        raise Unavailable(f"pg_ctl start failed: {log.strip()}")


def _wait_for_connections(server: Server) -> None:
    deadline = time.monotonic() + 30
    import psycopg

    while True:
        try:
            psycopg.connect(server.url, connect_timeout=5).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                server.stop()
                raise Unavailable("PostgreSQL started but takes no connections") from None
            time.sleep(0.2)
