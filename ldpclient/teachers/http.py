"""The public toolkit for HTTP teacher adapters: transport, encoding, result validation.

This module gathers what an adapter author needs; the code lives in :mod:`.transport` (the
connection and its bounds), :mod:`.retry` (the policy and loop), :mod:`.billing` (the per-attempt
billing hook), :mod:`.encoding` and :mod:`.result`.

The built-in adapters (OIP, TorchServe, Hugging Face) are written with these, and a
third-party adapter (``examples/custom_teacher.py``) needs nothing else from
ldpclient besides :class:`~ldpclient.teachers.Teacher`,
:class:`~ldpclient.teachers.TeacherMetadata` and
:class:`~ldpclient.teachers.InferResult`:

* **Transport**: :class:`HttpTransport` is the one object carrying a teacher's
  connection options (auth, timeouts, retries, TLS, size and time limits); its
  docstring is where they are documented. Adapters take ``transport=`` rather than
  re-declaring them; for the keyword style, :func:`transport_from_options`
  builds one from those keywords (:data:`TRANSPORT_OPTIONS`). ``call()`` sends one
  logical request with retries and returns ``(parse(response), CallInfo)``;
  :class:`RetryPolicy` says when and how long to retry; :func:`redact_url` makes an
  address safe to print. A billable request passes ``units=n`` and the ``billing`` hook its
  ``infer`` received (:class:`BillingGuard`), so that every attempt is counted.
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
* billing ``units`` (``call(..., units=n, billing=billing)``) are queries (images) a request carries.

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

from .billing import BillingGuard
from .encoding import INPUT_DATATYPES, to_png, to_wire
from .errors import MalformedResponse
from .result import best_of_scores, label_to_index, validate_labels
from .retry import RETRY_STATUSES, RetryPolicy, parse_retry_after
from .transport import (
    MAX_RESPONSE_BYTES,
    TRANSPORT_OPTIONS,
    CallInfo,
    HttpTransport,
    RetryHint,
    Timeout,
    TransportOptions,
    redact_url,
    server_error_text,
    transport_from_options,
)

__all__ = [
    # transport
    "HttpTransport",
    "TRANSPORT_OPTIONS",
    "TransportOptions",
    "transport_from_options",
    "RetryPolicy",
    "RetryHint",
    "RETRY_STATUSES",
    "parse_retry_after",
    "BillingGuard",
    "CallInfo",
    "Timeout",
    "MAX_RESPONSE_BYTES",
    "redact_url",
    "server_error_text",
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
