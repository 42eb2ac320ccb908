"""Command-line interface (typer): ``ldpclient label``, ``noise``, ``budget``, ``serve-mock``, ``demo``, ``audit``.

User errors (bad options, unusable folders, unreachable or misbehaving teachers,
exhausted budgets, money caps) end with one line on stderr naming the problem and a
non-zero exit code, never a traceback; everything already done (charged releases in
the ledger, answered batches in the journal) is kept, so re-running the same command
resumes. Exit codes: 0 ok, 1 other failure, 2 bad input, 3 privacy cap, 4 money cap,
5 teacher unreachable or misbehaving, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Any, Iterator, Optional

import typer
from typer.core import TyperGroup

from .. import __version__
from ..io.text import check_token
from ..names import AUGMENTATIONS, BASES, EPSILON_UNITS, STUDENT_NAMES, choice_list
from ..privacy.basis import DEFAULT_COEFFICIENTS
from ..privacy.mechanisms import delta_mechanism_names, mechanism_names
from ..run.facts import WIRE_CHOICES
from ..run.ui import UI
from ..transfer import defaults
from .click_compat import NoArgsIsHelpError, UsageError
from .config import ConfigError, options_for_command, read_config
from .help import HelpCommand, HelpContext

#: Same value as ldpclient.io.folders.DEFAULT_MAX_PIXELS (checked by a test); repeated here so
#: that `ldpclient --help` and argument errors do not pay for importing torch.
DEFAULT_MAX_PIXELS = 40_000_000

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_PRIVACY_CAP = 3
EXIT_MONEY_CAP = 4
EXIT_TEACHER = 5
EXIT_INTERRUPTED = 130

TOKEN_ENV = "LDPCLIENT_TOKEN"

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
            typer.echo(f"error: {_one_line(exc.format_message())}{where}", err=True)
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


class CLIError(Exception):
    """A user-facing failure: one-line ``message`` and an exit code."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


def _print_version(value: bool) -> None:
    """``--version``: print the version and stop before any command runs."""
    if value:
        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print the ldpclient version and exit."),
) -> None:
    """Label private images with a remote teacher that only ever sees LDP releases."""


# The choices derive from the one list of each concept (ldpclient.names).
Mechanism = Enum("Mechanism", {name: name for name in mechanism_names()}, type=str)  # type: ignore[misc]
EpsilonUnit = Enum("EpsilonUnit", {name: name for name in EPSILON_UNITS}, type=str)  # type: ignore[misc]
Augment = Enum("Augment", {name: name for name in AUGMENTATIONS}, type=str)  # type: ignore[misc]
Basis = Enum("Basis", {name: name for name in BASES}, type=str)  # type: ignore[misc]
DEFAULT_AUGMENT = Augment(defaults.augmentation())
Wire = Enum("Wire", {choice: choice for choice in WIRE_CHOICES}, type=str)  # type: ignore[misc]


class LabelFormat(str, Enum):
    csv = "csv"
    jsonl = "jsonl"


# --------------------------------------------------------------------------- errors


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

    if isinstance(exc, StateLocked):
        return EXIT_FAILURE, str(exc)
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


def _one_line(message: str) -> str:
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
        ui.error(_one_line(msg), code, secrets=secrets)
        raise typer.Exit(code) from None


# --------------------------------------------------------------------------- config


def _load_config(ctx: typer.Context, param: Any, value: Optional[Path]) -> Optional[Path]:
    """Eager callback of ``--config``: the file's values become this command's defaults."""
    if value is None or ctx.resilient_parsing:
        return value
    try:
        parsed = read_config(value)
        names = [p.name for p in ctx.command.params if p.name not in ("config", "token")]
        group = getattr(ctx.parent.command, "commands", {}) if ctx.parent is not None else {}
        known = [p.name for c in group.values() for p in c.params if p.name not in ("config", "token")]
        source = f"config file {str(value)!r}"
        values = options_for_command(parsed, ctx.info_name or "", names, source=source, commands=list(group),
                                     known=known)
        _check_config_types(ctx.command.params, values, source)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    ctx.default_map = {**(ctx.default_map or {}), **values}
    return value


def _check_config_types(params: Any, values: dict[str, Any], source: str) -> None:
    """ConfigError for a config value of the wrong kind: a flag takes true/false, an integer option an integer
    (``warmup = true`` is not 1 epoch), a number option a number, any other option not true/false."""
    by_name = {p.name: p for p in params}
    for key, value in values.items():
        param = by_name.get(key)
        if param is None:
            continue
        kind = _option_type(param)
        if getattr(param, "is_flag", False):
            ok, wanted = isinstance(value, bool), "true or false"
        elif kind is int:
            ok, wanted = isinstance(value, int) and not isinstance(value, bool), "an integer"
        elif kind is float:
            ok, wanted = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
        else:
            ok, wanted = not isinstance(value, (bool, dict)), "a value, not true/false"
        if not ok:
            shown = str(value).lower() if isinstance(value, bool) else repr(value)
            raise ConfigError(f"{source}: {key.replace('_', '-')} must be {wanted}, got {shown}")


def _option_type(param: Any) -> Any:
    """The Python type an option's value has (``Optional[int]`` -> ``int``; None when it cannot be told)."""
    import typing

    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if len(args) == 1 else annotation


ConfigOption = typer.Option(
    None,
    "--config",
    help="TOML file with option values (command line wins; secrets are never read from it).",
    is_eager=True,
    callback=_load_config,
    exists=False,
    dir_okay=False,
)
MechanismOption = typer.Option(
    Mechanism(defaults.mechanism()),
    help="LDP mechanism applied to each record. quantised-rr sends a quantised code of the image's low frequencies "
    "by randomized response: as informative as its epsilon allows, so at 100 per record the teacher sees the "
    "quantised image itself about 99 times in 100 (docs/privacy.md).",
)
EpsilonOption = typer.Option(defaults.epsilon(), help="Privacy parameter epsilon (nats), in --epsilon-unit.")
LabelEpsilonOption = typer.Option(
    defaults.epsilon(),
    help="Privacy parameter epsilon (nats), in --epsilon-unit. 0: data-free, nothing private is sent (the teacher "
    "labels blank images noised here; the clean images only adapt the student here).",
)
EpsilonUnitOption = typer.Option(
    EpsilonUnit(defaults.epsilon_unit()), help="Whether --epsilon is per released element or per whole record."
)
DeltaOption = typer.Option(
    None,
    help=f"Delta of {choice_list(delta_mechanism_names())} (same unit as --epsilon; default {defaults.delta():g}).",
    show_default=False,
)
ReduceOption = typer.Option(
    None,
    min=1,
    help="Average-pool records by this factor before noise (1 = off). Default: the largest factor that keeps at "
    f"least {defaults.MIN_RELEASED_SIDE} pixels per side (28x28 -> 4, 8x8 -> 1).",
    show_default=False,
)
BasisOption = typer.Option(
    None,
    help="What the noise is added to: pool = the pixels, average-pooled by --reduce; dct = a record-level vector of "
    "low-frequency DCT coefficients clipped to --clip-norm (laplace: L1, gaussian: L2; needs --epsilon-unit record, "
    "no --reduce), released as its reconstruction. Default: dct for laplace and gaussian per record without "
    "--reduce, else pool.",
    show_default=False,
)
CoefficientsOption = typer.Option(
    None, min=1,
    help="--basis dct: low-frequency coefficients kept per record (colour: luminance; chroma gets a quarter each). "
    "Default: 64, or all of a smaller image's.",
    show_default=False,
)
ClipNormOption = typer.Option(
    None,
    help="--basis dct: norm bound C of each record's coefficient vector, in the value range's units (sensitivity 2C). "
    "Default: the L2 norm of an image at 2/7 of the range per pixel (28x28 on [0,1] -> 8), times sqrt(K)/2 for L1 "
    "(-> 32).",
    show_default=False,
)
PostprocessOption = typer.Option(
    None,
    help="Post-processing of releases (free), e.g. 'blur:2,clip', 'median:3,clip', 'lowpass:64,clip' or ''. "
    f"Default: with --basis dct, clip; when every pixel is released (reduce 1) at a per-element epsilon of at "
    f"least {defaults.LOWPASS_MIN_EPSILON_ELEMENT:g} and a channel has more than {DEFAULT_COEFFICIENTS} pixels, "
    f"'lowpass:{DEFAULT_COEFFICIENTS},clip' (keep the {DEFAULT_COEFFICIENTS} lowest DCT frequencies); otherwise a "
    f"blur of the image's longer side / {2 * defaults.MIN_RELEASED_SIDE} pixels (28x28 -> 2, 8x8 -> 0.571), then "
    "clip.",
    show_default=False,
)
AdaptOption = typer.Option(
    True, "--adapt/--no-adapt",
    help="Fine-tune the student on the clean private images before labelling them (on this device only: no "
    "query, no privacy cost; the adapted student has seen them and must stay here). The baseline gets the same.",
)
SeedOption = typer.Option(None, help="Seed all randomness, noise included (tests only: never for real data).")
QuietOption = typer.Option(False, "--quiet", "-q", help="No progress bars or summary.")
StateDirOption = typer.Option(
    None, help="State directory: the ledger, the journal and the runs (default: $LDPCLIENT_STATE_DIR or "
    "~/.local/state/ldpclient).")
StateOption = typer.Option(
    None, "--state", metavar="<url>",
    help="A PostgreSQL database for the ledger, the journal and the plan seeds, shared by hosts and processes "
    "(postgresql://user@host/db; needs `pip install 'ldpclient[cluster]'`). Default: none, the files in the state "
    "directory.")
LedgerKeyFileOption = typer.Option(
    None, "--ledger-key-file", metavar="<file>",
    help="The ledger's secret key file, a copy on every host sharing a --state database (made on first use). "
    "Default: ledger.key in the state directory for --state, else beside the ledger file.")
PrivacyCapOption = typer.Option(
    None, help="Per-image epsilon cap the ledger enforces, kept in the state for every later command (a lower one "
    "tightens it; only `budget --set-cap` raises it). Default: none, or the cap the state holds.")
SecureOption = typer.Option(
    True,
    "--secure/--no-secure",
    help="Draw the noise on the secure integer path (discrete Laplace/Gaussian on a grid); --no-secure uses float64 "
    "sampling, open to the floating-point attack (benchmarks only). discrete-tldp and quantised-rr are always "
    "secure.",
)
AllowLargeDeltaOption = typer.Option(
    False, "--allow-large-delta", help="Accept a --delta above 1e-2 (refused otherwise: it is no meaningful guarantee)."
)
AllowWeakPrivacyOption = typer.Option(
    False, "--allow-weak-privacy",
    help=f"Accept a per-record epsilon above {defaults.epsilon_ceiling():g} (refused otherwise: the releases come "
    "close to sending the images; the summary and report then say so).",
)
MaxMemoryOption = typer.Option(
    None, "--max-memory", min=0.0,
    help="GiB a run may need (estimated from the teacher's input shape and the batch sizes before anything is "
    "decoded; refused above it). Default: half of this machine's RAM.",
    show_default=False,
)
TokenOption = typer.Option(
    None,
    "--token",
    envvar=TOKEN_ENV,
    help=f"Bearer token for the teacher (or ${TOKEN_ENV}). Never written anywhere.",
    show_default=False,
)


# How to reach the teacher, shared by `label` and `noise` (ldpclient.run.network.NetworkOptions).
TimeoutOption = typer.Option(60.0, "--timeout", help="Seconds to wait for one teacher response.")
MaxRetryTimeOption = typer.Option(
    120.0, "--max-retry-time", help="Give up retrying a failing request after this many seconds (0 = no retries)."
)
CaBundleOption = typer.Option(
    None, "--ca-bundle", help="CA bundle for TLS verification (verification is always on).", show_default=False
)


def _network(timeout: float, max_retry_time: float, ca_bundle: Optional[Path]) -> Any:
    from ..run.network import NetworkOptions

    return NetworkOptions(timeout=timeout, max_retry_time=max_retry_time, ca_bundle=ca_bundle)


# Model facts a server may not publish (stock KServe publishes no classes, value range or names),
# shared by `label` and `noise`; see ldpclient.run.facts.
WireOption = typer.Option(
    "auto", "--wire",
    help="Request bodies: auto (binary tensor extension, JSON when the server cannot take it; remembered per "
    "teacher in the state dir), binary or json.",
)
NumClassesOption = typer.Option(None, "--num-classes", help="Number of classes, when the server does not publish it.")
ClassNamesOption = typer.Option(
    None, "--class-names", dir_okay=False,
    help="File of class names in index order (one per line, a JSON list, or a JSON object of name: one-line "
    "description, which a chat model's prompt carries).",
)
ModelOption = typer.Option(None, "--model", help="The model's name, at an API that serves several (openai+https://...).")
PriceInputTokensOption = typer.Option(
    None, "--price-input-tokens", min=0.0,
    help="Money per million input tokens (prompt and image), for a teacher billed in tokens (openai+https://...): "
    "each query is booked at its most and settled from the tokens the answer reports.")
LabelMapOption = typer.Option(
    None, "--label-map", dir_okay=False, metavar="<file>",
    help="JSON object of class name -> list of Knowledge Graph mids and label descriptions, for a teacher that answers "
    "free-form labels (vision+https://...): the best-scoring label that maps names the class; none maps: the query "
    "is declined.", show_default=False)
BatchApiOption = typer.Option(
    False, "--batch", help="Ask a chat teacher (openai+https://...) through its Batch API: the queries go as files "
    "of jobs answered within 24 hours, at half the token prices; a run stopped while they run collects them when "
    "run again.")
PriceOutputTokensOption = typer.Option(
    None, "--price-output-tokens", min=0.0, help="Money per million output tokens (the answer), as --price-input-tokens.")
ValueRangeOption = typer.Option(
    None, "--value-range",
    help="LO,HI: the units the model's inputs are in (e.g. 0,255) when the server does not publish them "
    "(otherwise [0,1] is assumed, and the report says so).",
)
InputShapeOption = typer.Option(None, "--input-shape", help="C,H,W of one input, when the server declares none or a variable one.")
InputNameOption = typer.Option(None, "--input-name", help="Input tensor name, when the model has several or declares none.")
OutputNameOption = typer.Option(None, "--output-name", help="Output tensor name (class indices or scores), when the model has several or declares none.")
DatatypeOption = typer.Option(None, "--datatype", help="Input datatype the model takes (FP32, UINT8, ...), when it declares none.")


def _facts(wire: Wire, num_classes: Optional[int], class_names: Optional[Path], value_range: Optional[str],
           input_shape: Optional[str], input_name: Optional[str], output_name: Optional[str],
           datatype: Optional[str], model: Optional[str] = None, price_input_tokens: Optional[float] = None,
           price_output_tokens: Optional[float] = None, label_map: Optional[Path] = None,
           batch_api: bool = False) -> Any:
    """The CLI's teacher facts as :class:`ldpclient.run.facts.TeacherFacts` (ValueError names the option)."""
    from ..run.facts import TeacherFacts

    return TeacherFacts.from_options(
        wire=wire.value, num_classes=num_classes, class_names=class_names, value_range=value_range,
        input_shape=input_shape, input_name=input_name, output_name=output_name, datatype=datatype, model=model,
        price_input_tokens=price_input_tokens, price_output_tokens=price_output_tokens, label_map=label_map,
        batch_api=batch_api,
    )


# --------------------------------------------------------------------------- commands


@app.command(cls=HelpCommand)
def version() -> None:
    """Print the ldpclient version."""
    typer.echo(__version__)


@app.command(cls=HelpCommand)
def label(
    private_dir: Path = typer.Argument(..., metavar="PRIVATE_DIR", help="Folder of private images (searched recursively).",
                                       show_default=False),
    teacher: Optional[str] = typer.Option(
        None, "--teacher", "-t", help="Teacher URL, e.g. http://127.0.0.1:8080/v2/models/digits. Required (here or "
        "as `teacher` in --config).", show_default=False
    ),
    mechanism: Mechanism = MechanismOption,
    epsilon: float = LabelEpsilonOption,
    epsilon_unit: EpsilonUnit = EpsilonUnitOption,
    delta: Optional[float] = DeltaOption,
    secure: bool = SecureOption,
    allow_large_delta: bool = AllowLargeDeltaOption,
    allow_weak_privacy: bool = AllowWeakPrivacyOption,
    max_memory: Optional[float] = MaxMemoryOption,
    augment: Augment = typer.Option(DEFAULT_AUGMENT, help="LDPKiT query expansion: sup, rand, or none (= SIDP)."),
    reduce: Optional[int] = ReduceOption,
    basis: Optional[Basis] = BasisOption,
    coefficients: Optional[int] = CoefficientsOption,
    clip_norm: Optional[float] = ClipNormOption,
    postprocess: Optional[str] = PostprocessOption,
    baseline: bool = typer.Option(False, "--baseline/--no-baseline", help="Also run the data-free baseline (blank records, epsilon 0, noised at a fixed level; with --public, those images too)."),
    public: Optional[Path] = typer.Option(
        None, "--public", file_okay=False,
        help="Folder of images you state are NOT private: each is sent once as it is (no noise, no privacy cost, "
        "never in the ledger; billed and counted apart) and its answer trains the student beside the private "
        "queries. An image also in PRIVATE_DIR is refused.",
        show_default=False,
    ),
    adapt: bool = AdaptOption,
    queries: Optional[int] = typer.Option(None, min=1, help="Number of teacher queries (default: 20 per record, at least 500)."),
    query_rounds: int = typer.Option(
        defaults.query_rounds(), min=1, help="Send the queries in up to this many rounds of doubling size (3: a "
        "quarter, a half, all of --queries) and stop sending when the last round raised the student's agreement with "
        "the teacher on held-out queries by less than 1 point: queries cost money, not privacy. Each round trains "
        "the student anew. 1 (the default): all at once."),
    batch_size: Optional[int] = typer.Option(None, min=1, help="Queries per request (default: teacher's max, at most 256)."),
    price: float = typer.Option(0.0, min=0.0, help="Price per query (image), for the cost meter."),
    money_cap: Optional[float] = typer.Option(
        None, min=0.0, help="Largest total spend with this teacher over all runs (needs --price): a run that would "
        "cross it is refused before anything is noised or sent. Default: none."),
    privacy_cap: Optional[float] = PrivacyCapOption,
    student: Optional[str] = typer.Option(
        None, help=f"Student model: {choice_list(STUDENT_NAMES)} (default: small_resnet for colour images of 16 px "
        "or more beside --public images, else small_cnn)."),
    flip: Optional[bool] = typer.Option(
        None, "--flip/--no-flip", help="Also train on mirrored images (left-right), for images whose class a "
        "mirror keeps (photos of objects and scenes), or never. Default: beside 100 or more --public images of 16 px "
        "or more, the teacher is asked about mirrored and shifted copies of up to 200 of them (public queries, no "
        "privacy cost) and rows are mirrored when a mirror keeps its answers about as often as a shift; else not."),
    warmup: int = typer.Option(
        0, min=0, help="Before training, teach the student for this many epochs which way each "
        "clean private image was rotated (a self-supervised warm-up on this device: nothing sent, no privacy cost). "
        "Measured without --public at 60 epochs: +9 points on colour digits, no change on photos or grey digits, "
        "at about 4x the run's time. 0 (the default): none."),
    students: int = typer.Option(
        defaults.students(), min=1, help="Students trained on the same answers, each with draws of its own; the "
        "labels come from the mean of their outputs. Measured at 3 on digits, MNIST, colour digits and CIFAR-10: "
        "labels 0.8-1.5 points better, at most 1.8 points apart between seeds, at 3x the training and adaptation "
        "time."),
    epochs: int = typer.Option(defaults.epochs(), min=1, help="Student training epochs."),
    train_batch_size: int = typer.Option(
        defaults.train_batch_size(), min=1, help="Student training batch size (optimiser step)."
    ),
    output: Path = typer.Option(Path("labels.csv"), "--output", "-o", help="Labels file (.csv, or .jsonl)."),
    format: Optional[LabelFormat] = typer.Option(None, "--format", help="Labels format (default: from --output's extension)."),
    report: Optional[Path] = typer.Option(None, help="Run report JSON (default: next to --output, *.report.json)."),
    html: bool = typer.Option(
        False, "--html",
        help="Also write a page beside the labels (labels.csv -> labels.html; one file, opens offline): the "
        "verdict on the labels, the guarantee in plain words, releases and queries as sent, counts and money, the "
        "student, timings.",
    ),
    html_private: bool = typer.Option(
        False, "--html-private",
        help="Show the clean private images and their file names on that page too (implies --html; the page then "
        "says on top that it holds private images: keep it on this device).",
    ),
    state_dir: Optional[Path] = StateDirOption,
    state: Optional[str] = StateOption,
    ledger_key_file: Optional[Path] = LedgerKeyFileOption,
    cluster: Optional[str] = typer.Option(
        None, "--cluster", metavar="<auto|address>",
        help="Release and label the images on a Ray cluster: 'auto' (the one RAY_ADDRESS names or this user started "
        "here, else a Ray of the run's own on 127.0.0.1) or a Ray address. Needs --state postgresql://...; refuses "
        "--seed. Default: none, all here."),
    token: Optional[str] = TokenOption,
    config: Optional[Path] = ConfigOption,
    max_pixels: int = typer.Option(DEFAULT_MAX_PIXELS, min=1, help="Skip images with more pixels than this."),
    workers: int = typer.Option(1, min=1, help="Requests in flight at once."),
    timeout: float = TimeoutOption,
    max_retry_time: float = MaxRetryTimeOption,
    ca_bundle: Optional[Path] = CaBundleOption,
    wire: Wire = WireOption,
    num_classes: Optional[int] = NumClassesOption,
    class_names: Optional[Path] = ClassNamesOption,
    value_range: Optional[str] = ValueRangeOption,
    input_shape: Optional[str] = InputShapeOption,
    input_name: Optional[str] = InputNameOption,
    output_name: Optional[str] = OutputNameOption,
    datatype: Optional[str] = DatatypeOption,
    model: Optional[str] = ModelOption,
    price_input_tokens: Optional[float] = PriceInputTokensOption,
    price_output_tokens: Optional[float] = PriceOutputTokensOption,
    label_map: Optional[Path] = LabelMapOption,
    batch_api: bool = BatchApiOption,
    seed: Optional[int] = SeedOption,
    check: Optional[Path] = typer.Option(
        None, "--check", dir_okay=False, metavar="<file>",
        help="Hand labels of a few private images (CSV rows file,label: the path as the labels file writes it, a "
        "class name or index; a header row file,class or file,index says which, and is needed where class names "
        "are digits that read as other classes' indices), read on this device only and never sent: the run scores "
        "its labels on them (95% interval) and its verdict says what the labels are worth. Default: none "
        "(accuracy not measured).",
        show_default=False,
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run",
        help="Print the plan (what would be released, sent, spent and trained, every default resolved) and stop: "
        "nothing is decoded, noised, sent or charged; the teacher is asked only for its metadata.",
    ),
    quiet: bool = QuietOption,
    json_out: bool = typer.Option(False, "--json", help="Print the run report as JSON on stdout (implies --quiet)."),
) -> None:
    """Label PRIVATE_DIR with a student trained on the teacher's answers to LDP queries.

    Raw images never leave this machine: each is noised once (per-record budget kept in the ledger), expanded into queries by post-processing, and sent in batches.

    Re-running the same command resumes: no record is re-noised, no batch paid twice.
    """
    from ..run.compute import use_available_cores
    from ..run.label import LabelOptions, resume_hint, run_label

    ui = UI(quiet=quiet or json_out, json_mode=json_out)
    ui.capture_logs(secrets=(token,))
    opts = None
    with user_errors(ui, secrets=(token,)):
        token = check_token(token)
        if not teacher:
            raise CLIError("missing option --teacher URL (or `teacher = ...` in the --config file)", EXIT_USAGE)
        opts = LabelOptions(
            private_dir=private_dir,
            teacher=teacher,
            mechanism=mechanism.value,
            epsilon=epsilon,
            epsilon_unit=epsilon_unit.value,
            delta=delta,
            secure=secure,
            allow_large_delta=allow_large_delta,
            allow_weak_privacy=allow_weak_privacy,
            max_memory=max_memory,
            augment=augment.value,
            reduce=reduce,
            basis=basis.value if basis is not None else None,
            coefficients=coefficients,
            clip_norm=clip_norm,
            postprocess=postprocess,
            baseline=baseline,
            public=public,
            adapt=adapt,
            queries=queries,
            query_rounds=query_rounds,
            batch_size=batch_size,
            price=price,
            money_cap=money_cap,
            privacy_cap=privacy_cap,
            student=student,
            flip=flip,
            warmup=warmup,
            students=students,
            epochs=epochs,
            train_batch_size=train_batch_size,
            output=output,
            format=format.value if format else None,
            report=report,
            html=html,
            html_private=html_private,
            dry_run=dry_run,
            check=check,
            state_dir=state_dir,
            state=state,
            ledger_key_file=ledger_key_file,
            cluster=cluster,
            max_pixels=max_pixels,
            workers=workers,
            seed=seed,
            network=_network(timeout, max_retry_time, ca_bundle),
            facts=_facts(wire, num_classes, class_names, value_range, input_shape, input_name, output_name, datatype,
                         model, price_input_tokens, price_output_tokens, label_map, batch_api),
        )
        opts.validate()
    assert opts is not None
    with user_errors(ui, resume_hint=resume_hint(opts), secrets=(token,)):
        use_available_cores()
        with ui.stdout_kept_for_json():
            result = run_label(opts, token=token, ui=ui)
    if json_out:
        ui.print_json(result, secrets=(token,))
    elif opts.dry_run:
        ui.plan_summary(result["plan"], result.get("warnings", ()))
    else:
        ui.summary(result)


@app.command(cls=HelpCommand)
def noise(
    private_dir: Path = typer.Argument(..., metavar="PRIVATE_DIR", help="Folder of private images.", show_default=False),
    out: Path = typer.Option(..., "--out", help="Where noised copies (PNG) and preview.png go.", show_default=False),
    teacher: Optional[str] = typer.Option(None, "--teacher", "-t", help="Take the input shape from this teacher, and release for it (the label run then reuses these releases)."),
    size: int = typer.Option(28, min=1, help="Image side when no --teacher is given."),
    channels: int = typer.Option(1, help="1 (grey) or 3 (RGB) when no --teacher is given."),
    mechanism: Mechanism = MechanismOption,
    epsilon: float = EpsilonOption,
    epsilon_unit: EpsilonUnit = EpsilonUnitOption,
    delta: Optional[float] = DeltaOption,
    secure: bool = SecureOption,
    allow_large_delta: bool = AllowLargeDeltaOption,
    allow_weak_privacy: bool = AllowWeakPrivacyOption,
    max_memory: Optional[float] = MaxMemoryOption,
    reduce: Optional[int] = ReduceOption,
    basis: Optional[Basis] = BasisOption,
    coefficients: Optional[int] = CoefficientsOption,
    clip_norm: Optional[float] = ClipNormOption,
    postprocess: Optional[str] = PostprocessOption,
    augment: Augment = typer.Option(DEFAULT_AUGMENT, help="Augmentation shown in the preview's third row."),
    preview: int = typer.Option(8, min=1, help="Records shown in preview.png."),
    privacy_cap: Optional[float] = PrivacyCapOption,
    state_dir: Optional[Path] = StateDirOption,
    state: Optional[str] = StateOption,
    ledger_key_file: Optional[Path] = LedgerKeyFileOption,
    token: Optional[str] = TokenOption,
    config: Optional[Path] = ConfigOption,
    max_pixels: int = typer.Option(DEFAULT_MAX_PIXELS, min=1, help="Skip images with more pixels than this."),
    timeout: float = TimeoutOption,
    max_retry_time: float = MaxRetryTimeOption,
    ca_bundle: Optional[Path] = CaBundleOption,
    wire: Wire = WireOption,
    num_classes: Optional[int] = NumClassesOption,
    class_names: Optional[Path] = ClassNamesOption,
    value_range: Optional[str] = ValueRangeOption,
    input_shape: Optional[str] = InputShapeOption,
    input_name: Optional[str] = InputNameOption,
    output_name: Optional[str] = OutputNameOption,
    datatype: Optional[str] = DatatypeOption,
    model: Optional[str] = ModelOption,
    seed: Optional[int] = SeedOption,
    quiet: bool = QuietOption,
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
) -> None:
    """Write noised copies of PRIVATE_DIR (what a teacher would see) and a preview grid.

    preview.png rows: clean records, their releases (post-processed), augmented queries. Charged in the ledger like any release; the preview shows clean images and is for your eyes only.
    """
    from ..run.compute import use_available_cores
    from ..run.noise import NoiseOptions, run_noise

    ui = UI(quiet=quiet or json_out, json_mode=json_out)
    ui.capture_logs(secrets=(token,))
    with user_errors(ui, secrets=(token,)):
        token = check_token(token)
        opts = NoiseOptions(
            private_dir=private_dir,
            out=out,
            teacher=teacher,
            size=size,
            channels=channels,
            mechanism=mechanism.value,
            epsilon=epsilon,
            epsilon_unit=epsilon_unit.value,
            delta=delta,
            secure=secure,
            allow_large_delta=allow_large_delta,
            allow_weak_privacy=allow_weak_privacy,
            max_memory=max_memory,
            reduce=reduce,
            basis=basis.value if basis is not None else None,
            coefficients=coefficients,
            clip_norm=clip_norm,
            postprocess=postprocess,
            augment=augment.value,
            preview=preview,
            privacy_cap=privacy_cap,
            state_dir=state_dir,
            state=state,
            ledger_key_file=ledger_key_file,
            max_pixels=max_pixels,
            seed=seed,
            network=_network(timeout, max_retry_time, ca_bundle),
            facts=_facts(wire, num_classes, class_names, value_range, input_shape, input_name, output_name, datatype,
                         model),
        )
        opts.validate()
        use_available_cores()
        with ui.stdout_kept_for_json():
            result = run_noise(opts, token=token, ui=ui)
    if json_out:
        ui.print_json(result, secrets=(token,))
    else:
        ui.noise_summary(result)


@app.command(cls=HelpCommand)
def budget(
    state_dir: Optional[Path] = StateDirOption,
    state: Optional[str] = StateOption,
    ledger_key_file: Optional[Path] = LedgerKeyFileOption,
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
        summary = ledger_summary(state_dir, set_cap, html=html, private_dir=private, state=state,
                                 ledger_key_file=ledger_key_file, init=init)
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
    workdir: Optional[Path] = typer.Option(None, help="Where the private PNG folder and outputs go (default: a temp dir)."),
    queries: Optional[int] = typer.Option(
        None, min=10, help=f"Teacher queries per method (default: label's, {defaults.QUERIES_PER_RECORD} per record).",
        show_default=False,
    ),
    epochs: int = typer.Option(defaults.epochs(), min=1, help="Student training epochs (label's default)."),
    epsilon: float = typer.Option(defaults.epsilon(), help=f"Per-record epsilon of the demo's {defaults.mechanism()} mechanism."),
    reduce: Optional[int] = ReduceOption,
    adapt: bool = AdaptOption,
    baseline: bool = typer.Option(True, "--baseline/--no-baseline", help="Also run the data-free baseline."),
    seed: int = typer.Option(0, help="Seed of the demo's data split and training (the demo uses public data)."),
    teacher_epochs: Optional[int] = typer.Option(None, min=1, hidden=True, help="Mock teacher epochs, uncached (tests)."),
    html: Optional[Path] = typer.Option(
        None, "--html", dir_okay=False,
        help="Write the LDPKiT-Sup run's page (label --html-private: the demo's images are public digits) here.",
        show_default=False,
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the demo's figures as JSON on stdout."),
) -> None:
    """End-to-end demo on real digits: mock teacher, private PNG folder, label, compare with SIDP."""
    from ..run.demo import run_demo

    ui = UI(quiet=json_out, json_mode=json_out)
    with user_errors(ui):
        result = run_demo(
            workdir=workdir, queries=queries, epochs=epochs, epsilon=epsilon, reduce=reduce,
            baseline=baseline, adapt=adapt, seed=seed, teacher_epochs=teacher_epochs, html=html, ui=ui,
        )
    if json_out:
        ui.print_json(result)
    else:
        ui.demo_summary(result)


def _register_audit() -> None:
    """``ldpclient audit`` comes from :mod:`ldpclient.run.audit` (it always ships with ldpclient)."""
    from ..run.audit import audit

    app.command("audit", cls=HelpCommand)(audit)


_register_audit()


def main() -> None:  # pragma: no cover - python -m ldpclient.cli (__main__.py)
    app()
