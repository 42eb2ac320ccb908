"""The flows behind ``ldpclient label`` and ``ldpclient noise``, usable without the CLI.

:func:`run_label` wires a private folder (:mod:`ldpclient.data`), a teacher
(:func:`ldpclient.teachers.connect` + :class:`~ldpclient.teachers.QueryClient`
with a journal and a money cap), a mechanism, the privacy ledger and
:class:`~ldpclient.transfer.pipeline.KnowledgeTransfer`, then writes the labels and a JSON
run report. State lives in one directory (``ledger.sqlite`` for per-record
privacy spend and stored releases, ``journal.sqlite`` for answered batches,
``runs.json`` for the query-plan seeds of earlier runs), so running the same
command again resumes: no record is noised again and no answered batch is sent
or paid again.

Units: records are decoded to ``[0, 1]`` and mapped linearly to the teacher's
declared value range, which is the mechanism's domain (sensitivity per element =
its width). Epsilon is in nats; the report always gives it per element *and* per
record.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

import torch

from ..data import DEFAULT_MAX_PIXELS, SpooledImages, spool_private_folder, to_uint8_image
from ..names import AUGMENTATIONS, DELTA_MECHANISMS, EPSILON_UNITS, MECHANISMS, PLAN_KINDS, choice_list
from ..privacy.preprocess import delta_warning
from ..records import RecordSource
from ..teachers.base import as_teacher
from ..teachers.http import redact_url
from ..teachers.units import ByteUnitsTeacher
from ..transfer import defaults
from .facts import TeacherFacts
from .mechanism import mechanism_for
from .network import NetworkOptions
from .report import (
    StageTimer,
    iter_label_rows,
    label_format_for,
    preview_grid,
    versions,
    write_json,
    write_labels,
)
from .run_report import (
    CostSection,
    CountsSection,
    LedgerSection,
    MechanismSection,
    QueriesSection,
    RunReport,
    StudentSection,
    TeacherSection,
)
from .ui import UI

# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class LabelOptions:
    """Everything ``ldpclient label`` needs except the token (secrets are passed separately).

    ``epsilon`` is in nats, per ``epsilon_unit`` (``element`` or ``record``);
    ``privacy_cap`` is a per-record epsilon cap enforced by the ledger over all runs;
    ``price`` is money per query and ``money_cap`` the largest total spend for this
    teacher over all runs (journal). ``queries=None``: 20 per record, at least 500
    (bounded by the distinct Sup pairs). ``seed`` seeds *all* randomness including
    the privacy noise: tests only.
    """

    private_dir: Path
    teacher: str
    mechanism: str = defaults.mechanism()
    epsilon: float = defaults.epsilon()
    epsilon_unit: str = defaults.epsilon_unit()
    delta: Optional[float] = None
    secure: bool = True
    allow_large_delta: bool = False
    augment: str = defaults.augmentation()
    reduce: Optional[int] = None
    postprocess: Optional[str] = None
    baseline: bool = False
    adapt: bool = True
    queries: Optional[int] = None
    batch_size: Optional[int] = None
    price: float = 0.0
    money_cap: Optional[float] = None
    privacy_cap: Optional[float] = None
    student: str = "small_cnn"
    epochs: int = defaults.epochs()
    output: Path = Path("labels.csv")
    format: Optional[str] = None
    report: Optional[Path] = None
    state_dir: Optional[Path] = None
    max_pixels: int = DEFAULT_MAX_PIXELS
    workers: int = 1
    seed: Optional[int] = None
    device: str = "auto"
    train_batch_size: int = defaults.train_batch_size()
    network: NetworkOptions = NetworkOptions()
    facts: TeacherFacts = TeacherFacts()

    def validate(self) -> None:
        """Raise ValueError naming the option for any value that cannot work."""
        self.network.validate()
        _check_mechanism_options(self.mechanism, self.epsilon, self.epsilon_unit, self.delta, self.reduce)
        if self.augment not in AUGMENTATIONS:
            raise ValueError(f"--augment must be one of {', '.join(AUGMENTATIONS)}, got {self.augment!r}")
        if self.postprocess is not None:
            _check_postprocess(self.postprocess)
        for name, value in (("--queries", self.queries), ("--batch-size", self.batch_size)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if not (math.isfinite(self.price) and self.price >= 0):
            raise ValueError(f"--price must be a finite number >= 0, got {self.price}")
        if self.money_cap is not None and not (math.isfinite(self.money_cap) and self.money_cap >= 0):
            raise ValueError(f"--money-cap must be a finite number >= 0, got {self.money_cap}")
        if self.privacy_cap is not None and not (math.isfinite(self.privacy_cap) and self.privacy_cap > 0):
            raise ValueError(f"--privacy-cap must be a finite number > 0 (per-record epsilon), got {self.privacy_cap}")
        if self.epochs < 1:
            raise ValueError(f"--epochs must be >= 1, got {self.epochs}")
        if self.train_batch_size < 1:
            raise ValueError(f"--train-batch-size must be >= 1, got {self.train_batch_size}")
        if self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
        from ..transfer.student import build_student

        try:
            with torch.random.fork_rng(devices=[]):  # a trial build: its init draws stay local
                build_student(self.student, num_classes=2)
        except (ValueError, KeyError) as exc:
            raise ValueError(f"--student: {exc}") from None
        label_format_for(self.output, self.format)
        if self.output.exists() and self.output.is_dir():
            raise ValueError(f"--output {str(self.output)!r} is a directory; give a file name")
        if not self.teacher:
            raise ValueError("--teacher must be a URL or adapter name")


@dataclass(frozen=True)
class NoiseOptions:
    """Options of ``ldpclient noise`` (see :func:`run_noise`)."""

    private_dir: Path
    out: Path
    teacher: Optional[str] = None
    size: int = 28
    channels: int = 1
    mechanism: str = defaults.mechanism()
    epsilon: float = defaults.epsilon()
    epsilon_unit: str = defaults.epsilon_unit()
    delta: Optional[float] = None
    secure: bool = True
    allow_large_delta: bool = False
    reduce: Optional[int] = None
    postprocess: Optional[str] = None
    augment: str = defaults.augmentation()
    preview: int = 8
    privacy_cap: Optional[float] = None
    state_dir: Optional[Path] = None
    max_pixels: int = DEFAULT_MAX_PIXELS
    seed: Optional[int] = None
    network: NetworkOptions = NetworkOptions()
    facts: TeacherFacts = TeacherFacts()

    def validate(self) -> None:
        self.network.validate()
        _check_mechanism_options(self.mechanism, self.epsilon, self.epsilon_unit, self.delta, self.reduce)
        if self.postprocess is not None:
            _check_postprocess(self.postprocess)
        if self.channels not in (1, 3):
            raise ValueError(f"--channels must be 1 or 3, got {self.channels}")
        if self.size < 1 or self.preview < 1:
            raise ValueError("--size and --preview must be >= 1")
        if self.augment not in AUGMENTATIONS:
            raise ValueError(f"--augment must be one of {', '.join(AUGMENTATIONS)}, got {self.augment!r}")
        if self.privacy_cap is not None and not (math.isfinite(self.privacy_cap) and self.privacy_cap > 0):
            raise ValueError(f"--privacy-cap must be a finite number > 0 (per-record epsilon), got {self.privacy_cap}")
        if self.out.exists() and not self.out.is_dir():
            raise ValueError(f"--out {str(self.out)!r} exists and is not a directory")


def _check_mechanism_options(
    mechanism: str, epsilon: float, unit: str, delta: float | None, reduce: int | None
) -> None:
    if mechanism not in MECHANISMS:
        raise ValueError(f"--mechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"--epsilon must be a finite number > 0, got {epsilon}")
    if unit not in EPSILON_UNITS:
        raise ValueError(f"--epsilon-unit must be {choice_list(EPSILON_UNITS)}, got {unit!r}")
    if delta is not None and not (0 < delta < 1):
        raise ValueError(f"--delta must be in (0, 1), got {delta}")
    if delta is not None and mechanism not in DELTA_MECHANISMS:
        raise ValueError(f"--delta applies to {', '.join(DELTA_MECHANISMS)} only, not to --mechanism {mechanism}")
    if reduce is not None and reduce < 1:
        raise ValueError(f"--reduce must be >= 1, got {reduce}")


def resolve_shape_defaults(opts: Any, input_shape: tuple[int, ...]) -> Any:
    """``opts`` with ``reduce`` and ``postprocess`` filled from the record shape where the user gave none
    (:func:`ldpclient.transfer.defaults.shape_settings`)."""
    import dataclasses

    reduce, post = defaults.shape_settings(input_shape, opts.reduce, opts.postprocess)
    return dataclasses.replace(opts, reduce=reduce, postprocess=post)


def _check_postprocess(spec: str) -> None:
    from ..transfer.postprocess import parse_postprocess

    try:
        parse_postprocess(spec)
    except ValueError as exc:
        raise ValueError(f"--postprocess: {exc}") from None


# --------------------------------------------------------------------------- helpers


def teacher_options(address: str, facts: TeacherFacts, state: Path) -> dict[str, Any]:
    """The model facts the user supplied; for Open Inference Protocol teachers also the wire format,
    whose ``auto`` choice is remembered in the state directory ``state``."""
    from ..teachers.registry import resolve

    out: dict[str, Any] = facts.supplied()
    if resolve(address)[0] == "oip":
        out.update(wire=facts.wire, state_dir=state)
    elif facts.wire != "auto":
        raise ValueError("--wire applies to Open Inference Protocol teachers (http://, oip+http://) only")
    return out


def connect_options(address: str, facts: TeacherFacts, network: NetworkOptions, state: Path) -> dict[str, Any]:
    """Options for :func:`~ldpclient.teachers.connect`: :func:`teacher_options`, and for URL adapters
    the transport's timeouts, retry budget and CA bundle (:class:`~ldpclient.run.network.NetworkOptions`)."""
    return {**teacher_options(address, facts, state), **network.transport_options(address)}


def open_teacher(address: str, token: str | None, options: Mapping[str, Any]) -> Any:
    """:func:`~ldpclient.teachers.connect`, with an adapter's refusal of a supplied fact as one line."""
    from ..teachers import connect

    try:
        return connect(address, token=token, **options)
    except TypeError as exc:
        if "unexpected keyword argument" not in str(exc):
            raise
        name = str(exc).rsplit(" ", 1)[-1].strip("'")
        raise ValueError(
            f"the teacher adapter for {redact_url(address)!r} does not take --{name.replace('_', '-')}"
        ) from None


def check_private_folder(path: Path) -> None:
    """Raise DataError (one line) when ``path`` is missing, not a folder, or holds no image files."""
    from ..data import IMAGE_EXTENSIONS, DataError, discover_images

    found = discover_images(path)
    if not found.files:
        raise DataError(
            f"private folder {str(path)!r} contains no image files ({', '.join(sorted(IMAGE_EXTENSIONS))})"
        )


def state_dir_for(state_dir: Path | None) -> Path:
    from ..state import state_dir as _state_dir

    return _state_dir(state_dir)


def build_mechanism(
    opts: LabelOptions | NoiseOptions,
    value_range: tuple[float, float],
    record_shape: tuple[int, ...],
) -> Any:
    """The mechanism the options name, on the teacher's value range, checked against the record shape."""
    return mechanism_for(
        opts.mechanism, epsilon=opts.epsilon, per=opts.epsilon_unit, delta=opts.delta, reduce=opts.reduce,
        value_range=value_range, record_shape=record_shape, secure=opts.secure,
        allow_large_delta=opts.allow_large_delta,
    )


class _RunState:
    """``runs.json`` in the state directory: the query-plan seed of each run configuration.

    The plan seed decides which pairs/noise copies are queried; keeping it makes a
    re-run produce the same batches (same ids, same queries), which the journal then
    answers without sending. It is not a privacy secret: the queries are functions
    of the releases, which the teacher sees anyway.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / "runs.json"

    def seed_for(self, key: Mapping[str, Any], explicit: int | None) -> int:
        if explicit is not None:
            return int(explicit)
        digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]
        data = self._read()
        if digest not in data:
            data[digest] = {"seed": secrets.randbits(31), "created": time.time()}  # small: the pipeline derives seeds from it
            write_json(self.path, data)
        return int(data[digest]["seed"])

    def _read(self) -> dict[str, Any]:
        try:
            loaded = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ValueError(f"state file {str(self.path)!r} is unreadable ({exc}); move it away to start afresh") from None
        return loaded if isinstance(loaded, dict) else {}


def resume_hint(opts: LabelOptions) -> str:
    """What to tell a user whose run stopped: re-run the same command (state dir named)."""
    where = str(opts.state_dir) if opts.state_dir is not None else "the default state directory"
    return f"state kept in {where}; re-run the same command to resume without re-noising or paying twice"


class _Progress:
    """Adapter from the pipeline's ``progress(stage, done, total, metrics)`` to the UI's bars."""

    NAMES = {"release": "noising", "label": "querying", "train": "training", "predict": "labelling"}

    def __init__(self, ui: UI, prefix: str, client: Any) -> None:
        self.ui = ui
        self.prefix = prefix
        self.client = client
        self._bars: dict[str, Any] = {}
        self._contexts: list[Any] = []
        self._t0: dict[str, float] = {}
        self._epoch_info = ""
        self._label_start: float | None = None

    def _bar(self, stage: str, total: int) -> Any:
        if stage not in self._bars:
            cm = self.ui.stage(f"{self.prefix}{self.NAMES[stage]}", total)
            self._contexts.append(cm)
            self._bars[stage] = cm.__enter__()
            self._t0[stage] = time.perf_counter()
        return self._bars[stage]

    def __call__(self, stage: str, done: int, total: int, metrics: Mapping[str, Any]) -> None:
        if stage == "epoch":
            val = metrics.get("val_acc")
            val_s = "" if val is None or val != val else f" val acc {100 * val:.1f}%"
            self._epoch_info = (
                f"epoch {done}/{total} loss {metrics.get('loss', float('nan')):.3f} "
                f"train acc {100 * metrics.get('train_acc', float('nan')):.1f}%{val_s}"
            )
            if "train" in self._bars:
                self._bars["train"].update(info=self._epoch_info)
            return
        if stage not in self.NAMES:
            return
        if stage == "release" and done >= total:
            self._label_start = time.perf_counter()  # querying starts right after the releases
        bar = self._bar(stage, total)
        info = None
        if stage == "label":
            s = self.client.stats
            elapsed = max(time.perf_counter() - (self._label_start or self._t0[stage]), 1e-3)
            qps = s.queries_sent / elapsed
            info = (
                f"{qps:.0f} q/s, {s.queries_from_journal} from journal, "
                f"spent {self.client.cost.spent_run:.4g} (total {self.client.cost.spent_total:.4g})"
            )
        elif stage == "train":
            info = f"epoch {metrics.get('epoch', '?')} loss {metrics.get('loss', float('nan')):.3f}"
            if self._epoch_info:
                info += f" | last: {self._epoch_info}"
        bar.update(done, total=total, info=info)

    def close(self) -> None:
        while self._contexts:
            self._contexts.pop().__exit__(None, None, None)


# --------------------------------------------------------------------------- label


@dataclass(frozen=True)
class _Setup:
    """One label run's resolved inputs: options (shape defaults filled), teacher, mechanism, UI, timer, state."""

    opts: LabelOptions
    token: str | None
    ui: UI
    timer: StageTimer
    state: Path
    identity: str
    teacher: Any
    meta: Any
    shape: tuple[int, ...]
    mechanism: Any


@dataclass(frozen=True)
class _Plan:
    """The query count, the query-plan seed and the release generator of one run."""

    num_queries: int | None
    seed: int
    generator: torch.Generator | None


@dataclass(frozen=True)
class _Session:
    """The run's open state: the ledger, the journalled query client, its progress bars, the pipeline arguments."""

    ledger: Any
    client: Any
    progress: _Progress
    q_batch: int
    common: dict[str, Any]


@dataclass(frozen=True)
class _Baseline:
    """The data-free baseline run: its report section, its labels and confidences, its unadapted labels."""

    section: dict[str, Any]
    labels: torch.Tensor
    confidences: torch.Tensor
    unadapted: Any


@dataclass(frozen=True)
class _Outcome:
    """What the transfer step leaves: the private result, the records' total spend after it, the client's
    figures, the baseline."""

    result: Any
    spent_after: torch.Tensor
    stats_private: dict[str, Any]
    client_report: dict[str, Any]
    ledger_cap: float | None
    ledger_path: Path
    query_batch_size: int
    baseline: _Baseline | None


@dataclass(frozen=True)
class _Written:
    """How many label rows were written, and the report's ``outputs`` section."""

    labelled: int
    outputs: dict[str, str]


def run_label(
    opts: LabelOptions,
    *,
    token: str | None = None,
    ui: UI | None = None,
    teacher: Any = None,
) -> dict[str, Any]:
    """Run the whole label flow; returns the run report (also written to disk).

    ``teacher``: an already opened Teacher to use instead of connecting to
    ``opts.teacher`` (embedding, tests); ``opts.teacher`` still names it in reports.
    Raises the underlying errors (DataError, ValueError, BudgetExceeded,
    CostCapReached, TeacherError) for the caller to present.
    """
    ui = ui or UI(quiet=True)
    opts.validate()
    timer = StageTimer()
    state = state_dir_for(opts.state_dir)
    identity = redact_url(opts.teacher)

    check_private_folder(opts.private_dir)  # a missing/empty folder fails before any network traffic
    setup = _prepare_teacher(opts, token=token, teacher=teacher, ui=ui, timer=timer, state=state, identity=identity)
    images = _load_records(setup)
    try:
        plan = _plan_queries(setup, len(images))
        session = _open_session(setup, plan)
        outcome = _run_transfer(setup, session, plan, images.records)
    finally:
        images.close()  # the spooled clean records: nothing of them stays on disk
    _merge_timings(timer, outcome.result)

    report_path = report_path_for(setup.opts)
    written = _write_outputs(setup, images, outcome, report_path)
    report = _build_report(setup, images, outcome, written).to_dict()
    write_json(report_path, report, secrets=(token,))
    return report


def _prepare_teacher(
    opts: LabelOptions, *, token: str | None, teacher: Any, ui: UI, timer: StageTimer, state: Path, identity: str
) -> _Setup:
    """Connect to and describe the teacher, check its input shape, fill shape defaults, build the mechanism."""
    from ..teachers.limits import TeacherLimits

    with timer.stage("connect"):
        if teacher is None:
            teacher = open_teacher(opts.teacher, token, connect_options(opts.teacher, opts.facts, opts.network, state))
        meta = teacher.metadata()
    if opts.mechanism == "discrete-tldp" and tuple(meta.value_range) != (0.0, 255.0):
        teacher = ByteUnitsTeacher(teacher)
        meta = teacher.metadata()
    shape = tuple(int(s) for s in meta.input_shape)
    TeacherLimits().check_input_shape(shape, identity)  # before any image is decoded at that size
    if len(shape) != 3:
        raise ValueError(f"teacher {identity!r} declares input shape {shape}; ldpclient label needs (C, H, W) images")
    opts = resolve_shape_defaults(opts, shape)
    mechanism = build_mechanism(opts, meta.value_range, shape)
    return _Setup(opts=opts, token=token, ui=ui, timer=timer, state=state, identity=identity,
                  teacher=teacher, meta=meta, shape=shape, mechanism=mechanism)


def _load_records(setup: _Setup) -> SpooledImages:
    """Decode the private folder at the teacher's shape, in its value range, into a spool file in the state
    directory (an unlinked temporary file: memory O(chunk), nothing left behind); the caller closes it."""
    opts, meta, integer = setup.opts, setup.meta, setup.mechanism.domain.integer
    with setup.timer.stage("loading"), setup.ui.stage("loading", None) as bar:
        return spool_private_folder(
            opts.private_dir, setup.shape, convert=lambda r: _to_value_range(r, meta.value_range, integer=integer),
            directory=setup.state, max_pixels=opts.max_pixels, progress=lambda d, t: bar.update(d, total=t),
        )


def _plan_queries(setup: _Setup, n: int) -> _Plan:
    """Warn about a large delta, settle the query count and the plan seed (``runs.json``), seed the releases."""
    opts, mechanism = setup.opts, setup.mechanism
    warned = delta_warning(mechanism.guarantee(setup.shape).delta_record, n)
    if warned:
        logging.getLogger("ldpclient").warning(warned)
    num_queries = _default_queries(opts, n)

    run_key = {
        "private_dir": str(Path(opts.private_dir).resolve()),
        "teacher": setup.identity,
        "mechanism": mechanism.config(),
        "augment": opts.augment,
        "postprocess": opts.postprocess,
        "queries": num_queries,
        "batch_size": opts.batch_size,
        "records": n,
    }
    plan_seed = _RunState(setup.state).seed_for(run_key, opts.seed)
    generator = torch.Generator().manual_seed(opts.seed) if opts.seed is not None else None
    return _Plan(num_queries=num_queries, seed=plan_seed, generator=generator)


def _open_session(setup: _Setup, plan: _Plan) -> _Session:
    """Open the ledger and the journal, and build the query client, its progress bars and the pipeline arguments."""
    from ..privacy.ledger import Ledger
    from ..teachers import CostMeter, Journal, QueryClient

    opts, state = setup.opts, setup.state
    ledger = Ledger(state / "ledger.sqlite", cap_epsilon=opts.privacy_cap)
    journal = Journal(state / "journal.sqlite")
    cost = CostMeter(price_per_query=opts.price, cap=opts.money_cap)
    client = QueryClient(
        setup.teacher, batch_size=opts.batch_size, workers=opts.workers, journal=journal, cost=cost, scope=setup.identity
    )
    q_batch = opts.batch_size or defaults.query_batch_size(setup.meta.max_batch_size)
    progress = _Progress(setup.ui, "", client)
    common: dict[str, Any] = dict(
        augmentation=opts.augment,
        num_queries=plan.num_queries,
        postprocess=opts.postprocess,
        student=opts.student,
        epochs=opts.epochs,
        batch_size=opts.train_batch_size,
        query_batch_size=q_batch,
        client=client,
        device=opts.device,
        adapt=opts.adapt,
    )
    return _Session(ledger=ledger, client=client, progress=progress, q_batch=q_batch, common=common)


def _run_transfer(setup: _Setup, session: _Session, plan: _Plan, records: RecordSource) -> _Outcome:
    """Noise, query and train (then the baseline); a stop report at a cap; client and ledger closed whatever happens."""
    from ..privacy.ledger import BudgetExceeded
    from ..teachers import CostCapReached
    from ..transfer.pipeline import KnowledgeTransfer

    opts, ledger, client, progress = setup.opts, session.ledger, session.client, session.progress
    try:
        transfer = KnowledgeTransfer(
            setup.teacher, setup.mechanism, ledger=ledger, scope=setup.identity,
            mode="ldpkit" if opts.augment != "none" else "sidp",
            seed=plan.seed, release_generator=plan.generator, progress=progress, **session.common,
        )
        with setup.timer.stage("pipeline"):
            result = transfer.run(records)
        progress.close()
        spent_after = ledger.spent(records).epsilon
        stats_private = dict(asdict(client.stats))
        baseline = None
        if opts.baseline:
            baseline = _run_baseline(setup, session, plan, records, result, stats_private)
        client_report = client.report()
    except (CostCapReached, BudgetExceeded) as exc:
        _write_stop_report(opts, exc, setup.identity, client, ledger, records, setup.token)
        raise
    finally:
        progress.close()
        client.close()
        ledger_cap = ledger.cap_epsilon
        ledger_path = ledger.path
        ledger.close()
    return _Outcome(result=result, spent_after=spent_after, stats_private=stats_private,
                    client_report=client_report, ledger_cap=ledger_cap, ledger_path=ledger_path,
                    query_batch_size=session.q_batch, baseline=baseline)


def _run_baseline(
    setup: _Setup, session: _Session, plan: _Plan, records: RecordSource, result: Any,
    stats_private: Mapping[str, Any],
) -> _Baseline:
    """The data-free baseline (blank public input, no privacy cost) and how far it agrees with the private run."""
    from ..transfer.pipeline import KnowledgeTransfer

    client, n = session.client, len(records)
    base_progress = _Progress(setup.ui, "baseline ", client)
    base_seed = (plan.seed * 1_000_003 + 0xB45E) % (2**31)
    base = KnowledgeTransfer(
        setup.teacher, setup.mechanism, mode="data-free", seed=base_seed,
        release_generator=torch.Generator().manual_seed(base_seed),  # public blank input: a fixed seed is harmless
        progress=base_progress, **session.common,
    )
    with setup.timer.stage("baseline"):
        base_result = base.run(records)
    base_progress.close()
    agree = float((base_result.labels == result.labels).float().mean())
    base_conf = (
        base_result.confidences if base_result.confidences is not None else torch.full((n,), float("nan"))
    )
    section = {
        "mode": "data-free",
        "epsilon_record": 0.0,
        "queries_sent": client.stats.queries_sent - stats_private["queries_sent"],
        "queries_from_journal": client.stats.queries_from_journal - stats_private["queries_from_journal"],
        "agreement_with_private_run": agree,
        "student_val_accuracy": _last_val(base_result),
    }
    return _Baseline(section=section, labels=base_result.labels, confidences=base_conf,
                     unadapted=base_result.unadapted_labels)


def _merge_timings(timer: StageTimer, result: Any) -> None:
    """Replace the timer's ``pipeline`` stage by the pipeline's own stages, under the progress bars' names."""
    for k, v in result.timings.items():
        timer.seconds[_Progress.NAMES.get(k, k)] = v
    timer.seconds.pop("pipeline", None)


def _write_outputs(setup: _Setup, images: Any, outcome: _Outcome, report_path: Path) -> _Written:
    """Write the labels, the unadapted and baseline labels beside them (rows streamed); the ``outputs`` section."""
    opts, n, result = setup.opts, len(images), outcome.result
    fmt = label_format_for(opts.output, opts.format)
    paths = images.printable_paths

    def write(path: Path, labels: torch.Tensor, confidences: torch.Tensor | None) -> None:
        conf = confidences if confidences is not None else _no_conf(n)
        write_labels(path, iter_label_rows(paths, labels, conf, setup.meta.class_names), fmt)

    write(opts.output, result.labels, result.confidences)
    outputs = {"labels": str(opts.output), "format": fmt, "report": str(report_path)}
    if result.unadapted_labels is not None:  # what the student said before adaptation, for comparison
        outputs["unadapted_labels"] = str(_sibling(opts.output, ".unadapted"))
        write(_sibling(opts.output, ".unadapted"), result.unadapted_labels, None)
    baseline = outcome.baseline
    if baseline is not None:
        outputs["baseline_labels"] = str(_sibling(opts.output, ".baseline"))
        write(_sibling(opts.output, ".baseline"), baseline.labels, baseline.confidences)
        if baseline.unadapted is not None:
            outputs["baseline_unadapted_labels"] = str(_sibling(opts.output, ".baseline.unadapted"))
            write(_sibling(opts.output, ".baseline.unadapted"), baseline.unadapted, None)
    return _Written(labelled=n, outputs=outputs)


def _build_report(setup: _Setup, images: Any, outcome: _Outcome, written: _Written) -> RunReport:
    """The run report of a finished label run (``ui.py`` and ``ldpclient audit`` read it; JSON via ``to_dict``)."""
    opts, meta, mechanism, result = setup.opts, setup.meta, setup.mechanism, outcome.result
    return RunReport(
        command="label",
        ok=True,
        private_dir=str(opts.private_dir),
        teacher=TeacherSection(address=setup.identity, model=meta.name, input_shape=list(setup.shape),
                               datatype=meta.datatype, num_classes=meta.num_classes,
                               value_range=list(meta.value_range), wire=_wire_used(setup.teacher),
                               assumed=list(meta.assumed)),
        mechanism=MechanismSection(name=opts.mechanism, epsilon=opts.epsilon, epsilon_unit=opts.epsilon_unit,
                                   delta=opts.delta, reduce=opts.reduce, config=mechanism.config()),
        guarantee=result.guarantee.as_dict(),
        guarantee_note=(
            "per record is the figure that matters: it bounds what the teacher can learn about one whole image; "
            "post-processing (augmentation, blur, clipping) adds nothing; inputs are clipped to the declared domain "
            "before noising"
        ),
        augment=opts.augment,
        postprocess=opts.postprocess,
        # the full query plan: with the teacher's query log it maps every logged query to its records
        # (`ldpclient audit --run REPORT --queries LOG --private DIR`)
        plan=asdict(result.plan) if result.plan is not None else None,
        **_usage_sections(setup, images, outcome, written.labelled),
        student=StudentSection(
            model=opts.student if result.student is not None else None,
            epochs=opts.epochs if result.student is not None else 0,
            val_accuracy=_last_val(result),
            train_accuracy=result.history.train_accuracy[-1] if result.history else None,
            loss=result.history.loss[-1] if result.history else None,
            note="validation accuracy = agreement with the teacher's labels on held-out noised queries",
        ),
        adaptation=_adaptation_section(result),
        baseline=outcome.baseline.section if outcome.baseline is not None else None,
        label_histogram=torch.bincount(result.labels, minlength=meta.num_classes).tolist(),
        timings=setup.timer.as_dict(),
        skipped=[s.as_dict() for s in images.skipped],
        # file names that are not valid UTF-8: labelled, and written with \xNN escapes
        escaped_names=list(images.escaped_paths),
        outputs=written.outputs,
        versions=versions(),
    )


def _usage_sections(setup: _Setup, images: Any, outcome: _Outcome, labelled: int) -> dict[str, Any]:
    """The report's ``counts``, ``queries``, ``cost`` and ``ledger`` sections, in that order."""
    opts, counts, n = setup.opts, outcome.result.counts, len(images)
    stats, client_report = outcome.stats_private, outcome.client_report
    return {
        "counts": CountsSection(
            files_found=n + sum(1 for s in images.skipped if not s.path.endswith("/")),
            records=n,
            labelled=labelled,
            skipped=len(images.skipped),
            releases_fresh=int(counts.get("releases_fresh", 0)),
            releases_reused=int(counts.get("releases_reused", 0)),
        ),
        "queries": QueriesSection(
            planned=int(counts.get("queries", 0)),
            batches=int(counts.get("batches", 0)),
            sent=stats["queries_sent"],
            from_journal=stats["queries_from_journal"],
            requests=stats["requests"],
            batch_size=outcome.query_batch_size,
            plan_seed_source="--seed" if opts.seed is not None else "runs.json",
        ),
        "cost": CostSection(
            price_per_query=opts.price,
            spent_run=client_report["spent_run"],
            spent_total=client_report["spent_total"],
            cap=opts.money_cap,
            billing=client_report["billing"],
        ),
        "ledger": LedgerSection(
            path=str(outcome.ledger_path),
            fresh=int(counts.get("releases_fresh", 0)),
            reused=int(counts.get("releases_reused", 0)),
            # what this run charged: each fresh release costs the release's per-record epsilon (the ledger
            # charges exactly that), reused ones nothing; no second pass over the records to difference
            spent_this_run_max_epsilon=(
                float(outcome.result.guarantee.epsilon_record) if int(counts.get("releases_fresh", 0)) else 0.0
            ),
            max_spent_epsilon=float(outcome.spent_after.max()),
            cap_epsilon=outcome.ledger_cap,
        ),
    }


ADAPTATION_NOTE = (
    "the student was fine-tuned on the clean private images, on this device only (no query, no privacy cost); "
    "it has seen them, is not covered by the LDP guarantee and must not leave the device; the queries and the "
    "teacher's answers keep their meaning"
)


def _adaptation_section(result: Any) -> dict[str, Any] | None:
    summary = result.summary().get("adaptation")
    if summary is None:
        return None
    changed = None
    if result.unadapted_labels is not None:
        changed = float((result.unadapted_labels != result.labels).float().mean())
    return {**summary, "labels_changed": changed, "note": ADAPTATION_NOTE}


def _sibling(output: Path, tag: str) -> Path:
    """``labels.csv`` -> ``labels<tag>.csv`` beside it."""
    return output.with_name(output.stem + tag + output.suffix)


def _no_conf(n: int) -> torch.Tensor:
    return torch.full((n,), float("nan"))


def report_path_for(opts: LabelOptions) -> Path:
    """The run report's path: ``--report``, else ``<output stem>.report.json`` beside the labels."""
    return opts.report or opts.output.with_name(opts.output.stem + ".report.json")


def _write_stop_report(
    opts: LabelOptions, exc: Exception, identity: str, client: Any, ledger: Any, records: RecordSource,
    token: str | None,
) -> None:
    """A partial report for a run stopped at the money or privacy cap: what was spent and answered."""
    spent = ledger.spent(records).epsilon
    stopped = "money cap" if type(exc).__name__ == "CostCapReached" else "privacy cap"
    costs = client.report()
    write_json(report_path_for(opts), {
        "schema": 1,
        "command": "label",
        "ok": False,
        "stopped": {"reason": stopped, "message": " ".join(str(exc).split())},
        "private_dir": str(opts.private_dir),
        "teacher": {"address": identity},
        "queries": {"sent": client.stats.queries_sent, "from_journal": client.stats.queries_from_journal,
                    "requests": client.stats.requests},
        "cost": {"price_per_query": opts.price, "cap": opts.money_cap,
                 **{k: costs[k] for k in ("spent_run", "spent_total", "spent_unconfirmed", "billing")}},
        "ledger": {"path": str(ledger.path), "max_spent_epsilon": float(spent.max()) if len(spent) else 0.0,
                   "cap_epsilon": ledger.cap_epsilon},
        "outputs": {"report": str(report_path_for(opts))},
        "versions": versions(),
    }, secrets=(token,))


def _wire_used(teacher: Any) -> str | None:
    """``"binary"``/``"json"`` for an Open Inference Protocol teacher (after negotiation), else None."""
    from ..teachers.oip import OIPTeacher

    inner = teacher.inner if isinstance(teacher, ByteUnitsTeacher) else teacher
    if not isinstance(inner, OIPTeacher):
        return None
    return "binary" if inner.binary else "json"


def _last_val(result: Any) -> float | None:
    if result.history is None or not result.history.val_accuracy:
        return None
    v = result.history.val_accuracy[-1]
    return None if v != v else float(v)


def _default_queries(opts: LabelOptions, n: int) -> int | None:
    if opts.augment == "none":
        return None
    if opts.augment == "sup" and n < 2:
        raise ValueError(f"--augment sup needs at least 2 images, the folder has {n}; use --augment rand or none")
    if opts.queries is None:
        return defaults.num_queries(n, opts.augment)
    pairs = n * (n - 1) // 2
    if opts.augment == "sup" and opts.queries > pairs:
        raise ValueError(
            f"--queries {opts.queries} exceeds the {pairs} distinct Sup pairs of {n} images; lower it or use --augment rand"
        )
    return opts.queries


def _to_value_range(records: torch.Tensor, value_range: tuple[float, float], *, integer: bool = False) -> torch.Tensor:
    """Decoded images (float [0, 1]) in the teacher's value range; ``integer``: rounded to whole units
    (for an integer domain such as 0..255: the 8-bit pixel values the files held)."""
    lo, hi = float(value_range[0]), float(value_range[1])
    out = records if (lo, hi) == (0.0, 1.0) else records * (hi - lo) + lo
    return torch.round(out) if integer else out


# --------------------------------------------------------------------------- noise


@dataclass(frozen=True)
class _NoiseTarget:
    """What a noise run releases for: the record shape, the mechanism's value range and the ledger scope."""

    shape: tuple[int, ...]
    value_range: tuple[float, float]
    scope: str


def run_noise(opts: NoiseOptions, *, token: str | None = None, ui: UI | None = None) -> dict[str, Any]:
    """Release every image of the folder once (charged in the ledger) and write what a teacher would see.

    Writes ``OUT/<relative path>.png`` per record (the post-processed release,
    clipped and quantised to 8 bits: free post-processing) and ``OUT/preview.png``
    (rows: clean, released, augmented). With ``teacher`` the release is made for
    that teacher (same ledger scope as ``ldpclient label``), so a later label run
    reuses it at no further cost.
    """
    ui = ui or UI(quiet=True)
    opts.validate()
    state = state_dir_for(opts.state_dir)
    target = _noise_target(opts, token, state)
    opts = resolve_shape_defaults(opts, target.shape)
    mechanism = build_mechanism(opts, target.value_range, target.shape)
    lo, hi = target.value_range
    with ui.stage("loading", None) as bar:
        images = spool_private_folder(
            opts.private_dir, target.shape, directory=state, max_pixels=opts.max_pixels,
            convert=lambda r: _to_value_range(r, target.value_range, integer=mechanism.domain.integer),
            progress=lambda d, t: bar.update(d, total=t),
        )
    with images:
        noised = _noise_and_write(opts, images, mechanism, target, state, ui)
        preview_path = _write_preview(opts, Path(opts.out), images.records, noised.rows, mechanism,
                                      lambda v: (v - lo) / (hi - lo))
    release, n = noised.rows.release, len(images)
    fresh, reused = int((~release.reused).sum()), int(release.reused.sum())
    return {
        "schema": 1,
        "command": "noise",
        "ok": True,
        "private_dir": str(opts.private_dir),
        "scope": target.scope,
        "guarantee": release.guarantee.as_dict(),
        "counts": {"noised": n, "fresh": fresh, "reused": reused, "skipped": len(images.skipped)},
        "ledger": {"fresh": fresh, "reused": reused, "max_spent_epsilon": noised.max_spent,
                   "cap_epsilon": opts.privacy_cap},
        "skipped": [s.as_dict() for s in images.skipped],
        "outputs": {"dir": str(opts.out), "preview": str(preview_path), "files": n},
        "versions": versions(),
    }


@dataclass(frozen=True)
class _Noised:
    """A noise run's releases (post-processed on demand) and the largest per-record spend after it."""

    rows: Any
    max_spent: float


def _noise_and_write(
    opts: NoiseOptions, images: SpooledImages, mechanism: Any, target: _NoiseTarget, state: Path, ui: UI
) -> _Noised:
    """Release the records in chunks through the ledger and write each one's post-processed release as
    ``OUT/<relative path>.png`` (clipped to the value range, quantised to 8 bits: free post-processing)."""
    from ..privacy.ledger import Ledger
    from ..privacy.release import ReleaseBuilder
    from ..records import iter_batches
    from ..transfer.pipeline import release_chunk
    from ..transfer.postprocess import ReleaseRows, parse_postprocess

    lo, hi = target.value_range
    transforms = parse_postprocess(opts.postprocess)
    generator = torch.Generator().manual_seed(opts.seed) if opts.seed is not None else None
    chunk = release_chunk(target.shape)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    whole = ReleaseBuilder(len(images))
    with Ledger(state / "ledger.sqlite", cap_epsilon=opts.privacy_cap) as ledger, \
            ui.stage("noising", len(images)) as bar:
        for idx, records in iter_batches(images.records, chunk):
            release = ledger.release(mechanism, records, scope=target.scope, generator=generator)
            whole.add(release)
            values = ReleaseRows(release, transforms, "bilinear").rows(torch.arange(len(release))).values
            for k, row in zip(idx.tolist(), values, strict=True):
                rel = images.paths[k]
                path = out / (rel + ".png" if not rel.lower().endswith(".png") else rel)
                path.parent.mkdir(parents=True, exist_ok=True)
                to_uint8_image((row - lo) / (hi - lo)).save(path)
            bar.update(int(idx[-1]) + 1)
        max_spent = float(ledger.spent(images.records).epsilon.max())
    return _Noised(ReleaseRows(whole.build(), transforms, "bilinear"), max_spent)


def _noise_target(opts: NoiseOptions, token: str | None, state: Path) -> _NoiseTarget:
    """Shape, value range and scope of a noise run: the named teacher's (asked once, then closed), else local."""
    value_range: tuple[float, float] = (0.0, 1.0)
    if opts.teacher:
        t = open_teacher(opts.teacher, token, connect_options(opts.teacher, opts.facts, opts.network, state))
        try:
            meta = t.metadata()
        finally:
            as_teacher(t).close()
        shape = tuple(int(s) for s in meta.input_shape)
        value_range = (float(meta.value_range[0]), float(meta.value_range[1]))
        scope = redact_url(opts.teacher)
    else:
        shape = (opts.channels, opts.size, opts.size)
        scope = "local-preview"
    if opts.mechanism == "discrete-tldp":
        value_range = (0.0, 255.0)  # its domain is the integers 0..255 (see ByteUnitsTeacher)
    return _NoiseTarget(shape=shape, value_range=value_range, scope=scope)


def _write_preview(
    opts: NoiseOptions, out: Path, records: Any, derived: Any, mechanism: Any, to_unit: Any
) -> Path:
    """Write ``OUT/preview.png``: rows of clean records, their releases and augmented queries (the first few)."""
    from ..transfer.augment import QueryPlan

    n = len(records)
    k = min(opts.preview, n)
    aug_rows: list[torch.Tensor] = []
    kind = PLAN_KINDS[opts.augment]
    if kind == "sup" and n < 2:
        kind = "identity"
    plan = QueryPlan(kind=kind, n=n, num_queries=k if kind != "identity" else None, seed=opts.seed or 0, batch_size=max(k, 1))
    for _, d in plan.batches(derived, mechanism=mechanism):
        aug_rows.extend(list(d.values[: k - len(aug_rows)]))
        if len(aug_rows) >= k:
            break
    first = torch.arange(k)
    grid = preview_grid([
        [to_unit(r) for r in records.read(first.numpy())],
        [to_unit(r) for r in derived.rows(first).values],
        [to_unit(r) for r in aug_rows[:k]],
    ])
    preview_path = out / "preview.png"
    grid.save(preview_path)
    return preview_path


# --------------------------------------------------------------------------- budget


def ledger_summary(state_dir: Path | None, privacy_cap: float | None) -> dict[str, Any]:
    """The ledger's aggregate summary for ``ldpclient budget`` (creates nothing when there is no ledger)."""
    from ..privacy.ledger import Ledger
    from ..state import default_state_dir

    directory = Path(state_dir).expanduser() if state_dir is not None else default_state_dir()
    path = directory / "ledger.sqlite"
    if not path.exists():
        raise ValueError(f"no ledger at {str(path)!r} yet (nothing has been noised with this --state-dir)")
    if privacy_cap is not None and not (math.isfinite(privacy_cap) and privacy_cap > 0):
        raise ValueError(f"--privacy-cap must be a finite number > 0, got {privacy_cap}")
    with Ledger(path, cap_epsilon=privacy_cap) as ledger:
        summary = ledger.summary()
    return {"schema": 1, "command": "budget", "ok": True, **summary}
