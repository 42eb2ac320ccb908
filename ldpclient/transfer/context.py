"""What every stage of a knowledge transfer reads: :class:`RunContext`.

One context per call of :class:`~ldpclient.transfer.pipeline.KnowledgeTransfer`: the teacher and the client
that talks to it, the mechanism, the ledger, the resolved settings (:class:`~.resolve.Resolved`), the records
and the teacher's facts, the progress callback and the seconds per stage. Stages take it instead of a dozen
threaded parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Optional, Protocol

import numpy as np
import torch
from torch import nn

from ..io.records import RecordSource
from ..names import Mode
from ..privacy.base import Mechanism
from ..privacy.release import Derived, Release
from .resolve import Resolved, member_seeds
from .result_cache import ResultCache
from .settings import Given
from .student import Progress, predict_proba

if TYPE_CHECKING:
    from ..privacy.ledger import Ledger
    from ..teachers.base import Teacher, TeacherMetadata
    from .augment import QueryPlan

#: The modes' values (:class:`~ldpclient.names.Mode`), as messages list them.
MODES = tuple(m.value for m in Mode)


class StageRunner(Protocol):
    """Runs the stages whose work grows with the private records elsewhere (:mod:`ldpclient.cluster`)."""

    def release(
        self, mechanism: Mechanism, scope: str, records: RecordSource, on_block: Callable[[int], None]
    ) -> np.ndarray:
        """Noise and charge every record through the shared ledger under ``scope`` (``on_block(records done)`` per
        block); a bool ``(N,)`` array: True where a record was noised now, False where a stored release held."""
        ...

    def predict_proba(self, model: nn.Module, records: RecordSource) -> torch.Tensor:
        """``model``'s softmax (float32 ``(N, K)``) on every record, in order (:func:`~.student.predict_proba`)."""
        ...


class LabelClient(Protocol):
    """What sends the plan's batches to the teacher for a transfer: a
    :class:`~ldpclient.teachers.client.QueryClient` (journal, cost, retries), or anything that answers batches."""

    def label_batches(self, batches: Iterable[tuple[str, Derived]]) -> Iterator[tuple[str, torch.Tensor]]:
        """``(batch id, labels int64 (n,))`` for each ``(batch id, queries)``, in input order."""
        ...


def teacher_and_client(teacher: object, client: LabelClient | None) -> tuple[Teacher, LabelClient | None]:
    """``(teacher, client)`` from what was given: a teacher (an object with ``metadata()`` and ``classify()``,
    as :func:`~ldpclient.teachers.base.as_teacher` takes it), a QueryClient (its teacher is used), or a teacher
    and the QueryClient that talks to it; ValueError when a client talks to another teacher."""
    from ..teachers.base import as_teacher
    from ..teachers.client import QueryClient

    if isinstance(teacher, QueryClient):
        if client is not None and client is not teacher:
            raise ValueError("give the teacher or a QueryClient, not a QueryClient and another client")
        return teacher.teacher, teacher
    own = getattr(client, "teacher", None)  # a duck-typed client (label_batches only) cannot be checked
    if own is not None:
        if teacher is not own and teacher is not getattr(own, "wrapped", own):
            raise ValueError(
                "client= talks to another teacher than the one given; pass the QueryClient alone "
                "(KnowledgeTransfer(client, mechanism, ...))"
            )
    return as_teacher(teacher), client


def check_wiring(
    mode: Mode | str, mechanism: object, stages: StageRunner | None, release_generator: torch.Generator | None
) -> None:
    """ValueError (TypeError for a mechanism that is none) for a transfer's parts that do not go together."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not isinstance(mechanism, Mechanism):
        raise TypeError(f"mechanism must be an ldpclient.privacy Mechanism, got {type(mechanism).__name__}")
    if stages is not None and release_generator is not None:
        raise ValueError("stages= (a cluster) refuses a release generator: a shared noise seed would give "
                         "different images identical noise")


def checked_records(records: torch.Tensor | RecordSource, meta: TeacherMetadata) -> RecordSource:
    """``records`` as a RecordSource, checked against the teacher's input shape and not empty (ValueError)."""
    from ..io.records import as_record_source

    source = as_record_source(records)
    if tuple(source.record_shape) != tuple(meta.input_shape):
        raise ValueError(f"records have shape {tuple(source.record_shape)} per record but the teacher "
                         f"{meta.name!r} expects {tuple(meta.input_shape)}")
    if len(source) < 1:
        raise ValueError("no records to label")
    return source


@dataclass
class RunContext:
    """One run's inputs, settings and clock. ``records``: the private records (N of them, ``meta.input_shape``
    each); ``given``: the settings objects as given (they key a kept result); ``timings``: seconds per stage,
    summed over a stage's runs (one per student or query round)."""

    teacher: Teacher
    client: LabelClient | None
    mechanism: Mechanism
    settings: Resolved
    given: Given
    records: RecordSource
    meta: TeacherMetadata
    mode: Mode = Mode.LDPKIT
    seed: int = 0
    ledger: Ledger | None = None
    scope: Optional[str] = None
    release_generator: Optional[torch.Generator] = None
    progress: Optional[Progress] = None
    stages: Optional[StageRunner] = None
    result_cache: Optional[ResultCache] = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """The private records' count."""
        return len(self.records)

    @property
    def member_seeds(self) -> tuple[int, ...]:
        """The seed of each student's draws in this run (:func:`~.resolve.member_seeds`)."""
        return member_seeds(self.settings.students, self.given.training.student_seed, self.seed)


    def report(self, stage: str, done: int, total: int, **metrics: float) -> None:
        """Tell the progress callback (when there is one) that ``stage`` has done ``done`` of ``total``."""
        if self.progress is not None:
            self.progress(stage, done, total, metrics)

    def add_time(self, stage: str, seconds: float) -> None:
        """Add ``seconds`` to ``timings[stage]``: a stage that runs once per student or query round sums its runs."""
        self.timings[stage] = self.timings.get(stage, 0.0) + seconds

    def scope_name(self) -> str:
        """Who the releases are for: ``scope`` when given, else the teacher's identity (its journal scope)."""
        return self.scope or str(self.teacher.journal_scope)

    def release(self, records: torch.Tensor, *, public: bool, sources: list[bytes | str] | None = None) -> Release:
        """Noise ``records``: through the ledger when there is one (``sources``: their source ids, see
        :func:`~ldpclient.io.records.source_ids`); ``public`` blank inputs are neither charged nor stored."""
        g = self.release_generator
        if public:
            return self.settings.blank_mechanism.release(records, generator=g, public=True)
        if self.ledger is not None:
            return self.ledger.release(self.mechanism, records, scope=self.scope_name(), generator=g, sources=sources)
        return self.mechanism.release(records, generator=g)

    def label(self, batches: Iterable[tuple[str, Derived]]) -> Iterator[tuple[str, torch.Tensor]]:
        """The teacher's answers to ``batches``, through the client when there is one."""
        if self.client is not None:
            yield from self.client.label_batches(batches)
            return
        for bid, d in batches:
            yield bid, self.teacher.classify(d)

    def answers(
        self, plan: QueryPlan, batches: Iterable[tuple[str, Derived]]
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The teacher's answers to ``batches`` of ``plan``: ``(query ids in the plan, labels)`` per batch, checked
        (RuntimeError for an unknown batch or a wrong count)."""
        index = {plan.batch_id(b): b for b in range(plan.num_batches)}
        for bid, labels in self.label(batches):
            if bid not in index:
                raise RuntimeError(f"teacher client returned an unknown batch id {bid!r}")
            ids = plan.batch_ids(index[bid])
            labels = torch.as_tensor(labels).reshape(-1)
            if len(labels) != len(ids):
                raise RuntimeError(f"batch {bid}: {len(labels)} labels for {len(ids)} queries")
            yield ids, labels.numpy()

    def client_counts(self) -> tuple[int, int]:
        """Queries the client has sent and read back from its journal so far ((0, 0) without a client)."""
        stats = getattr(self.client, "stats", None)
        return (int(getattr(stats, "queries_sent", 0)), int(getattr(stats, "queries_from_journal", 0)))

    def predict_all(self, model: nn.Module) -> torch.Tensor:
        """The student's softmax on every clean private record: on the :class:`StageRunner` when there is one."""
        if self.stages is not None:
            return self.stages.predict_proba(model, self.records)
        return predict_proba(model, self.records, device=self.settings.device)


__all__ = [
    "MODES",
    "LabelClient",
    "RunContext",
    "StageRunner",
    "check_wiring",
    "checked_records",
    "teacher_and_client",
]
