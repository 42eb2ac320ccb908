"""Command-line interface (typer): ``ldpclient label``, ``noise``, ``budget``, ``serve-mock``, ``demo``, ``audit``.

Each command declares the option groups it takes (:mod:`ldpclient.cli.options`), builds its run's options from
them and hands over to :mod:`ldpclient.run`. User errors end with one line on stderr and an exit code
(:mod:`ldpclient.cli.errors`); everything already done is kept, so re-running the same command resumes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer
from typer.core import TyperGroup

from ..io.text import check_token
from ..names import VERSION
from ..privacy import defaults as privacy_defaults
from ..run.demo import FEW_CLASSES_CASE, FEW_CLASSES_QUERIES_PER_IMAGE, run_demo
from ..run.ui import UI
from ..transfer import defaults
from .click_compat import NoArgsIsHelpError, UsageError
from .errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, CLIError, one_line, user_errors
from .groups import options_from, with_groups
from .help import HelpCommand, HelpContext
from .options import (
    DEFAULT_AUGMENT,
    AdaptOption,
    Augment,
    ConfigOption,
    Decode,
    EpsilonOption,
    LabelEpsilonOption,
    MoneyGroup,
    NoiseDecodeOption,
    NoisePublicOption,
    OutputGroup,
    PrivacyGroup,
    PrivateDirArgument,
    PublicSkipCopiesOption,
    QueryGroup,
    ReduceOption,
    RunGroup,
    StateGroup,
    StudentGroup,
    TeacherGroup,
    TeacherUrlOption,
)


class _OneLineUsageErrors(TyperGroup):
    """Option and argument errors (``--epochs 0``, an unknown option, a missing argument) as one line
    on stderr with exit code 2, instead of click's multi-line usage box; ``--help`` wrapped whole
    (:mod:`ldpclient.cli.help`)."""

    context_class = HelpContext

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        if not standalone_mode:
            return super().main(*args, **kwargs)
        try:
            code = super().main(*args, **kwargs)
        except NoArgsIsHelpError as exc:
            if exc.ctx is not None:
                typer.echo(exc.ctx.get_help())
            sys.exit(EXIT_USAGE)
        except UsageError as exc:
            where = f" (ldpclient {exc.ctx.info_name} --help)" if exc.ctx is not None and exc.ctx.parent else ""
            typer.echo(f"error: {one_line(exc.format_message())}{where}", err=True)
            sys.exit(EXIT_USAGE)
        except typer.Abort:
            typer.echo("error: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=_OneLineUsageErrors,
    help="Label private images with a remote teacher that only ever sees LDP releases.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help, wrapped by cli.help: rich panels cut option names at 80 columns
)


def _print_version(value: bool) -> None:
    """``--version``: print the version and stop before any command runs."""
    if value:
        typer.echo(VERSION)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print the ldpclient version and exit."),
) -> None:
    """Label private images with a remote teacher that only ever sees LDP releases."""


@app.command(cls=HelpCommand)
def version() -> None:
    """Print the ldpclient version."""
    typer.echo(VERSION)


@app.command(cls=HelpCommand)
@with_groups
def label(
    private_dir: Path = PrivateDirArgument,
    teacher: Optional[str] = TeacherUrlOption,
    epsilon: float = LabelEpsilonOption,
    *, privacy_group: PrivacyGroup, query_group: QueryGroup, money_group: MoneyGroup, student_group: StudentGroup,
    output_group: OutputGroup, state_group: StateGroup, run_group: RunGroup, teacher_group: TeacherGroup,
    json_out: bool = typer.Option(False, "--json", help="Print the run report as JSON on stdout (implies --quiet)."),
) -> None:
    """Label PRIVATE_DIR with a student trained on the teacher's answers to LDP queries.

    Raw images never leave this machine: each is noised once (per-record budget kept in the ledger), expanded into
    queries by post-processing, and sent in batches.

    Re-running the same command resumes: no record is re-noised, no batch paid twice.
    """
    from ..run.compute import use_available_cores
    from ..run.label import LabelOptions, label_run, resume_hint

    ui = UI(quiet=run_group.quiet or json_out, json_mode=json_out)
    ui.capture_logs(secrets=(run_group.token,))
    with user_errors(ui, secrets=(run_group.token,)):
        token = check_token(run_group.token)
        if not teacher:
            raise CLIError("missing option --teacher URL (or `teacher = ...` in the --config file)", EXIT_USAGE)
        opts = options_from(LabelOptions, privacy_group, query_group, money_group, student_group, output_group,
                            state_group, run_group, private_dir=private_dir, teacher=teacher, epsilon=epsilon,
                            **teacher_group.run_options(money_group))
        opts.validate()
    with user_errors(ui, resume_hint=resume_hint(opts), secrets=(token,)):
        use_available_cores()
        with ui.stdout_kept_for_json():
            result = label_run(opts, token=token, ui=ui).report
    if json_out:
        ui.print_json(result, secrets=(token,))
    elif opts.dry_run:
        ui.plan_summary(result)
    else:
        ui.summary(result)


@app.command(cls=HelpCommand)
@with_groups
def noise(
    private_dir: Path = PrivateDirArgument,
    out: Path = typer.Option(..., "--out", help="Where noised copies (PNG) and preview.png go.", show_default=False),
    teacher: Optional[str] = typer.Option(None, "--teacher", "-t", help="Take the input shape from this teacher, and "
                                          "release for it (the label run then reuses these releases)."),
    size: int = typer.Option(28, min=1, help="Image side when no --teacher is given."),
    channels: int = typer.Option(1, help="1 (grey) or 3 (RGB) when no --teacher is given."),
    epsilon: float = EpsilonOption, *, privacy_group: PrivacyGroup,
    augment: Augment = typer.Option(DEFAULT_AUGMENT, help="Augmentation shown in the preview's third row."),
    preview: int = typer.Option(8, min=1, help="Records shown in preview.png."),
    public: Optional[Path] = NoisePublicOption,
    decode: Decode = NoiseDecodeOption,
    public_skip_copies: bool = PublicSkipCopiesOption,
    state_group: StateGroup, run_group: RunGroup, teacher_group: TeacherGroup,
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
) -> None:
    """Write noised copies of PRIVATE_DIR (what a teacher would see) and a preview grid.

    preview.png rows: clean records, their releases (post-processed), augmented queries. Charged in the ledger like
    any release; the preview shows clean images and is for your eyes only.
    """
    from ..run.compute import use_available_cores
    from ..run.noise import NoiseOptions, run_noise

    ui = UI(quiet=run_group.quiet or json_out, json_mode=json_out)
    ui.capture_logs(secrets=(run_group.token,))
    with user_errors(ui, secrets=(run_group.token,)):
        token = check_token(run_group.token)
        opts = options_from(NoiseOptions, privacy_group, state_group, run_group, private_dir=private_dir, out=out,
                            teacher=teacher, size=size, channels=channels, epsilon=epsilon, augment=augment.value,
                            preview=preview, public=public, decode=decode.value,
                            public_skip_copies=public_skip_copies, **teacher_group.run_options())
        use_available_cores()  # run_noise validates the options first
        with ui.stdout_kept_for_json():
            result = run_noise(opts, token=token, ui=ui)
    if json_out:
        ui.print_json(result, secrets=(token,))
    else:
        ui.noise_summary(result)


@app.command(cls=HelpCommand)
@with_groups
def budget(
    *, state_group: StateGroup,
    set_cap: Optional[str] = typer.Option(
        None, "--set-cap", metavar="<epsilon|none>",
        help="Set the privacy cap this state holds (per-image epsilon; 'none' removes it), recorded in the ledger. "
        "A cap holds for every later command on the state; --privacy-cap can only lower it.",
        show_default=False,
    ),
    html: Optional[Path] = typer.Option(
        None, "--html", dir_okay=False,
        help="Also write a page (one file, opens offline): the spend per image as a histogram, per teacher, and "
        "the images at the cap.",
        show_default=False,
    ),
    private: Optional[Path] = typer.Option(
        None, "--private", file_okay=False,
        help="With --html: name this folder's images that are at the cap (their bytes are hashed here as label "
        "does; the ledger itself holds no names).",
        show_default=False,
    ),
    init: bool = typer.Option(
        False, "--init",
        help="Start the ledger where there is none yet: with the key file as it is where one exists (a key "
        "provisioned for it, e.g. by a secrets manager, which a run would refuse as a lost ledger's), else a new key.",
    ),
    config: Optional[Path] = ConfigOption,
    json_out: bool = typer.Option(False, "--json", help="Print the ledger summary as JSON on stdout."),
) -> None:
    """Show per-record privacy spend and the privacy cap the ledger holds (no pixels, no record keys)."""
    from ..run.budget import ledger_summary

    ui = UI(quiet=json_out, json_mode=json_out)
    with user_errors(ui):
        summary = ledger_summary(state_group.state_dir, set_cap, html=html, private_dir=private,
                                 state=state_group.state, ledger_key_file=state_group.ledger_key_file, init=init)
    if json_out:
        ui.print_json(summary)
    else:
        ui.budget_summary(summary)


@app.command(
    "serve-mock",
    cls=HelpCommand,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def serve_mock(ctx: typer.Context) -> None:
    """Run the bundled mock teacher (OIP v2 on 127.0.0.1) and print the model's address for label --teacher."""
    try:
        from mock_server import main as mock_main
    except ImportError:  # pragma: no cover - depends on the mock server being installed
        typer.echo("error: the bundled mock server (package mock_server) is not available", err=True)
        raise typer.Exit(EXIT_FAILURE) from None
    code = mock_main(list(ctx.args), prog="ldpclient serve-mock")
    raise typer.Exit(int(code or 0))


@app.command(cls=HelpCommand)
def demo(
    workdir: Optional[Path] = typer.Option(None, help="Where the private PNG folder and outputs go (default: a "
                                                      "temp dir)."),
    queries: Optional[int] = typer.Option(None, min=10, show_default=False, help="Teacher queries per method "
                                          f"(default: label's, {defaults.QUERIES_PER_RECORD} per record; "
                                          f"{FEW_CLASSES_QUERIES_PER_IMAGE} per record in the folder of "
                                          f"{FEW_CLASSES_CASE})."),
    epochs: int = typer.Option(defaults.epochs(), min=1, help="Student training epochs (label's default)."),
    epsilon: float = typer.Option(privacy_defaults.epsilon(), help="Per-record epsilon of the demo's "
                                                           f"{privacy_defaults.mechanism()} mechanism."),
    reduce: Optional[int] = ReduceOption,
    adapt: bool = AdaptOption,
    two_digits: bool = typer.Option(
        True, "--two-digits/--no-two-digits", help=f"Also label a folder of the {FEW_CLASSES_CASE}, "
        "beside its data-free baseline: the case where privacy pays."),
    seed: int = typer.Option(0, help="Seed of the demo's data split and training (the demo uses public data)."),
    teacher_epochs: Optional[int] = typer.Option(None, min=1, hidden=True, help="Mock teacher epochs, uncached "
                                                                                "(tests)."),
    html: Optional[Path] = typer.Option(None, "--html", dir_okay=False, show_default=False, help="Write the "
                                        "LDPKiT-Sup run's page (label --html-private: the demo's images are public "
                                        "digits) here."),
    json_out: bool = typer.Option(False, "--json", help="Print the demo's figures as JSON on stdout."),
) -> None:
    """End-to-end demo on real digits: mock teacher, private folder, label, SIDP, and a folder where privacy pays."""
    ui = UI(quiet=json_out, json_mode=json_out)
    with user_errors(ui):
        result = run_demo(workdir=workdir, queries=queries, epochs=epochs, epsilon=epsilon, reduce=reduce,
                          adapt=adapt, seed=seed, teacher_epochs=teacher_epochs, html=html, ui=ui,
                          two_digits=two_digits)
    if json_out:
        ui.print_json(result)
    else:
        ui.demo_summary(result)


def _register_audit() -> None:
    """``ldpclient audit`` (:mod:`ldpclient.cli.audit`)."""
    from .audit import audit

    app.command("audit", cls=HelpCommand)(with_groups(audit))


_register_audit()


def main() -> None:  # pragma: no cover - python -m ldpclient.cli (__main__.py)
    app()
