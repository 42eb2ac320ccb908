"""A real headless Chromium for the page tests, driven over the DevTools protocol on a pipe.

``chromium --remote-debugging-pipe`` reads commands on fd 3 and writes answers and events on fd 4, each a
JSON message ended by a NUL byte: no websocket library, no driver download. :func:`open_page` loads a file,
waits for its load event, and returns what the page did: every URL it requested, the console and load
errors, and the value of a JavaScript expression evaluated in it (DevTools evaluation is not subject to the
page's Content-Security-Policy, so a page without scripts can still be inspected).

Chromium comes from the system packages (``apt-get install chromium``; ``.ci/run`` installs it). Where it is
missing the tests skip, unless ``LDPCLIENT_REQUIRE_BROWSER=1`` (set by ``.ci/run``) makes that a failure.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
#: The flags a closed network needs (no background connections, no component updates), headless, as root.
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
    "--disable-background-networking", "--disable-component-update", "--disable-extensions",
    "--disable-dev-shm-usage", "--remote-debugging-pipe",
)


def chromium_or_skip() -> str:
    """The Chromium executable, or a skip (a failure where ``LDPCLIENT_REQUIRE_BROWSER=1``)."""
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    message = "no Chromium on this machine (apt-get install chromium)"
    if os.environ.get("LDPCLIENT_REQUIRE_BROWSER") == "1":
        pytest.fail(message + "; LDPCLIENT_REQUIRE_BROWSER=1 asks for the browser tests to run")
    pytest.skip(message)


@dataclass
class PageVisit:
    """What a page did in the browser: ``requests`` (every URL asked for, the page itself included),
    ``failed`` (requests that did not load, with the reason), ``console`` (console and log entries),
    ``value`` (the evaluated expression's JSON value), ``load_seconds`` (navigation to load event)."""

    requests: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)
    value: Any = None
    load_seconds: float = 0.0


class _Pipe:
    def __init__(self, process: subprocess.Popen[bytes], to_browser: int, from_browser: int) -> None:
        self.process, self.to_browser, self.from_browser = process, to_browser, from_browser
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("the browser did not answer in time")
            chunk = os.read(self.from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("the browser closed its DevTools pipe")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)  # type: ignore[no-any-return]

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})  # type: ignore[no-any-return]
            self.events.append(answer)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        for event in self.events:
            if event.get("method") == method:
                return event
        deadline = time.monotonic() + timeout
        while True:
            event = self._read_message(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event


def open_page(path: Path, expression: str, *, width: int = 1200, height: int = 900,
              screenshot: Path | None = None) -> PageVisit:
    """Load ``path`` in headless Chromium, wait for its load event, evaluate ``expression`` (its JSON value is
    returned), optionally save a PNG screenshot of the whole page; the browser is stopped whatever happens."""
    executable = chromium_or_skip()
    command_r, command_w = os.pipe()
    event_r, event_w = os.pipe()

    def child_fds() -> None:
        """In the child: the browser reads commands on fd 3 and writes on fd 4 (moved above 10 first, so
        that neither end overwrites the other). Every other descriptor of ours is close-on-exec."""
        high_r, high_w = fcntl.fcntl(command_r, fcntl.F_DUPFD, 10), fcntl.fcntl(event_w, fcntl.F_DUPFD, 10)
        os.dup2(high_r, 3)
        os.dup2(high_w, 4)

    with tempfile.TemporaryDirectory(prefix="ldpclient-browser-") as profile:
        process = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=child_fds, close_fds=False,
        )
        os.close(command_r)
        os.close(event_w)
        pipe = _Pipe(process, command_w, event_r)
        try:
            return _visit(pipe, path, expression, screenshot, (width, height))
        finally:
            try:
                pipe.send("Browser.close", timeout=5)
            except Exception:  # noqa: BLE001 - the browser is killed below anyway
                pass
            os.close(command_w)
            os.close(event_r)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _visit(pipe: _Pipe, path: Path, expression: str, screenshot: Path | None, size: tuple[int, int]) -> PageVisit:
    target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    # the viewport as a device of that size (a window is never narrower than 500 px): a phone below 600 px
    width, height = size
    pipe.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                     "mobile": width < 600}, session=session)
    for domain in ("Page", "Network", "Runtime", "Log"):
        pipe.send(f"{domain}.enable", session=session)
    pipe.events.clear()
    start = time.monotonic()
    pipe.send("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
    pipe.wait_for("Page.loadEventFired", timeout=60)
    visit = PageVisit(load_seconds=time.monotonic() - start)
    result = pipe.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
    visit.value = result.get("result", {}).get("value")
    if screenshot is not None:
        content = pipe.send("Page.getLayoutMetrics", {}, session=session)["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": content["width"], "height": content["height"], "scale": 1}
        shot = pipe.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip},
                         session=session)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
    for event in pipe.events:
        params = event.get("params", {})
        if event.get("method") == "Network.requestWillBeSent":
            visit.requests.append(params["request"]["url"])
        elif event.get("method") == "Network.loadingFailed":
            visit.failed.append(f"{params.get('type')}: {params.get('errorText')}")
        elif event.get("method") == "Runtime.consoleAPICalled":
            visit.console.append(" ".join(str(a.get("value")) for a in params.get("args", [])))
        elif event.get("method") == "Log.entryAdded":
            visit.console.append(f"{params['entry'].get('level')}: {params['entry'].get('text')}")
    return visit
