"""Reading one HTTP response from a peer that may be hostile: its body in bounded pieces, decompressed, within
a size limit and a deadline (no gzip bomb, no trickle of bytes holds a run), and its errors in one redacted line.
"""

from __future__ import annotations

import time
from typing import Callable

import requests
import urllib3

from .errors import MalformedResponse, TransientTeacherError

#: Bytes read from the socket at a time.
READ_PIECE = 16 * 1024

__all__ = ["READ_PIECE", "read_body", "short_error"]


def read_body(resp: requests.Response, *, limit: int, deadline_s: float, started: float, what: str, where: str,
              redact: Callable[[str], str]) -> int:
    """Read ``resp``'s body in pieces of :data:`READ_PIECE` bytes, decompressed, within ``limit`` bytes (after
    decompression) and ``deadline_s`` seconds from ``started`` (``time.monotonic``); returns its size. Raises
    MalformedResponse past the size limit, TransientTeacherError past the deadline; ``redact`` clears secrets
    from the messages."""
    deadline = started + deadline_s
    pieces: list[bytes] = []
    size = 0
    try:
        while True:
            if time.monotonic() > deadline:
                raise TransientTeacherError(redact(
                    f"{what}: the response from {where} did not arrive within {deadline_s:g} s (the server is "
                    "sending too slowly)"
                ))
            piece = resp.raw.read1(READ_PIECE, decode_content=True)  # at most one read from the socket
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
            raise MalformedResponse(f"{what}: undecodable response body from {where}: "
                                    f"{short_error(exc, redact)}") from None
        raise TransientTeacherError(redact(f"{what}: response body lost ({where}): "
                                           f"{short_error(exc, redact)}")) from None
    resp._content = b"".join(pieces)  # what .content/.json() read from now on
    resp._content_consumed = True
    return size


def short_error(exc: BaseException, redact: Callable[[str], str]) -> str:
    """One line of an exception's text, redacted before it is cut to 200 characters."""
    return redact(" ".join(str(exc).split()))[:200]
