"""The Ray Data engine: each stage as an actor pool (``map_batches(..., compute=ActorPoolStrategy(...))``).

Blocks travel pickled, one block per row and per task (``batch_size=1``): Ray's object store holds them (spilled
to disk past its memory). Actors are restarted and their tasks retried without limit (Ray Data's defaults for an
actor pool: ``max_restarts=-1``, ``max_task_retries=-1``): a block whose actor died runs again on another, which
the stages make harmless (the
release finds its block's releases stored). Each actor asks for ``actor_cpus`` (default 0.5: on a 2-core machine,
two 1-CPU actors starved Ray Data's own read task and the job hung).
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import socket
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from ..privacy.ledger.errors import LedgerError
from ..state import StateError
from .stages import Block


class _Refused:
    """What a worker returns for a block its stage refused with an error of ldpclient's own (a cap, the state):
    the error, raised again on the driver as it was raised (one line there, not Ray's traceback)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


#: Errors a stage raises that the driver presents as it presents its own (:class:`_Refused`).
_STAGE_ERRORS: tuple[type[Exception], ...] = (LedgerError, StateError, ValueError)


class _Worker:
    """A stage on a Ray actor: unpickles a block, runs the stage, pickles its result (or its refusal)."""

    def __init__(self, stage: type, kwargs: list[Any]) -> None:
        import ray
        import torch

        torch.set_num_threads(1)
        # the stage's arguments (a model: megabytes) come by reference, fetched once per actor
        self.stage = stage(**ray.get(kwargs[0]))

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = [pickle.dumps(self._run(payload), protocol=5) for payload in batch["payload"]]
        out = np.empty(len(results), dtype=object)
        out[:] = results
        return {"payload": out}

    def _run(self, payload: bytes) -> Any:
        try:
            return self.stage(pickle.loads(payload))
        except _STAGE_ERRORS as exc:
            return _Refused(exc)


def _quiet() -> None:
    """Ray's loggers to errors only (Ray Data logs each execution's plan and progress; the run shows its own)."""
    for name in list(logging.root.manager.loggerDict):
        if name == "ray" or name.startswith("ray."):
            logging.getLogger(name).setLevel(logging.ERROR)


#: Ray's environment variable that, set to 0 before it starts a node, gives the node the loopback address: every
#: server it starts (GCS, raylet, object manager, workers) then listens on 127.0.0.1 only.
_RAY_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def announced_cluster(temp_root: Path | None = None) -> str | None:
    """The address of the Ray this user started on this machine (``ray start``), as Ray announces it in its shared
    directory (``/tmp/ray/ray_current_cluster``); None when there is none, or when the file or its folder could have
    been written by another user (another owner, or writable by group or others): a cluster another local user
    announced is never joined."""
    folder = (temp_root or Path(tempfile.gettempdir())) / "ray"
    announced = folder / "ray_current_cluster"
    try:
        for path in (folder, announced):
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return None
        address = announced.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return address or None


def check_reachable(address: str, timeout: float) -> None:
    """StateError (one line) when nothing answers at the Ray ``address`` (``host:port`` or ``ray://host:port``)
    within ``timeout`` seconds: Ray itself would retry the connection without end."""
    target = address.split("://", 1)[-1].rstrip("/")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise StateError(f"--cluster {address!r} is not a Ray address (ray://host:10001, or host:6379)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
        raise StateError(f"--cluster {address!r}: nothing answers there ({reason} within {timeout:g} s): is the Ray "
                         "cluster running, and reachable from this host?") from None


#: Longest folder a Ray of our own keeps its session in: Ray puts Unix sockets some 70 characters below it, and a
#: socket's path may not pass 107 bytes.
_SESSION_PARENT_CHARS = 30


def _session_parent() -> str:
    """Where a Ray of our own gets its session folder (made private to this user by ``mkdtemp``): the temporary
    folder, or ``/tmp`` where that one's path is too long for Ray's sockets."""
    parent = tempfile.gettempdir()
    return parent if len(parent) <= _SESSION_PARENT_CHARS or not os.path.isdir("/tmp") else "/tmp"


def _loopback_node() -> None:
    """Give the node this process starts or drives the loopback address, as :data:`_RAY_CLUSTER_ENV` does where
    Ray was imported before it was set."""
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def _on_loopback(address: str) -> bool:
    """Whether the Ray ``address`` (``host:port``, ``ray://host:port``) is on this machine's loopback."""
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    return host == "localhost" or host == "::1" or host.startswith("127.")


def start_local_ray(**init: Any) -> str:
    """Start a Ray of this process's own (``ray.init`` with ``init``, e.g. ``num_cpus``): its node on the loopback
    address, so that nothing it starts listens beyond this machine, and its session in a new folder private to
    this user, whose path is returned (remove it after ``ray.shutdown()``)."""
    import ray

    _loopback_node()
    root = tempfile.mkdtemp(prefix="ldp-ray-", dir=_session_parent())
    ray.init(address="local", include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False,
             _temp_dir=root, **init)
    return root


class RayEngine:
    """Stages on Ray Data. ``address``: ``auto`` or a Ray address; a Ray already initialised in this process is
    used as it is. ``auto`` joins the cluster ``RAY_ADDRESS`` names, else the one this user started on this machine
    (:func:`announced_cluster`), else starts a Ray of its own, stopped on :meth:`close`: bound to the loopback
    address only (nothing it starts listens beyond this machine) and kept in a session directory of its own,
    removed on close (never the machine's shared one). :attr:`joined` says which, in words. An address is checked
    to answer within ``timeout`` seconds first (:func:`check_reachable`). ``actors``: actors per stage (default:
    the cluster's CPUs); ``actor_cpus``: CPUs each asks for."""

    def __init__(self, address: str = "auto", *, actors: int | None = None, actor_cpus: float = 0.5,
                 timeout: float = 10.0) -> None:
        self._started = False
        self._session_root: str | None = None
        target, self.joined = self._target(address)
        local = target is None or _on_loopback(target)
        if local and "ray" not in sys.modules:
            os.environ[_RAY_CLUSTER_ENV] = "0"  # read when Ray is imported: this node on loopback only
        try:
            import ray
        except ImportError:
            raise StateError("--cluster needs Ray, which this install lacks: pip install "
                             "'ldpclient[cluster]'") from None
        # Ray Data reports progress and plans on the terminal and in the log; the run has its own progress bars
        _quiet()
        if ray.is_initialized():
            self.joined = "the Ray this process had started"
        else:
            # the C++ core's log lines (one about Ray Data's own actor arguments) stay out of the terminal
            os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
            if target is not None:
                check_reachable(target, timeout)
                if local:  # a cluster on this machine's loopback: this driver's node address is loopback too
                    _loopback_node()
                ray.init(address=target, logging_level=logging.ERROR, log_to_driver=False)
            else:
                self._session_root = start_local_ray()
            self._started = True
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        self.actors = actors or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.actor_cpus = actor_cpus

    @staticmethod
    def _target(address: str) -> tuple[str | None, str]:
        """The address to join (None: start a Ray of our own) and what it is, in words."""
        if address != "auto":
            return address, f"the Ray cluster at {address}"
        named = os.environ.get("RAY_ADDRESS", "").strip()
        if named and named != "auto":
            return named, f"the Ray cluster at {named} (RAY_ADDRESS)"
        announced = announced_cluster()
        if announced is not None:
            return announced, f"the Ray cluster this user started at {announced}"
        return None, "a Ray started for this run, on 127.0.0.1 only"

    def map_blocks(self, stage: type, kwargs: dict[str, object], blocks: Iterable[Block]) -> Iterator[Block]:
        import ray
        from ray.data.block import BlockAccessor

        _quiet()
        items = [{"payload": pickle.dumps(block, protocol=5)} for block in blocks]
        if not items:
            return
        dataset = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            _Worker,
            fn_constructor_kwargs={"stage": stage, "kwargs": [ray.put(kwargs)]},
            batch_size=1,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=min(self.actors, len(items))),
            num_cpus=self.actor_cpus,
        )
        # block by block, not iter_batches: its prefetch thread (ray 2.60) outlives the iteration, one per stage run
        for bundle in dataset.iter_internal_ref_bundles():
            for entry in bundle.blocks:
                rows = BlockAccessor.for_block(ray.get(entry.ref)).to_batch_format("numpy")["payload"]
                for payload in rows:
                    result = pickle.loads(payload)
                    if isinstance(result, _Refused):
                        raise result.error
                    yield result

    def close(self) -> None:
        if self._started:
            import ray

            ray.shutdown()
            self._started = False
        if self._session_root is not None:
            shutil.rmtree(self._session_root, ignore_errors=True)
            self._session_root = None


__all__ = ["RayEngine", "announced_cluster", "check_reachable", "start_local_ray"]
