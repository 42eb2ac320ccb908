"""``--help`` that reads at any terminal width: nothing cut, nothing broken inside a word.

typer's rich help panels cut option names, metavars and defaults with an ellipsis when a column
runs out of room (at 80 columns: ``--allow-weak-pri…``, ``--train-batch-si…``). The command line
prints click's plain definition lists instead, through :class:`HelpFormatter`, which wraps

* the help text at spaces only: never inside a word and never at a hyphen, so ``--no-secure`` or
  ``tldp-weighted`` stay whole (a word longer than the line, such as a URL, stays whole too and
  runs past the line instead of being cut);
* the option column at spaces, ``|`` and ``,`` when an option, its aliases and its metavar are
  wider than the line.

Options are listed in groups (:data:`HELP_GROUPS`: one list for every command, so that an option shared by
several commands sits in the same group in each). :class:`HelpCommand` and :class:`HelpContext` carry the
formatter to every command.
"""

from __future__ import annotations

import re
from typing import Sequence

from typer.core import TyperCommand

from ..io.text import wrap_words
from .click_compat import Context, UsageError
from .click_compat import HelpFormatter as _ClickHelpFormatter

#: Widest option column (option names and metavar) before the help text moves under it.
OPTION_COLUMN_MAX = 30
#: Narrowest help-text column kept beside the option column; on a narrower screen the help text goes under
#: its option, indented by :data:`STACKED_INDENT`.
MIN_TEXT_WIDTH = 30
STACKED_INDENT = 4
_SPACING = 2
#: Where an option column may break: after a space, ``|`` or ``,``.
_TERM_PIECES = re.compile(r"[^ |,]+[ |,]*|[ |,]+")

#: The help's option groups, in the order printed, each with the parameter names (as the commands' functions
#: name them) it holds; an option of no group would be listed last under "Other options" (a test keeps none).
#: The first group: what a first run needs, in that order.
START_HERE = "Start here"
HELP_GROUPS: dict[str, tuple[str, ...]] = {
    START_HERE: ("teacher", "check", "output", "dry_run", "html"),
    "Input and output": ("public", "public_skip_copies", "decode", "format", "report", "html_private", "out", "preview",
                         "private", "workdir", "run", "plan", "sources", "size", "channels", "max_pixels",
                         "max_memory", "json_out", "as_json", "quiet", "two_digits"),
    "Privacy": ("mechanism", "epsilon", "epsilon_unit", "delta", "secure", "allow_large_delta",
                "allow_weak_privacy", "augment", "reduce", "basis", "coefficients", "clip_norm", "postprocess",
                "privacy_cap", "set_cap", "paper_epsilon", "old_per", "old_reduction", "old_kind"),
    "Teacher and network": ("token", "queries", "query_rounds", "batch_size", "workers", "timeout", "max_retry_time",
                            "ca_bundle", "wire", "num_classes", "class_names", "value_range", "input_shape",
                            "input_name", "output_name", "datatype", "model", "label_map", "batch_api",
                            "teacher_epochs"),
    "Money": ("price", "price_input_tokens", "price_output_tokens", "image_tokens", "money_cap"),
    "Student": ("student", "student_weights", "epochs", "train_batch_size", "warmup", "flip", "students", "adapt",
                "baseline"),
    "Attack": ("empirical", "holdout", "cnn_steps", "max_queries", "rme", "sweep"),
    "Run control": ("config", "state_dir", "state", "ledger_key_file", "init", "cluster", "seed", "help"),
}
_GROUP_OF = {name: group for group, names in HELP_GROUPS.items() for name in names}
#: Options a command's usage line shows beside its arguments: what it cannot run without (given on the command
#: line or in its ``--config`` file).
USAGE_OPTIONS: dict[str, tuple[str, ...]] = {"label": ("--teacher URL",)}
#: The group of an option no entry of :data:`HELP_GROUPS` names.
OTHER_GROUP = "Other options"


def wrap_term(term: str, width: int) -> list[str]:
    """An option column entry (``-t, --teacher <str>``) as lines of at most ``width`` characters, broken
    after a space, ``|`` or ``,`` (continuation lines indented by 4); a piece longer than a line stays whole."""
    lines, line = [], ""
    for piece in _TERM_PIECES.findall(term):
        if line.strip() and len(line + piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = "    "
        line += piece
    lines.append(line.rstrip())
    return lines


class HelpFormatter(_ClickHelpFormatter):
    """click's help formatter with the wrapping described in the module doc."""

    def write_text(self, text: str) -> None:
        for line in wrap_words(text, self.width, " " * self.current_indent):
            self.write(f"{line}\n")

    def write_dl(self, rows: Sequence[tuple[str, str]], col_max: int = OPTION_COLUMN_MAX,
                 col_spacing: int = _SPACING) -> None:
        rows = list(rows)
        if not rows:
            return
        indent = self.current_indent
        room = max(self.width - indent, MIN_TEXT_WIDTH)
        column = min(max(len(first) for first, _ in rows), col_max)
        text_at = indent + column + col_spacing
        if self.width - text_at < MIN_TEXT_WIDTH:  # stacked: each help text under its option
            text_at = indent + STACKED_INDENT
        for first, second in rows:
            term = wrap_term(first, room)
            for line in term[:-1]:
                self.write(f"{'':>{indent}}{line}\n")
            last = f"{'':>{indent}}{term[-1]}"
            text = wrap_words(second, self.width, " " * text_at) if second else []
            if not text:
                self.write(f"{last}\n")
                continue
            if len(term) == 1 and len(last) + col_spacing <= text_at:
                self.write(f"{last:<{text_at}}{text[0].lstrip()}\n")
            else:
                self.write(f"{last}\n{text[0]}\n")
            for line in text[1:]:
                self.write(f"{line}\n")


class HelpContext(Context):
    """A click context whose ``--help`` goes through :class:`HelpFormatter`."""

    formatter_class = HelpFormatter


class HelpCommand(TyperCommand):
    """A typer command whose ``--help`` goes through :class:`HelpFormatter` (``@app.command(cls=HelpCommand)``),
    and which refuses a flag given with its opposite (``--flip --no-flip``: click would let the last one win)."""

    context_class = HelpContext

    def format_options(self, ctx: Context, formatter: _ClickHelpFormatter) -> None:
        """The arguments, then the options in their :data:`HELP_GROUPS` groups (in that order)."""
        arguments: list[tuple[str, str]] = []
        groups: dict[str, list[tuple[str, tuple[str, str]]]] = {}  # group -> (parameter name, help record)
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append(record)
            else:
                groups.setdefault(_GROUP_OF.get(param.name or "", OTHER_GROUP), []).append((param.name or "", record))
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        if START_HERE in groups:  # in the order a first run needs them
            groups[START_HERE].sort(key=lambda named: HELP_GROUPS[START_HERE].index(named[0]))
        for group in [*HELP_GROUPS, OTHER_GROUP]:
            if group in groups:
                with formatter.section(group):
                    formatter.write_dl([record for _, record in groups[group]])

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        """``PRIVATE_DIR --teacher URL [OPTIONS]``: the arguments, what :data:`USAGE_OPTIONS` names, then the rest."""
        pieces = super().collect_usage_pieces(ctx)
        needed = USAGE_OPTIONS.get(ctx.info_name or "", ())
        if not needed:
            return pieces
        rest = [p for p in pieces if p != self.options_metavar]
        return [*rest, *needed, *([self.options_metavar] if self.options_metavar in pieces else [])]

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        given = set(args[: args.index("--")] if "--" in args else args)
        for param in self.params:
            if getattr(param, "is_flag", False) and param.secondary_opts:
                on = [o for o in param.opts if o in given]
                off = [o for o in param.secondary_opts if o in given]
                if on and off:
                    raise UsageError(f"{on[0]} and {off[0]} contradict each other: give one of them", ctx=ctx)
        return super().parse_args(ctx, args)
