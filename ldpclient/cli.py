"""Command-line interface (typer)."""

from __future__ import annotations

import typer

from . import __version__

app = typer.Typer(help="Label private images with a remote teacher that only sees LDP releases.", no_args_is_help=True)


@app.command()
def version() -> None:
    """Print the ldpclient version."""
    typer.echo(__version__)
