"""The typed hand-offs between the stages of a label run (the label run makes them, ``run/label_report.py``
reads them): what the run resolved before touching data, what the transfer left, what was written."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..privacy.base import Mechanism
from ..report.label_files import StageTimer
from ..teachers.base import Teacher, TeacherMetadata
from ..teachers.client_stats import ClientStats
from ..transfer.result import TransferResult
from .check_file import CheckSet
from .options import LabelOptions
from .plan import RunPlan
from .verdict import Verdict

if TYPE_CHECKING:
    from ..io.folders import Skipped
    from .ui import UI


@dataclass(frozen=True)
class RunSetup:
    """One label run's plan (every setting, resolved once) and what it runs with: the opened teacher, the token,
    the UI, the timer and the state directory. ``opts``, ``meta``, ``shape``, ``mechanism``, ``identity`` and
    ``scope`` are the plan's."""

    plan: RunPlan
    token: str | None
    ui: UI
    timer: StageTimer
    state: Path
    teacher: Teacher
    #: the hand labels of ``--check`` (None: none), read and matched to the images before anything is noised
    check: CheckSet | None = None

    @property
    def opts(self) -> LabelOptions:
        return self.plan.opts

    @property
    def meta(self) -> TeacherMetadata:
        return self.plan.meta

    @property
    def shape(self) -> tuple[int, ...]:
        return self.plan.shape

    @property
    def mechanism(self) -> Mechanism:
        return self.plan.mechanism

    @property
    def identity(self) -> str:
        """The address as the user gave it, redacted: what messages and the report show."""
        return self.plan.identity

    @property
    def scope(self) -> str:
        """The teacher's one identity (its adapter's journal_scope): ledger, journal and money cap."""
        return self.plan.scope


@dataclass(frozen=True)
class Baseline:
    """The data-free baseline run: its report section, its labels and confidences, its unadapted labels."""

    section: dict[str, object]
    labels: torch.Tensor
    confidences: torch.Tensor
    unadapted: torch.Tensor | None


@dataclass(frozen=True)
class RunOutcome:
    """What the transfer step leaves: the private result, the records' total spend after it, the client's
    figures, the baseline. ``stats_private``: the client's counters right after the private run (a baseline sends
    its own after it) and ``spent_private`` the money spent by then; ``spent_run``, ``spent_total`` and ``billing``:
    the client's money at the end of the run, in this run and over the journal's life."""

    result: TransferResult
    spent_after: torch.Tensor
    stats_private: ClientStats
    spent_private: float
    spent_run: float
    spent_total: float
    billing: dict[str, object]
    ledger_cap: float | None
    ledger_path: str  # where the ledger is, as printed (a file's path, or a database URL without its password)
    query_batch_size: int
    baseline: Baseline | None
    #: files of the ``--public`` folder that were not used, with reasons (as the private folder's ``skipped``)
    public_skipped: tuple[Skipped, ...] = ()


@dataclass(frozen=True)
class WrittenOutputs:
    """How many label rows were written, and the report's ``outputs`` section."""

    labelled: int
    outputs: dict[str, str]


@dataclass(frozen=True)
class LabelRun:
    """A finished label run: its ``report`` (the dict written as JSON), the ``result`` of the pipeline
    (labels, confidences, guarantee, counts) and the record names in label order."""

    report: dict[str, object]
    result: TransferResult | None  # None for a dry run (``report`` is then ``{"dry_run": True, "plan": ...}``)
    paths: tuple[str, ...]
    #: what the labels are worth (None for a dry run); also the report's ``verdict`` section
    verdict: Verdict | None = None


__all__ = ["Baseline", "LabelRun", "RunOutcome", "RunSetup", "WrittenOutputs"]
