"""The command line: the typer app (:mod:`.commands`, one function per command; the console script is
``ldpclient.cli:app``), its help at any terminal width (:mod:`.help`), ``--config`` files (:mod:`.config`), the
option tables of ``docs/`` (:mod:`.reference`) and the click that typer runs on (:mod:`.click_compat`). Nothing else in
``ldpclient`` imports it; the mock teacher's help borrows its wrapping."""

from .commands import app

__all__ = ["app"]
