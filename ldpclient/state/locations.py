"""Where one command's state lives: the ledger, the journal and the plan seeds, in the state directory's files or
in a PostgreSQL database that several hosts share (``--state postgresql://...``).

The state directory (``--state-dir``) is used either way for what belongs to one host: the lock that keeps two
runs on it apart, the spool of decoded images, the remembered wire formats. With a database, the ledger's key stays a
file on each host (``--ledger-key-file``, default ``ledger.key`` in the state directory): it never goes into the
database, and every host that shares the ledger holds a copy of the same file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .database import display_location, is_database_url


@dataclass(frozen=True)
class StateLocations:
    """``directory``: this host's state directory; ``database``: a ``postgresql://`` URL or None (the directory's
    files); ``key_file``: the ledger's key file, None for the default."""

    directory: Path
    database: str | None = None
    key_file: Path | None = None

    @property
    def ledger(self) -> str | Path:
        """The ledger: the database's URL, or ``ledger.sqlite`` in the directory."""
        return self.database if self.database is not None else self.directory / "ledger.sqlite"

    @property
    def journal(self) -> str | Path:
        """The query journal: the database's URL, or ``journal.sqlite`` in the directory."""
        return self.database if self.database is not None else self.directory / "journal.sqlite"

    @property
    def ledger_key(self) -> Path | None:
        """The ledger's key file: the one given, else ``ledger.key`` in the directory for a database (None: the
        file ledger's own, beside it)."""
        if self.key_file is not None:
            return self.key_file.expanduser()
        return self.directory / "ledger.key" if self.database is not None else None

    def describe(self) -> str:
        """Where the state is, as it may be printed (a URL without its password)."""
        if self.database is None:
            return str(self.directory)
        return f"{display_location(self.database)} (this host's files in {self.directory})"


def check_state_url(value: str | None) -> None:
    """ValueError naming ``--state`` unless ``value`` is None or a ``postgresql://`` URL."""
    if value is not None and not is_database_url(value):
        raise ValueError("--state must be a postgresql:// URL (a folder is --state-dir), got "
                         f"{display_location(value)!r}")


__all__ = ["StateLocations", "check_state_url"]
