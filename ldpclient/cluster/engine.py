"""Where a run's per-image stages execute: the :class:`Engine` interface, the in-process :class:`LocalEngine`, and
:class:`Cluster`, which runs the release and the student's passes over every image through an engine (the
:class:`~ldpclient.transfer.context.StageRunner` a label run hands its pipeline)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol

import numpy as np
import torch
from torch import nn

from ..io.records import RecordSource, iter_batches, source_ids
from .stages import Block, PredictStage, ReleaseStage

if TYPE_CHECKING:
    from ..privacy.base import Mechanism

#: Images per block of the student's passes (one task each).
PREDICT_BLOCK = 4096


class Engine(Protocol):
    """Runs a stage (a class built once per worker with ``kwargs``, then called on blocks) over blocks; yields
    each block's result in any order (a result names its block by ``"start"``). ``joined``: where the stages run,
    in words."""

    joined: str

    def map_blocks(self, stage: type, kwargs: dict[str, Any], blocks: Iterable[Block]) -> Iterator[Block]: ...

    def close(self) -> None: ...


class LocalEngine:
    """The stages in this process, one worker, blocks in order (what a run without a cluster amounts to)."""

    joined = "this process"

    def map_blocks(self, stage: type, kwargs: dict[str, Any], blocks: Iterable[Block]) -> Iterator[Block]:
        worker = stage(**kwargs)
        for block in blocks:
            yield worker(block)

    def close(self) -> None:
        pass


def check_cluster_options(cluster: str | None, *, state: str | None, seed: int | None) -> None:
    """ValueError naming the option when ``--cluster`` cannot run with the others: it needs a shared ``--state``
    (every worker charges the same ledger) and refuses ``--seed`` (a shared noise seed)."""
    if cluster is None:
        return
    if not cluster.strip():
        raise ValueError("--cluster must be 'auto' or a Ray address (ray://host:10001, or host:6379)")
    if state is None:
        raise ValueError("--cluster needs --state postgresql://...: the workers charge one shared ledger")
    if seed is not None:
        raise ValueError("--cluster refuses --seed: a shared noise seed would give different images identical noise, "
                         "and the difference of two releases would show the difference of two images")


def open_engine(cluster: str, *, timeout: float = 10.0) -> Engine:
    """The engine ``--cluster`` names: ``auto`` (the cluster ``RAY_ADDRESS`` names or this user started here, else a
    Ray of the run's own on loopback) or a Ray address that must answer within ``timeout`` seconds
    (:class:`~ldpclient.cluster.ray_engine.RayEngine`)."""
    from .ray_engine import RayEngine

    return RayEngine(cluster, timeout=timeout)


@dataclass
class Cluster:
    """The release and the student's passes of a label run on ``engine``, against the shared ledger at ``ledger``
    (``key_file``: the ledger's key file on the workers' hosts; ``cap_epsilon``, ``cap_delta``: the per-image caps
    the run works under, as its driver's ledger settled them)."""

    engine: Engine
    ledger: str
    key_file: str | None
    cap_epsilon: float | None
    cap_delta: float | None = None

    def release(
        self, mechanism: Mechanism, scope: str, records: RecordSource, on_block: Callable[[int], None]
    ) -> np.ndarray:
        """Noise and charge every record (blocks of :func:`~ldpclient.transfer.stages.release.release_chunk`); a bool
        ``(N,)``: True where a record was noised now."""
        from ..transfer.stages.release import release_chunk

        fresh = np.zeros(len(records), dtype=bool)
        blocks = ({"start": int(idx[0]), "records": x.numpy(), "sources": source_ids(records, idx)}
                  for idx, x in iter_batches(records, release_chunk(records.record_shape)))
        kwargs = {"ledger": self.ledger, "key_file": self.key_file, "cap_epsilon": self.cap_epsilon,
                  "cap_delta": self.cap_delta, "mechanism": mechanism, "scope": scope}
        for out in self.engine.map_blocks(ReleaseStage, kwargs, blocks):
            start, done = int(out["start"]), np.asarray(out["fresh"], dtype=bool)
            fresh[start:start + len(done)] = done
            on_block(len(done))
        return fresh

    def predict_proba(self, model: nn.Module, records: RecordSource) -> torch.Tensor:
        """``model``'s softmax on every record, computed by the workers (a CPU copy of the model each)."""
        shipped = copy.deepcopy(model).cpu().eval()
        out: torch.Tensor | None = None
        blocks = ({"start": int(idx[0]), "records": x.numpy()} for idx, x in iter_batches(records, PREDICT_BLOCK))
        for result in self.engine.map_blocks(PredictStage, {"model": shipped}, blocks):
            probs = torch.from_numpy(np.asarray(result["probs"], dtype=np.float32))
            if out is None:
                out = torch.empty((len(records), probs.shape[1]), dtype=torch.float32)
            start = int(result["start"])
            out[start:start + len(probs)] = probs
        return out if out is not None else torch.empty(0, 0)

    def close(self) -> None:
        self.engine.close()


__all__ = ["Cluster", "Engine", "LocalEngine", "PREDICT_BLOCK", "check_cluster_options", "open_engine"]
