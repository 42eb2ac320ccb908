"""The typed run report of ``ldpclient label`` (``<output>.report.json``).

:class:`RunReport` is what ``_build_report`` produces and what the terminal summary
reads; :meth:`RunReport.to_dict` gives the JSON document exactly as written (same keys,
same order, same values), and :meth:`RunReport.from_dict` reads one back, refusing
another ``schema``. :meth:`RunReport.read` is the one reader of a report file
(``ldpclient audit --run`` uses it). Free-form sections (the guarantee, the plan, the
adaptation and baseline summaries, ...) stay plain dicts.

A run stopped at the money or privacy cap writes a partial *stop report* (``"ok": false``,
with ``stopped``) instead; :meth:`RunReport.from_dict` refuses it, saying why the run stopped.
"""

from __future__ import annotations

import json
import os
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, TypeVar, Union

from ..io.document import Document, JSONDict, typed_fields

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

SCHEMA = 1

_S = TypeVar("_S")


def _section_dict(obj: DataclassInstance | type[DataclassInstance]) -> JSONDict:
    """A small section dataclass as a dict, in field order (not deep-copied)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _document(report: Report) -> JSONDict:
    """A report dataclass as its JSON document: ``schema`` first, then the fields in order, section
    dataclasses as dicts."""
    out: JSONDict = {"schema": report.schema}
    for f in fields(report):
        if f.name != "schema":
            value = getattr(report, f.name)
            out[f.name] = _section_dict(value) if is_dataclass(value) else value
    return out


def _check_keys(d: Document, names: list[str], where: str, optional: frozenset[str] = frozenset()) -> None:
    """ValueError (one line, naming ``where``) on the first key of ``names`` missing from ``d`` (``optional`` ones
    may be: a report may lack them) or key of ``d`` not in them."""
    missing = [k for k in names if k not in d and k not in optional]
    if missing:
        raise ValueError(f"{where}: missing key {missing[0]!r}")
    unknown = [k for k in d if k not in names]
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}")


def _section(cls: type[_S], d: object, name: str, where: str = "run report") -> _S:
    """Build a section dataclass from its dict; ValueError naming the section on a missing or unknown key, or a
    value of another type than its field's."""
    if not isinstance(d, Mapping):
        raise ValueError(f"{where}: section {name!r} is not an object")
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    optional = frozenset(f.name for f in fields(cls) if f.default is not MISSING)  # type: ignore[arg-type]
    _check_keys(d, names, f"{where}: section {name!r}", optional)
    return cls(**typed_fields(cls, d, f"{where}: section {name!r}"))


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _stopped_why(d: Document) -> str:
    """``"<reason>: <message>"`` of a stop report's ``stopped`` section, as far as it says."""
    stopped = d.get("stopped")
    if not isinstance(stopped, Mapping):
        return "no reason recorded"
    reason, message = _one_line(stopped.get("reason") or ""), _one_line(stopped.get("message") or "")
    return ": ".join(p for p in (reason, message) if p) or "no reason recorded"


@dataclass(frozen=True)
class TeacherSection:
    address: str
    model: str
    input_shape: list[int]
    datatype: str
    num_classes: int
    value_range: list[float]
    wire: str | None
    assumed: list[str]


@dataclass(frozen=True)
class MechanismSection:
    name: str
    epsilon: float
    epsilon_unit: str
    delta: float | None
    reduce: int | None
    config: JSONDict


@dataclass(frozen=True)
class CountsSection:
    files_found: int
    records: int
    labelled: int
    skipped: int
    releases_fresh: int
    releases_reused: int
    #: images declared public (``--public``), sent as they are; a report may lack it (0 then)
    public_images: int = 0
    #: mirrored and shifted copies of public images sent to decide ``flip`` (the mirror check); a report may
    #: lack it (0 then)
    mirror_check_queries: int = 0
    #: public images and private releases sent raw and decoded to decide whether to decode (``--decode auto``);
    #: a report may lack it (0 then)
    decode_check_queries: int = 0
    #: files of the ``--public`` folder that were not used (reasons in the report's ``public_skipped``)
    public_skipped: int = 0
    #: private images no query is made from, so neither released nor charged (labelled by the student all the
    #: same); a report may lack it (0 then)
    not_released: int = 0


@dataclass(frozen=True)
class QueriesSection:
    #: the queries the run's plan holds (the public images' included), whether sent, read back or declined
    planned: int
    batches: int
    sent: int
    from_journal: int
    requests: int
    batch_size: int
    plan_seed_source: str
    #: how often the teacher answered each class over this run's queries; a report may lack it (0 then)
    answers_histogram: list[int] | None = None
    #: of ``sent`` and ``from_journal``, the public images' queries (each image once, as it is, and the mirror
    #: check's copies of some of them)
    public_sent: int = 0
    public_from_journal: int = 0
    #: the query rounds as they went (``--query-rounds``: :meth:`ldpclient.transfer.rounds.QueryRound.as_dict`
    #: each: queries sent by its end, held-out queries, agreement, the previous round's student's, gain); None when
    #: every query went at once; a report may lack it (0 then)
    rounds: list[dict[str, float | int | None]] | None = None
    #: of ``sent`` and ``from_journal``, the queries the teacher declined to label ("cannot tell", a refusal, a
    #: content-policy error, an answer outside the class list): never trained on
    abstained: int = 0
    #: of ``abstained``, the queries sent this run by why they were declined (keys of
    #: :data:`ldpclient.names.DECLINE_KINDS`; answers read back from the journal keep no reason); None: none
    declined: dict[str, int] | None = None
    #: of ``sent``, the answers collected from Batch API jobs an earlier run sent (a run killed after sending them)
    collected_earlier: int = 0
    #: answers of a busy teacher (429 rate limits, 503 overloads) waited out as it asked, the seconds waited for
    #: them, and the seconds requests were held back because its headers said its limit was used up
    busy: int = 0
    busy_wait_s: float = 0.0
    paced_s: float = 0.0


@dataclass(frozen=True)
class CostSection:
    price_per_query: float | None
    spent_run: float
    spent_total: float
    cap: float | None
    billing: JSONDict
    #: of ``spent_run``, what the public images' queries cost (their count times the price per query)
    spent_public_run: float = 0.0
    #: a teacher billed in tokens: money per million input and output tokens, and the tokens this run's answers
    #: reported (``price_per_query`` is then the most one query can cost, which each is booked at)
    price_input_tokens: float | None = None
    price_output_tokens: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    #: the share of the token prices a batch API billed, where the run asked through one (``--batch``), else None
    batch_price_factor: float | None = None
    #: answers billed in tokens whose ``usage`` was missing or not believable (zero, negative, absurd): charged at
    #: their booking, the most they could cost
    usage_not_reported: int = 0


@dataclass(frozen=True)
class LedgerSection:
    path: str
    fresh: int
    reused: int
    spent_this_run_max_epsilon: float
    max_spent_epsilon: float
    cap_epsilon: float | None
    #: images no query is made from: neither released nor charged (a report may lack it: 0 then)
    not_released: int = 0


@dataclass(frozen=True)
class StudentSection:
    model: str | None
    epochs: int
    val_accuracy: float | None
    train_accuracy: float | None
    loss: float | None
    note: str
    #: how the prediction passes ran (e.g. "channels_last, 2 threads"); a report may lack it (0 then)
    inference: str | None = None
    #: times per epoch the student trained on each public image (``--public``); 0 without them
    public_repeats: int = 0
    #: most pixels a training row was shifted by, and whether rows were mirrored (``--flip``); a report may lack
    #: them (no shift, no mirror then)
    crop_pixels: int = 0
    flip: bool = False
    #: epochs of the rotation warm-up on the clean private images before training (``--warmup``); 0: none
    warmup_epochs: int = 0
    #: students trained on the same answers, the labels from their mean output (``--students``); a report may
    #: lack it (one then)
    students: int = 1
    #: what decided ``flip`` when ``--flip``/``--no-flip`` was not given: the shares of the checked public images
    #: whose label the teacher kept under a mirror and under a shift, and how many were checked (None: no check)
    mirror_check: JSONDict | None = None
    #: the student and its labels are those a run before trained on the same records, releases, answers and settings
    #: (kept in the run state): nothing was trained, adapted or predicted again
    reused: bool = False
    #: the file the student started from (name, SHA-256, architecture, input size, features); None: random weights
    weights: JSONDict | None = None


_SECTIONS: dict[str, type] = {
    "teacher": TeacherSection,
    "mechanism": MechanismSection,
    "counts": CountsSection,
    "queries": QueriesSection,
    "cost": CostSection,
    "ledger": LedgerSection,
    "student": StudentSection,
}


@dataclass(frozen=True)
class RunReport:
    """The report of one finished ``ldpclient label`` run; fields in the JSON document's key order."""

    command: str
    ok: bool
    private_dir: str | None  # None: records handed over in memory
    teacher: TeacherSection
    mechanism: MechanismSection
    guarantee: JSONDict
    guarantee_note: str
    augment: str
    postprocess: str | None
    plan: JSONDict | None
    counts: CountsSection
    queries: QueriesSection
    cost: CostSection
    ledger: LedgerSection
    student: StudentSection
    adaptation: JSONDict | None
    baseline: JSONDict | None
    label_histogram: list[int]
    timings: dict[str, float]
    skipped: list[dict[str, str]]
    escaped_names: list[str]
    outputs: dict[str, str]
    versions: dict[str, str]
    #: Every setting of the run as resolved before it touched data (``RunPlan.describe``: what ``label
    #: --dry-run`` prints); None where a report lacks it.
    run_plan: JSONDict | None = None
    #: What the labels are worth (``ldpclient.run.verdict.Verdict.as_dict``: level, headline, reasons, evidence);
    #: None where a report lacks it.
    verdict: JSONDict | None = None
    #: Files of the ``--public`` folder that were not used, ``{"path", "reason"}`` as ``skipped``.
    public_skipped: list[dict[str, str]] = field(default_factory=list)
    #: Whether the releases were sent decoded and why (``--decode``; the result's ``decoding``); None when not
    #: asked, or where a report lacks it.
    decoding: JSONDict | None = None
    #: How far the private releases sit from releases of the public images (the result's ``release_shift``); None
    #: without public images, for releases of pixels, or where a report lacks it.
    release_shift: JSONDict | None = None
    schema: int = SCHEMA

    def to_dict(self) -> JSONDict:
        """The report as the JSON document ``label`` writes (``schema`` first, then the fields in order)."""
        return _document(self)

    @classmethod
    def from_dict(cls, d: Document, *, where: str = "run report") -> RunReport:
        """Read a report back (e.g. a parsed ``.report.json``).

        ValueError (one line, starting with ``where``) on another schema, another command's report, the stop
        report of a run stopped at a cap, or a missing or unknown key.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"{where}: not a JSON object")
        if "schema" not in d:
            raise ValueError(f"{where}: missing key 'schema'")
        if d["schema"] != SCHEMA:
            raise ValueError(f"{where}: schema {d['schema']!r} is not supported (this ldpclient reads schema {SCHEMA})")
        if "command" in d and d["command"] != "label":
            raise ValueError(f"{where}: command {d['command']!r} is not a label run")
        if d.get("ok") is False:
            raise ValueError(
                f"{where}: the run stopped early ({_stopped_why(d)}) and left only a partial report, without its "
                "settings and query plan; finish the run (run the same 'ldpclient label' again) and use its report"
            )
        names = [f.name for f in fields(cls)]
        _check_keys(d, names, where, optional=frozenset({"run_plan", "verdict", "decoding", "release_shift"}))
        builders = {key: partial(_section, section) for key, section in _SECTIONS.items()}
        return cls(**typed_fields(cls, d, where, builders))  # type: ignore[arg-type]  # each value checked

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> RunReport:
        """Read the report file of a finished ``ldpclient label`` run (``<output>.report.json``).

        ValueError, one line naming the file, on a missing or unreadable file, a file that is not JSON, and
        everything :meth:`from_dict` refuses (another schema or command, a stopped run, a missing or unknown key).
        """
        p = Path(path)
        where = f"run report {str(p)!r}"
        if not p.exists():
            raise ValueError(f"{where} does not exist")
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{where}: cannot read it: {_one_line(exc)}") from None
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{where} is not JSON: {_one_line(exc)}") from None
        return cls.from_dict(doc, where=where)


@dataclass(frozen=True)
class StoppedSection:
    reason: str  # "money cap" or "privacy cap"
    message: str


@dataclass(frozen=True)
class StopQueriesSection:
    sent: int
    from_journal: int
    requests: int


@dataclass(frozen=True)
class StopLedgerSection:
    path: str
    max_spent_epsilon: float
    cap_epsilon: float | None


@dataclass(frozen=True)
class StopReport:
    """The partial report of a ``label`` run stopped at the money or privacy cap: what was spent and answered
    (no settings, no plan: :meth:`RunReport.from_dict` refuses it, saying why the run stopped)."""

    command: str
    ok: bool
    stopped: StoppedSection
    private_dir: str | None  # None: records handed over in memory
    teacher: JSONDict
    queries: StopQueriesSection
    cost: JSONDict
    ledger: StopLedgerSection
    outputs: dict[str, str]
    versions: dict[str, str]
    schema: int = SCHEMA

    def to_dict(self) -> JSONDict:
        return _document(self)


@dataclass(frozen=True)
class NoiseCountsSection:
    noised: int
    fresh: int
    reused: int
    skipped: int


@dataclass(frozen=True)
class NoiseLedgerSection:
    fresh: int
    reused: int
    max_spent_epsilon: float
    cap_epsilon: float | None


@dataclass(frozen=True)
class NoiseReport:
    """The report of ``ldpclient noise`` (returned, printed with ``--json``): what was released for whom."""

    command: str
    ok: bool
    private_dir: str
    scope: str
    guarantee: JSONDict
    counts: NoiseCountsSection
    ledger: NoiseLedgerSection
    skipped: list[dict[str, str]]
    outputs: JSONDict
    versions: dict[str, str]
    schema: int = SCHEMA
    #: Whether the releases were written decoded and why (``--decode``); None when not asked
    decoding: JSONDict | None = None
    #: ``--public`` images left out as near copies of private images (``--public-skip-copies``), with the reason
    public_skipped: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> JSONDict:
        return _document(self)


#: Each report of a command.
Report = Union[RunReport, StopReport, NoiseReport]
