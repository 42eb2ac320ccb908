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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported when label() runs, not when ldpclient is imported
    import torch

    from .io.records import RecordSource
    from .privacy.guarantee import Guarantee
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
    counts: dict[str, Any]
    cost: dict[str, Any]
    report: dict[str, Any]
    verdict: "Verdict"


def label(
    images: "str | os.PathLike[str] | torch.Tensor | RecordSource",
    teacher: "str | Teacher",
    *,
    token: str | None = None,
    output: "str | os.PathLike[str] | None" = None,
    progress: "ProgressCallback | None" = None,
    quiet: bool | None = None,
    **options: Any,
) -> LabelResult:
    """Label ``images`` with a student trained on ``teacher``'s answers to LDP releases of them.

    ``images``: a folder of image files (searched recursively, as the CLI does); or a float
    tensor ``(N, C, H, W)`` / a ``RecordSource`` with values in ``[0, 1]`` at the teacher's
    input shape. ``teacher``: an address (``http://host:port/v2/models/m``, ``oip+...``,
    ``torchserve+...``, ``hf://...``) or an opened :class:`~ldpclient.teachers.Teacher`.
    ``token``: bearer token (else ``$LDPCLIENT_TOKEN``). ``output``: a labels file to write
    (``.csv`` or ``.jsonl``, with the report beside it), or None for none.

    ``progress``: called as ``progress(stage, done, total)`` on every step of every stage (``stage`` as the
    command's bars name it: ``"loading"``, ``"noising"``, ``"querying"``, ``"training"``, ``"adapting"``,
    ``"labelling"``, and the baseline's; ``done`` and ``total`` in the stage's units, ``total`` None while unknown).
    ``quiet``: no progress bars (the callback is still called); by default the command's bars are shown on
    standard error when it is a terminal, and nothing otherwise.

    ``options``: any option of ``ldpclient label``, by its Python name, with the CLI's
    defaults: ``epsilon=100`` (``epsilon=0``: data-free, nothing private is sent), ``epsilon_unit="record"``,
    ``mechanism="laplace"``,
    ``privacy_cap=``, ``money_cap=``, ``price=``, ``queries=``, ``state_dir=``, ``baseline=``,
    ``state=`` (a ``postgresql://`` URL: ledger, journal and plan seeds shared by hosts) with ``ledger_key_file=``,
    ``cluster=`` (``"auto"`` or a Ray address: the release and the student's passes on Ray; needs ``state=``),
    ``public=`` (images you state are not private, sent as they are: a folder, or a tensor like ``images``),
    ``allow_weak_privacy=``, ``check=`` (hand labels of some of the images, to measure the labels' accuracy:
    a ``file,label`` CSV path, or a mapping name -> class name or index), ``seed=`` (tests only), ... (see
    :class:`ldpclient.run.options.LabelOptions`). An unknown name is a TypeError.

    Raises what the CLI reports in one line: ``ValueError`` (bad option, bad data),
    ``ldpclient.io.folders.DataError``, ``ldpclient.privacy.BudgetExceeded`` (privacy cap),
    ``ldpclient.teachers.CostCapReached`` (money cap), ``ldpclient.teachers.TeacherError``,
    ``ldpclient.state.StateLocked`` (another run holds the state directory).
    """
    import torch

    from .io.records import RecordSource, TensorRecords
    from .io.text import check_token
    from .run.label import LabelOptions, label_run
    from .run.ui import UI
    from .teachers.base import as_teacher

    known = {f.name for f in dataclasses.fields(LabelOptions)} - {"private_dir", "teacher", "output", "dry_run"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"label() got unknown option(s) {', '.join(unknown)} (options of ldpclient label: "
                        f"{', '.join(sorted(known))})")
    records: RecordSource | None = None
    if isinstance(images, (str, os.PathLike)):
        private_dir = Path(images)
    elif isinstance(images, torch.Tensor):
        records, private_dir = TensorRecords(images), Path("<tensor>")
    elif isinstance(images, RecordSource):
        records, private_dir = images, Path("<records>")
    else:
        raise TypeError(f"images must be a folder path, a tensor or a RecordSource, got {type(images).__name__}")
    public = options.pop("public", None)
    public_records: RecordSource | None = None
    if isinstance(public, (str, os.PathLike)):
        options["public"] = Path(public)
    elif isinstance(public, torch.Tensor):
        public_records = TensorRecords(public)
    elif isinstance(public, RecordSource):
        public_records = public
    elif public is not None:
        raise TypeError(f"public must be a folder path, a tensor or a RecordSource, got {type(public).__name__}")
    opened = None if isinstance(teacher, str) else as_teacher(teacher)
    address = teacher if isinstance(teacher, str) else str(opened.journal_scope)  # type: ignore[union-attr]
    for key in ("state_dir", "report", "class_names", "ledger_key_file"):
        if options.get(key) is not None:
            options[key] = Path(options[key])
    if isinstance(options.get("check"), (str, os.PathLike)):
        options["check"] = Path(options["check"])
    opts = LabelOptions(private_dir=private_dir, teacher=address, output=Path(output) if output else None, **options)
    bars = not quiet if quiet is not None else sys.stderr is not None and sys.stderr.isatty()
    ui = UI(quiet=not bars, on_progress=progress)
    try:
        run = label_run(opts, token=check_token(token if token is not None else os.environ.get("LDPCLIENT_TOKEN")),
                        ui=ui, teacher=opened, records=records, public=public_records)
    finally:
        ui.stop_progress()
    result = run.result
    assert result is not None and run.verdict is not None  # a dry run is the command line's (label --dry-run)
    n = len(run.paths)
    confidences = result.confidences if result.confidences is not None else torch.full((n,), float("nan"))
    return LabelResult(
        labels=result.labels,
        confidences=confidences.to(torch.float32),
        names=run.paths,
        guarantee=result.guarantee,
        counts=dict(run.report.get("counts", {})),
        cost=dict(run.report.get("cost", {})),
        report=run.report,
        verdict=run.verdict,
    )


__all__ = ["LabelResult", "label"]
