"""The public toolkit for HTTP teacher adapters: transport, encoding, result validation.

The built-in adapters (OIP, TorchServe, Hugging Face) are written with these, and a
third-party adapter (``examples/custom_teacher.py``) needs nothing else from
ldpclient besides :class:`~ldpclient.teachers.Teacher`,
:class:`~ldpclient.teachers.TeacherMetadata` and
:class:`~ldpclient.teachers.InferResult`:

* **Transport**: :class:`HttpTransport` is the one object carrying a teacher's
  connection options (auth, timeouts, retries, TLS, size and time limits); its
  docstring is where they are documented. Adapters take ``transport=`` rather than
  re-declaring them; for the older keyword style, :func:`transport_from_options`
  builds one from those keywords (:data:`TRANSPORT_OPTIONS`). ``call()`` sends one
  logical request with retries and returns ``(parse(response), CallInfo)``;
  :class:`RetryPolicy` says when and how long to retry; :func:`redact_url` makes an
  address safe to print.
* **Encoding** (post-processing of LDP releases, free in privacy): :func:`to_wire`
  turns a ``Release``/``Derived`` into an array ``(Q, *input_shape)`` in the
  teacher's datatype (``INPUT_DATATYPES``; values clipped to ``value_range``, the
  units the model's inputs are in; ``UINT8`` = that range scaled to 0..255) and
  refuses raw tensors (TypeError); :func:`to_png` makes one 8-bit PNG of a query.
* **Result validation**: a ``parse`` callback raises :class:`MalformedResponse`
  for an unusable answer; :func:`validate_labels` (one integer label per query in
  ``[0, num_classes)``), :func:`label_to_index` (a name or index -> index) and
  :func:`best_of_scores` (top label of ``{label: score}`` answers) do the checks.

Units and limits (defaults; each one an :class:`HttpTransport` option):

* times are in seconds: ``timeout=(5, 60)`` (connect, read), ``deadline`` for a whole
  answer (default connect + read), ``RetryPolicy(max_total=180)`` for all attempts and
  waits of one call (``Retry-After`` honoured up to ``max_retry_after=300``);
* sizes are in bytes: a response body is refused past ``max_response_bytes`` (64 MiB)
  after decompression;
* billing ``units`` (``call(..., units=n)``) are queries (images) a request carries.

How one request is made and bounded:

* One pooled ``requests.Session`` per thread (the client's worker threads each get
  their own), created lazily, with urllib3's own retries off (tenacity decides).
* Every request has a ``(connect, read)`` timeout in seconds.
* Retries with tenacity: exponential backoff with jitter for connection errors,
  timeouts, 408, 429 and 5xx; ``Retry-After`` (seconds or an HTTP date) or a
  body's ``estimated_time`` (Hugging Face "model is loading") is honoured as the
  wait; other 4xx fail fast with the server's ``error`` text; a malformed answer
  that could be transient is retried once; the total time spent (attempts plus
  waits) is capped.
* The token (bearer or API key) is only ever put in the request header. It is
  redacted from every message this module builds and never appears in a repr.
* TLS certificates are verified by default; ``verify="/path/ca.pem"`` trusts a
  custom CA bundle, ``verify=False`` disables checks (not recommended).

A teacher may be hostile, so one response is bounded here, where it is read:

* its body, after decompression, is read in small pieces and refused past
  ``max_response_bytes`` (a gzip bomb is never inflated whole);
* the whole answer, status line and headers included, must arrive within ``deadline``
  seconds of the request (default: the connect plus read timeouts), however slowly the
  bytes trickle in: a watchdog shuts the connection's socket when the deadline passes;
* redirects are never followed: queries and tokens go only to the address the user
  named (a 3xx is an error that says where the server wanted to send them).
"""

from __future__ import annotations

import email.utils
import inspect
import json
import logging
import os
import random
import socket
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, TypeVar, Union
from urllib.parse import urlsplit, urlunsplit

import requests
import tenacity
import urllib3
from requests.adapters import HTTPAdapter

from ..text import check_token, printable, redact
from .encoding import INPUT_DATATYPES, to_png, to_wire
from .errors import MalformedResponse, RetriesExhausted, TeacherError, TeacherRequestError, TransientTeacherError
from .result import best_of_scores, label_to_index, validate_labels

__all__ = [
    # transport
    "HttpTransport",
    "TRANSPORT_OPTIONS",
    "transport_from_options",
    "RetryPolicy",
    "CallInfo",
    "Timeout",
    "MAX_RESPONSE_BYTES",
    "redact_url",
    # encoding
    "to_wire",
    "to_png",
    "INPUT_DATATYPES",
    # result validation
    "MalformedResponse",
    "validate_labels",
    "label_to_index",
    "best_of_scores",
]

log = logging.getLogger("ldpclient.teachers.http")

T = TypeVar("T")
Timeout = Union[float, tuple[float, float]]

#: statuses that may succeed when repeated
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504}) | frozenset(range(505, 600))

#: Default largest response body, after decompression (an infer answer for 256 queries is a few KB).
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_READ_PIECE = 16 * 1024


_WATCH = threading.local()  # .holder: list receiving the connection(s) of the attempt running in this thread


class _ReportsToWatchdog:
    """Mixin for urllib3 connections: tells the attempt running in this thread which connection
    carries it (for its deadline)."""

    def request(self, *args: Any, **kwargs: Any) -> None:
        holder = getattr(_WATCH, "holder", None)
        if holder is not None:
            holder.append(self)
        super().request(*args, **kwargs)  # type: ignore[misc]


class _WatchedHTTPConnection(_ReportsToWatchdog, urllib3.connection.HTTPConnection):
    pass


class _WatchedHTTPSConnection(_ReportsToWatchdog, urllib3.connection.HTTPSConnection):
    pass


class _WatchedHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


class _DeadlineAdapter(HTTPAdapter):
    """requests' adapter whose connections report themselves to the deadline watchdog."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


def _shut(connections: list[Any], expired: threading.Event) -> None:
    """Deadline passed: wake the blocked read by shutting the attempt's socket(s)."""
    expired.set()
    for conn in connections:
        sock = getattr(conn, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class BillingGuard(Protocol):
    """Told about every attempt of a billable call, so that money is counted conservatively.

    ``before_attempt(units)`` runs before each attempt is sent (``units``: queries it carries) and
    raises (e.g. :class:`~ldpclient.teachers.errors.CostCapReached`) to stop instead; a guard may
    also have ``attempt_started(abort)``: called once the attempt is on its way, with a function
    that abandons it at once (shuts its socket: the attempt then ends as ``"lost"``);
    ``after_attempt(outcome, units)`` reports how it ended: ``"answered"``, ``"refused"`` (not sent,
    or an error answer the server did not bill) or ``"lost"`` (sent, and may have been billed for
    ``units`` queries, but no usable answer came back: a dropped connection, a timeout, a
    malformed 200).
    """

    def before_attempt(self, units: int) -> None: ...

    def after_attempt(self, outcome: str, units: int) -> None: ...


#: The guard of the batch being sent in this thread (set by :class:`~ldpclient.teachers.QueryClient`).
BILLING_GUARD: ContextVar[BillingGuard | None] = ContextVar("ldpclient_billing_guard", default=None)


def redact_url(url: str) -> str:
    """``url`` without user info (``user:password@``), query string or fragment: safe to print and store."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return url.split("?", 1)[0].split("#", 1)[0]
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to retry. All times in seconds.

    ``max_attempts``: attempts per request including the first. ``initial_wait``:
    first backoff; it doubles each retry up to ``max_wait``; ``jitter``: uniform
    random extra wait in ``[0, jitter]``. ``max_total``: give up when the time since
    the first attempt plus the next wait would exceed it. ``max_retry_after``: the
    longest server-requested wait honoured (a longer one fails at once).
    ``malformed_retries``: retries of a malformed answer that might be transient.
    ``sleep``: the sleep function (tests record waits instead of sleeping).
    """

    max_attempts: int = 6
    initial_wait: float = 0.5
    max_wait: float = 20.0
    jitter: float = 0.5
    max_total: float = 180.0
    max_retry_after: float = 300.0
    malformed_retries: int = 1
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in ("initial_wait", "max_wait", "jitter", "max_total", "max_retry_after"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 seconds, got {getattr(self, name)}")

    def backoff(self, retry_number: int) -> float:
        """Wait before retry ``retry_number`` (1-based) when the server named none."""
        base = min(self.max_wait, self.initial_wait * (2 ** (retry_number - 1)))
        return float(base + random.uniform(0.0, self.jitter))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date), else None."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def server_error_text(
    resp: requests.Response, limit: int = 300, redact: Callable[[str], str] | None = None
) -> str:
    """The server's ``error`` message (JSON ``{"error": ...}``), else the start of the body; ``redact``
    is applied *before* the text is cut to ``limit`` characters (a cut must not leave part of a secret)."""
    try:
        body = resp.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "error" in body:
        err = body["error"]
        text = err if isinstance(err, str) else json.dumps(err)
    else:
        text = resp.text or ""
    text = " ".join(text.split())
    if redact is not None:
        text = redact(text)
    return text[:limit] + ("..." if len(text) > limit else "")


@dataclass
class CallInfo:
    """Accounting of one logical call: attempts made, body bytes sent/received (last attempt), billing."""

    attempts: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    #: sum of ``X-Billed-Images`` over every attempt that carried one (failed or
    #: malformed answers the server still billed included); None when none did
    billed_header: int | None = None


class HttpTransport:
    """The connection options of one teacher, and the pooled sessions that carry its requests.

    This is the one place these options are documented: adapters take
    ``transport=HttpTransport(...)`` (or, for compatibility, the same keywords, which
    :func:`transport_from_options` turns into one). All keyword-only:

    * ``token``: bearer token / API key; when None it is read from the environment
      variable ``token_env`` (default ``LDPCLIENT_TOKEN``; the Hugging Face adapter
      builds its own transport with ``HF_TOKEN``; ``token_env=None``: no token). It is
      only ever put in the request header, and redacted from messages and reprs.
    * ``auth_header``/``auth_scheme``: how the token is sent (default
      ``Authorization: Bearer <token>``; ``auth_header="X-API-Key", auth_scheme=""``
      sends the bare key).
    * ``timeout``: seconds, one number or ``(connect, read)``; > 0 (default ``(5, 60)``).
    * ``deadline``: seconds one attempt may take from sending to the last body byte,
      however slowly it trickles (default: connect + read timeout).
    * ``retry``: :class:`RetryPolicy` (attempts, backoff, total retry time in seconds;
      default ``RetryPolicy()``: 6 attempts within 180 s).
    * ``verify``: TLS verification: True (default), False (not recommended) or the path
      of a CA bundle (must exist).
    * ``max_response_bytes``: largest response body accepted, after decompression, in
      bytes (default :data:`MAX_RESPONSE_BYTES`, 64 MiB); >= 1.
    * ``headers``: extra headers sent with every request.
    * ``pool_maxsize``: pooled connections kept per thread (default 4).
    * ``name``: a label for reprs (e.g. ``"oip:digits"``).

    One transport may be shared by several teachers; closing a teacher closes the
    transport's pooled connections, and later requests open new ones.
    """

    def __init__(
        self,
        *,
        name: str = "http",
        token: str | None = None,
        token_env: str | None = "LDPCLIENT_TOKEN",
        auth_header: str = "Authorization",
        auth_scheme: str = "Bearer",
        timeout: Timeout = (5.0, 60.0),
        verify: bool | str = True,
        retry: RetryPolicy | None = None,
        headers: dict[str, str] | None = None,
        pool_maxsize: int = 4,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        deadline: float | None = None,
    ) -> None:
        if token is None and token_env:
            token = os.environ.get(token_env) or None
        if token is not None and not isinstance(token, str):
            raise ValueError("token must be a non-empty string")
        token = check_token(token, "token")  # surrounding whitespace dropped; blank or control characters refused
        if isinstance(verify, str) and not os.path.exists(verify):
            raise ValueError(f"CA bundle {verify!r} (verify=) does not exist")
        if isinstance(timeout, (int, float)):
            timeout = (float(timeout), float(timeout))
        if len(timeout) != 2 or min(timeout) <= 0:
            raise ValueError(f"timeout must be > 0 seconds (one number or (connect, read)), got {timeout}")
        self.name = name
        self.__token = token
        self._auth_header = auth_header
        self._auth_scheme = auth_scheme
        self.timeout = (float(timeout[0]), float(timeout[1]))
        if not max_response_bytes >= 1:
            raise ValueError(f"max_response_bytes must be >= 1, got {max_response_bytes}")
        self.max_response_bytes = int(max_response_bytes)
        self.deadline = float(deadline) if deadline is not None else self.timeout[0] + self.timeout[1]
        if not self.deadline > 0:
            raise ValueError(f"deadline must be > 0 seconds, got {deadline}")
        self.verify = verify
        self.retry = retry if retry is not None else RetryPolicy()
        self._headers = dict(headers or {})
        self._pool_maxsize = pool_maxsize
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._sessions_lock = threading.Lock()

    @property
    def has_token(self) -> bool:
        return self.__token is not None

    def redact(self, text: str) -> str:
        """Remove the token (every form of it, see :func:`ldpclient.text.redact`) from ``text``."""
        return redact(text, (self.__token,))

    def session(self) -> requests.Session:
        """This thread's pooled session (auth header preset)."""
        s = getattr(self._local, "session", None)
        if s is None:
            s = requests.Session()
            adapter = _DeadlineAdapter(pool_connections=1, pool_maxsize=self._pool_maxsize, max_retries=0)
            s.mount("http://", adapter)
            s.mount("https://", adapter)
            s.headers.update(self._headers)
            s.headers["User-Agent"] = "ldpclient"
            if self.__token is not None:
                s.headers[self._auth_header] = (
                    f"{self._auth_scheme} {self.__token}" if self._auth_scheme else self.__token
                )
            s.verify = self.verify
            self._local.session = s
            with self._sessions_lock:
                self._sessions.append(s)
        return s

    def close(self) -> None:
        with self._sessions_lock:
            for s in self._sessions:
                s.close()
            self._sessions.clear()
        self._local = threading.local()

    def _attempt(
        self,
        method: str,
        url: str,
        parse: Callable[[requests.Response], T],
        data: bytes | None,
        headers: dict[str, str] | None,
        what: str,
        info: CallInfo,
        units: int = 0,
    ) -> T:
        """One attempt. With ``units`` (queries a billable request carries) the thread's
        :data:`BILLING_GUARD` hears about it before it is sent and how it ended."""
        guard = BILLING_GUARD.get() if units else None
        if guard is None:
            return self._attempt_once(method, url, parse, data, headers, what, info)
        guard.before_attempt(units)
        billed_before = info.billed_header or 0
        outcome = "lost"
        try:
            result = self._attempt_once(method, url, parse, data, headers, what, info,
                                        on_start=getattr(guard, "attempt_started", None))
            outcome = "answered"
            return result
        except MalformedResponse:
            raise  # a 200 that could not be used: it may well have been billed
        except _NotSent:
            outcome = "refused"
            raise
        except TransientTeacherError as exc:
            outcome = "refused" if exc.status is not None else "lost"  # an error answer vs no answer at all
            raise
        except TeacherError:  # an error answer (4xx, redirect) or a request that could not be made (TLS)
            outcome = "refused"
            raise
        finally:
            billed = (info.billed_header or 0) - billed_before  # the server's own word, when it gave one
            if outcome != "answered" and billed > 0:
                guard.after_attempt("lost", billed)
            else:
                guard.after_attempt(outcome, units)

    def _attempt_once(
        self,
        method: str,
        url: str,
        parse: Callable[[requests.Response], T],
        data: bytes | None,
        headers: dict[str, str] | None,
        what: str,
        info: CallInfo,
        on_start: Callable[[Callable[[], None]], None] | None = None,
    ) -> T:
        info.attempts += 1
        where = redact_url(url)
        started = time.monotonic()
        connections: list[Any] = []
        expired = threading.Event()
        watchdog = threading.Timer(self.deadline, _shut, (connections, expired))
        watchdog.daemon = True
        _WATCH.holder = connections
        watchdog.start()
        if on_start is not None:
            on_start(lambda: _shut(connections, threading.Event()))
        try:
            return self._exchange(method, url, parse, data, headers, what, info, where, started)
        except (TeacherError, requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError):
            if expired.is_set():
                raise TransientTeacherError(self.redact(
                    f"{what}: the response from {where} did not arrive within {self.deadline:g} s (the server is "
                    "sending too slowly)"
                )) from None
            raise
        finally:
            watchdog.cancel()
            _WATCH.holder = None

    def _exchange(
        self,
        method: str,
        url: str,
        parse: Callable[[requests.Response], T],
        data: bytes | None,
        headers: dict[str, str] | None,
        what: str,
        info: CallInfo,
        where: str,
        started: float,
    ) -> T:
        try:
            resp = self.session().request(
                method, url, data=data, headers=headers, timeout=self.timeout, stream=True, allow_redirects=False
            )
        except requests.exceptions.SSLError as exc:
            raise TeacherError(
                self.redact(f"{what}: TLS verification failed for {where}: {type(exc).__name__}; "
                            "pass verify='/path/to/ca-bundle.pem' to trust a private CA")
            ) from None
        except requests.exceptions.ConnectTimeout:
            raise _NotSent(self.redact(f"{what}: timed out connecting ({where}, timeout {self.timeout[0]} s)")) from None
        except requests.exceptions.Timeout:
            raise TransientTeacherError(self.redact(f"{what}: timed out ({where}, timeout {self.timeout} s)")) from None
        except requests.exceptions.ConnectionError as exc:
            if _never_connected(exc):
                raise _NotSent(self.redact(f"{what}: connection failed ({where}): {_short(exc, self.redact)}")) from None
            raise TransientTeacherError(self.redact(f"{what}: connection failed ({where}): {_short(exc, self.redact)}")) from None
        except requests.exceptions.ChunkedEncodingError as exc:
            raise TransientTeacherError(self.redact(f"{what}: connection failed ({where}): {_short(exc, self.redact)}")) from None
        except requests.exceptions.RequestException as exc:
            raise TeacherError(self.redact(f"{what}: request failed ({where}): {_short(exc, self.redact)}")) from None
        info.bytes_sent = len(data) if data else 0
        billed = resp.headers.get("X-Billed-Images")
        if billed is not None and billed.strip().isdigit():
            info.billed_header = (info.billed_header or 0) + int(billed)
        try:
            info.bytes_received = self._read_body(resp, started, what, where)
        finally:
            resp.close()
        status = resp.status_code
        if 300 <= status < 400:
            location = resp.headers.get("Location", "")
            if not location:  # e.g. 304 Not Modified to a request that asked for no cache: not a redirect at all
                raise TeacherRequestError(
                    f"{what}: HTTP {status} from {where} without a Location: an answer this client did not ask for",
                    status=status,
                )
            raise TeacherRequestError(
                f"{what}: HTTP {status} from {where} redirects to {printable(redact_url(location), max_chars=200)}; "
                "not followed (queries and tokens go only to the address you gave: use the final address as "
                "--teacher)", status=status,
            )
        if 200 <= status < 300:
            try:
                return parse(resp)
            except MalformedResponse as exc:
                raise MalformedResponse(self.redact(f"{what}: {exc}"), transient=exc.transient) from None
        text = server_error_text(resp, redact=self.redact)
        if status in RETRY_STATUSES:
            wait = parse_retry_after(resp.headers.get("Retry-After"))
            if wait is None:
                wait = _estimated_time(resp)
            raise TransientTeacherError(f"{what}: HTTP {status} from {where}: {text}", status=status, retry_after=wait)
        hint = ""
        if status in (401, 403):
            hint = " (check the token: option token= or the environment variable)" if self.has_token else (
                " (no token was sent: pass token= or set the environment variable)"
            )
        raise TeacherRequestError(
            f"{what}: HTTP {status} from {where}: {text}{hint}", status=status, server_message=text
        )

    def _read_body(self, resp: requests.Response, started: float, what: str, where: str) -> int:
        """Read ``resp``'s body in pieces, decompressed, within the size limit and the deadline; returns
        its size. Raises MalformedResponse past the size limit, TransientTeacherError past the deadline."""
        limit, deadline = self.max_response_bytes, started + self.deadline
        pieces: list[bytes] = []
        size = 0
        try:
            while True:
                if time.monotonic() > deadline:
                    raise TransientTeacherError(self.redact(
                        f"{what}: the response from {where} did not arrive within {self.deadline:g} s (the server is "
                        "sending too slowly)"
                    ))
                piece = resp.raw.read1(_READ_PIECE, decode_content=True)  # at most one read from the socket
                if not piece:
                    break
                size += len(piece)
                if size > limit:
                    pieces.clear()  # a kept exception (retry state, wire fallback) must not pin the pieces
                    raise MalformedResponse(
                        f"{what}: the response from {where} is larger than {limit} bytes (after decompression); "
                        "refused", transient=False,
                    )
                pieces.append(piece)
        except (urllib3.exceptions.HTTPError, requests.exceptions.RequestException, OSError) as exc:
            pieces.clear()
            if isinstance(exc, urllib3.exceptions.DecodeError):
                raise MalformedResponse(f"{what}: undecodable response body from {where}: {_short(exc, self.redact)}") from None
            raise TransientTeacherError(self.redact(f"{what}: response body lost ({where}): {_short(exc, self.redact)}")) from None
        resp._content = b"".join(pieces)  # what .content/.json() read from now on
        resp._content_consumed = True
        return size

    def call(
        self,
        method: str,
        url: str,
        *,
        parse: Callable[[requests.Response], T],
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        what: str = "request",
        retry: bool = True,
        units: int = 0,
    ) -> tuple[T, CallInfo]:
        """Perform one logical request with retries; return ``(parse(response), info)``.

        ``units``: queries the request carries when it is billable (the :data:`BILLING_GUARD`
        then hears about every attempt)."""
        policy = self.retry
        info = CallInfo()
        malformed_seen = [0]
        started = time.monotonic()

        def should_retry(exc: BaseException) -> bool:
            if not retry:
                return False
            if isinstance(exc, TransientTeacherError):
                return True
            if isinstance(exc, MalformedResponse) and exc.transient:
                malformed_seen[0] += 1
                return malformed_seen[0] <= policy.malformed_retries
            return False

        def wait(state: tenacity.RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            ra = getattr(exc, "retry_after", None)
            if ra is not None:
                return float(ra)
            return policy.backoff(state.attempt_number)

        def stop(state: tenacity.RetryCallState) -> bool:
            if state.attempt_number >= policy.max_attempts:
                return True
            upcoming = state.upcoming_sleep or 0.0
            exc = state.outcome.exception() if state.outcome else None
            if getattr(exc, "retry_after", None) is not None and upcoming > policy.max_retry_after:
                return True
            return (time.monotonic() - started) + upcoming > policy.max_total

        def before_sleep(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.warning("%s: retry %d in %.2f s after: %s", what, state.attempt_number, state.upcoming_sleep or 0.0, exc)

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(should_retry),
            wait=wait,
            stop=stop,
            sleep=policy.sleep,
            before_sleep=before_sleep,
            reraise=False,
        )
        try:
            result = retrying(self._attempt, method, url, parse, data, headers, what, info, units)
        except tenacity.RetryError as err:
            last = err.last_attempt.exception()
            elapsed = time.monotonic() - started
            ra = getattr(last, "retry_after", None)
            why = (
                f"the server asked to wait {ra:.0f} s (over max_retry_after={policy.max_retry_after:g} s or the "
                f"max_total={policy.max_total:g} s budget)"
                if ra is not None and (ra > policy.max_retry_after or elapsed + ra > policy.max_total)
                else f"{info.attempts} attempt(s) in {elapsed:.1f} s (max_attempts={policy.max_attempts}, "
                f"max_total={policy.max_total:g} s)"
            )
            raise RetriesExhausted(
                f"gave up on {what}: {why}; last error: {last}", attempts=info.attempts, elapsed_s=elapsed
            ) from None
        return result, info

    def get_json(self, url: str, *, what: str, allow_404: bool = False, optional: bool = False) -> Any:
        """GET a JSON document with retries (``allow_404``: return None on 404).

        ``optional``: a probe for something servers may not offer (one attempt; any
        failure returns None).
        """

        def parse(resp: requests.Response) -> Any:
            try:
                return resp.json()
            except ValueError:
                raise MalformedResponse(f"{redact_url(url)} did not return JSON: {resp.text[:100]!r}") from None

        if optional:
            try:
                return self.call("GET", url, parse=parse, what=what, retry=False)[0]
            except TeacherError:
                return None
        try:
            return self.call("GET", url, parse=parse, what=what)[0]
        except TeacherRequestError as exc:
            if allow_404 and exc.status == 404:
                return None
            raise

    def __repr__(self) -> str:
        return f"HttpTransport(name={self.name!r}, token={'***' if self.has_token else None}, verify={self.verify!r})"


#: The keyword options :class:`HttpTransport` takes besides ``name`` (an adapter's compatibility keywords).
TRANSPORT_OPTIONS: frozenset[str] = frozenset(
    p for p in inspect.signature(HttpTransport.__init__).parameters if p not in ("self", "name")
)


def transport_from_options(
    transport: HttpTransport | None,
    options: Mapping[str, Any],
    *,
    adapter: str,
    name: str,
    **defaults: Any,
) -> HttpTransport:
    """The transport an adapter uses: ``transport`` when given, else a new :class:`HttpTransport`
    named ``name`` from the keyword ``options`` over the adapter's ``defaults`` (e.g.
    ``token_env="HF_TOKEN"``).

    ``options`` are what the adapter received as ``**transport_options``: a name outside
    :data:`TRANSPORT_OPTIONS` raises TypeError (``"<adapter>() got an unexpected keyword
    argument '<name>'"``, as Python words it), and options given alongside a ``transport``
    raise ValueError (the transport already carries them)."""
    unknown = [k for k in options if k not in TRANSPORT_OPTIONS]
    if unknown:
        raise TypeError(f"{adapter}() got an unexpected keyword argument {unknown[0]!r}")
    if transport is None:
        return HttpTransport(name=name, **{**defaults, **options})
    if not isinstance(transport, HttpTransport):
        raise TypeError(f"{adapter}(): transport must be an HttpTransport, got {type(transport).__name__}")
    if options:
        raise ValueError(
            f"{adapter}(): pass either transport= or the transport options {', '.join(sorted(options))}, not both "
            "(set them on the HttpTransport)"
        )
    return transport


class _NotSent(TransientTeacherError):
    """The request never reached the server (connection refused, connect timeout): nothing was billed."""


def _never_connected(exc: requests.exceptions.ConnectionError) -> bool:
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


def _short(exc: BaseException, redact: Callable[[str], str]) -> str:
    """One line of an exception's text, redacted before it is cut to 200 characters."""
    return redact(" ".join(str(exc).split()))[:200]


def _estimated_time(resp: requests.Response) -> float | None:
    """Hugging Face's ``{"error": "... is currently loading", "estimated_time": s}``."""
    try:
        body = resp.json()
    except ValueError:
        return None
    if isinstance(body, dict) and isinstance(body.get("estimated_time"), (int, float)):
        return max(0.0, float(body["estimated_time"]))
    return None
