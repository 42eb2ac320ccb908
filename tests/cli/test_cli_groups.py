"""Option groups (ldpclient.cli.groups): a group's fields become a command's options, and a run's options are
built from the groups by name, with nothing copied by hand and nothing dropped."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import pytest
import typer
from typer.testing import CliRunner

from ldpclient.cli.groups import OptionGroup, options_from, with_groups


@dataclasses.dataclass(frozen=True)
class _Sizes(OptionGroup):
    APART: ClassVar[frozenset[str]] = frozenset({"verbose"})

    width: int = typer.Option(3, min=1, help="Width.")
    label: Optional[str] = typer.Option(None, "--label", help="Label.")
    verbose: bool = typer.Option(False, "--verbose")


@dataclasses.dataclass(frozen=True)
class _Run:
    name: str
    width: int
    label: Optional[str]


def test_a_group_is_the_commands_options_and_comes_back_filled() -> None:
    seen: list[object] = []

    def command(name: str = typer.Argument(...), *, sizes: _Sizes) -> None:
        seen.append(options_from(_Run, sizes, name=name))
        seen.append(sizes.verbose)

    app = typer.Typer()
    app.command()(with_groups(command))
    app.command("other")(lambda: None)  # two commands: typer then takes the first argument as the command's name
    assert CliRunner().invoke(app, ["command", "x", "--width", "5", "--verbose"]).exit_code == 0
    assert seen == [_Run("x", 5, None), True]
    refused = CliRunner().invoke(app, ["command", "x", "--width", "0"])
    assert refused.exit_code == 2 and "--width" in refused.output
    assert "--label" in CliRunner().invoke(app, ["command", "--help"]).output


def test_a_name_twice_is_refused_when_the_command_is_declared() -> None:
    def command(width: int = typer.Option(1), *, sizes: _Sizes) -> None: ...

    with pytest.raises(TypeError, match="named twice: width"):
        with_groups(command)


def test_a_group_field_the_run_does_not_take_is_an_error_unless_set_apart() -> None:
    @dataclasses.dataclass(frozen=True)
    class Narrow:
        width: int

    with pytest.raises(TypeError, match="_Sizes.label is not an option of Narrow"):
        options_from(Narrow, _Sizes(width=2, label="a", verbose=True))
