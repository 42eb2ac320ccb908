"""The examples of README.md and docs/: each fenced block, with the HTML comment above it that says how it runs."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The address the examples name: the mock teacher's, whatever port it got.
DOC_ADDRESS = "127.0.0.1:8080"
_FENCE = re.compile(r"(?:<!-- example: (?P<kind>[\w-]+)(?P<note>[^>]*)-->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)


@dataclass(frozen=True)
class Example:
    page: str
    line: int
    lang: str
    kind: str
    note: str
    body: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def examples(page: Path) -> list[Example]:
    """The fenced blocks of ``page``, in order."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(text):
        line = text.count("\n", 0, m.start("lang")) + 1
        out.append(Example(page.name, line, m.group("lang"), m.group("kind") or "", (m.group("note") or "").strip(),
                           m.group("body")))
    return out


def reports(cwd: Path) -> dict[Path, int]:
    """Every run report under ``cwd`` and its modification time (ns)."""
    return {path: path.stat().st_mtime_ns for path in cwd.rglob("*.report.json")}


def verdicts_written(cwd: Path, before: dict[Path, int]) -> list[tuple[str, str]]:
    """``(report file, verdict level)`` of every label run report under ``cwd`` written since ``before``
    (:func:`reports`)."""
    out = []
    for path, mtime in sorted(reports(cwd).items()):
        if before.get(path) != mtime:
            verdict = json.loads(path.read_text(encoding="utf-8")).get("verdict")
            if verdict is not None:
                out.append((path.name, verdict["level"]))
    return out
