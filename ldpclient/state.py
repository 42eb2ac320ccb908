"""Where ldpclient keeps its persistent state: one small module every layer may import.

The state directory holds the privacy ledger (``ledger.sqlite`` + ``ledger.sqlite.key``),
the query journal (``journal.sqlite``), per-run plan seeds (``runs.json``) and the
mock teacher's cached weights. It is chosen once, here:
``$LDPCLIENT_STATE_DIR`` if set, else ``$XDG_STATE_HOME/ldpclient``, else
``~/.local/state/ldpclient``.
"""

from __future__ import annotations

import os
from pathlib import Path

STATE_DIR_ENV = "LDPCLIENT_STATE_DIR"


def default_state_dir() -> Path:
    """The default state directory (see the module doc). Not created by this function."""
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "ldpclient"
    return Path.home() / ".local" / "state" / "ldpclient"


def state_dir(path: str | os.PathLike[str] | None = None, *, create: bool = True) -> Path:
    """``path`` (user-expanded) or :func:`default_state_dir`, created (mode 0700) unless ``create=False``."""
    directory = Path(path).expanduser() if path is not None else default_state_dir()
    if create:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    return directory


__all__ = ["STATE_DIR_ENV", "default_state_dir", "state_dir"]
