"""The connection to a teacher: :class:`HttpTransport` and what bounds one response.

:class:`HttpTransport` carries a teacher's connection options (auth, timeouts, retries, TLS,
size and time limits; its docstring documents them) and the pooled sessions that send its
requests. ``call()`` sends one logical request: retried by :func:`~.retry.with_retries` under the
transport's :class:`~.retry.RetryPolicy`, each attempt of a billable request reported to the
caller's billing hook (:func:`~.billing.billed_attempt`), each response bounded here where it is
read (size after decompression, a deadline for the whole answer, no redirects followed).
The public toolkit for adapter authors re-exports it: :mod:`ldpclient.teachers.http`.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Generic, TypedDict, TypeVar, Union
from urllib.parse import urlsplit, urlunsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter

from ..io.text import check_token, printable, redact
from .billing import BillingGuard, billed_attempt
from .errors import (
    MalformedResponse,
    RequestNotSent,
    TeacherError,
    TeacherRequestError,
    TeacherUnreachable,
    TokenInClear,
    TransientTeacherError,
)
from .response import read_body, short_error
from .retry import RETRY_STATUSES, RetryPolicy, Waits, parse_retry_after, with_retries

T = TypeVar("T")
Timeout = Union[float, tuple[float, float]]

if TYPE_CHECKING:
    from typing_extensions import Unpack
#: An adapter's reading of a retryable error answer: the wait (seconds) it asks for, or None.
RetryHint = Callable[[requests.Response], Union[float, None]]

#: Default largest response body, after decompression (an infer answer for 256 queries is a few KB).
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


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


def server_error_text(
    resp: requests.Response, limit: int = 300, redact: Callable[[str], str] | None = None
) -> str:
    """The server's ``error`` message (JSON ``{"error": ...}``), else the start of the body; ``redact``
    is applied *before* the text is cut to ``limit`` characters (a cut must not leave part of a secret)."""
    try:
        body = resp.json()
    except (ValueError, RecursionError):
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
    """Accounting of one logical call: attempts made, body bytes sent/received (last attempt), billing, and the
    waits for a busy server."""

    attempts: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    #: sum of ``X-Billed-Images`` over every attempt that carried one (failed or
    #: malformed answers the server still billed included); None when none did
    billed_header: int | None = None
    waits: Waits = field(default_factory=Waits)


@dataclass(frozen=True)
class _Request(Generic[T]):
    """One logical request, as every attempt at it sends it: ``parse`` reads a 2xx answer, ``what`` names the
    request in messages, ``retry_hint`` reads the wait a retryable answer asks for without ``Retry-After``."""

    method: str
    url: str
    parse: Callable[[requests.Response], T]
    data: bytes | None
    headers: dict[str, str] | None
    what: str
    retry_hint: RetryHint | None


def _not_followed(what: str, status: int, where: str, location: str) -> TeacherRequestError:
    """The error for a 3xx answer: a redirect is not followed (queries and tokens go only to the address given)."""
    if not location:  # e.g. 304 Not Modified to a request that asked for no cache: not a redirect at all
        return TeacherRequestError(
            f"{what}: HTTP {status} from {where} without a Location: an answer this client did not ask for",
            status=status,
        )
    return TeacherRequestError(
        f"{what}: HTTP {status} from {where} redirects to {printable(redact_url(location), max_chars=200)}; "
        "not followed (queries and tokens go only to the address you gave: use the final address as "
        "--teacher)", status=status,
    )


class HttpTransport:
    """The connection options of one teacher, and the pooled sessions that carry its requests.

    This is the one place these options are documented: adapters take
    ``transport=HttpTransport(...)`` (or, for compatibility, the same keywords, which
    :func:`transport_from_options` turns into one). All keyword-only:

    * ``token``: bearer token / API key; when None it is read from the environment
      variable ``token_env`` (default ``LDPCLIENT_TOKEN``; the Hugging Face adapter
      builds its own transport with ``HF_TOKEN``; a tuple of names: the first one set, e.g.
      ``("LDPCLIENT_TOKEN", "OPENAI_API_KEY")``; ``token_env=None``: no token). It is
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
        token_env: str | tuple[str, ...] | None = "LDPCLIENT_TOKEN",
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
            names = (token_env,) if isinstance(token_env, str) else token_env
            token = next((os.environ[n] for n in names if os.environ.get(n)), None)
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

    def refuse_clear_token(self, url: str) -> None:
        """:class:`~.errors.TokenInClear` when this transport's token would go to ``url`` unencrypted
        (:func:`refuse_token_in_clear`)."""
        if self.__token is not None:
            refuse_token_in_clear(url)

    def redact(self, text: str) -> str:
        """Remove the token (every form of it, see :func:`ldpclient.io.text.redact`) from ``text``."""
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
        self, req: _Request[T], info: CallInfo, units: int = 0, billing: BillingGuard | None = None
    ) -> T:
        """One attempt. With ``units`` (queries a billable request carries) and a ``billing`` hook,
        the hook hears about it before it is sent and how it ended."""

        def send(on_start: Callable[[Callable[[], None]], None] | None = None) -> T:
            return self._attempt_once(req, info, on_start)

        if billing is None or not units:
            return send()
        return billed_attempt(billing, units, send, lambda: info.billed_header or 0)

    def _attempt_once(
        self, req: _Request[T], info: CallInfo, on_start: Callable[[Callable[[], None]], None] | None = None
    ) -> T:
        info.attempts += 1
        where = redact_url(req.url)
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
            return self._exchange(req, info, where, started)
        except (TeacherError, requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError):
            if expired.is_set():
                raise TransientTeacherError(self.redact(
                    f"{req.what}: the response from {where} did not arrive within {self.deadline:g} s (the server is "
                    "sending too slowly)"
                )) from None
            raise
        finally:
            watchdog.cancel()
            _WATCH.holder = None

    def _exchange(self, req: _Request[T], info: CallInfo, where: str, started: float) -> T:
        """Send ``req`` once and read its answer within the limits: the parsed answer, or the error it amounts to."""
        resp = self._send(req, where)
        info.bytes_sent = len(req.data) if req.data else 0
        billed = resp.headers.get("X-Billed-Images")
        if billed is not None and billed.strip().isdigit():
            info.billed_header = (info.billed_header or 0) + int(billed)
        try:
            info.bytes_received = read_body(resp, limit=self.max_response_bytes, deadline_s=self.deadline,
                                            started=started, what=req.what, where=where, redact=self.redact)
        finally:
            resp.close()
        if self.__token is not None:  # a server that echoes the key: no part of it reaches a parser
            resp._content = resp.content.replace(self.__token.encode(), b"***")
        return self._answer(req, resp, where)

    def _send(self, req: _Request[T], where: str) -> requests.Response:
        """The response to ``req`` (its body not read yet); a failure to connect or send as the teacher error it
        is (unreachable, not sent, transient, or final)."""
        what = req.what
        self.refuse_clear_token(req.url)
        try:
            return self.session().request(
                req.method, req.url, data=req.data, headers=req.headers, timeout=self.timeout, stream=True,
                allow_redirects=False,
            )
        except requests.exceptions.SSLError as exc:
            if _not_tls(exc):
                raise TeacherUnreachable(self.redact(
                    f"{_origin(req.url)} does not answer in TLS (https): is its address http://?")) from None
            raise TeacherError(
                self.redact(f"{what}: TLS verification failed for {where} ({_tls_reason(exc)}); to trust a private "
                            "CA give its bundle: --ca-bundle FILE (API: verify=FILE)")
            ) from None
        except requests.exceptions.ConnectTimeout:
            raise RequestNotSent(self.redact(
                f"no answer from {_origin(req.url)} within {self.timeout[0]:g} s (connect timeout): is the address "
                "reachable from this host (firewall, VPN, proxy)?")) from None
        except requests.exceptions.Timeout:
            raise TransientTeacherError(self.redact(f"{what}: timed out ({where}, timeout {self.timeout} s)")) from None
        except requests.exceptions.ConnectionError as exc:
            if _never_connected(exc):
                raise TeacherUnreachable(self.redact(_unreachable(exc, req.url))) from None
            raise TransientTeacherError(self.redact(f"{what}: connection failed ({where}): "
                                                    f"{short_error(exc, self.redact)}")) from None
        except requests.exceptions.ChunkedEncodingError as exc:
            raise TransientTeacherError(self.redact(f"{what}: connection failed ({where}): "
                                                    f"{short_error(exc, self.redact)}")) from None
        except requests.exceptions.RequestException as exc:
            why = short_error(exc, self.redact)
            raise TeacherError(self.redact(f"{what}: request failed ({where}): {why}")) from None

    def _answer(self, req: _Request[T], resp: requests.Response, where: str) -> T:
        """A read response as ``req``'s parsed answer (2xx), or as the error its status means: a redirect not
        followed, a transient status with the wait asked for, or a final refusal (a hint for 401/403)."""
        what, status = req.what, resp.status_code
        if 300 <= status < 400:
            raise _not_followed(what, status, where, self.redact(resp.headers.get("Location", "")))
        if 200 <= status < 300:
            try:
                return req.parse(resp)
            except MalformedResponse as exc:
                raise MalformedResponse(self.redact(f"{what}: {exc}"), transient=exc.transient) from None
            except RecursionError:  # JSON nested deeper than any parser follows: a hostile or broken answer
                raise MalformedResponse(f"{what}: the answer from {where} nests deeper than this client reads; "
                                        "refused", transient=False) from None
        text = server_error_text(resp, redact=self.redact)
        if status in RETRY_STATUSES:
            wait = parse_retry_after(resp.headers.get("Retry-After"))
            if wait is None and req.retry_hint is not None:
                wait = req.retry_hint(resp)
            raise TransientTeacherError(f"{what}: HTTP {status}{_from(what, where)}: {text}", status=status,
                                        retry_after=wait)
        hint = _auth_hint(status, self.has_token)
        raise TeacherRequestError(f"{what}: HTTP {status}{_from(what, where)}: {text}{hint}", status=status,
                                  server_message=text)

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
        billing: BillingGuard | None = None,
        retry_hint: RetryHint | None = None,
        first_contact: bool = False,
    ) -> tuple[T, CallInfo]:
        """Perform one logical request with retries; return ``(parse(response), info)``.

        ``units``: queries the request carries when it is billable; ``billing``: the hook that then
        hears about every attempt (the one ``infer`` received). ``retry_hint``: reads the wait a
        retryable error answer asks for when it has no ``Retry-After`` (e.g. Hugging Face's
        ``estimated_time``). ``first_contact``: an address nothing answers at
        (:class:`~ldpclient.teachers.errors.TeacherUnreachable`) fails at once, not after the retries.
        """
        info = CallInfo()
        req = _Request(method, url, parse, data, headers, what, retry_hint)

        def attempt() -> T:
            return self._attempt(req, info, units, billing)

        result = with_retries(attempt, self.retry, what=what, attempts=lambda: info.attempts, retry=retry,
                              fail_fast=(TeacherUnreachable,) if first_contact else (), waits=info.waits)
        return result, info

    def get_json(self, url: str, *, what: str, allow_404: bool = False, optional: bool = False) -> object:
        """GET a JSON document with retries (``allow_404``: return None on 404).

        ``optional``: a probe for something servers may not offer (one attempt; any
        failure returns None).
        """

        def parse(resp: requests.Response) -> object:
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


class TransportOptions(TypedDict, total=False):
    """The keyword options :class:`HttpTransport` takes besides ``name``, which every HTTP adapter passes on to the
    transport it builds (see :class:`HttpTransport` for each)."""

    token: str | None
    token_env: str | tuple[str, ...] | None
    auth_header: str
    auth_scheme: str
    timeout: Timeout
    verify: bool | str
    retry: RetryPolicy | None
    headers: dict[str, str] | None
    pool_maxsize: int
    max_response_bytes: int
    deadline: float | None


#: The names of :class:`TransportOptions` (an adapter's compatibility keywords).
TRANSPORT_OPTIONS: frozenset[str] = frozenset(TransportOptions.__annotations__)


def transport_from_options(
    transport: HttpTransport | None,
    options: TransportOptions,
    *,
    adapter: str,
    name: str,
    url: str | None = None,
    **defaults: Unpack[TransportOptions],
) -> HttpTransport:
    """The transport an adapter uses: ``transport`` when given, else a new :class:`HttpTransport`
    named ``name`` from the keyword ``options`` over the adapter's ``defaults`` (e.g.
    ``token_env="HF_TOKEN"``).

    ``options`` are what the adapter received as ``**transport_options``: a name outside
    :data:`TRANSPORT_OPTIONS` raises TypeError (``"<adapter>() got an unexpected keyword
    argument '<name>'"``, as Python words it), and options given alongside a ``transport``
    raise ValueError (the transport already carries them). ``url``: the teacher's address; a token that would go
    to it in clear is refused here (:meth:`HttpTransport.refuse_clear_token`), before anything is sent."""
    unknown = [k for k in options if k not in TRANSPORT_OPTIONS]
    if unknown:
        raise TypeError(f"{adapter}() got an unexpected keyword argument {unknown[0]!r}")
    if transport is None:
        merged: TransportOptions = {**defaults, **options}
        made = HttpTransport(name=name, **merged)
        if url is not None:
            made.refuse_clear_token(url)
        return made
    if not isinstance(transport, HttpTransport):
        raise TypeError(f"{adapter}(): transport must be an HttpTransport, got {type(transport).__name__}")
    if options:
        raise ValueError(
            f"{adapter}(): pass either transport= or the transport options {', '.join(sorted(options))}, not both "
            "(set them on the HttpTransport)"
        )
    if url is not None:
        transport.refuse_clear_token(url)
    return transport


def refuse_token_in_clear(url: str) -> None:
    """:class:`~.errors.TokenInClear` when a token sent to ``url`` would travel unencrypted: over ``http://`` to a
    host other than this machine's loopback (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "http" or is_loopback(parts.hostname or ""):
        return
    raise TokenInClear(
        f"refusing to send the token in clear to {_origin(url)}: a key over plain http:// can be read by anyone on "
        "the way; use an https:// address, or drop the token (--token, LDPCLIENT_TOKEN and the service's own "
        "variable, e.g. OPENAI_API_KEY)")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 without brackets) is this machine's loopback."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _auth_hint(status: int, has_token: bool) -> str:
    """What to check after a refusal with ``status``: the token, for 401 and 403; else nothing."""
    if status not in (401, 403):
        return ""
    return (" (check the token: --token or LDPCLIENT_TOKEN; API: token=)" if has_token
            else " (no token was sent: give --token or LDPCLIENT_TOKEN; API: token=)")


def _from(what: str, where: str) -> str:
    """`` from <where>`` after an HTTP status, unless ``what`` already names that address."""
    return "" if where in what else f" from {where}"


def _origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` (no path, no credentials)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


def _unreachable(exc: requests.exceptions.ConnectionError, url: str) -> str:
    """What a connection that never opened means for the user, in one line: the address and what to check."""
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    cause = reason.__cause__ if reason is not None and reason.__cause__ is not None else reason
    where = _origin(url)
    if isinstance(reason, urllib3.exceptions.NameResolutionError) or isinstance(cause, socket.gaierror):
        return f"cannot resolve the host of {where}: check the teacher address (--teacher)"
    if isinstance(cause, ConnectionRefusedError) or getattr(cause, "errno", None) == errno.ECONNREFUSED:
        return f"nothing answers at {where} (connection refused): is the teacher running, on that port?"
    why = getattr(cause, "strerror", None) or type(cause).__name__
    return f"cannot connect to {where} ({why}): is the teacher running, and reachable from this host?"


def _not_tls(exc: requests.exceptions.SSLError) -> bool:
    """Whether a TLS handshake failed because the server answered in plain HTTP."""
    text = str(exc).lower()
    return "wrong version number" in text or "record layer failure" in text or "http request" in text


def _tls_reason(exc: requests.exceptions.SSLError) -> str:
    """The certificate problem in a few words (OpenSSL's reason, else the error's type)."""
    text = " ".join(str(exc).split())
    for known in ("certificate verify failed: self-signed certificate in certificate chain",
                  "certificate verify failed: self-signed certificate", "certificate verify failed: unable to get "
                  "local issuer certificate", "certificate verify failed: certificate has expired",
                  "certificate verify failed: Hostname mismatch", "certificate verify failed"):
        if known.lower() in text.lower():
            return known
    return type(exc).__name__


def _never_connected(exc: requests.exceptions.ConnectionError) -> bool:
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


__all__ = [
    "CallInfo",
    "HttpTransport",
    "MAX_RESPONSE_BYTES",
    "RetryHint",
    "TRANSPORT_OPTIONS",
    "Timeout",
    "redact_url",
    "server_error_text",
    "transport_from_options",
]
