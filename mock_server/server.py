"""The HTTP/1.1 server: routing, auth, billing, faults, query log, graceful shutdown.

Built on the standard library's ``ThreadingHTTPServer`` (one thread per connection,
keep-alive via ``protocol_version = "HTTP/1.1"``): no extra dependency, and every
byte on the wire stays under our control, which fault injection needs (dropping a
connection half-way through a body, trickling a body, lying in a 200).
"""

from __future__ import annotations

import hmac
import json
import select
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np

from .batches import BATCH_PRICE_FACTOR, BatchStore
from .billing import Billing, QuotaExceeded, key_id
from .cloud import ApiError, RequestWindow, annotate, chat_completion, models_list, refuse_injected
from .config import ServerConfig
from .faults import Decision, FaultInjector, RateLimiter, retry_after_header
from .protocol import HEADER_LENGTH, INPUT_NAME, OUTPUT_NAME, ProtocolError, encode_infer_response, parse_infer_request
from .querylog import QueryLog
from .teacher import TeacherModel, build_teacher

SERVER_NAME = "ldpclient-mock-teacher"
SERVER_VERSION = "0.1.0"
#: At most this many bytes of an over-long body are read and discarded before closing,
#: so that the client gets to read its 413 instead of a reset.
_DISCARD_LIMIT = 16 * 1024 * 1024


class HTTPFailure(ProtocolError):
    """An error reply with optional extra headers; ``close`` drops the connection after it. ``doc``: the
    body's JSON when it is not ``{"error": message}`` (the cloud APIs' error objects)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None,
                 close: bool = False, discard: int = 0, doc: Any = None) -> None:
        super().__init__(status, message)
        self.headers = headers or {}
        self.close = close
        self.discard = discard
        self.doc = doc


class MockTeacherServer(ThreadingHTTPServer):
    """An OIP v2 teacher bound to ``config.host:config.port``. Use ``serve()`` in tests."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, config: ServerConfig, teacher: TeacherModel | None = None) -> None:
        self.config = config
        self.teacher = teacher if teacher is not None else build_teacher(config)
        self.billing = Billing(config.price_per_image, config.quota_images, config.price_input_tokens,
                               config.price_output_tokens, BATCH_PRICE_FACTOR)
        self.batches = BatchStore()
        self.faults = FaultInjector(config)
        self.limiter = RateLimiter(config.rate_limit, config.rate_burst) if config.rate_limit else None
        self.chat_window = RequestWindow(config.chat_requests_per_window, config.chat_window)
        self.stopping = False
        self._tokens = [t.encode() for t in config.tokens]
        self._cond = threading.Condition()
        self._active = 0
        self._conns: set[socket.socket] = set()
        self._serving = False
        super().__init__((config.host, config.port), _Handler)
        self.query_log = QueryLog(config.query_log) if config.query_log else None

    def server_bind(self) -> None:  # skip HTTPServer's reverse-DNS lookup of the host
        TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hung up before its answer was written (a TLS client hello that got a 400, a client that
        gave up) is not the server's error: no traceback for it on stderr; anything else as the standard library
        reports it."""
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        host = str(self.server_address[0])
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"

    def serve_forever(self, poll_interval: float = 0.1) -> None:
        self._serving = True
        try:
            super().serve_forever(poll_interval)
        finally:
            self._serving = False

    # --- bookkeeping used by the handler -------------------------------------------------
    def authenticate(self, header: str | None) -> str:
        """Key id of the caller; raises 401 when auth is on and the bearer token is missing or wrong."""
        if not self._tokens:
            return key_id(None)
        scheme, _, token = (header or "").partition(" ")
        token = token.strip()
        if scheme.lower() == "bearer" and token:
            raw = token.encode()
            if any(hmac.compare_digest(raw, t) for t in self._tokens):
                return key_id(token)
        raise HTTPFailure(401, "missing or invalid bearer token" if header else "authorization required",
                          {"WWW-Authenticate": 'Bearer realm="mock-teacher"'})

    def model_metadata(self) -> dict[str, Any]:
        """The OIP metadata document; in strict-spec mode without the custom ``parameters``."""
        t, c = self.teacher, self.config
        doc: dict[str, Any] = {
            "name": c.model_name, "versions": ["1"], "platform": "pytorch",
            "inputs": [{"name": INPUT_NAME, "datatype": "FP32", "shape": [-1, *t.input_shape]}],
            "outputs": [{"name": OUTPUT_NAME, "datatype": "INT64", "shape": [-1]}],
        }
        if c.strict_spec:
            return doc
        return {
            **doc,
            "parameters": {
                "num_classes": t.num_classes, "class_names": list(t.class_names),
                "max_batch_size": c.max_batch_size, "value_range": list(t.value_range),
                "input_datatypes": ["FP32", "UINT8"],
            },
        }

    @contextmanager
    def in_flight(self) -> Iterator[None]:
        with self._cond:
            self._active += 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def track(self, conn: socket.socket, alive: bool) -> None:
        with self._cond:
            (self._conns.add if alive else self._conns.discard)(conn)
            self._cond.notify_all()

    def wait_in_flight(self, timeout: float) -> bool:
        """Until a request is being answered (True), or ``timeout`` seconds (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._active > 0, timeout=timeout)

    def wait_idle(self, timeout: float) -> bool:
        """Until no request is being answered, no connection is open and none waits to be accepted (True: every
        request a client sent before it hung up has been answered and billed), or ``timeout`` seconds (False)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if self._active == 0 and not self._conns and not select.select([self.socket], [], [], 0)[0]:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))  # a connection waiting to be accepted notifies nobody

    def graceful_stop(self, grace: float = 10.0) -> None:
        """Stop accepting, let requests in flight finish (up to ``grace`` s), close idle keep-alive connections."""
        self.stopping = True
        if self._serving:
            self.shutdown()
        with self._cond:
            self._cond.wait_for(lambda: self._active == 0, timeout=grace)
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.server_close()
        if self.query_log is not None:
            self.query_log.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    default_request_version = "HTTP/1.0"  # error replies to garbled request lines still get a status line
    server_version = f"{SERVER_NAME}/{SERVER_VERSION}"
    sys_version = ""
    server: MockTeacherServer

    def version_string(self) -> str:
        return self.server_version

    def setup(self) -> None:
        self.timeout = self.server.config.request_timeout  # type: ignore[misc]  # per-connection socket timeout
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.track(self.connection, False)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.config.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_GET

    # --- plumbing -------------------------------------------------------------------------
    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors found by http.server itself (bad request line, headers, version) as JSON."""
        self.close_connection = True
        self._send(code, _json({"error": message or self.responses.get(code, ("error",))[0]}),
                   {"Content-Type": "application/json"})

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        if self.server.stopping:
            self.close_connection = True
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_json(self, status: int, doc: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, _json(doc), {"Content-Type": "application/json", **(headers or {})})

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            raise HTTPFailure(411, "chunked request bodies are not supported; send Content-Length", close=True)
        values = self.headers.get_all("Content-Length") or []
        if not values:
            if self.command in ("POST", "PUT", "PATCH"):
                raise HTTPFailure(411, "missing Content-Length", close=True)
            return b""
        text = values[0].strip()
        if len({v.strip() for v in values}) > 1 or not text.isdigit() or not text.isascii():
            raise HTTPFailure(400, f"invalid Content-Length {', '.join(values)[:60]!r}", close=True)
        length = int(text)
        if length > self.server.config.max_body_bytes:
            raise HTTPFailure(413, f"body of {length} bytes exceeds the limit of "
                              f"{self.server.config.max_body_bytes}", close=True, discard=length)
        body = self.rfile.read(length)
        if len(body) < length:
            raise HTTPFailure(400, f"body ended after {len(body)} of {length} bytes", close=True)
        return body

    def _discard(self, nbytes: int) -> None:
        """Read and drop up to ``nbytes`` of an unread body (1 s), so the client can read our reply."""
        self.connection.settimeout(1.0)
        left = min(nbytes, _DISCARD_LIMIT)
        try:
            while left > 0:
                chunk = self.rfile.read1(min(left, 65536))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:
            pass

    def _dispatch(self) -> None:
        with self.server.in_flight():
            try:
                self._route()
            except HTTPFailure as exc:
                if exc.close:
                    self.close_connection = True
                self._send_json(exc.status, exc.doc if exc.doc is not None else {"error": exc.message}, exc.headers)
                if exc.discard:
                    self._discard(exc.discard)
            except ProtocolError as exc:
                self._send_json(exc.status, {"error": exc.message})
            except (BrokenPipeError, ConnectionResetError, TimeoutError, socket.timeout):
                self.close_connection = True
            except Exception as exc:  # never let a bug take the connection down silently
                traceback.print_exc(file=sys.stderr)
                self.close_connection = True
                try:
                    self._send_json(500, {"error": f"internal error: {type(exc).__name__}"})
                except OSError:
                    pass

    # --- routes ---------------------------------------------------------------------------
    def _route(self) -> None:
        body = self._read_body()
        path = urlsplit(self.path).path.rstrip("/") or "/"
        parts = path.split("/")[1:]
        cfg = self.server.config
        method = self.command

        def allow(*methods: str) -> None:
            if method not in methods:
                raise HTTPFailure(405, f"method {method} not allowed on {path}", {"Allow": ", ".join(methods)})

        if parts in (["v2", "health", "live"], ["v2", "health", "ready"]):
            allow("GET")
            if cfg.strict_spec:  # the spec advises an empty 200; MLServer and Triton send no body
                return self._send(200, b"", {})
            return self._send_json(200, {parts[-1]: True})
        if parts == ["v2"]:
            allow("GET")
            return self._send_json(200, {"name": SERVER_NAME, "version": SERVER_VERSION,
                                         "extensions": [] if cfg.strict_spec else ["binary_tensor_data"]})
        if parts == ["usage"]:
            allow("GET")
            self.server.authenticate(self.headers.get("Authorization"))
            return self._send_json(200, self.server.billing.snapshot())
        if parts[:1] == ["v1"]:
            return self._cloud(parts[1:], body, allow)
        if len(parts) >= 3 and parts[:2] == ["v2", "models"]:
            rest = parts[3:]
            if rest[:1] == ["versions"]:
                if len(rest) < 2 or rest[1] != "1":
                    raise HTTPFailure(404, f"unknown version {'/'.join(rest[1:2]) or '(none)'!r}; only '1'")
                rest = rest[2:]
            if rest in ([], ["ready"], ["infer"]):
                key = self.server.authenticate(self.headers.get("Authorization"))
                if parts[2] != cfg.model_name:
                    raise HTTPFailure(404, f"unknown model {parts[2][:60]!r}; this server has {cfg.model_name!r}")
                if rest == ["infer"]:
                    allow("POST")
                    return self._infer(body, key)
                allow("GET")
                if rest == ["ready"]:
                    return self._send_json(200, {"name": cfg.model_name, "ready": True})
                return self._send_json(200, self.server.model_metadata())
        raise HTTPFailure(404, f"unknown path {path[:80]!r}")

    def _cloud(self, rest: list[str], body: bytes, allow: Any) -> None:
        """The cloud APIs (:mod:`mock_server.cloud`): chat completions, the models list, Vision's annotate."""
        srv = self.server
        header = self.headers.get("Authorization")
        api_key = self.headers.get("X-Goog-Api-Key") or parse_qs(urlsplit(self.path).query).get("key", [None])[0]
        if header is None and api_key:
            header = f"Bearer {api_key}"
        try:
            key = srv.authenticate(header)
        except HTTPFailure as exc:
            raise HTTPFailure(401, exc.message, exc.headers, doc={"error": {
                "message": "Incorrect API key provided (mock)", "type": "invalid_request_error", "param": None,
                "code": "invalid_api_key"}}) from None
        try:
            if rest == ["models"]:
                allow("GET")
                return self._send_json(200, models_list(srv))
            if rest == ["chat", "completions"]:
                allow("POST")
                answer, headers = chat_completion(srv, body, key, srv.faults.decide())
                return self._send_json(200, answer, headers)
            if rest == ["images:annotate"]:
                allow("POST")
                return self._send_json(200, annotate(srv, body, key, srv.faults.decide()))
            if rest[:1] in (["files"], ["batches"]):
                return self._batch_api(rest, body, key, allow)
        except ApiError as exc:
            srv.billing.reject(key)
            raise HTTPFailure(exc.status, str(exc), exc.headers, doc=exc.doc) from None
        raise HTTPFailure(404, f"unknown path /v1/{'/'.join(rest)[:80]!r}")

    def _batch_api(self, rest: list[str], body: bytes, key: str, allow: Any) -> None:
        """OpenAI's Batch API (:mod:`mock_server.batches`): files and batches."""
        srv, store = self.server, self.server.batches
        if self.command == "POST" and rest in (["files"], ["batches"]):
            refuse_injected(srv.config, srv.faults.decide())
        if rest == ["files"]:
            allow("POST")
            return self._send_json(200, store.upload(key, self.headers.get("Content-Type"), body))
        if len(rest) == 2 and rest[0] == "files":
            allow("GET")
            return self._send_json(200, store.file_doc(key, rest[1]))
        if len(rest) == 3 and rest[0] == "files" and rest[2] == "content":
            allow("GET")
            return self._send(200, store.file_content(key, rest[1]), {"Content-Type": "application/octet-stream"})
        if rest == ["batches"]:
            allow("GET", "POST")
            if self.command == "POST":
                return self._send_json(200, store.create(srv, key, body))
            query = parse_qs(urlsplit(self.path).query)
            try:
                limit = min(100, max(1, int(query.get("limit", ["20"])[0])))
            except ValueError:
                raise HTTPFailure(400, "limit must be an integer") from None
            return self._send_json(200, store.listing(srv, key, limit, query.get("after", [None])[0]))
        if len(rest) == 2 and rest[0] == "batches":
            allow("GET")
            return self._send_json(200, store.retrieve(srv, key, rest[1]))
        if len(rest) == 3 and rest[0] == "batches" and rest[2] == "cancel":
            allow("POST")
            return self._send_json(200, store.cancel(srv, key, rest[1]))
        raise HTTPFailure(404, f"unknown path /v1/{'/'.join(rest)[:80]!r}")

    def _infer(self, body: bytes, key: str) -> None:
        srv, cfg, teacher = self.server, self.server.config, self.server.teacher
        billed0 = {"X-Billed-Images": "0"}
        if cfg.strict_spec and self.headers.get(HEADER_LENGTH) is not None:
            srv.billing.reject(key)  # a stock REST server without the binary extension fails such a body
            raise HTTPFailure(500, "Internal Server Error", billed0)
        try:
            req = parse_infer_request(body, self.headers.get(HEADER_LENGTH), input_shape=teacher.input_shape,
                                      max_batch_size=cfg.max_batch_size)
        except ProtocolError as exc:
            srv.billing.reject(key)
            raise HTTPFailure(exc.status, exc.message, billed0) from None
        decision = srv.faults.decide()
        if srv.query_log is not None:
            srv.query_log.record(request_id=req.id, seq=decision.index, key_id=key, model=cfg.model_name,
                                 tensor=req.tensor, datatype=req.datatype)
        if decision.latency > 0:
            time.sleep(decision.latency)
        if decision.action == "status":
            srv.billing.reject(key)
            headers = dict(billed0)
            if decision.status in (429, 503):
                headers["Retry-After"] = retry_after_header(cfg.retry_after)
            message = {429: "too many requests (injected)", 503: "service unavailable (injected)"}.get(
                decision.status or 0, f"injected failure {decision.status}")
            raise HTTPFailure(decision.status or 500, message, headers)
        if srv.limiter is not None:
            wait = srv.limiter.acquire(key)
            if wait > 0:
                srv.billing.reject(key)
                raise HTTPFailure(429, f"rate limit of {cfg.rate_limit:g} requests/s exceeded",
                                  {**billed0, "Retry-After": retry_after_header(wait)})
        try:
            srv.billing.charge(key, req.batch)
        except QuotaExceeded as exc:
            raise HTTPFailure(429, str(exc), {**billed0, "Retry-After": retry_after_header(cfg.retry_after)}) from None
        try:
            labels = teacher.predict(req.model_input(teacher.value_range))
        except BaseException:
            srv.billing.refund(key, req.batch)
            raise
        self._deliver(req, labels, decision)

    def _deliver(self, req: Any, labels: np.ndarray, decision: Decision) -> None:
        cfg, teacher = self.server.config, self.server.teacher

        def encode(lab: np.ndarray) -> tuple[bytes, dict[str, str]]:
            rid = uuid.uuid4().hex if cfg.fresh_response_id else req.id
            binary = req.binary_output and not cfg.strict_spec
            return encode_infer_response(rid, cfg.model_name, lab, binary=binary, billed_images=req.batch)

        body, headers = encode(labels)
        if decision.action == "malformed":
            kind = decision.malformed_kind
            if kind == "truncated":
                body = body[: len(body) // 2]
            elif kind == "not_json":
                body = b"<html><body><h1>502 Bad Gateway</h1>upstream hiccup</body></html>"
            elif kind == "wrong_count":
                body, headers = encode(labels[:-1])
            elif kind == "out_of_range":
                body, headers = encode(labels + teacher.num_classes)
        headers["X-Billed-Images"] = str(req.batch)
        if decision.action == "drop":
            self.close_connection = True
            self.send_response(200)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if decision.action == "slow":
            self.send_response(200)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            pieces = 10
            step = max(1, -(-len(body) // pieces))
            for i in range(0, len(body), step):
                time.sleep(cfg.slow_body_seconds / pieces)
                self.wfile.write(body[i : i + step])
            return
        self._send(200, body, headers)


def _json(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()
