"""Start and stop the mock teacher: in a background thread (tests) or as a subprocess, and the CLI."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .config import TOKENS_ENV, ServerConfig, build_parser
from .server import MockTeacherServer
from .teacher import TeacherModel, build_teacher, save_checkpoint

#: The line ``python -m mock_server`` prints (and flushes) on stdout once it accepts connections.
LISTENING_PREFIX = "mock teacher listening on "


class RunningServer:
    """Handle on a started mock teacher. ``url`` is ``http://127.0.0.1:PORT`` (no model path)."""

    def __init__(self, config: ServerConfig, url: str, *, server: MockTeacherServer | None = None,
                 thread: threading.Thread | None = None, process: subprocess.Popen | None = None,
                 stderr_path: str | None = None) -> None:
        self.config = config
        self.url = url
        self.port = int(url.rsplit(":", 1)[1])
        self.model_name = config.model_name
        self.server = server
        self._thread = thread
        self.process = process
        self._stderr_path = stderr_path
        self.returncode: int | None = None

    @property
    def model_url(self) -> str:
        """``{url}/v2/models/{model_name}``."""
        return f"{self.url}/v2/models/{self.model_name}"

    @property
    def teacher(self) -> TeacherModel | None:
        """The served model (in-thread servers only)."""
        return self.server.teacher if self.server is not None else None

    def usage(self) -> dict[str, Any]:
        """The ``GET /usage`` document (read directly in-thread, over HTTP for a subprocess)."""
        if self.server is not None:
            return self.server.billing.snapshot()
        req = urllib.request.Request(f"{self.url}/usage")
        if self.config.tokens:
            req.add_header("Authorization", f"Bearer {self.config.tokens[0]}")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def fault_stats(self) -> dict[str, int]:
        """Treatments of infer requests so far, e.g. {"ok": 7, "status_503": 2} (in-thread only)."""
        if self.server is None:
            raise RuntimeError("fault_stats() needs an in-thread server")
        return self.server.faults.stats()

    def wait_in_flight(self, timeout: float = 60.0) -> None:
        """Until the server is answering a request (in-thread only); AssertionError after ``timeout`` seconds."""
        if not self._in_thread().wait_in_flight(timeout):
            raise AssertionError(f"the mock teacher got no request in {timeout:g} s")

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Until every request a client sent has been answered and billed and every connection is closed (a client
        that was killed or stopped: what it sent is in :meth:`usage` now; in-thread only); AssertionError after
        ``timeout`` seconds."""
        if not self._in_thread().wait_idle(timeout):
            raise AssertionError(f"the mock teacher was still busy or connected after {timeout:g} s")

    def _in_thread(self) -> MockTeacherServer:
        if self.server is None:
            raise RuntimeError("waiting on the server needs an in-thread server")
        return self.server

    def stderr_text(self) -> str:
        """What a subprocess server wrote to stderr so far ("" in-thread)."""
        if not self._stderr_path:
            return ""
        with open(self._stderr_path, encoding="utf-8", errors="replace") as fh:
            return fh.read()

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful stop (idempotent): in-flight requests finish, then the port is released."""
        if self.server is not None and self._thread is not None:
            if self._thread.is_alive() or not self.server.stopping:
                self.server.graceful_stop(grace=timeout)
                self._thread.join(timeout)
        if self.process is not None and self.returncode is None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
            try:
                self.returncode = self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.returncode = self.process.wait()

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(*, subprocess: bool = False, teacher: TeacherModel | None = None,
          startup_timeout: float = 180.0, **options: Any) -> RunningServer:
    """Start a mock teacher on 127.0.0.1 (port 0 by default) and return its handle; call ``.stop()``.

    ``options`` are ``ServerConfig`` fields. ``teacher`` reuses an already built model
    (in-thread only). ``subprocess=True`` runs ``python -m mock_server`` instead, tokens
    passed through the environment, and waits for its listening line.
    """
    config = ServerConfig.from_kwargs(**options)
    if not subprocess:
        server = MockTeacherServer(config, teacher)
        thread = threading.Thread(target=server.serve_forever, name=f"mock-teacher:{server.port}", daemon=True)
        thread.start()
        return RunningServer(config, server.url, server=server, thread=thread)
    if teacher is not None:
        raise ValueError("teacher= cannot be passed to a subprocess server; use checkpoint=")
    return _start_subprocess(config, startup_timeout)


def _start_subprocess(config: ServerConfig, startup_timeout: float) -> RunningServer:
    env = dict(os.environ)
    env.pop(TOKENS_ENV, None)
    if config.tokens:
        env[TOKENS_ENV] = ",".join(config.tokens)
    fd, stderr_path = tempfile.mkstemp(prefix="mock-teacher-", suffix=".stderr")
    os.close(fd)
    argv = [sys.executable, "-m", "mock_server", *config.to_argv(), "--port", str(config.port)]
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=env, text=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:  # keep draining stdout so the child never blocks on a full pipe
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + startup_timeout
    while True:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            line = None
        if line is not None and line.startswith(LISTENING_PREFIX):
            url = line[len(LISTENING_PREFIX):].strip()
            return RunningServer(config, url, process=proc, stderr_path=stderr_path)
        if line is None:
            proc.kill()
            proc.wait()
            with open(stderr_path, encoding="utf-8", errors="replace") as fh:
                tail = fh.read()[-2000:]
            raise RuntimeError(f"mock teacher subprocess did not start: {tail.strip() or 'no output'}")


@contextmanager
def serve(*, subprocess: bool = False, teacher: TeacherModel | None = None,
          **options: Any) -> Iterator[RunningServer]:
    """Context manager around ``start()``: yields the running server, stops it on exit.

    Example::

        with serve(model="trivial", tokens=["t0"], error_rate_503=0.2) as srv:
            requests.get(f"{srv.url}/v2/health/ready")
    """
    handle = start(subprocess=subprocess, teacher=teacher, **options)
    try:
        yield handle
    finally:
        handle.stop()


def main(argv: Sequence[str] | None = None, prog: str = "python -m mock_server") -> int:
    """CLI entry (``python -m mock_server``, ``ldpclient serve-mock``). Runs until SIGINT/SIGTERM.

    Prints ``mock teacher listening on http://HOST:PORT`` on stdout (flushed) once ready;
    everything else goes to stderr. Returns the exit status (0 after a graceful stop,
    2 for bad options or an unusable teacher, 1 when the port cannot be bound).
    """
    parser = build_parser(prog)
    args = vars(parser.parse_args(argv))
    env_tokens = [t.strip() for t in os.environ.get(TOKENS_ENV, "").split(",") if t.strip()]
    args["tokens"] = tuple(args["tokens"]) + tuple(env_tokens)
    try:
        config = ServerConfig(**args)
    except ValueError as exc:
        parser.error(str(exc))
    if config.torch_threads:
        import torch

        torch.set_num_threads(config.torch_threads)
    try:
        teacher = build_teacher(config)
        if config.save_checkpoint:
            save_checkpoint(teacher, config.save_checkpoint)
    except (ValueError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(teacher.summary(), file=sys.stderr, flush=True)
    try:
        server = MockTeacherServer(config, teacher)
    except OSError as exc:
        print(f"error: cannot listen on {config.host}:{config.port}: {exc}", file=sys.stderr)
        return 1

    stop = threading.Event()
    previous: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
        except ValueError:  # not the main thread: the caller handles shutdown
            pass
    thread = threading.Thread(target=server.serve_forever, name="mock-teacher", daemon=True)
    thread.start()
    auth = f"bearer auth with {len(config.tokens)} token(s)" if config.tokens else "no auth"
    print(f"model {config.model_name!r} at {server.url}/v2/models/{config.model_name} (ldpclient label --teacher "
          f"takes this address), {auth}, price {config.price_per_image:g}/image", file=sys.stderr)
    print(f"{LISTENING_PREFIX}{server.url}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.graceful_stop()
        thread.join(5)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    total = server.billing.snapshot()["total"]
    print(f"mock teacher stopped after {total['requests']} billed requests, {total['images']} images",
          file=sys.stderr, flush=True)
    return 0
