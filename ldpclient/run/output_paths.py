"""Outputs never overwrite inputs or state: every path a command will write, checked before anything is noised, sent,
charged or paid.

A command names what it writes (the labels, their siblings, the report, the page) and what it reads (the check file,
the image folders) and where its state is (:class:`~ldpclient.state.locations.StateLocations`). An output is
refused, in one line naming both options, when it is the same file as another output or an input file, when it is
an existing directory, when it lies in an image folder (an image folder holds inputs only: a file written there
would be read as one by the next run), or when it lies in the state directory or is the ledger's key file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from ..state.locations import StateLocations


def _where(path: Path) -> Path:
    """``path`` made absolute with its links followed (the parts that exist), for comparing."""
    return Path(os.path.realpath(path.expanduser()))


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same path once links are followed, or one file by two names."""
    if _where(a) == _where(b):
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies somewhere below it."""
    here, there = _where(path), _where(folder)
    return here == there or there in here.parents


def check_output_paths(
    outputs: Mapping[str, Path],
    *,
    input_files: Mapping[str, Path] | None = None,
    input_folders: Mapping[str, Path] | None = None,
    state: StateLocations | None = None,
    output_folders: Mapping[str, Path] | None = None,
) -> None:
    """ValueError (one line, naming the options) when an output would overwrite something.

    ``outputs``: what the command writes, by the option that names it (``"--report"``, ``"--output"``, ...).
    ``input_files``: files it reads (``"--check"``); ``input_folders``: image folders it reads (``"PRIVATE_DIR"``,
    ``"--public"``); ``state``: where its state is; ``output_folders``: folders it writes files into (``noise
    --out``), refused in an image folder or the state like a file. Nothing is read or written but the paths'
    metadata."""
    seen: list[tuple[str, Path]] = []
    folders = output_folders or {}
    for name, path in [*outputs.items(), *folders.items()]:
        if name not in folders and path.is_dir():
            raise ValueError(f"{name} {str(path)!r} is a directory: name a file to write")
        for other, earlier in seen:
            if _same_file(path, earlier):
                raise ValueError(f"{name} {str(path)!r} is also where {other} writes: give each output its own file")
        for what, read in (input_files or {}).items():
            if _same_file(path, read):
                raise ValueError(f"{name} {str(path)!r} is the {what} file this run reads: writing it would "
                                 "overwrite it; name another file")
        for what, folder in (input_folders or {}).items():
            if _inside(path, folder):
                raise ValueError(f"{name} {str(path)!r} is in the {what} folder {str(folder)!r}, which holds the "
                                 "images this run reads: write outputs elsewhere")
        if state is not None:  # every file in the state directory; a key file named apart (else it is in there)
            if _inside(path, state.directory):
                _refuse_state(name, path, "the state directory", state.directory)
            if state.ledger_key is not None and _same_file(path, state.ledger_key):
                _refuse_state(name, path, "the ledger's key file", state.ledger_key)
        seen.append((name, path))


def _refuse_state(name: str, path: Path, what: str, kept: Path) -> None:
    raise ValueError(f"{name} {str(path)!r} would overwrite {what} ({str(kept)!r}): write outputs outside the state")


__all__ = ["check_output_paths"]
