"""A run's trained student and labels, kept in the run state: a re-run that sends nothing also trains nothing.

A label run that resumes finds its releases in the ledger and its answers in the journal; without this, it would
still train, adapt and predict again, minutes of work it has done. After a run has labelled every query, its
:class:`ResultCache` key is a digest of everything the training, adaptation and labelling depend on: the records
labelled (the folder's files by their bytes, or the records' values: ``data_key``), the releases the queries were
made from, every answer, the public images, the settings (their full ``repr``: a setting whose repr does not show
its state changes the key every run, so it never finds a stale result), the seeds, the teacher's metadata and the
versions of ldpclient and torch. A run whose key is stored takes the stored result; any change trains anew.

What is kept, per data set and mode (the private run, the data-free baseline), in ``<state dir>/students`` (this
device only, like the ledger): the student(s) (:func:`~.student.save_checkpoint`, adapted on the clean private
images: not covered by the LDP guarantee, never sent) and the labels, confidences and training summaries as
tensors and plain values, both read with ``torch.load(weights_only=True)``. Runs in rounds, runs that save a
checkpoint of their own and SIDP (no student) are not kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional

import numpy as np
import torch
from torch import nn

from ..io.document import typed_fields
from ..io.output import atomic_torch_save
from ..names import Mode
from .adapt import AdaptHistory
from .image_changes import KeptChanges
from .result import TrainingSummary
from .student import TrainHistory, load_checkpoint, save_checkpoint

if TYPE_CHECKING:
    from .result import Outcome, TransferResult

#: The layout of a kept result (:meth:`ResultCache.save`); another one is not read (the run trains anew).
CACHE_SCHEMA = 3


@dataclass(frozen=True)
class _KeptValues:
    """The values of a :class:`~.result.TransferResult` a kept result holds as they are (tensors, numbers)."""

    labels: torch.Tensor
    confidences: Optional[torch.Tensor]
    unadapted_labels: Optional[torch.Tensor]
    public_held_out: Optional[dict[str, int]]


#: The fields of a :class:`~.result.TransferResult` kept as they are (the others are rebuilt, or the run's own).
_KEPT = tuple(f.name for f in dataclasses.fields(_KeptValues))


@dataclass(frozen=True)
class KeptResult:
    """A result a run before trained: its values, its student (adapted), the histories and its training summary."""

    values: _KeptValues
    student: nn.Module
    history: Optional[TrainHistory]
    adaptation: Optional[AdaptHistory]
    training: TrainingSummary

    def restore(self, outcome: Outcome, answers_apart: Optional[dict[str, list[int]]]) -> TransferResult:
        """The :class:`~.result.TransferResult` of this run: the kept result beside the run's own ``outcome``."""
        from .result import TransferResult

        v = self.values
        return TransferResult(labels=v.labels, confidences=v.confidences, unadapted_labels=v.unadapted_labels,
                              public_held_out=v.public_held_out, student=self.student,
                              history=self.history, adaptation=self.adaptation, training=self.training,
                              answers_apart=answers_apart, **outcome)


#: The folder of a state directory that holds its kept results (and release decoders: :mod:`.decoder_store`).
STUDENTS_FOLDER = "students"


@dataclass(frozen=True)
class ResultCache:
    """Where a label run keeps its trained result (``directory``) and what it labels (``data_key``: a digest of
    the records, the same for every run on the same images)."""

    directory: Path
    data_key: str

    @staticmethod
    def key(parts: Iterable[str | np.ndarray]) -> str:
        """The digest of ``parts`` (in order; each delimited, so no two lists of parts give one digest): texts, and
        arrays by their bytes, read where they lie (no copy of a run's releases is made for it)."""
        digest = hashlib.sha256(f"ldpclient-result-v{CACHE_SCHEMA}\x00".encode())
        for part in parts:
            if isinstance(part, str):
                raw = memoryview(part.encode("utf-8", "surrogateescape"))
            else:
                raw = np.ascontiguousarray(part).data.cast("B")
            digest.update(raw.nbytes.to_bytes(8, "little"))
            digest.update(raw)
        return digest.hexdigest()

    def _paths(self, mode: Mode) -> tuple[Path, Path]:
        """The result's file and its student's: one slot per data set and mode (a new key replaces the old)."""
        slot = hashlib.sha256(f"{self.data_key}\x00{mode}".encode()).hexdigest()[:32]
        return self.directory / f"{slot}.result.pt", self.directory / f"{slot}.student.pt"

    def load(self, mode: Mode, key: str) -> KeptResult | None:
        """The result kept under ``key`` (the training marked ``reused``), or None when none is kept, another key
        is, or the files cannot be read or do not hold what was kept (the run then trains anew)."""
        result, student = self._paths(mode)
        try:
            blob = torch.load(result, map_location="cpu", weights_only=True)
            if not isinstance(blob, dict) or blob.get("schema") != CACHE_SCHEMA or blob.get("key") != key:
                return None
            model, info = load_checkpoint(student)
        except Exception:  # noqa: BLE001 - missing, damaged or unsafe: whatever it is, the run trains anew
            return None
        extra = info.get("extra")
        if not isinstance(extra, dict) or extra.get("result_key") != key:  # a student written for another result
            return None
        history, adaptation, training = blob.get("history"), blob.get("adaptation"), blob.get("training")
        try:
            values = _KeptValues(**typed_fields(_KeptValues, blob, "kept result"))  # type: ignore[arg-type]
            return KeptResult(
                values, model,
                history=TrainHistory(**history) if isinstance(history, dict) else None,
                adaptation=_adaptation(adaptation) if isinstance(adaptation, dict) else None,
                training=TrainingSummary.from_dict({**(training if isinstance(training, dict) else {}),
                                                    "reused": True}))
        except (TypeError, ValueError):  # not what this ldpclient kept
            return None

    def save(self, mode: Mode, key: str, result: "TransferResult", student_name: str,
             student_kwargs: dict[str, object]) -> None:
        """Keep ``result`` (its student built as ``student_name`` with ``student_kwargs``) under ``key``; files
        readable by this user only. A failure to write is not the run's: it is skipped."""
        if result.student is None:
            return
        path, student = self._paths(mode)
        blob: dict[str, object] = {"schema": CACHE_SCHEMA, "key": key}
        blob.update({name: getattr(result, name) for name in _KEPT})
        blob["training"] = result.training.as_dict()
        blob["history"] = dataclasses.asdict(result.history) if result.history is not None else None
        blob["adaptation"] = ({**dataclasses.asdict(result.adaptation), "probs": None}
                              if result.adaptation is not None else None)
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            save_checkpoint(student, result.student, student_name, student_kwargs,
                            extra={"adapted_on_clean_private_records": True, "result_key": key})
            os.chmod(student, 0o600)
            atomic_torch_save(path, blob)
        except OSError:
            return



def _adaptation(kept: dict) -> AdaptHistory:
    """The adaptation's history as kept (its image changes a plain dict there)."""
    changes = kept.get("changes")
    return AdaptHistory(**{**kept, "changes": KeptChanges(**changes) if isinstance(changes, dict) else None})

__all__ = ["CACHE_SCHEMA", "ResultCache", "STUDENTS_FOLDER"]
