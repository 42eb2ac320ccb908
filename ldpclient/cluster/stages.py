"""The stages a cluster runs, each a plain callable on one block: a dict of numpy arrays in, a dict out.

A block of images is ``{"start": int, "records": float32 (n, C, H, W), "sources": list of n source ids}``
(``start``: the index of its first image in the run). Each stage is built once per worker (its constructor
opens what it needs: a ledger connection, a model) and then called on block after block.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

Block = dict[str, Any]


class ReleaseStage:
    """Noise and charge one block of private images in the shared ledger; returns ``{"start", "fresh"}``, ``fresh``
    a bool ``(n,)``: True where the image was noised now, False where its stored release held (free).

    ``ledger``: the ledger's location (a ``postgresql://`` URL, or a SQLite file every worker can reach);
    ``key_file``: the ledger's key file on this worker's host; ``cap_epsilon``: the per-image cap the run works
    under (per record, nats; the driver has settled it in the ledger), or the one the ledger holds now where that
    is lower (lowered since the run began: every charge reads it again); ``mechanism``: the run's mechanism;
    ``scope``: the teacher's identity."""

    def __init__(self, *, ledger: str, key_file: str | None, cap_epsilon: float | None, mechanism: Any,
                 scope: str) -> None:
        from ..privacy.ledger import Ledger
        from ..privacy.ledger.cap_history import held_caps

        self.mechanism = mechanism
        self.scope = scope
        self.run_cap = cap_epsilon
        held = held_caps(ledger).epsilon
        cap = held if cap_epsilon is None or (held is not None and held < cap_epsilon) else cap_epsilon
        self.ledger = Ledger(ledger, key_file=key_file, cap_epsilon=cap, cap_origin="--privacy-cap")

    def __call__(self, block: Block) -> Block:
        from ..privacy.ledger import BudgetExceeded

        records = torch.from_numpy(np.ascontiguousarray(block["records"]))
        sources: Sequence[Any] | None = block.get("sources")
        try:
            release = self.ledger.release(self.mechanism, records, scope=self.scope, sources=sources)
        except BudgetExceeded as exc:
            held = self.ledger.cap_epsilon
            if self.run_cap is None or held is None or held >= self.run_cap or "lowered" in str(exc):
                raise
            raise BudgetExceeded(f"{exc} The cap was lowered on this state while the run was under way (ldpclient "
                                 "budget --set-cap).", **exc.__dict__) from None
        self.committed(block)
        return {"start": int(block["start"]), "fresh": (~release.reused).numpy()}

    def committed(self, block: Block) -> None:
        """Called after a block's releases are committed, before the result is returned (the kill tests' hook)."""


class PredictStage:
    """The student's softmax on one block of clean images: ``{"start", "probs"}``, ``probs`` float32 ``(n, K)``.

    ``model``: the student (copied to each worker, run on its CPU or GPU)."""

    def __init__(self, *, model: nn.Module, batch_size: int = 512) -> None:
        self.model = model
        self.batch_size = batch_size

    def __call__(self, block: Block) -> Block:
        from ..transfer.student import predict_proba

        records = torch.from_numpy(np.ascontiguousarray(block["records"]))
        probs = predict_proba(self.model, records, batch_size=self.batch_size)
        return {"start": int(block["start"]), "probs": probs.numpy()}


__all__ = ["Block", "PredictStage", "ReleaseStage"]
