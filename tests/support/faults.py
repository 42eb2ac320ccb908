"""Real storage faults for the tests: a small tmpfs, a read-only bind mount, an immutable file (``chattr +i``).

Each needs root (the tests run as root in CI); :class:`Mounts` skips the test with the reason elsewhere. Root
bypasses file modes, so a read-only state is made with a mount or ``chattr``, never ``chmod``. Everything mounted
or made immutable is undone when the test ends, whatever happened.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


class Mounts:
    """The faults one test made: :meth:`tmpfs`, :meth:`read_only`, :meth:`immutable`; :meth:`undo` at its end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._mounted: list[Path] = []
        self._immutable: list[Path] = []

    def _run(self, *argv: str) -> None:
        proc = subprocess.run(list(argv), capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot {' '.join(argv[:2])} here (needs root): {proc.stderr.strip()[:200]}")

    def tmpfs(self, size: str) -> Path:
        """A new tmpfs of ``size`` (``mount`` units: ``64k``, ``1m``); its mount point."""
        where = self.root / f"tmpfs{len(self._mounted)}"
        where.mkdir(parents=True)
        self._run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where))
        self._mounted.append(where)
        return where

    def resize(self, where: Path, size: str) -> None:
        """Grow (or shrink) the tmpfs at ``where`` to ``size``: the full disk's cause gone."""
        self._run("mount", "-o", f"remount,size={size}", str(where))

    def read_only(self, folder: Path) -> None:
        """Make ``folder`` read-only for everyone, root included (a read-only bind mount over itself)."""
        self._run("mount", "--bind", str(folder), str(folder))
        self._mounted.append(folder)
        self._run("mount", "-o", "remount,bind,ro", str(folder))

    def unmount(self, folder: Path) -> None:
        """Undo :meth:`read_only` (or a tmpfs: its files go with it)."""
        self._run("umount", str(folder))
        self._mounted.remove(folder)

    def immutable(self, path: Path) -> None:
        """``chattr +i path``: not written, renamed or removed, by root either."""
        self._run("chattr", "+i", str(path))
        self._immutable.append(path)

    def undo(self) -> None:
        for path in self._immutable:
            subprocess.run(["chattr", "-i", str(path)], capture_output=True)
        for where in reversed(self._mounted):
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.fixture
def mounts(tmp_path: Path):
    """A :class:`Mounts` for the test, undone after it."""
    made = Mounts(tmp_path / "faults")
    try:
        yield made
    finally:
        made.undo()
