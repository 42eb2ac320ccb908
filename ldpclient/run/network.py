"""How a command reaches its teacher over the network: one option group for ``label`` and ``noise``.

``timeout``: seconds to wait for one response (the connect timeout is the smaller of 10 s and
this); ``max_retry_time``: seconds of retrying a failing request before giving up (0: no
retries); ``ca_bundle``: a CA file for TLS verification (verification is always on). They
become the :class:`~ldpclient.teachers.http.HttpTransport` options of a URL adapter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


@dataclass(frozen=True)
class NetworkOptions:
    """The CLI's network options (``--timeout``, ``--max-retry-time``, ``--ca-bundle``); see the module doc."""

    timeout: float = 60.0
    max_retry_time: float = 120.0
    ca_bundle: Optional[Path] = None

    def validate(self) -> None:
        """Raise ValueError naming the option for a value that cannot work."""
        if not (math.isfinite(self.timeout) and self.timeout > 0):
            raise ValueError(f"--timeout must be a number of seconds > 0, got {self.timeout}")
        if not (math.isfinite(self.max_retry_time) and self.max_retry_time >= 0):
            raise ValueError(f"--max-retry-time must be a number of seconds >= 0, got {self.max_retry_time}")
        if self.ca_bundle is not None and not Path(self.ca_bundle).is_file():
            raise ValueError(f"--ca-bundle {str(self.ca_bundle)!r} is not a file")

    def transport_options(self, address: str) -> dict[str, object]:
        """Transport keyword options for a URL adapter at ``address`` (none for ``local:`` and other non-URLs)."""
        if "://" not in address:
            return {}
        from ..teachers.http import RetryPolicy

        out: dict[str, object] = {
            "timeout": (min(10.0, self.timeout), self.timeout),
            "retry": RetryPolicy(max_total=self.max_retry_time, max_attempts=6 if self.max_retry_time > 0 else 1),
        }
        if self.ca_bundle is not None:
            out["verify"] = str(self.ca_bundle)
        return out


__all__ = ["NetworkOptions"]
