"""The stages a cluster runs, each a plain callable on one block: a dict of numpy arrays in, a dict out.

A block of images is ``{"start": int, "records": float32 (n, C, H, W), "sources": list of n source ids}``
(``start``: the index of its first image in the run). Each stage is built once per worker (its constructor
opens what it needs: a ledger connection, a model) and then called on block after block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    from ..privacy.base import Mechanism

Block = dict[str, Any]


class ReleaseStage:
    """Noise and charge one block of private images in the shared ledger; returns ``{"start", "fresh"}``, ``fresh``
    a bool ``(n,)``: True where the image was noised now, False where its stored release held (free).

    ``ledger``: the ledger's location (a ``postgresql://`` URL, or a SQLite file every worker can reach);
    ``key_file``: the ledger's key file on this worker's host; ``cap_epsilon``, ``cap_delta``: the per-image caps
    the run works under (per record; the driver settled them in the ledger: ``Ledger(settled=True)``, so a cap
    lowered since binds, and a refusal says so); ``mechanism``: the run's mechanism; ``scope``: the teacher's
    identity."""

    def __init__(self, *, ledger: str, key_file: str | None, cap_epsilon: float | None, mechanism: Mechanism,
                 scope: str, cap_delta: float | None = None) -> None:
        from ..privacy.ledger import Ledger

        self.mechanism = mechanism
        self.scope = scope
        self.ledger = Ledger(ledger, key_file=key_file, cap_epsilon=cap_epsilon, cap_delta=cap_delta,
                             cap_origin="--privacy-cap", settled=True)

    def __call__(self, block: Block) -> Block:
        records = torch.from_numpy(np.ascontiguousarray(block["records"]))
        sources: Sequence[Any] | None = block.get("sources")
        release = self.ledger.release(self.mechanism, records, scope=self.scope, sources=sources)
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
