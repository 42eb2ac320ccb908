"""Where ldpclient keeps its persistent state: one small module every layer may import.

The state directory holds the privacy ledger (``ledger.sqlite`` + ``ledger.sqlite.key``),
the query journal (``journal.sqlite``), per-run plan seeds (``runs.json``) and the
mock teacher's cached weights. It is chosen once, here:
``$LDPCLIENT_STATE_DIR`` if set, else ``$XDG_STATE_HOME/ldpclient``, else
``~/.local/state/ldpclient``.
"""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: runs are not serialised
    fcntl = None  # type: ignore[assignment]

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


class StateError(ValueError):
    """The state directory cannot be used (a file in its place, unwritable, an unknown ``~user``); one line."""


class NewerStateFile(StateError):
    """A state file (ledger, journal, runs, checkpoint) was written by a newer ldpclient: a schema this version does
    not know. Refused before anything is sent, paid or charged; the file is left as it is."""

    def __init__(self, what: str, path: str | os.PathLike[str], found: object, known: int) -> None:
        super().__init__(
            f"{what} {str(path)!r} was written by a newer ldpclient (schema {found}; this version reads schema "
            f"{known} and older): upgrade ldpclient, or give this run another --state-dir; nothing was sent, paid "
            "or charged")


def check_schema(what: str, path: str | os.PathLike[str], found: object, known: int) -> int:
    """The schema version ``found`` in a state file as an int; :class:`NewerStateFile` above ``known``,
    :class:`StateError` when it is not a version at all."""
    try:
        version = int(str(found))
    except ValueError:
        raise StateError(f"{what} {str(path)!r} has an unreadable schema version {found!r}") from None
    if version > known:
        raise NewerStateFile(what, path, version, known)
    return version


class StateLocked(RuntimeError):
    """Another run holds the state directory (see :func:`state_lock`)."""


def state_dir(path: str | os.PathLike[str] | None = None, *, create: bool = True) -> Path:
    """``path`` (user-expanded) or :func:`default_state_dir`, created (mode 0700) unless ``create=False``.

    Raises :class:`StateError` (one line, naming the directory) when it cannot be made or used.
    """
    try:
        directory = Path(path).expanduser() if path is not None else default_state_dir()
    except RuntimeError as exc:  # Path.expanduser: "Could not determine home directory", unknown ~user
        raise StateError(f"state directory {str(path)!r}: cannot expand it ({exc})") from None
    if create:
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            reason = "a file is in its place" if exc.errno == errno.EEXIST else (exc.strerror or type(exc).__name__)
            raise StateError(f"state directory {str(directory)!r} cannot be created: {reason}") from None
        if not directory.is_dir():
            raise StateError(f"state directory {str(directory)!r} is not a directory")
    return directory


@contextmanager
def state_lock(directory: Path) -> Iterator[None]:
    """Hold the state directory for one run: an exclusive ``flock`` on ``directory/lock``.

    A second run on the same directory (another process, or another run in this one) gets
    :class:`StateLocked` at once instead of sharing the ledger, the journal and the money
    cap with the first: two runs at once could each pass the cap, and bill twice for one
    batch. The lock dies with the process, so a killed run never leaves it held.
    """
    if fcntl is None:  # pragma: no cover
        yield
        return
    path = directory / "lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StateError(f"state directory {str(directory)!r}: cannot open its lock file ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise StateLocked(
                f"state directory {str(directory)!r} is in use by another ldpclient run{who}; wait for it to "
                "finish, or give this run another --state-dir"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        except OSError:
            pass  # the pid is only a hint in the message above
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


__all__ = [
    "STATE_DIR_ENV",
    "NewerStateFile",
    "StateError",
    "check_schema",
    "StateLocked",
    "default_state_dir",
    "state_dir",
    "state_lock",
]
