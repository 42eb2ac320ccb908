"""The typed run report of ``ldpclient label`` (``<output>.report.json``).

:class:`RunReport` is what ``_build_report`` produces and what the terminal summary
reads; :meth:`RunReport.to_dict` gives the JSON document exactly as written (same keys,
same order, same values), and :meth:`RunReport.from_dict` reads one back, refusing
another ``schema``. Free-form sections (the guarantee, the plan, the adaptation and
baseline summaries, ...) stay plain dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, TypeVar

SCHEMA = 1

_S = TypeVar("_S")


def _section_dict(obj: Any) -> dict[str, Any]:
    """A small section dataclass as a dict, in field order (not deep-copied)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _check_keys(d: Mapping[str, Any], names: list[str], where: str) -> None:
    """ValueError (one line, naming ``where``) on the first key of ``names`` missing from ``d`` or key of ``d`` not in them."""
    missing = [k for k in names if k not in d]
    if missing:
        raise ValueError(f"{where}: missing key {missing[0]!r}")
    unknown = [k for k in d if k not in names]
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}")


def _section(cls: type[_S], d: Any, name: str) -> _S:
    """Build a section dataclass from its dict; ValueError naming the section on a missing or unknown key."""
    if not isinstance(d, Mapping):
        raise ValueError(f"run report: section {name!r} is not an object")
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    _check_keys(d, names, f"run report: section {name!r}")
    return cls(**{k: d[k] for k in names})


@dataclass(frozen=True)
class TeacherSection:
    address: str
    model: str
    input_shape: list[int]
    datatype: str
    num_classes: int
    value_range: list[float]
    wire: str | None
    assumed: list[Any]


@dataclass(frozen=True)
class MechanismSection:
    name: str
    epsilon: float
    epsilon_unit: str
    delta: float | None
    reduce: int | None
    config: dict[str, Any]


@dataclass(frozen=True)
class CountsSection:
    files_found: int
    records: int
    labelled: int
    skipped: int
    releases_fresh: int
    releases_reused: int


@dataclass(frozen=True)
class QueriesSection:
    planned: int
    batches: int
    sent: int
    from_journal: int
    requests: int
    batch_size: int
    plan_seed_source: str


@dataclass(frozen=True)
class CostSection:
    price_per_query: float | None
    spent_run: float
    spent_total: float
    cap: float | None
    billing: Any


@dataclass(frozen=True)
class LedgerSection:
    path: str
    fresh: int
    reused: int
    spent_this_run_max_epsilon: float
    max_spent_epsilon: float
    cap_epsilon: float | None


@dataclass(frozen=True)
class StudentSection:
    model: str | None
    epochs: int
    val_accuracy: float | None
    train_accuracy: float | None
    loss: float | None
    note: str


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
    private_dir: str
    teacher: TeacherSection
    mechanism: MechanismSection
    guarantee: dict[str, Any]
    guarantee_note: str
    augment: str
    postprocess: str | None
    plan: dict[str, Any] | None
    counts: CountsSection
    queries: QueriesSection
    cost: CostSection
    ledger: LedgerSection
    student: StudentSection
    adaptation: dict[str, Any] | None
    baseline: dict[str, Any] | None
    label_histogram: list[int]
    timings: dict[str, float]
    skipped: list[dict[str, Any]]
    escaped_names: list[str]
    outputs: dict[str, str]
    versions: dict[str, str]
    schema: int = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        """The report as the JSON document ``label`` writes (``schema`` first, then the fields in order)."""
        out: dict[str, Any] = {"schema": self.schema}
        for f in fields(self):
            if f.name == "schema":
                continue
            value = getattr(self, f.name)
            out[f.name] = _section_dict(value) if f.name in _SECTIONS else value
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunReport:
        """Read a report back (e.g. a parsed ``.report.json``); ValueError on another schema or a missing key."""
        if not isinstance(d, Mapping):
            raise ValueError("run report: not a JSON object")
        if "schema" not in d:
            raise ValueError("run report: missing key 'schema'")
        if d["schema"] != SCHEMA:
            raise ValueError(f"run report: schema {d['schema']!r} is not supported (this ldpclient reads schema {SCHEMA})")
        names = [f.name for f in fields(cls)]
        _check_keys(d, names, "run report")
        if d["command"] != "label":
            raise ValueError(f"run report: command {d['command']!r} is not a label run")
        kwargs = {k: _section(_SECTIONS[k], d[k], k) if k in _SECTIONS else d[k] for k in names}
        return cls(**kwargs)
