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


def _state_files(state: StateLocations) -> dict[str, Path]:
    """The state's paths on this host: its directory (every file in it is state) and the ledger's key file."""
    files = {"the state directory": state.directory}
    if state.ledger_key is not None:  # a key file named apart (else the ledger's, in the directory)
        files["the ledger's key file"] = state.ledger_key
    return files


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
    for name, path in [*outputs.items(), *(output_folders or {}).items()]:
        if path.is_dir() and name not in (output_folders or {}):
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
        for what, kept in (_state_files(state) if state is not None else {}).items():
            if _same_file(path, kept) or (what == "the state directory" and _inside(path, kept)):
                raise ValueError(f"{name} {str(path)!r} would overwrite {what} ({str(kept)!r}): write outputs "
                                 "outside the state")
        seen.append((name, path))


__all__ = ["check_output_paths"]
