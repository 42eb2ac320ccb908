"""The option tables of ``docs/``, generated from the same definitions ``--help`` prints.

Every option is written once: in its ``typer.Option(help=...)`` (or, for the mock teacher,
in ``mock_server.config.ServerConfig``). A page marks where a command's table goes::

    <!-- options: label -->
    ...generated...
    <!-- end options -->

``python -m ldpclient.cli.reference docs/*.md`` rewrites those blocks in place; ``--check``
rewrites nothing and exits 1 naming each page whose tables are stale (the test suite runs it).
The command names are those of ``ldpclient`` (``label``, ``noise``, ``budget``, ``demo``,
``audit``) and ``serve-mock`` (the mock teacher's argparse flags).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Iterable, Sequence

from .click_compat import Context

_BLOCK = re.compile(r"(<!-- options: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end options -->)", re.S)


def _cell(text: str) -> str:
    """One table cell: whitespace collapsed, ``|`` escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _click_rows(name: str) -> list[tuple[str, str]]:
    """(option with its metavar, help with its ``[default: ...]``) of each visible parameter: what ``--help`` prints."""
    import typer.main

    from .commands import app

    group = typer.main.get_command(app)
    command = group.commands[name]  # type: ignore[attr-defined]
    ctx = Context(command, info_name=name)
    rows = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None or param.name == "help":
            continue
        rows.append((f"`{_cell(record[0])}`", _cell(record[1])))
    return rows


def _argparse_rows(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        names = ", ".join(action.option_strings)
        metavar = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
        rows.append((f"`{names}{metavar}`", _cell((action.help or "").replace("%%", "%"))))
    return rows


def options_table(name: str) -> str:
    """The markdown table of command ``name``'s options (``serve-mock``: the mock teacher's flags)."""
    if name == "serve-mock":
        from mock_server.config import build_parser

        rows = _argparse_rows(build_parser("ldpclient serve-mock"))
    else:
        rows = _click_rows(name)
    return "| option | meaning |\n|---|---|\n" + "".join(f"| {opt} | {text} |\n" for opt, text in rows)


def render(page: str) -> str:
    """``page`` with every marked block replaced by its command's current table."""
    return _BLOCK.sub(lambda m: m.group(1) + options_table(m.group("name")) + m.group(4), page)


def stale_pages(paths: Iterable[Path]) -> list[Path]:
    """The pages whose option tables differ from what :func:`render` writes."""
    stale = []
    for p in paths:
        text = p.read_text(encoding="utf-8")
        if render(text) != text:
            stale.append(p)
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ldpclient.cli.reference", description=__doc__.split("\n")[0])
    parser.add_argument("pages", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a page is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_pages(args.pages)
        for p in stale:
            print(f"{p}: option tables are stale; run python -m ldpclient.cli.reference {p}", file=sys.stderr)
        return 1 if stale else 0
    for p in args.pages:
        text = p.read_text(encoding="utf-8")
        new = render(text)
        if new != text:
            p.write_text(new, encoding="utf-8")
            print(f"updated {p}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
