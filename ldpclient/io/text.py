"""Text a peer or a file name controls, made safe for a terminal, a log, a JSON file and a CSV cell.

One boundary for every string that did not come from ldpclient itself: a teacher's
error messages and class names, server headers, file names, tokens. What it does:

* :func:`printable`: control characters (C0 but tab, DEL, C1) and the Unicode
  bidirectional overrides become visible ``\\xNN``/``\\uNNNN`` escapes, so nothing a
  peer sends can move the cursor, clear the screen, set a window title or reorder
  a line on a terminal; optionally cut to a length.
* :func:`redact`: every secret (and its forms with surrounding whitespace and with
  escaped control characters) replaced by ``***``. Redact *before* cutting text,
  or a cut can leave most of a secret behind.
* :func:`csv_cell`: a cell that a spreadsheet would run as a formula (starting with
  ``=``, ``+``, ``-``, ``@``, tab or CR: the OWASP list) gets a leading ``'``.
* :func:`json_text`: JSON text with DEL and C1 characters escaped too (``json``
  escapes only C0 when it keeps non-ASCII characters).
* :func:`wrap_words`: help text wrapped at spaces only (the command line's and the mock server's).
"""

from __future__ import annotations

import re
import textwrap
from typing import Iterable

#: Characters that act on a terminal: C0 controls except tab, DEL, C1 controls, bidi overrides/isolates.
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
#: First characters that make a spreadsheet read a CSV cell as a formula (OWASP CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
#: Shortest secret that is redacted wherever it appears (a shorter one would blank out ordinary words).
MIN_SECRET_CHARS = 4


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object, *, max_chars: int | None = None) -> str:
    """``text`` with every terminal-active character escaped (see the module doc); cut to ``max_chars``."""
    out = _UNSAFE.sub(_escape, str(text))
    if max_chars is not None and len(out) > max_chars:
        out = out[: max(0, max_chars - 3)] + "..."
    return out


def _forms(secret: str) -> list[str]:
    """The ways a secret can appear in a message: as given, stripped, and with its controls escaped."""
    forms = {secret, secret.strip(), secret.encode("unicode_escape").decode("ascii"), printable(secret)}
    return sorted((f for f in forms if len(f.strip()) >= MIN_SECRET_CHARS), key=len, reverse=True)


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """Replace every form of each secret in ``text`` with ``***`` (secrets shorter than 4 characters are
    refused where they are given, see :func:`check_token`)."""
    for secret in secrets:
        if secret:
            for form in _forms(secret):
                text = text.replace(form, "***")
    return text


def check_token(token: str | None, option: str = "--token") -> str | None:
    """A bearer token as it can go into an HTTP header: surrounding whitespace (a trailing newline from a
    file or ``$(...)``) removed. Raises ValueError, without the token, for one that is blank, too short
    to redact safely, or holds control characters or spaces inside."""
    if token is None:
        return None
    stripped = token.strip()
    if not stripped:
        raise ValueError(f"{option} is empty (or only whitespace)")
    if len(stripped) < MIN_SECRET_CHARS:
        raise ValueError(f"{option} is shorter than {MIN_SECRET_CHARS} characters: not a real token")
    if _UNSAFE.search(stripped) or any(c.isspace() for c in stripped):
        raise ValueError(f"{option} holds whitespace or control characters inside it (not shown)")
    return stripped


def _needs_quote(text: str) -> bool:
    return text.startswith(_FORMULA_START) or (text.startswith("'") and _needs_quote(text[1:]))


def csv_cell(text: str) -> str:
    """``text`` safe as a CSV cell: printable, and a leading ``'`` where a spreadsheet would see a formula
    (also before a ``'`` that already stands there, so that :func:`from_csv_cell` gives the text back)."""
    text = printable(text)
    return "'" + text if _needs_quote(text) else text


def from_csv_cell(cell: str) -> str:
    """The text :func:`csv_cell` was given (its escapes of control characters stay escaped)."""
    return cell[1:] if cell.startswith("'") and _needs_quote(cell[1:]) else cell


def json_text(text: str) -> str:
    """JSON text (from ``json.dumps(..., ensure_ascii=False)``) with DEL, C1 and bidi characters escaped as
    ``\\uNNNN`` (they can only occur inside JSON strings, where the escape is equivalent)."""
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


__all__ = [
    "MIN_SECRET_CHARS",
    "check_token",
    "csv_cell",
    "from_csv_cell",
    "json_text",
    "printable",
    "redact",
    "wrap_words",
]


#: A short bracketed note click adds to an option's help (``[default: secure]``, ``[x>=1]``): kept on one line.
_BRACKETED = re.compile(r"\[[^\[\]\n]{1,60}\]")
_KEEP_TOGETHER = "\x00"


def wrap_words(text: str, width: int, indent: str = "") -> list[str]:
    """``text`` as lines of at most ``width`` characters (``indent`` included), broken at spaces only.

    Paragraphs (separated by an empty line) stay apart; a paragraph whose first line is ``\\b`` is
    kept as written (click's no-rewrap marker). A word longer than a line is never cut."""
    wrapper = textwrap.TextWrapper(
        width=max(width, len(indent) + 1), initial_indent=indent, subsequent_indent=indent,
        break_long_words=False, break_on_hyphens=False,
    )
    lines: list[str] = []
    for paragraph in re.split(r"\n[ \t]*\n", text.expandtabs().strip("\n")):
        if lines:
            lines.append("")
        raw = paragraph.splitlines()
        if raw and raw[0].strip() == "\b":
            lines.extend(indent + line.strip() for line in raw[1:])
        else:
            joined = _BRACKETED.sub(lambda m: m.group().replace(" ", _KEEP_TOGETHER), " ".join(paragraph.split()))
            lines.extend(line.replace(_KEEP_TOGETHER, " ") for line in wrapper.wrap(joined))
    return lines
