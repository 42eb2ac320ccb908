"""``--help`` of every command at 80 and 60 columns: no option name, metavar or default is cut (the rich
help panels cut ``--allow-weak-pri…`` at 80), and nothing is broken inside an option name."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from ldpclient.cli.commands import app
from ldpclient.cli.help import wrap_term
from ldpclient.io.text import wrap_words

GROUP = typer.main.get_command(app)
COMMANDS = sorted(GROUP.commands)  # type: ignore[attr-defined]


def _help(args: list[str], columns: int) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


def _whole(word: str, text: str) -> bool:
    """``word`` appears in ``text`` with no letter, digit or hyphen glued to either side."""
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def _documented(command_name: str) -> list[tuple[list[str], str, str]]:
    """Per visible parameter of the command: its option names, its option column (names and metavar), and
    the bracketed notes (``[default: ...]``, ``[required]``) of its help text."""
    command = GROUP.commands[command_name]  # type: ignore[attr-defined]
    ctx = command.make_context(command_name, ["--help"], resilient_parsing=True)
    out = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None or getattr(param, "hidden", False):
            continue
        names = ([param.metavar or param.name] if param.param_type_name == "argument"  # as shown: its metavar
                 else [*param.opts, *getattr(param, "secondary_opts", [])])
        notes = " ".join(re.findall(r"\[[^\[\]]*\]", record[1]))
        out.append((names, record[0], notes))
    return out


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_at_80_columns_cuts_no_option_name_metavar_or_default(command: str) -> None:
    args = [command] if command else []
    text = _help(args, 80)
    assert "…" not in text and "╭" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert not [line for line in text.splitlines() if re.search(r"\w-$", line)]  # no word broken at a hyphen
    if not command:
        for name in COMMANDS:
            assert _whole(name, text)
        return
    lines = text.splitlines()
    for names, term, notes in _documented(command):
        for name in names:
            assert _whole(name, text), f"{command}: {name} is not whole in --help"
        for piece in re.split(r"[|,/\s<>{}\[\]]+", term):  # option names, metavar words, choices
            assert not piece or _whole(piece, text), f"{command}: {piece!r} of {term!r} is cut"
        for note in re.findall(r"\[[^\[\]]*\]", notes):
            assert any(note in line for line in lines), f"{command}: {note!r} is not whole on one line"


@pytest.mark.parametrize("command", COMMANDS)
def test_help_at_60_columns_breaks_no_option_name(command: str) -> None:
    text = _help([command], 60)
    for line in text.splitlines():
        assert not re.search(r"\w-$", line), f"{command}: a word broken at a hyphen: {line!r}"
    for names, _, _ in _documented(command):
        for name in names:
            assert _whole(name, text), f"{command}: {name} is not whole at 60 columns"


def test_the_option_the_weak_privacy_error_names_is_spelled_out_in_label_help() -> None:
    assert _whole("--allow-weak-privacy", _help(["label"], 80))


def test_wrap_words_breaks_at_spaces_only_and_keeps_bracketed_notes_together() -> None:
    text = "use --no-secure or tldp-weighted with http://127.0.0.1:8080/v2/models/digits [default: secure]"
    lines = wrap_words(text, 20, "  ")
    words = " ".join(line.strip() for line in lines).split()
    assert words == text.split()  # every word whole, in order
    assert "  [default: secure]" in lines
    assert all(len(line) <= 20 for line in lines if "http" not in line)
    assert wrap_words("one\n\ntwo", 40) == ["one", "", "two"]
    assert wrap_words("\b\nkeep   as\nwritten", 40, " ") == [" keep   as", " written"]


def test_wrap_term_breaks_a_long_choice_list_after_a_bar() -> None:
    term = "--mechanism <laplace|gaussian|tldp-laplace|tldp-gaussian|tldp-weighted|discrete-tldp>"
    lines = wrap_term(term, 40)
    assert all(len(line) <= 40 for line in lines) and len(lines) > 1
    assert "".join(line.strip() for line in lines) == term.replace("| ", "|")
    assert wrap_term("-t, --teacher <str>", 40) == ["-t, --teacher <str>"]


def test_every_option_of_every_command_is_in_a_help_group_and_label_help_shows_them_in_order() -> None:
    from ldpclient.cli.help import HELP_GROUPS, OTHER_GROUP

    command = typer.main.get_command(app)
    grouped = {name for names in HELP_GROUPS.values() for name in names}
    for name, sub in command.commands.items():  # type: ignore[attr-defined]
        loose = [p.name for p in sub.params if p.param_type_name == "option" and p.name not in grouped]
        assert not loose, (name, loose)
    text = _help(["label", "--help"], 80)
    headings = [line[:-1] for line in text.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert headings == ["Arguments", "Start here", "Input and output", "Privacy", "Teacher and network", "Money",
                        "Student", "Run control"], headings
    start = text.split("\nStart here:\n", 1)[1].split("\n\n", 1)[0]
    for option in ("--teacher", "--check", "--output", "--dry-run", "--html"):
        assert f"  {option}" in start or f", {option}" in start, (option, start)
    assert [start.find(f"--{o}") for o in ("teacher", "check", "output", "dry-run", "html")] == sorted(
        start.find(f"--{o}") for o in ("teacher", "check", "output", "dry-run", "html"))  # in a first run's order
    assert text.splitlines()[0].endswith(" label {PRIVATE_DIR} --teacher URL [OPTIONS]"), text.splitlines()[0]
    assert OTHER_GROUP not in text
    section = text.split("\nMoney:\n", 1)[1].split("\n\n", 1)[0]
    assert "--price" in section and "--money-cap" in section and "--epsilon" not in section


@pytest.mark.parametrize("name", ["seed", "quiet", "state_dir", "privacy_cap", "config", "token"])
def test_an_option_shared_by_label_noise_and_budget_reads_the_same_in_each(name: str) -> None:
    texts = {sub: param.help for sub in ("label", "noise", "budget")
             for param in GROUP.commands[sub].params if param.name == name}  # type: ignore[attr-defined]
    assert len(texts) >= 2 and len(set(texts.values())) == 1, texts


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_names_its_value_in_one_placeholder_style(command: str) -> None:
    """An option that takes a value shows it as ``<kind>`` in lower case (``<path>``, ``<int range>``,
    ``<epsilon|none>``), never as ``FILE`` beside ``<file>``."""
    odd = []
    for names, column, _ in _documented(command):
        if names[0].startswith("-"):
            value = " ".join(w for w in column.replace(",", " ").split() if w not in names and "/" not in w)
            if value and not re.fullmatch(r"<[a-z0-9 |._-]+>", value):
                odd.append(column)
    assert odd == []


def test_serve_mock_help_reads_like_the_other_commands() -> None:
    """The mock teacher's flags (argparse, defined in ``mock_server.config``) in the same style: ``Usage:`` with
    this command's name, titled groups, ``<kind>`` placeholders, sentences, defaults in brackets or 'Default: none'."""
    text = _help(["serve-mock"], 80)
    assert text.startswith("Usage: ldpclient serve-mock [OPTIONS]")
    assert "python -m mock_server" not in text and "(default: None)" not in text and "options:" not in text
    for title in ("Network:", "Teacher model:", "Auth and billing:", "Fault injection:", "Spec conformance:"):
        assert f"\n{title}\n" in text
    options = re.findall(r"^  (--[\w-]+)(?: (\S+))?", text, flags=re.M)
    assert len(options) > 30
    assert [o for o, value in options if value and not re.fullmatch(r"<[a-z0-9 |._-]+>", value)] == []
    helps = re.findall(r"^  --[\w-]+(?: <[^>]+>)? +([^\s<].*)$", text, flags=re.M)
    assert helps and all(h[0].isupper() for h in helps)
    assert "Default: none." in text and "[default: 8000]" in text
