"""Which request body a teacher takes (binary tensor extension or plain JSON), remembered per teacher.

The Open Inference Protocol's binary tensor extension makes bodies about 4x
smaller than JSON, but stock servers differ: Triton and the bundled mock teacher
accept it, MLServer's REST API does not (it answers 500). With ``wire="auto"``
an adapter tries binary first and, when that fails with an HTTP error or an
unparsable answer while the same request succeeds as JSON, switches to JSON. The
outcome is kept in ``wire.json`` in the state directory, keyed by the teacher's
address without credentials, so later runs do not probe again.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ..io.output import atomic_write_text
from .http import redact_url

WIRE_FORMATS = ("auto", "binary", "json")

log = logging.getLogger("ldpclient.teachers.wire")


class WireMemory:
    """``<directory>/wire.json``: ``{teacher address: "binary" | "json"}``.

    Reading a missing or unreadable file gives no memory (the adapter probes
    again); a failed write is logged and otherwise ignored, since the choice can
    always be made again at the cost of one probe.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory) / "wire.json"

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def get(self, url: str) -> str | None:
        """The remembered format of the teacher at ``url`` (``"binary"``/``"json"``), or None."""
        value = self._read().get(redact_url(url))
        return value if value in ("binary", "json") else None

    def set(self, url: str, wire: str) -> None:
        """Remember ``wire`` (``"binary"`` or ``"json"``) for the teacher at ``url``."""
        if wire not in ("binary", "json"):
            raise ValueError(f"wire must be 'binary' or 'json', got {wire!r}")
        data = self._read()
        data[redact_url(url)] = wire
        try:
            atomic_write_text(self.path, json.dumps(data, indent=1, sort_keys=True))
        except OSError as exc:
            log.warning("could not remember the wire format in %s: %s", self.path, exc)


__all__ = ["WIRE_FORMATS", "WireMemory"]
