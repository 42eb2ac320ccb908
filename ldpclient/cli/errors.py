"""How a command fails: one line on stderr naming the problem and an exit code, never a traceback.

Exit codes: 0 ok, 1 other failure, 2 bad input, 3 privacy cap, 4 money cap, 5 teacher unreachable or
misbehaving, 130 interrupted (Ctrl-C). Everything already done (charged releases in the ledger, answered
batches in the journal) is kept, so re-running the same command resumes.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

import typer

from ..run.ui import UI
from .config import ConfigError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_PRIVACY_CAP = 3
EXIT_MONEY_CAP = 4
EXIT_TEACHER = 5
EXIT_INTERRUPTED = 130


class CLIError(Exception):
    """A user-facing failure: one-line ``message`` and an exit code."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


def classify_error(exc: BaseException) -> tuple[int, str] | None:
    """Map a known user-facing exception to (exit code, one-line message); None = a bug (re-raise)."""
    from ..io.folders import DataError

    if isinstance(exc, CLIError):
        return exc.exit_code, str(exc)
    if isinstance(exc, (ConfigError, DataError)):
        return EXIT_USAGE, str(exc)
    from ..privacy.ledger import BudgetExceeded, LedgerError
    from ..run.caps import CapForeseen
    from ..teachers.errors import CostCapReached, JournalError, TeacherError

    if isinstance(exc, CapForeseen):  # refused before anything was noised or sent: nothing to resume
        return (EXIT_PRIVACY_CAP if isinstance(exc, BudgetExceeded) else EXIT_MONEY_CAP), f"refused: {exc}"
    if isinstance(exc, BudgetExceeded):
        return EXIT_PRIVACY_CAP, f"privacy cap reached: {exc}"
    if isinstance(exc, LedgerError):
        if _environment_error(exc.__cause__) is not None:  # the disk, not the ledger: full, read-only, gone
            return EXIT_USAGE, f"ledger problem: {exc} (is the disk full or the state directory read-only?)"
        return EXIT_FAILURE, f"ledger problem: {exc}"
    if isinstance(exc, JournalError):
        return EXIT_FAILURE, f"journal problem: {exc}"
    if isinstance(exc, CostCapReached):
        return EXIT_MONEY_CAP, str(exc)
    if isinstance(exc, TeacherError):
        return EXIT_TEACHER, f"teacher error: {exc}"
    if isinstance(exc, (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)):
        return EXIT_USAGE, str(exc)
    from ..state import StateLocked
    from ..state.database import StateDamaged, StateDatabaseError

    if isinstance(exc, StateLocked):
        return EXIT_FAILURE, str(exc)
    if isinstance(exc, StateDatabaseError):
        return (EXIT_FAILURE if isinstance(exc, StateDamaged) else EXIT_USAGE), str(exc)
    return _environment_error(exc)


def _environment_error(exc: BaseException | None) -> tuple[int, str] | None:
    """A full disk, a read-only or vanished file, a state database that cannot be written: one line, exit 2."""
    import sqlite3

    from ..state.database import is_database_error

    if isinstance(exc, sqlite3.OperationalError):
        return EXIT_USAGE, f"state database problem: {exc} (is the disk full or the state directory read-only?)"
    if exc is not None and is_database_error(exc):  # PostgreSQL (--state): lost, full, refused
        return EXIT_USAGE, f"state database problem: {exc} (nothing committed is lost; fix it and re-run)"
    if isinstance(exc, OSError) and exc.errno is not None:
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        return EXIT_USAGE, f"{exc.strerror or os.strerror(exc.errno)}{where} (nothing done so far is lost; free the " \
            "space or fix the permissions and re-run)"
    if isinstance(exc, OSError) and "short write" in str(exc):
        return EXIT_USAGE, f"{exc} (is the disk full?)"
    return None


def one_line(message: str) -> str:
    """``message`` on one line: its whitespace runs as single spaces (``error`` when empty)."""
    return " ".join(message.split()) or "error"


@contextmanager
def user_errors(ui: UI, *, resume_hint: str | None = None, secrets: tuple[str | None, ...] = ()) -> Iterator[None]:
    """Turn known exceptions into one-line messages and exit codes (see module doc)."""
    try:
        yield
    except typer.Exit:
        raise
    except KeyboardInterrupt as exc:
        ui.stop_progress()
        hint = resume_hint or "re-run the same command to resume"
        msg = f"interrupted; everything done so far is saved ({hint})"
        abandoned = getattr(exc, "abandoned", 0)
        if abandoned:  # a second Ctrl-C: the requests in flight were not waited for
            msg += (f"; {abandoned} request(s) in flight were abandoned: the teacher may bill them, and the "
                    "re-run sends them again, so they may be paid twice")
        ui.error(msg, EXIT_INTERRUPTED, secrets=secrets)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Exception as exc:  # noqa: BLE001 - classified below, bugs re-raised
        mapped = classify_error(exc)
        if mapped is None:
            raise
        code, msg = mapped
        ui.stop_progress()
        resumable = not getattr(exc, "nothing_done", False) and not msg.startswith("refused: ")
        if code in (EXIT_MONEY_CAP, EXIT_PRIVACY_CAP, EXIT_TEACHER) and resume_hint and resumable:
            msg = f"{msg} [{resume_hint}]"
        ui.error(one_line(msg), code, secrets=secrets)
        raise typer.Exit(code) from None


__all__ = ["CLIError", "EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_MONEY_CAP", "EXIT_OK", "EXIT_PRIVACY_CAP",
           "EXIT_TEACHER", "EXIT_USAGE", "classify_error", "one_line", "user_errors"]
