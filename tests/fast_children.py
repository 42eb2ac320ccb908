"""Child processes that start in milliseconds, for the tests where several processes race or one is killed.

A fresh interpreter pays about 2 s to import torch and ldpclient; eight of them racing one cap paid it eight times,
on two cores. Here every child is forked from multiprocessing's *forkserver*: one single-threaded process that
imported those modules once and has run no torch operation (so forking it is safe, whatever threads this test
process runs), and that forks a child per :class:`Child`. A child is a fresh process with its own pid, its own
database connections and its own signals: what the race and kill tests need.

A child runs ``target(*args, say=...)``, a module-level function of a module the tests folder holds; ``say(line)``
sends a line back to the test (:meth:`Child.expect`).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
from functools import lru_cache
from multiprocessing.context import ForkServerContext
from typing import Any, Callable

#: What the forkserver imports once, before it forks any child.
PRELOAD = ["torch", "psycopg", "ldpclient.privacy", "ldpclient.teachers.journal", "ledger_crash_child",
           "postgres_race_child", "journal_child"]


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
