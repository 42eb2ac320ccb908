"""The per-record caps a ledger holds: set once, they hold for every later run and command on that ledger.

Every change is a row of the ``caps`` table (the last row holds; NULL: no cap on that quantity), with what set
it (``origin``: the option or call) and when. A cap given to a run (``--privacy-cap``, ``Ledger(cap_epsilon=)``)
may only tighten what the ledger holds: a lower one is recorded and holds from then on, a higher one is refused
(:class:`~.errors.CapRaiseRefused`). Raising or removing a cap is explicit (:func:`set_caps`: ``ldpclient budget
--set-cap``), and recorded the same way. Lowering a cap below what some images have spent freezes them: no
fresh release of theirs fits (:func:`~.spend.check_budget`); nothing is ever silently exceeded.

Units: epsilon per record in nats, delta a probability (per record).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ...state.database import LEDGER_NAMESPACE, Database, is_database_url
from .errors import CapRaiseRefused
from .schema import transaction
from .spend import Caps

#: The lock a change of caps is made under (PostgreSQL: an advisory lock; SQLite: the write lock).
CAPS_LOCK = "ldpclient-ledger-caps"


def stored_caps(c: Database) -> Caps:
    """The caps the ledger holds now (its last ``caps`` row; no row: no caps)."""
    row = c.execute("SELECT epsilon, delta FROM caps ORDER BY id DESC LIMIT 1").fetchone()
    return Caps(None, None) if row is None else Caps(row[0], row[1])


def held_caps(path: str | os.PathLike[str]) -> Caps:
    """The caps the ledger file at ``path`` holds, read only (no ledger, or one from before caps were kept: no
    caps); :class:`~ldpclient.state.NewerStateFile` for a ledger of a newer schema. For what runs before the
    ledger is opened (the plan, ``--dry-run``): read-only, with its write-ahead log where it has one with content
    (:meth:`~ldpclient.state.database.Database.open_to_read`), so a cap a killed run left in the log holds here
    too."""
    if is_database_url(path):
        return _held_caps_in_database(str(path))
    p = Path(path)
    if not p.exists():
        return Caps(None, None)
    c = Database.open_to_read(p, namespace=LEDGER_NAMESPACE)
    try:
        return _held_caps_of(c)
    finally:
        c.close()


def _held_caps_in_database(url: str) -> Caps:
    """:func:`held_caps` of a PostgreSQL ledger (no ledger there yet: no caps)."""
    c = Database.open(url, namespace=LEDGER_NAMESPACE)
    try:
        return _held_caps_of(c)
    finally:
        c.close()


def _held_caps_of(c: Database) -> Caps:
    """The caps the ledger in ``c`` holds, its schema checked (:class:`~ldpclient.state.NewerStateFile` for a
    newer one); no ledger, or one from before caps were kept: no caps."""
    from ...state import check_schema
    from .schema import SCHEMA_VERSION, stored_schema

    version = stored_schema(c)
    if version is not None:
        check_schema("ledger", c.location, version, SCHEMA_VERSION)
    return stored_caps(c) if "caps" in c.tables() else Caps(None, None)


def cap_for_run(path: str | os.PathLike[str], given: float | None, origin: str) -> float | None:
    """The per-record epsilon cap a run on the ledger at ``path`` works under: the held one, tightened by
    ``given``; :class:`CapRaiseRefused` when ``given`` is above it."""
    return _tightened("epsilon", given, held_caps(path).epsilon, origin)


def _tightened(name: str, given: float | None, held: float | None, origin: str) -> float | None:
    """The cap that holds after a run asks for ``given`` where the ledger holds ``held``."""
    if given is None:
        return held
    if held is None or given <= held:
        return given
    raise CapRaiseRefused(
        f"{origin} {given:g} is above the privacy cap this state holds ({name} {held:g} per image); a cap "
        f"is raised only explicitly: ldpclient budget --set-cap {given:g} (with the same --state-dir)")


def settle_caps(c: Database, given: Caps, origin: str) -> Caps:
    """The caps a ledger user works under: the ledger's, tightened by ``given`` (recorded when it changes
    them); :class:`CapRaiseRefused` when ``given`` is above what the ledger holds. ``origin`` names where
    ``given`` came from in messages and in the history (``--privacy-cap``, ``Ledger(cap_epsilon=...)``)."""
    with transaction(c):
        c.lock(CAPS_LOCK)
        held = stored_caps(c)
        caps = Caps(_tightened("epsilon", given.epsilon, held.epsilon, origin),
                    _tightened("delta", given.delta, held.delta, origin))
        if caps != held:
            _record(c, caps, origin)
    return caps


def set_caps(c: Database, caps: Caps, origin: str) -> Caps:
    """Set the ledger's caps to ``caps`` (raise, lower or remove: None), recorded with ``origin``."""
    with transaction(c):
        c.lock(CAPS_LOCK)
        if caps != stored_caps(c):
            _record(c, caps, origin)
    return caps


def cap_history(c: Database) -> list[dict[str, object]]:
    """Every cap set on the ledger, oldest first: ``epsilon``, ``delta`` (None: no cap), ``origin``, ``set_at``
    (seconds since the epoch)."""
    rows = c.execute("SELECT epsilon, delta, origin, created FROM caps ORDER BY id").fetchall()
    return [{"epsilon": e, "delta": d, "origin": o, "set_at": t} for e, d, o, t in rows]


def _record(c: Database, caps: Caps, origin: str) -> None:
    c.execute("INSERT INTO caps(epsilon, delta, origin, created) VALUES (?, ?, ?, ?)",
              (caps.epsilon, caps.delta, origin, time.time()))


__all__ = ["cap_for_run", "cap_history", "held_caps", "set_caps", "settle_caps", "stored_caps"]
