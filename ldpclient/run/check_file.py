"""The check set: a few private images the user labelled by hand (``--check LABELS.csv``), read on this device
only and used for nothing but the verdict's score. A file of CSV rows ``file,label``, where a label is a class name
the teacher publishes or a class index; :func:`check_indices` finds the check images among those labelled.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

#: Largest check file read (bytes): a check set is a few hundred hand-labelled images, not a data set.
MAX_CHECK_BYTES = 16 * 2**20


@dataclass(frozen=True)
class CheckSet:
    """Hand labels of some private images: ``labels[name]`` is the class index of the image named ``name`` (its
    path relative to the private folder, as the labels file writes it; ``"0"``.. for records handed over)."""

    labels: Mapping[str, int]
    source: str = "check set"

    def __len__(self) -> int:
        return len(self.labels)


#: A check file's header row: its first column, then its second's name for what the labels are (None: detected).
_CHECK_HEADERS = {"label": None, "class": "class", "class_name": "class", "index": "index", "class_index": "index"}


def read_check_file(path: str | Path, class_names: Sequence[str] | None, num_classes: int) -> CheckSet:
    """Read ``--check FILE``: CSV rows ``file,label``; a label is a class name the teacher publishes or a class
    index ``0..num_classes-1``. A header row may come first: ``file,class`` (every label a class name), ``file,index``
    (every label an index) or ``file,label`` (either, detected as :func:`parse_check_rows` does); ``path`` may stand
    for ``file``. ValueError, one line naming the file and row, for anything else (a duplicate file, an unknown
    class, a label that reads as two different classes, an empty file)."""
    p = Path(path)
    where = f"--check {str(p)!r}"
    try:
        if p.stat().st_size > MAX_CHECK_BYTES:
            raise ValueError(f"{where} is larger than {MAX_CHECK_BYTES // 2**20} MiB; a check set is a few hundred "
                             "hand-labelled images")
        text = p.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ValueError(f"{where} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where}: cannot read it: {' '.join(str(exc).split())}") from None
    rows = [r for r in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in r)]
    reading = None
    if rows and len(rows[0]) == 2:
        first, second = (c.strip().lower().replace(" ", "_") for c in rows[0])
        if first in ("file", "path") and second in _CHECK_HEADERS:
            reading, rows = _CHECK_HEADERS[second], rows[1:]
    return parse_check_rows(rows, class_names, num_classes, where, reading=reading)


def parse_check_rows(
    rows: Sequence[Sequence[object]], class_names: Sequence[str] | None, num_classes: int, where: str = "check set",
    *, reading: str | None = None,
) -> CheckSet:
    """A :class:`CheckSet` from ``(name, label)`` rows (see :func:`read_check_file`). ``reading``: ``"class"``
    (labels are class names), ``"index"`` (class indices; a Python int always is one) or None: a label that is
    one of the two is read as it; where class names are digits (``"1".."10"``), the labels are read as whichever
    of the two every one of them can be, and a file whose labels read as both, with different classes, is
    refused (its header row must say which)."""
    index = {str(name): k for k, name in enumerate(class_names or ())}
    parsed: list[tuple[int, str, object]] = []
    for line, row in enumerate(rows, 1):
        if len(row) != 2:
            raise ValueError(f"{where}: row {line} has {len(row)} fields; each row is 'file,label'")
        name = str(row[0]).strip()
        if not name:
            raise ValueError(f"{where}: row {line} names no file")
        parsed.append((line, name, row[1]))
    readings = {"class": [_by_name(raw, index) for _, _, raw in parsed],
                "index": [_by_index(raw, num_classes) for _, _, raw in parsed]}
    if reading is None:  # the one reading every label can be read in, where there is one
        whole = [r for r, found in readings.items() if found and all(k is not None for k in found)]
        reading = whole[0] if len(whole) == 1 else None
    labels: dict[str, int] = {}
    for k, (line, name, raw) in enumerate(parsed):
        if reading is not None:
            label = readings[reading][k]
        else:  # both readings, or a mixture: each label read as the one it can be; one it can be two ways is refused
            both = (readings["class"][k], readings["index"][k])
            if None not in both and both[0] != both[1]:
                raise ValueError(f"{where}: row {line}: label {str(raw)[:40]!r} is both the class named "
                                 f"{str(raw)[:40]!r} and another class's index; say which every label is with a "
                                 "header row 'file,class' (class names) or 'file,index' (class indices)")
            label = both[0] if both[0] is not None else both[1]
        if label is None:
            known = f"a class name ({', '.join(list(index)[:5])}{', ...' if len(index) > 5 else ''})"
            wanted = {"class": known, "index": f"a class index 0..{num_classes - 1}"}.get(
                reading or "", f"{known + ' or ' if index else ''}a class index 0..{num_classes - 1}")
            raise ValueError(f"{where}: row {line}: label {str(raw)[:40]!r} is not {wanted}")
        if name in labels:
            raise ValueError(f"{where}: row {line}: {name[:80]!r} is labelled twice")
        labels[name] = label
    if not labels:
        raise ValueError(f"{where} holds no labelled image")
    return CheckSet(labels, where)


def _by_name(raw: object, index: Mapping[str, int]) -> int | None:
    """The class a label names (None: not a class name; a Python int never is one)."""
    if isinstance(raw, (bool, int)):
        return None
    return index.get(str(raw).strip())


def _by_index(raw: object, num_classes: int) -> int | None:
    """The class a label is the index of (None: not an index ``0..num_classes-1``)."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if 0 <= raw < num_classes else None
    text = str(raw).strip()
    return int(text) if text.isdigit() and int(text) < num_classes else None


def check_indices(check: CheckSet, names: Sequence[str]) -> tuple[list[int], list[int], list[str]]:
    """Where the check set's images are among ``names`` (the images labelled): ``(indices, truths, missing)``,
    ``missing`` the check names that are not among them (skipped as undecodable, or not in the folder)."""
    where = {name: k for k, name in enumerate(names)}
    idx, truth, missing = [], [], []
    for name, label in check.labels.items():
        k = where.get(name)
        if k is None:
            missing.append(name)
        else:
            idx.append(k)
            truth.append(label)
    return idx, truth, missing


__all__ = ["MAX_CHECK_BYTES", "CheckSet", "check_indices", "parse_check_rows", "read_check_file"]
