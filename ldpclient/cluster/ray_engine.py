"""The Ray Data engine: each stage as an actor pool (``map_batches(..., compute=ActorPoolStrategy(...))``).

Blocks travel pickled, one block per row and per task (``batch_size=1``): Ray's object store holds them (spilled
to disk past its memory). Actors are restarted and their tasks retried without limit (Ray Data's defaults for an
actor pool: ``max_restarts=-1``, ``max_task_retries=-1``): a block whose actor died runs again on another, which the stages make harmless (the
release finds its block's releases stored). Each actor asks for ``actor_cpus`` (default 0.5: on a 2-core machine,
two 1-CPU actors starved Ray Data's own read task and the job hung).
"""

from __future__ import annotations

import logging
import os
import pickle
from typing import Any, Iterable, Iterator

import numpy as np

from ..state import StateError
from .stages import Block


class _Worker:
    """A stage on a Ray actor: unpickles a block, runs the stage, pickles its result."""

    def __init__(self, stage: type, kwargs: list[Any]) -> None:
        import ray
        import torch

        torch.set_num_threads(1)
        # the stage's arguments (a model: megabytes) come by reference, fetched once per actor
        self.stage = stage(**ray.get(kwargs[0]))

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = [pickle.dumps(self.stage(pickle.loads(payload)), protocol=5) for payload in batch["payload"]]
        out = np.empty(len(results), dtype=object)
        out[:] = results
        return {"payload": out}


def _quiet() -> None:
    """Ray's loggers to errors only (Ray Data logs each execution's plan and progress; the run shows its own)."""
    for name in list(logging.root.manager.loggerDict):
        if name == "ray" or name.startswith("ray."):
            logging.getLogger(name).setLevel(logging.ERROR)


class RayEngine:
    """Stages on Ray Data. ``address``: ``auto`` (the cluster this machine belongs to, or a local Ray started here
    and stopped on :meth:`close`) or a Ray address; a Ray already initialised in this process is used as it is.
    ``actors``: actors per stage (default: the cluster's CPUs); ``actor_cpus``: CPUs each asks for."""

    def __init__(self, address: str = "auto", *, actors: int | None = None, actor_cpus: float = 0.5) -> None:
        try:
            import ray
        except ImportError:
            raise StateError("--cluster needs Ray, which this install lacks: pip install 'ldpclient[cluster]'") from None
        self._started = False
        # Ray Data reports progress and plans on the terminal and in the log; the run has its own progress bars
        _quiet()
        if not ray.is_initialized():
            # the C++ core's log lines (one about Ray Data's own actor arguments) stay out of the terminal
            os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
            ray.init(address=None if address == "auto" else address, include_dashboard=False,
                     logging_level=logging.ERROR, log_to_driver=False)
            self._started = True
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        self.actors = actors or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.actor_cpus = actor_cpus

    def map_blocks(self, stage: type, kwargs: dict[str, Any], blocks: Iterable[Block]) -> Iterator[Block]:
        import ray
        from ray.data.block import BlockAccessor

        _quiet()
        items = [{"payload": pickle.dumps(block, protocol=5)} for block in blocks]
        if not items:
            return
        dataset = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            _Worker, fn_constructor_kwargs={"stage": stage, "kwargs": [ray.put(kwargs)]}, batch_size=1, batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=min(self.actors, len(items))), num_cpus=self.actor_cpus)
        # block by block, not iter_batches: its prefetch thread (ray 2.60) outlives the iteration, one per stage run
        for bundle in dataset.iter_internal_ref_bundles():
            for entry in bundle.blocks:
                rows = BlockAccessor.for_block(ray.get(entry.ref)).to_batch_format("numpy")["payload"]
                for payload in rows:
                    yield pickle.loads(payload)

    def close(self) -> None:
        if self._started:
            import ray

            ray.shutdown()
            self._started = False


__all__ = ["RayEngine"]
