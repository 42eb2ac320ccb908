"""Every option of the command line, declared once, and the option groups the commands share.

An option group is a frozen dataclass whose fields are typer options (:mod:`ldpclient.cli.groups` expands it
into a command's parameters and fills it back): :class:`PrivacyGroup`, :class:`StateGroup`,
:class:`TeacherGroup` (how to reach the teacher and the facts a server may not publish), :class:`RunGroup`
(decoding, memory, seed, progress), and ``label``'s own :class:`QueryGroup`, :class:`MoneyGroup`,
:class:`StudentGroup` and :class:`OutputGroup`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Optional

import typer

from ..names import AUGMENTATIONS, BASES, DECODINGS, EPSILON_UNITS, PRETRAINED_STUDENTS, STUDENT_NAMES, choice_list
from ..privacy import defaults as privacy_defaults
from ..privacy.basis import DEFAULT_COEFFICIENTS
from ..privacy.mechanisms import delta_mechanism_names, mechanism_names
from ..run.facts import FACT_OPTIONS, NETWORK_OPTIONS, WIRE_CHOICES, TeacherFacts, teacher_options
from ..run.network import NetworkOptions
from ..run.options import LabelOptions
from ..transfer import defaults
from .config import ConfigError, options_for_command, read_config
from .errors import EXIT_USAGE
from .groups import OptionGroup

#: Same value as ldpclient.io.folders.DEFAULT_MAX_PIXELS (checked by a test); repeated here so
#: that `ldpclient --help` and argument errors do not pay for importing torch.
DEFAULT_MAX_PIXELS = 40_000_000

TOKEN_ENV = "LDPCLIENT_TOKEN"

#: The default of each option the one spec of a label run declares (:class:`~ldpclient.run.options.LabelOptions`, the
#: options ``noise`` shares with it included): the command line shows and uses these, and writes none of its own.
GIVEN = {f.name: f.default for f in fields(LabelOptions)}

# The choices derive from the one list of each concept (ldpclient.names).
Mechanism = Enum("Mechanism", {name: name for name in mechanism_names()}, type=str)  # type: ignore[misc]
EpsilonUnit = Enum("EpsilonUnit", {name: name for name in EPSILON_UNITS}, type=str)  # type: ignore[misc]
Augment = Enum("Augment", {name: name for name in AUGMENTATIONS}, type=str)  # type: ignore[misc]
Basis = Enum("Basis", {name: name for name in BASES}, type=str)  # type: ignore[misc]
Decode = Enum("Decode", {name: name for name in DECODINGS}, type=str)  # type: ignore[misc]
DEFAULT_AUGMENT = Augment(defaults.augment())
Wire = Enum("Wire", {choice: choice for choice in WIRE_CHOICES}, type=str)  # type: ignore[misc]


class LabelFormat(str, Enum):
    csv = "csv"
    jsonl = "jsonl"




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


def _check_config_types(params: Any, values: dict[str, object], source: str) -> None:
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
    Mechanism(privacy_defaults.mechanism()),
    help="LDP mechanism applied to each record. quantised-rr sends a quantised code of the image's low frequencies "
    "by randomized response: as informative as its epsilon allows, so at 100 per record the teacher sees the "
    "quantised image itself about 99 times in 100 (docs/privacy.md).",
)
PrivateDirArgument = typer.Argument(
    ..., metavar="PRIVATE_DIR", help="Folder of private images (searched recursively).", show_default=False)
TeacherUrlOption = typer.Option(
    None, "--teacher", "-t", help="Teacher URL, e.g. http://127.0.0.1:8080/v2/models/digits. Required (here or "
    "as `teacher` in --config).", show_default=False)
EpsilonOption = typer.Option(privacy_defaults.epsilon(), help="Privacy parameter epsilon (nats), in --epsilon-unit.")
LabelEpsilonOption = typer.Option(
    privacy_defaults.epsilon(),
    help="Privacy parameter epsilon (nats), in --epsilon-unit. 0: data-free, nothing private is sent (the teacher "
    "labels blank images noised here; the clean images only adapt the student here).",
)
EpsilonUnitOption = typer.Option(
    EpsilonUnit(privacy_defaults.epsilon_unit()), help="Whether --epsilon is per released element or per whole record."
)
DeltaOption = typer.Option(
    None,
    help=f"Delta of {choice_list(delta_mechanism_names())} (same unit as --epsilon; default "
    f"{privacy_defaults.delta():g}).",
    show_default=False,
)
ReduceOption = typer.Option(
    None,
    min=1,
    help="Average-pool records by this factor before noise (1 = off). Default: the largest factor that keeps at "
    f"least {privacy_defaults.MIN_RELEASED_SIDE} pixels per side (28x28 -> 4, 8x8 -> 1).",
    show_default=False,
)
BasisOption = typer.Option(
    None,
    help="What the noise is added to: pool = the pixels, average-pooled by --reduce; dct = a record-level vector of "
    "low-frequency DCT coefficients clipped to --clip-norm (laplace: L1, gaussian: L2; needs --epsilon-unit record, "
    "no --reduce), released as its reconstruction; pca = the same, on the leading principal components of the "
    "--public images (fitted on them alone; the same guarantee as dct for the same --coefficients and "
    "--clip-norm). Default: dct for laplace and gaussian per record without --reduce, else pool.",
    show_default=False,
)
CoefficientsOption = typer.Option(
    None, min=1,
    help="--basis dct or pca: coefficients kept per record (colour: luminance; chroma gets a quarter each). "
    "Default: dct 64, or all of a smaller image's; pca 16.",
    show_default=False,
)
ClipNormOption = typer.Option(
    None,
    help="--basis dct or pca: norm bound C of each record's coefficient vector, in the value range's units "
    "(sensitivity 2C). "
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
    f"blur of the image's longer side / {2 * privacy_defaults.MIN_RELEASED_SIDE} pixels (28x28 -> 2, 8x8 -> 0.571), "
    "then clip.",
    show_default=False,
)
AdaptOption = typer.Option(
    GIVEN["adapt"], "--adapt/--no-adapt",
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
    GIVEN["secure"],
    "--secure/--no-secure",
    help="Draw the noise on the secure integer path (discrete Laplace/Gaussian on a grid); --no-secure uses float64 "
    "sampling, open to the floating-point attack (benchmarks only). discrete-tldp and quantised-rr are always "
    "secure.",
)
AllowLargeDeltaOption = typer.Option(
    GIVEN["allow_large_delta"], "--allow-large-delta",
    help="Accept a --delta above 1e-2 (refused otherwise: it is no meaningful guarantee)."
)
AllowWeakPrivacyOption = typer.Option(
    GIVEN["allow_weak_privacy"], "--allow-weak-privacy",
    help=f"Accept a per-record epsilon above {privacy_defaults.epsilon_ceiling():g} (refused otherwise: the releases "
    "come close to sending the images; the summary and report then say so).",
)
MaxMemoryOption = typer.Option(
    None, "--max-memory", min=0.0,
    help="GiB a run may need (estimated from the teacher's input shape and the batch sizes before anything is "
    "decoded; refused above it). Default: half of this machine's RAM.",
    show_default=False,
)
NoisePublicOption = typer.Option(
    None, "--public", file_okay=False, show_default=False,
    help="Folder of images you state are NOT private, for a release decoder to decode into (--decode) and for "
    "--basis pca to be fitted on; one also in PRIVATE_DIR, or a near copy of a private image, is refused.")
PublicSkipCopiesOption = typer.Option(
    GIVEN["public_skip_copies"], "--public-skip-copies/--no-public-skip-copies",
    help="Leave out the --public images that are near copies of private images (this run's, or any the ledger "
    "charged): never sent or decoded into, each listed in the report's public_skipped with the private image it "
    "copies. Default: the run is refused, naming them.")
NoiseDecodeOption = typer.Option(
    GIVEN["decode"], help="With --public (200 images or more) and a --basis dct or pca release: write each release "
    "decoded as `label --decode` decodes it into the same public images (post-processing: no privacy cost). "
    "auto: where a label run's check chose it for this --teacher; always; none.")
TokenOption = typer.Option(
    None,
    "--token",
    envvar=TOKEN_ENV,
    help=f"Bearer token for the teacher (or ${TOKEN_ENV}). Never written anywhere.",
    show_default=False,
)


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
ImageTokensOption = typer.Option(
    None, "--image-tokens", min=1,
    help="Input tokens one image costs at a teacher billed in tokens, to book each query at. Default: the published "
    "rule of the model's family (gpt-4o 85, gpt-4o-mini 2,833, ...), else 2,833 until its answers show its count.")
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
    None, "--price-output-tokens", min=0.0, help="Money per million output tokens (the answer), as "
                                                 "--price-input-tokens.")
ValueRangeOption = typer.Option(
    None, "--value-range",
    help="LO,HI: the units the model's inputs are in (e.g. 0,255) when the server does not publish them "
    "(otherwise [0,1] is assumed, and the report says so).",
)
InputShapeOption = typer.Option(None, "--input-shape", help="C,H,W of one input, when the server declares none or "
                                                            "a variable one.")
InputNameOption = typer.Option(None, "--input-name", help="Input tensor name, when the model has several or "
                                                          "declares none.")
OutputNameOption = typer.Option(None, "--output-name", help="Output tensor name (class indices or scores), when "
                                                            "the model has several or declares none.")
DatatypeOption = typer.Option(None, "--datatype", help="Input datatype the model takes (FP32, UINT8, ...), when it "
                                                       "declares none.")




@dataclass(frozen=True)
class PrivacyGroup(OptionGroup):
    """How each record is noised (``epsilon`` is the command's own: its help differs), and the ledger's cap."""

    mechanism: Mechanism = MechanismOption
    epsilon_unit: EpsilonUnit = EpsilonUnitOption
    delta: Optional[float] = DeltaOption
    secure: bool = SecureOption
    allow_large_delta: bool = AllowLargeDeltaOption
    allow_weak_privacy: bool = AllowWeakPrivacyOption
    reduce: Optional[int] = ReduceOption
    basis: Optional[Basis] = BasisOption
    coefficients: Optional[int] = CoefficientsOption
    clip_norm: Optional[float] = ClipNormOption
    postprocess: Optional[str] = PostprocessOption
    privacy_cap: Optional[float] = PrivacyCapOption


@dataclass(frozen=True)
class StateGroup(OptionGroup):
    """Where the ledger, the journal and the runs are kept."""

    state_dir: Optional[Path] = StateDirOption
    state: Optional[str] = StateOption
    ledger_key_file: Optional[Path] = LedgerKeyFileOption


@dataclass(frozen=True)
class RunGroup(OptionGroup):
    """Decoding, memory, the seed, the terminal, the token and the config file."""

    APART: ClassVar[frozenset[str]] = frozenset({"quiet", "token", "config"})

    max_pixels: int = typer.Option(DEFAULT_MAX_PIXELS, min=1, help="Skip images with more pixels than this.")
    max_memory: Optional[float] = MaxMemoryOption
    seed: Optional[int] = SeedOption
    quiet: bool = QuietOption
    token: Optional[str] = TokenOption
    config: Optional[Path] = ConfigOption


@dataclass(frozen=True)
class TeacherGroup(OptionGroup):
    """How to reach the teacher (:class:`~ldpclient.run.network.NetworkOptions`) and the facts a server may not
    publish (stock KServe publishes no classes, value range or names; :class:`~ldpclient.run.facts.TeacherFacts`)."""

    APART: ClassVar[frozenset[str]] = NETWORK_OPTIONS | FACT_OPTIONS

    timeout: float = typer.Option(60.0, "--timeout", help="Seconds to wait for one teacher response.")
    max_retry_time: float = typer.Option(
        120.0, "--max-retry-time", help="Give up retrying a failing request after this many seconds (0 = no retries).")
    ca_bundle: Optional[Path] = typer.Option(
        None, "--ca-bundle", help="CA bundle for TLS verification (verification is always on).", show_default=False)
    wire: Wire = WireOption
    num_classes: Optional[int] = NumClassesOption
    class_names: Optional[Path] = ClassNamesOption
    value_range: Optional[str] = ValueRangeOption
    input_shape: Optional[str] = InputShapeOption
    input_name: Optional[str] = InputNameOption
    output_name: Optional[str] = OutputNameOption
    datatype: Optional[str] = DatatypeOption
    model: Optional[str] = ModelOption

    def run_options(self, money: MoneyGroup | None = None) -> dict[str, NetworkOptions | TeacherFacts]:
        """The run options' ``network`` (:class:`~ldpclient.run.network.NetworkOptions`) and ``facts``
        (:class:`~ldpclient.run.facts.TeacherFacts`, with ``money``'s token prices, label map and Batch API);
        ValueError names an unusable option."""
        network, facts = teacher_options({**self.values(), **(money.values() if money is not None else {})})
        return {"network": network, "facts": facts}




@dataclass(frozen=True)
class QueryGroup(OptionGroup):
    """What is sent (``label``): the query expansion and budget, the public images, the baseline, where it runs."""

    augment: Augment = typer.Option(DEFAULT_AUGMENT, help="LDPKiT query expansion: sup, rand, or none (= SIDP).")
    queries: Optional[int] = typer.Option(
        None, min=1, help="Number of teacher queries (default: 20 per record, at least 500).")
    query_rounds: int = typer.Option(
        defaults.query_rounds(), min=1, help="Send the queries in up to this many rounds of doubling size (3: a "
        "quarter, a half, all of --queries) and stop sending when the last round raised the student's agreement with "
        "the teacher on held-out queries by less than 1 point: queries cost money, not privacy. Each round trains "
        "the student anew. 1 (the default): all at once.")
    batch_size: Optional[int] = typer.Option(
        None, min=1, help="Queries per request (default: teacher's max, at most 256).")
    baseline: bool = typer.Option(
        GIVEN["baseline"], "--baseline/--no-baseline", help="Also run the data-free baseline (blank records, epsilon "
        "0, noised at a fixed level; with --public, those images too).")
    public: Optional[Path] = typer.Option(
        None, "--public", file_okay=False,
        help="Folder of images you state are NOT private: each is sent once as it is (no noise, no privacy cost, "
        "never in the ledger; billed and counted apart) and its answer trains the student beside the private "
        "queries, and --basis pca is fitted on them. An image also in PRIVATE_DIR is refused, and so is a near copy "
        "of a private image (named with it) unless --public-skip-copies.",
        show_default=False)
    decode: Decode = typer.Option(
        GIVEN["decode"],
        help="With --public (200 images or more) and a --basis dct or pca release: send each release decoded into "
        "the public images: their mean, each weighted by how likely the mechanism's noise makes it to have "
        "given the release (post-processing: no privacy cost). auto: only when the teacher, asked about some "
        "public images and private releases sent raw and decoded (paid queries, no privacy cost), answers the"
        " decoded ones clearly better and alike on both; always: without asking; none: never.")
    public_skip_copies: bool = PublicSkipCopiesOption
    workers: int = typer.Option(GIVEN["workers"], min=1, help="Requests in flight at once.")
    cluster: Optional[str] = typer.Option(
        None, "--cluster", metavar="<auto|address>",
        help="Release and label the images on a Ray cluster: 'auto' (the one RAY_ADDRESS names or this user started "
        "here, else a Ray of the run's own on 127.0.0.1) or a Ray address. Needs --state postgresql://...; refuses "
        "--seed. Default: none, all here.")


@dataclass(frozen=True)
class MoneyGroup(OptionGroup):
    """What the answers cost (``label``): the price per query or per token, the cap, the Batch API, and how a
    teacher's free-form labels map to classes."""

    APART: ClassVar[frozenset[str]] = FACT_OPTIONS

    price: float = typer.Option(GIVEN["price"], min=0.0, help="Price per query (image), for the cost meter.")
    money_cap: Optional[float] = typer.Option(
        None, min=0.0, help="Largest total spend with this teacher over all runs (needs --price): a run that would "
        "cross it is refused before anything is noised or sent. Default: none.")
    price_input_tokens: Optional[float] = PriceInputTokensOption
    price_output_tokens: Optional[float] = PriceOutputTokensOption
    image_tokens: Optional[int] = ImageTokensOption
    batch_api: bool = BatchApiOption
    label_map: Optional[Path] = LabelMapOption


@dataclass(frozen=True)
class StudentGroup(OptionGroup):
    """How the student learns (``label``), on this device only."""

    student: Optional[str] = typer.Option(
        None, help=f"Student model: {choice_list(STUDENT_NAMES)} (default: small_resnet for colour images of 16 px "
        "or more beside --public images; pooled_cnn, a small_cnn on the image averaged over 2x2 pixels, for grey "
        "images of 24 px or more without them, except in data-free runs and baselines; else small_cnn).")
    student_weights: Optional[Path] = typer.Option(
        None, "--student-weights", dir_okay=False, metavar="<file>",
        help=f"Start the student from a weights file on this device, frozen under a new head for the teacher's "
        f"classes: a torchvision state dict of {choice_list(PRETRAINED_STUDENTS[:-1])} (the file torchvision "
        "caches for weights=\"DEFAULT\"; images resized to 224 px and normalised as ImageNet's), or a TorchScript "
        "feature extractor (--student torchscript) saved with its input size. Read and checked before anything is "
        "noised or sent; never downloaded. Default: random weights.")
    flip: Optional[bool] = typer.Option(
        None, "--flip/--no-flip", help="Also train on mirrored images (left-right), for images whose class a "
        "mirror keeps (photos of objects and scenes), or never. Default: beside 100 or more --public images of 16 px "
        "or more, the teacher is asked about mirrored and shifted copies of up to 200 of them (public queries, no "
        "privacy cost) and rows are mirrored when a mirror keeps its answers about as often as a shift; else not.")
    warmup: int = typer.Option(
        GIVEN["warmup"], min=0, help="Before training, teach the student for this many epochs which way each "
        "clean private image was rotated (a self-supervised warm-up on this device: nothing sent, no privacy cost). "
        "Measured without --public at 60 epochs: +9 points on colour digits, no change on photos or grey digits, "
        "at about 4x the run's time. 0 (the default): none.")
    students: int = typer.Option(
        defaults.students(), min=1, help="Students trained on the same answers, each with draws of its own; the "
        "labels come from the mean of their outputs. Measured at 3 on digits, MNIST, colour digits and CIFAR-10: "
        "labels 0.8-1.5 points better, at most 1.8 points apart between seeds, at 3x the training and adaptation "
        "time.")
    epochs: int = typer.Option(defaults.epochs(), min=1, help="Student training epochs.")
    train_batch_size: int = typer.Option(
        defaults.train_batch_size(), min=1, help="Student training batch size (optimiser step).")
    adapt: bool = AdaptOption


@dataclass(frozen=True)
class OutputGroup(OptionGroup):
    """What ``label`` writes, what it checks the labels against, and whether it only shows the plan."""

    output: Path = typer.Option(Path("labels.csv"), "--output", "-o", help="Labels file (.csv, or .jsonl).")
    format: Optional[LabelFormat] = typer.Option(
        None, "--format", help="Labels format (default: from --output's extension).")
    report: Optional[Path] = typer.Option(None, help="Run report JSON (default: next to --output, *.report.json).")
    html: bool = typer.Option(
        GIVEN["html"], "--html",
        help="Also write a page beside the labels (labels.csv -> labels.html; one file, opens offline): the "
        "verdict on the labels, the guarantee in plain words, releases and queries as sent, counts and money, the "
        "student, timings.")
    html_private: bool = typer.Option(
        GIVEN["html_private"], "--html-private",
        help="Show the clean private images and their file names on that page too (implies --html; the page then "
        "says on top that it holds private images: keep it on this device).")
    check: Optional[Path] = typer.Option(
        None, "--check", dir_okay=False, metavar="<file>",
        help="Hand labels of a few private images (CSV rows file,label: the path as the labels file writes it, a "
        "class name or index; a header row file,class or file,index says which, and is needed where class names "
        "are digits that read as other classes' indices), read on this device only and never sent: the run scores "
        "its labels on them (95% interval) and its verdict says what the labels are worth. Default: none "
        "(accuracy not measured).",
        show_default=False)
    dry_run: bool = typer.Option(
        GIVEN["dry_run"], "--dry-run",
        help="Print the plan (what would be released, sent, spent and trained, every default resolved) and stop: "
        "nothing is decoded, noised, sent or charged; the teacher is asked only for its metadata.")


__all__ = ["Augment", "Basis", "Decode", "DEFAULT_AUGMENT", "DEFAULT_MAX_PIXELS", "EpsilonUnit", "LabelFormat",
           "Mechanism", "MoneyGroup", "NoiseDecodeOption", "NoisePublicOption", "OutputGroup", "PrivacyGroup",
           "PrivateDirArgument", "PublicSkipCopiesOption", "QueryGroup", "RunGroup", "StateGroup", "StudentGroup",
           "TOKEN_ENV", "TeacherGroup", "TeacherUrlOption", "Wire"]
