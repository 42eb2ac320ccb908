"""One identity per teacher: the scope its ledger releases, journal batches and money cap are kept under.

A teacher can be named in many spellings: ``http://127.0.0.1:8080/v2/models/digits``,
the same with a trailing slash, ``oip+http://...``, ``HTTP://LOCALHOST:80/...``, with
credentials in the URL, or opened as an adapter object by an application. Each of them
must find the same releases (never noise a record twice for one teacher) and the same
journal and money cap (never pay twice, never get a second cap). So:

* :func:`canonical_url` normalises an address: scheme and host in lower case, the
  default port dropped, no credentials, query or fragment, no empty path segments or
  trailing slash. ``localhost`` and ``127.0.0.1`` stay distinct hosts (they may be
  different servers).
* :func:`adapter_scope` is what every built-in adapter sets as its ``journal_scope``:
  ``"<adapter>:<canonical url of the model endpoint>"``; the CLI uses the opened
  adapter's scope, so the command line and the API share one identity.
* :func:`identity_of_scope` maps a scope stored by an older ldpclient (the CLI's
  redacted URL as typed, or an adapter scope before normalisation) to today's, so the
  ledger and the journal can merge what was written under the other spellings, once.
"""

from __future__ import annotations

import re
from typing import Protocol, Sequence
from urllib.parse import urlsplit, urlunsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}
_ADAPTER_SCOPE = re.compile(r"^(oip|torchserve|hf):(?!//)(.+)$")


def canonical_url(url: str) -> str:
    """``url`` normalised (see the module doc); a string that is not an absolute URL comes back stripped."""
    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.netloc:
        return url.strip().split("?", 1)[0].split("#", 1)[0]
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    path = "/".join(p for p in parts.path.split("/") if p)
    return urlunsplit((scheme, host, "/" + path if path else "", "", ""))


def adapter_scope(adapter: str, endpoint_url: str) -> str:
    """The identity of a teacher reached through ``adapter`` at ``endpoint_url`` (its model's endpoint)."""
    return f"{adapter}:{canonical_url(endpoint_url)}"


def identity_of_scope(stored: str) -> str | None:
    """Today's identity for a scope an older run stored (an address as typed, or an adapter scope);
    None when it names no teacher this module can normalise (a local or plugin teacher, a preview)."""
    stored = stored.strip()
    m = _ADAPTER_SCOPE.match(stored)
    if m:
        adapter, url = m.group(1), m.group(2)
        return adapter_scope(adapter, url) if "://" in url else None
    try:
        return teacher_identity(stored)
    except ValueError:
        return None


def teacher_identity(address: str) -> str:
    """The identity of the teacher at ``address`` (an address ``ldpclient.teachers.connect`` takes) for the
    built-in HTTP adapters, without contacting it. ValueError for other adapters: their identity is the
    opened teacher's ``journal_scope``."""
    from .registry import builtin_adapters, resolve

    name, inner = resolve(address)
    entry = builtin_adapters().get(name)
    if entry is None or entry.identity is None:
        raise ValueError(f"no address-only identity for {name!r} teachers")
    return adapter_scope(name, entry.identity(inner))


class ScopedStore(Protocol):
    """What keeps rows per teacher identity (a Ledger's releases, a Journal's batches)."""

    def scopes(self) -> list[str]:
        """Every scope the store keeps rows under."""
        ...

    def rename_scopes(self, aliases: Sequence[str], identity: str) -> int:
        """Move the rows kept under ``aliases`` onto ``identity``; the rows moved."""
        ...


def merge_scope_aliases(store: ScopedStore, identity: str) -> int:
    """Move what ``store`` (a Ledger or a Journal: ``scopes()``, ``rename_scopes()``) keeps under other
    spellings of ``identity`` onto it (once: afterwards there are none). Returns the rows moved."""
    aliases = [s for s in store.scopes() if s != identity and identity_of_scope(s) == identity]
    return int(store.rename_scopes(aliases, identity)) if aliases else 0


__all__ = ["adapter_scope", "canonical_url", "identity_of_scope", "merge_scope_aliases", "teacher_identity"]
