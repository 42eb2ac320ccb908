"""The flow behind ``ldpclient budget``: the privacy ledger's aggregate summary."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def ledger_summary(state_dir: Path | None, privacy_cap: float | None) -> dict[str, Any]:
    """The ledger's aggregate summary for ``ldpclient budget`` (creates nothing when there is no ledger)."""
    from ..privacy.ledger import Ledger
    from ..state import state_dir as resolve_state_dir

    path = resolve_state_dir(state_dir, create=False) / "ledger.sqlite"
    if not path.exists():
        raise ValueError(f"no ledger at {str(path)!r} yet (nothing has been noised with this --state-dir)")
    if privacy_cap is not None and not (math.isfinite(privacy_cap) and privacy_cap > 0):
        raise ValueError(f"--privacy-cap must be a finite number > 0, got {privacy_cap}")
    with Ledger(path, cap_epsilon=privacy_cap) as ledger:
        summary = ledger.summary()
    return {"schema": 1, "command": "budget", "ok": True, **summary}
