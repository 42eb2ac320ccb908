"""The click that typer runs on, in one place: recent typer vendors it as ``typer._click``, older typer
depends on ``click`` itself. The command line imports click's pieces from here."""

from __future__ import annotations

try:  # recent typer vendors click
    from typer._click.core import Context
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
    from typer._click.formatting import HelpFormatter
except ImportError:  # pragma: no cover - older typer on top of click
    from click.core import Context  # type: ignore[no-redef, assignment, unused-ignore]
    from click.exceptions import NoArgsIsHelpError, UsageError  # type: ignore[no-redef, assignment, unused-ignore]
    from click.formatting import HelpFormatter  # type: ignore[no-redef, assignment, unused-ignore]

__all__ = ["Context", "HelpFormatter", "NoArgsIsHelpError", "UsageError"]
