"""Run outputs: label files (CSV / JSONL), the JSON run report, stage timings, preview grids.

Nothing written here contains pixels of private records (the preview grid of
``ldpclient noise`` is the one deliberate exception, a local file the data owner
asks for). Secrets passed to :func:`write_json` are scrubbed from the text before
it reaches the disk, as a last line of defence: reports are built without them in
the first place. Files are written atomically (temporary file + rename), so an
interrupted run never leaves a half-written output behind.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import platform
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

from .. import __version__
from ..text import csv_cell, from_csv_cell, json_text, redact

if TYPE_CHECKING:  # torch and Pillow are imported lazily: `ldpclient --help` should not wait for them
    import torch
    from PIL import Image

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

    def as_dict(self) -> dict[str, Any]:
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
            name = "" if d["label_name"] is None else csv_cell(d["label_name"])
            writer.writerow([csv_cell(d["path"]), d["label"], name, d["confidence"]])
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


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and a rename."""
    atomic_write_lines(path, (text,))


def atomic_write_lines(path: Path, pieces: Iterable[str]) -> None:
    """Write ``pieces`` in order to ``path`` via a temporary file in the same directory, fsync and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.writelines(pieces)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """Replace every form of each secret in ``text`` with ``***`` (:func:`ldpclient.text.redact`)."""
    return redact(text, secrets)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, Path):
        return str(obj)
    torch_mod = sys.modules.get("torch")  # no tensor can exist unless torch was imported
    if torch_mod is not None and isinstance(obj, torch_mod.Tensor):
        if obj.numel() != 1:
            raise TypeError("refusing to put a multi-element tensor into a report (reports hold no pixels)")
        return obj.item()
    if hasattr(obj, "as_dict"):
        return _jsonable(obj.as_dict())
    raise TypeError(f"cannot put {type(obj).__name__} into a JSON report")


def to_json(obj: Any, *, secrets: Iterable[str | None] = (), indent: int | None = 2) -> str:
    """Serialise a report to JSON text (tensors of one element become numbers; others are refused), secrets scrubbed."""
    return json_text(scrub(json.dumps(_jsonable(obj), indent=indent, ensure_ascii=False, allow_nan=False), list(secrets)))


def write_json(path: str | os.PathLike[str], obj: Any, *, secrets: Iterable[str | None] = ()) -> Path:
    """Write a JSON report atomically (see :func:`to_json`)."""
    out = Path(path)
    atomic_write_text(out, to_json(obj, secrets=secrets) + "\n")
    return out


def versions() -> dict[str, str]:
    """Versions of ldpclient, Python, torch and the libraries that shape results."""
    import numpy
    import PIL
    import torch

    return {
        "ldpclient": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "pillow": PIL.__version__,
        "platform": f"{sys.platform}-{platform.machine()}",
    }


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


def preview_grid(rows: "Sequence[Sequence[torch.Tensor]]", *, scale: int = 4, pad: int = 2) -> "Image.Image":
    """A PNG-ready grid: one row per list (e.g. clean / noised / augmented), one cell per ``(C, H, W)`` tensor.

    Values are in ``[0, 1]`` units and clipped; cells are upscaled ``scale`` times with
    nearest neighbour so small images stay visible. Grey cells are shown as grey in an
    RGB grid. For the data owner's own eyes: ``ldpclient noise``'s preview and the audit's figure.
    """
    import torch
    from PIL import Image

    if not rows or not any(len(r) for r in rows):
        raise ValueError("preview grid needs at least one image")
    if scale < 1 or pad < 0:
        raise ValueError("scale must be >= 1 and pad >= 0")
    cells = [[c.detach().float() for c in row] for row in rows]
    h = max(c.shape[-2] for row in cells for c in row) * scale
    w = max(c.shape[-1] for row in cells for c in row) * scale
    ncols = max(len(row) for row in cells)
    grid = Image.new("RGB", (ncols * (w + pad) + pad, len(cells) * (h + pad) + pad), (255, 255, 255))
    for r, row in enumerate(cells):
        for k, cell in enumerate(row):
            if cell.dim() != 3 or cell.shape[0] not in (1, 3):
                raise ValueError(f"preview cells must be (C, H, W) with C in {{1, 3}}, got {tuple(cell.shape)}")
            rgb = cell.expand(3, -1, -1) if cell.shape[0] == 1 else cell
            arr = (rgb.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).contiguous().numpy()
            img = Image.fromarray(arr).resize((w, h), Image.Resampling.NEAREST)
            grid.paste(img, (pad + k * (w + pad), pad + r * (h + pad)))
    return grid
