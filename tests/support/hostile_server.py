"""A teacher that lies: a real stdlib HTTP server on 127.0.0.1 for the hostile-peer tests.

``HostileServer(behaviour)`` serves an Open Inference Protocol-looking model ``m`` whose
metadata or infer answers misbehave in one chosen way:

* ``huge-shape``: metadata declares an input of ``[-1, 1, 100000, 100000]``;
* ``gzip-bomb-metadata`` / ``gzip-bomb-infer``: a small gzip body (``Content-Encoding: gzip``)
  that inflates to 256 MiB;
* ``big-body``: a plain 80 MB metadata body;
* ``trickle``: metadata headers at once, then the body one byte every 0.2 s;
* ``trickle-headers``: the metadata answer's status line and headers themselves, one byte every 0.2 s;
* ``redirect``: every request answered ``307`` to another port (``redirect_to``);
* ``labels:<json>``: infer answers ``{"outputs": [{"name": "label", "datatype": "INT64",
  "data": <json>}]}`` whatever was asked (e.g. ``[1.7]``, ``[true]``, ``["3"]``, ``[2**70]``).
* ``names:<json>``: metadata publishes ``class_names`` <json> (10 of them: formulas, escape
  sequences, or 5 MB each) and infer answers label ``k % 10`` for the k-th query;
* ``error-text``: infer answers 400 with an ``error`` that holds terminal escape sequences;
* ``shape:<json>``: metadata declares input shape <json> (e.g. ``[-1, 1, 4096, 4096]``: inside the
  plausibility limits, too large for the machine's memory once batched);
* ``range:<json>``: metadata publishes ``value_range`` <json>;
* ``status:<code>``: infer answers that bare status (e.g. 304, no Location);
* ``scores:<json>``: metadata declares an FP32 score output of 10 classes, infer answers <json> as its data;
* ``hang-infer``: metadata as usual, but an infer request is read and never answered (until the
  server stops);
* ``echo-token``: infer answers 401 with 250 characters of padding and then the bearer token
  it was sent (a server that reflects the credential into its error).

Everything it was asked is counted in ``requests`` (path list), so a test can check that
nothing reached a host the user never named.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

META = {
    "name": "m",
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 1, 8, 8]}],
    "outputs": [{"name": "label", "datatype": "INT64", "shape": [-1]}],
    "parameters": {"num_classes": 10},
}


@lru_cache(maxsize=1)
def gzip_bomb() -> bytes:
    """256 MiB of zeros inside a valid gzip stream of about 250 KB."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"\0" * (1 << 20)
    out = [comp.compress(chunk) for _ in range(256)]
    out.append(comp.flush())
    return b"".join(out)


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {"Content-Type": "application/json"}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._answer(self.rfile.read(length))

    def _batch_rows(self, body: bytes) -> int:
        """Rows of the first input of an infer request, JSON or binary (1 when it cannot be read)."""
        try:
            header_len = self.headers.get("Inference-Header-Content-Length")
            return int(json.loads(body[: int(header_len)] if header_len else body)["inputs"][0]["shape"][0])
        except (ValueError, KeyError, IndexError, TypeError):
            return 1

    def _answer(self, body: bytes = b"") -> None:
        srv = self.server
        srv.requests.append(self.path)
        how = srv.behaviour
        infer = self.path.endswith("/infer")
        if how == "redirect":
            return self._send(307, b"", {"Location": f"http://127.0.0.1:{srv.redirect_to}{self.path}"})
        if self.path.startswith("/v2/health"):
            return self._send(200, b"", {})
        if not infer:
            meta = dict(META)
            if how.startswith("range:"):
                meta["parameters"] = {"num_classes": 10, "value_range": json.loads(how[len("range:"):])}
            if how.startswith("scores:"):
                meta["outputs"] = [{"name": "label", "datatype": "FP32", "shape": [-1, 10]}]
            if how.startswith("shape:"):
                meta["inputs"] = [{"name": "x", "datatype": "FP32", "shape": json.loads(how[len("shape:"):])}]
            if how.startswith("names:"):
                meta["parameters"] = {"num_classes": 10, "class_names": json.loads(how[len("names:"):])}
            if how == "huge-shape":
                meta["inputs"] = [{"name": "x", "datatype": "FP32", "shape": [-1, 1, 100000, 100000]}]
            if how == "gzip-bomb-metadata":
                return self._send(200, gzip_bomb(), {"Content-Type": "application/json", "Content-Encoding": "gzip"})
            if how == "big-body":
                return self._send(200, json.dumps({**meta, "pad": "x" * 80_000_000}).encode())
            if how == "trickle":
                return self._trickle(json.dumps(meta).encode())
            if how == "trickle-headers":
                body = json.dumps(meta).encode()
                head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                return self._drip(head.encode() + body)
            return self._send(200, json.dumps(meta).encode())
        if how == "gzip-bomb-infer":
            return self._send(200, gzip_bomb(), {"Content-Type": "application/json", "Content-Encoding": "gzip"})
        if how.startswith("names:"):
            n = self._batch_rows(body)
            body_out = {
                "outputs": [{"name": "label", "datatype": "INT64", "shape": [n], "data": [k % 10 for k in range(n)]}]
            }
            return self._send(200, json.dumps(body_out).encode())
        if how.startswith("status:"):
            return self._send(int(how[len("status:"):]), b"", {})
        if how.startswith("scores:"):
            data = json.loads(how[len("scores:"):])
            body_out = {"outputs": [{"name": "label", "datatype": "FP32", "shape": [len(data), 10], "data": data}]}
            return self._send(200, json.dumps(body_out).encode())
        if how == "hang-infer":
            srv.stopping.wait()
            return None
        if how == "error-text":
            return self._send(400, json.dumps({"error": "bad \x1b[2J\x1b]0;pwned\x07 input \x7f\x9b31m"}).encode())
        if how == "echo-token":
            token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
            return self._send(401, json.dumps({"error": "denied " + "p" * 250 + " for " + token}).encode())
        if how.startswith("labels:"):
            data = json.loads(how[len("labels:"):])
            body = {"outputs": [{"name": "label", "datatype": "INT64", "shape": [len(data)], "data": data}]}
            return self._send(200, json.dumps(body).encode())
        return self._send(500, b'{"error": "no such behaviour"}')

    def _trickle(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self._drip(body)

    def _drip(self, body: bytes) -> None:
        try:
            for i in range(len(body)):
                if self.server.stopping.is_set():
                    return
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            return


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the client hanging up on a lie is the point, not an error worth a traceback

    def __init__(self, behaviour: str, redirect_to: int | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.behaviour = behaviour
        self.redirect_to = redirect_to
        self.requests: list[str] = []
        self.stopping = threading.Event()


class HostileServer:
    """Context manager: ``with HostileServer("trickle") as srv: srv.url, srv.requests``."""

    def __init__(self, behaviour: str, *, redirect_to: int | None = None) -> None:
        self._server = _Server(behaviour, redirect_to)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def requests(self) -> list[str]:
        return self._server.requests

    def __enter__(self) -> "HostileServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()


__all__ = ["HostileServer", "gzip_bomb"]
