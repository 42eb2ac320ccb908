"""The front door: label private images with a remote teacher in one call (``ldpclient.label``).

It is the same work as ``ldpclient label``: the same defaults, the same state directory
(ledger, journal, ``runs.json``), the same resume (a second call noises nothing again and
pays for nothing again), the same checks and errors. Only the way in and out differ:
images come as a folder path, a tensor or a :class:`~ldpclient.io.records.RecordSource`, and
the labels come back as tensors (files are written only when ``output=`` is given).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # torch is imported when label() runs, not when ldpclient is imported
    from typing import Unpack

    import torch

    from .io.records import RecordSource
    from .privacy.guarantee import Guarantee
    from .run.handoffs import LabelRun
    from .run.keywords import LabelKeywords
    from .run.options import LabelOptions
    from .run.ui import ProgressCallback
    from .run.verdict import Verdict
    from .teachers.base import Teacher


@dataclass(frozen=True)
class LabelResult:
    """What :func:`label` returns.

    ``labels``: int64 ``(N,)`` class indices, one per image in ``names`` order.
    ``confidences``: float32 ``(N,)`` in ``[0, 1]``, the local student's confidence
    (NaN where no student ran, e.g. ``augment="none"``). ``names``: the images'
    relative paths for a folder, ``"0"``..``"N-1"`` for a tensor. ``guarantee``: what
    each image's release costs (read ``guarantee.epsilon_record``: per whole image).
    ``counts``, ``cost``: the report's sections (images, fresh/reused releases;
    queries, money). ``report``: the whole run report (the dict ``ldpclient label``
    writes as JSON). ``verdict``: what the labels are worth (``verdict.level``: ``"usable"``,
    ``"doubtful"`` or ``"not worth having"``; ``verdict.reasons`` in words; with ``check=``, the
    accuracy on the hand-labelled images in ``verdict.check``): read it before using the labels.
    """

    labels: "torch.Tensor"
    confidences: "torch.Tensor"
    names: tuple[str, ...]
    guarantee: "Guarantee"
    counts: dict[str, object]
    cost: dict[str, object]
    report: dict[str, object]
    verdict: "Verdict"


def label(
    images: "str | os.PathLike[str] | torch.Tensor | RecordSource",
    teacher: "str | Teacher",
    *,
    token: str | None = None,
    output: "str | os.PathLike[str] | None" = None,
    progress: "ProgressCallback | None" = None,
    quiet: bool | None = None,
    **options: Unpack[LabelKeywords],
) -> LabelResult:
    """Label ``images`` with a student trained on ``teacher``'s answers to LDP releases of them.

    ``images``: a folder of image files (searched recursively, as the CLI does); or a float
    tensor ``(N, C, H, W)`` / a ``RecordSource`` with values in ``[0, 1]`` at the teacher's
    input shape. ``teacher``: an address (``http://host:port/v2/models/m``, ``oip+...``,
    ``torchserve+...``, ``hf://...``, ``openai+https://...``, ``vision+https://...``) or an opened
    :class:`~ldpclient.teachers.Teacher`. ``token``: bearer token (else ``$LDPCLIENT_TOKEN``). ``output``: a labels
    file to write (``.csv`` or ``.jsonl``, with the report beside it), or None for none.

    ``progress``: called as ``progress(stage, done, total)`` on every step of every stage (``stage`` as the
    command's bars name it: ``"loading"``, ``"noising"``, ``"querying"``, ``"training"``, ``"adapting"``,
    ``"labelling"``, and the baseline's; ``done`` and ``total`` in the stage's units, ``total`` None while unknown).
    ``quiet``: no progress bars (the callback is still called); by default the command's bars are shown on
    standard error when it is a terminal, and nothing otherwise.

    ``options``: the options of ``ldpclient label`` by their Python names, with the command's defaults: each
    with its type and meaning in :class:`ldpclient.run.keywords.LabelKeywords` (``epsilon=``, ``epsilon=0``:
    data-free; ``money_cap=``, ``public=``, ``check=``, ``state=``, the teacher's facts, ...). An unknown name is
    a TypeError.

    Raises what the CLI reports in one line: ``ValueError`` (bad option, bad data),
    ``ldpclient.io.folders.DataError``, ``ldpclient.privacy.BudgetExceeded`` (privacy cap),
    ``ldpclient.teachers.CostCapReached`` (money cap), ``ldpclient.teachers.TeacherError``,
    ``ldpclient.state.StateLocked`` (another run holds the state directory).
    """

    from .io.text import check_token
    from .run.compute import within_available_cores
    from .run.label import label_run
    from .run.ui import UI
    from .teachers.base import as_teacher

    private_dir, records = _images(images, "images")
    public_dir, public = _images(options.pop("public", None), "public")
    opened = None if isinstance(teacher, str) else as_teacher(teacher)
    address = teacher if isinstance(teacher, str) else str(opened.journal_scope)  # type: ignore[union-attr]
    opts = _label_options(private_dir, address, output, public_dir, dict(options))
    bars = not quiet if quiet is not None else sys.stderr is not None and sys.stderr.isatty()
    ui = UI(quiet=not bars, on_progress=progress)
    try:
        with within_available_cores():
            run = label_run(opts, token=check_token(token if token is not None else os.environ.get("LDPCLIENT_TOKEN")),
                            ui=ui, teacher=opened, records=records, public=public)
    finally:
        ui.stop_progress()
    return _result(run)


def _result(run: LabelRun) -> LabelResult:
    """The front door's view of a finished run."""
    import torch

    result = run.result
    assert result is not None and run.verdict is not None  # a dry run is the command line's (label --dry-run)
    confidences = result.confidences if result.confidences is not None else torch.full((len(run.paths),), float("nan"))
    return LabelResult(labels=result.labels, confidences=confidences.to(torch.float32), names=run.paths,
                       guarantee=result.guarantee, counts=_section(run.report, "counts"),
                       cost=_section(run.report, "cost"), report=run.report, verdict=run.verdict)


def _section(report: Mapping[str, object], key: str) -> dict[str, object]:
    """The run report's ``key`` section, as the front door hands it over (empty when the report has none)."""
    part = report.get(key)
    return dict(part) if isinstance(part, dict) else {}


def _images(given: object, name: str) -> "tuple[Path | None, RecordSource | None]":
    """``(folder, records)`` for images given as a folder path, a tensor or a RecordSource (``(None, None)`` for
    None); TypeError for anything else."""
    import torch

    from .io.records import RecordSource, TensorRecords

    if given is None:
        return None, None
    if isinstance(given, (str, os.PathLike)):
        return Path(given), None
    if isinstance(given, torch.Tensor):
        return None, TensorRecords(given)
    if isinstance(given, RecordSource):
        return None, given
    raise TypeError(f"{name} must be a folder path, a tensor or a RecordSource, got {type(given).__name__}")


#: Options given as paths, taken as str too.
_PATHS = ("state_dir", "report", "ledger_key_file", "check", "class_names", "label_map", "ca_bundle",
          "student_weights")


def _label_options(
    private_dir: Path | None, teacher: str, output: "str | os.PathLike[str] | None", public: Path | None,
    options: dict[str, Any],
) -> LabelOptions:
    """The :class:`~ldpclient.run.options.LabelOptions` of a call: ``options`` by name, the network's and the
    teacher facts' among them built into their objects; TypeError names an unknown option."""
    from .run.facts import FACT_OPTIONS, NETWORK_OPTIONS, teacher_options
    from .run.label import LabelOptions

    teacher_names = NETWORK_OPTIONS | FACT_OPTIONS
    own = {f.name for f in dataclasses.fields(LabelOptions)} - {"private_dir", "teacher", "output", "dry_run",
                                                                 "network", "facts", "public"}
    unknown = sorted(set(options) - own - teacher_names)
    if unknown:
        raise TypeError(f"label() got unknown option(s) {', '.join(unknown)} (options of ldpclient label: "
                        f"{', '.join(sorted(own | teacher_names | {'public'}))})")
    given: dict[str, Any] = {key: Path(value) if key in _PATHS and isinstance(value, (str, os.PathLike)) else value
             for key, value in options.items()}
    network, facts = teacher_options(given)
    return LabelOptions(
        private_dir=private_dir, teacher=teacher, output=Path(output) if output else None, public=public,
        network=network, facts=facts, **{key: value for key, value in given.items() if key not in teacher_names})


__all__ = ["LabelResult", "label"]
