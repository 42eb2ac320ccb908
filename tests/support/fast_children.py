"""Child processes that start in milliseconds, for the tests where several processes race or one is killed.

A fresh interpreter pays about 2 s to import torch and ldpclient; eight of them racing one cap paid it eight times,
on two cores. Here every child is forked from multiprocessing's *forkserver*: one single-threaded process that
imported those modules once and has run no torch operation (so forking it is safe, whatever threads this test
process runs), and that forks a child per :class:`Child`. A child is a fresh process with its own pid, its own
database connections and its own signals: what the race and kill tests need.

A child runs ``target(*args, say=...)``, a module-level function of a module the tests folder holds; ``say(line)``
sends a line back to the test (:meth:`Child.expect`). :func:`run_cli` runs the command line that way, as
:func:`subprocess.run` would run it: the hostile-teacher and option-error tests start some fifty ``ldpclient``
processes, each of which paid the 2.5 s of a fresh interpreter. A child's peak RSS (``VmHWM``) counts the modules
it inherited, as a fresh interpreter counts the same modules it imports. The tests that kill or interrupt a run
still start a fresh interpreter (``python -m ldpclient.cli``), which also keeps the module entry point tested.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import subprocess
import sys
import tempfile
from functools import lru_cache
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any, Callable, Mapping

#: What the forkserver imports once, before it forks any child.
PRELOAD = ["torch", "psycopg", "ldpclient.privacy", "ldpclient.teachers.journal", "ldpclient.cli.commands",
           "ldpclient.run.label", "support.ledger_crash_child", "support.postgres_race_child",
           "support.journal_child"]


@lru_cache(maxsize=1)
def _context() -> ForkServerContext:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def _run(target: Callable[..., Any], args: tuple[Any, ...], pipe: multiprocessing.connection.Connection) -> None:
    target(*args, say=pipe.send)


class Child:
    """``target(*args, say=...)`` in a process forked from the forkserver (see the module doc)."""

    def __init__(self, target: Callable[..., Any], *args: Any) -> None:
        ctx = _context()
        self._lines, writer = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=_run, args=(target, args, writer), daemon=True)
        self.process.start()
        writer.close()

    def said(self, timeout: float = 120.0) -> Any:
        """The next thing the child says (fails when it ends or stays silent ``timeout`` s)."""
        assert self._lines.poll(timeout), f"the child said nothing in {timeout} s (exit code {self.process.exitcode})"
        try:
            return self._lines.recv()
        except EOFError:
            raise AssertionError(f"the child ended without a word (exit code {self.process.exitcode})") from None

    def expect(self, line: str, timeout: float = 120.0) -> None:
        """Until the child says ``line``; fails when it says something else, ends or stays silent ``timeout`` s."""
        said = self.said(timeout)
        assert said == line, said

    def wait(self, timeout: float = 240.0) -> int | None:
        """The exit code (minus the signal's number when killed); a child that overstays is killed first."""
        self.process.join(timeout)
        if self.process.exitcode is None:
            self.kill()
        return self.process.exitcode

    def kill(self) -> None:
        if self.process.pid is not None and self.process.exitcode is None:
            try:
                os.kill(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.join(10)


def _cli(args: list[str], env: Mapping[str, str], out: str, err: str, peak_rss: bool, *,
         say: Callable[[object], None]) -> None:
    """``ldpclient <args>`` in this child: its own environment, its stdout and stderr into the files ``out`` and
    ``err``; with ``peak_rss``, the process's peak RSS (``VmHWM``) printed last on stderr (:mod:`peak_rss`)."""
    from ldpclient.cli.commands import app

    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["ldpclient", *args]
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    try:
        app(args)
    finally:
        if peak_rss:
            status = Path("/proc/self/status").read_text()
            print("PEAK_RSS_KB", re.search(r"VmHWM:\s+(\d+)", status).group(1), file=sys.stderr)  # type: ignore[union-attr]
        sys.stdout.flush()
        sys.stderr.flush()


def run_cli(*args: str, env: Mapping[str, str] | None = None, timeout: float = 120.0,
            peak_rss: bool = False) -> subprocess.CompletedProcess[str]:
    """``ldpclient <args>`` as :func:`subprocess.run` with ``capture_output=True, text=True`` would run it, in a
    :class:`Child`: its exit code, stdout and stderr (:class:`subprocess.TimeoutExpired` after ``timeout`` s).
    Environment variables that libraries read when they are imported (``OMP_NUM_THREADS``) keep the forkserver's
    values: a test that sets them runs a fresh interpreter instead."""
    with tempfile.TemporaryDirectory(prefix="ldpclient-cli-") as folder:
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        for path in (out, err):
            Path(path).touch()
        child = Child(_cli, list(args), dict(os.environ if env is None else env), out, err, peak_rss)
        child.process.join(timeout)
        if child.process.exitcode is None:
            child.kill()
            raise subprocess.TimeoutExpired(["ldpclient", *args], timeout)
        code = child.process.exitcode
        return subprocess.CompletedProcess(["ldpclient", *args], code, Path(out).read_text(errors="replace"),
                                           Path(err).read_text(errors="replace"))
