"""What a label run writes: label files (CSV / JSONL, streamed row by row; cells safe for spreadsheets) and
its stage timings. The JSON writing, version stamp and preview grid every layer shares live in
:mod:`ldpclient.io.output`; label files are written atomically through it.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

from ..io.output import atomic_write_lines
from ..io.text import csv_cell, from_csv_cell, json_text

if TYPE_CHECKING:  # torch and Pillow are imported lazily: `ldpclient --help` should not wait for them
    import torch

LABEL_FORMATS = ("csv", "jsonl")
LABEL_COLUMNS = ("path", "label", "label_name", "confidence")
REPORT_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class LabelRow:
    """One labelled private record: its relative path, label index, name (or None), student confidence in [0, 1]."""

    path: str
    label: int
    label_name: str | None
    confidence: float

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "label": int(self.label),
            "label_name": self.label_name,
            "confidence": round(float(self.confidence), 6),
        }


def label_format_for(path: str | os.PathLike[str], explicit: str | None = None) -> str:
    """``"csv"`` or ``"jsonl"``: ``explicit`` when given, else from the extension (.jsonl/.ndjson/.json -> jsonl)."""
    if explicit is not None:
        fmt = explicit.lower()
        if fmt not in LABEL_FORMATS:
            raise ValueError(f"--format must be one of {', '.join(LABEL_FORMATS)}, got {explicit!r}")
        return fmt
    suffix = Path(path).suffix.lower()
    return "jsonl" if suffix in (".jsonl", ".ndjson", ".json") else "csv"


def label_rows(
    paths: Sequence[str],
    labels: "torch.Tensor | Sequence[int]",
    confidences: "torch.Tensor | Sequence[float]",
    class_names: Sequence[str] | None = None,
) -> list[LabelRow]:
    """Zip paths, label indices and confidences into rows (label names looked up when known)."""
    return list(iter_label_rows(paths, labels, confidences, class_names))


def iter_label_rows(
    paths: Sequence[str],
    labels: "torch.Tensor | Sequence[int]",
    confidences: "torch.Tensor | Sequence[float]",
    class_names: Sequence[str] | None = None,
) -> Iterator[LabelRow]:
    """:func:`label_rows` one row at a time (a million rows need not be held; lengths checked first)."""
    labs = labels.tolist() if hasattr(labels, "tolist") else list(labels)
    confs = confidences.tolist() if hasattr(confidences, "tolist") else list(confidences)
    if not len(paths) == len(labs) == len(confs):
        raise ValueError(f"got {len(paths)} paths, {len(labs)} labels and {len(confs)} confidences")
    for p, lab, conf in zip(paths, labs, confs, strict=True):
        lab = int(lab)
        name = class_names[lab] if class_names is not None and 0 <= lab < len(class_names) else None
        yield LabelRow(p, lab, name, float(conf))


def render_labels(rows: Iterable[LabelRow], fmt: str) -> str:
    """The text of a label file in ``fmt`` (``csv`` with a header row, or ``jsonl``)."""
    return "".join(_label_lines(rows, fmt))


def _label_lines(rows: Iterable[LabelRow], fmt: str) -> Iterator[str]:
    """The lines of a label file in ``fmt``, one at a time (each ends with a newline)."""
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(LABEL_COLUMNS)
        for r in rows:
            d = r.as_dict()
            name = "" if r.label_name is None else csv_cell(r.label_name)
            writer.writerow([csv_cell(r.path), d["label"], name, d["confidence"]])
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
        yield buf.getvalue()  # the header alone when there are no rows
        return
    if fmt == "jsonl":
        for r in rows:
            yield json_text(json.dumps(r.as_dict(), ensure_ascii=False)) + "\n"
        return
    raise ValueError(f"label format must be one of {', '.join(LABEL_FORMATS)}, got {fmt!r}")


def write_labels(path: str | os.PathLike[str], rows: Iterable[LabelRow], fmt: str | None = None) -> Path:
    """Write a label file atomically, streaming the rows; format from ``fmt`` or the extension. Returns the path."""
    out = Path(path)
    atomic_write_lines(out, _label_lines(rows, label_format_for(out, fmt)))
    return out


def read_labels(path: str | os.PathLike[str], fmt: str | None = None) -> list[LabelRow]:
    """Read back a label file written by :func:`write_labels`."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    rows = []
    if label_format_for(p, fmt) == "csv":
        for d in csv.DictReader(io.StringIO(text)):
            name = from_csv_cell(d["label_name"]) if d["label_name"] else None
            rows.append(LabelRow(from_csv_cell(d["path"]), int(d["label"]), name, float(d["confidence"])))
    else:
        for line in text.splitlines():
            if line.strip():
                d = json.loads(line)
                rows.append(LabelRow(d["path"], int(d["label"]), d["label_name"], float(d["confidence"])))
    return rows


@dataclass
class StageTimer:
    """Wall-clock seconds per named stage (accumulated when a stage runs more than once)."""

    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.seconds.items()}
