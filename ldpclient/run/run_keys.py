"""What keys the state a run leaves for its re-runs: the query plan's seed (``runs.json``, or the database), kept
under what the run labels (its images by their bytes, or records by their values), and the trained result kept
under the same key.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..io.records import RecordSource, iter_batches, source_ids
from ..privacy.preprocess import delta_warning
from .run_state import RunState

if TYPE_CHECKING:
    from ..transfer.result_cache import ResultCache
    from .handoffs import RunSetup

__all__ = ["Seeds", "data_key", "folder_key", "plan_seeds", "result_cache"]


@dataclass(frozen=True)
class Seeds:
    """The query-plan seed (kept in ``runs.json``, so a re-run plans the same batches), the release generator, and
    what the run labels (``data_key``: its records by their bytes or values), which keys its kept result."""

    seed: int
    generator: torch.Generator | None
    data_key: str = ""


def data_key(setup: RunSetup, records: RecordSource | None, decoded: RecordSource) -> str:
    """What the run labels, for the plan key of its seed (``runs.json``, or the database): a folder's image files by
    their bytes, in the order the run takes them (the SHA-256 of each, as the ledger knows them), so that a host
    that mounts the folder elsewhere resumes the same plan; records handed over, by a digest of their values."""
    if records is None:
        ids = source_ids(decoded, np.arange(len(decoded)))
        if ids is None:  # pragma: no cover - a decoded folder always names its files by their bytes
            return folder_key(setup, records) or ""
        digest = hashlib.sha256(b"ldpclient-folder-v1\x00")
        for sid in ids:
            raw = sid if isinstance(sid, bytes) else sid.encode("utf-8", "surrogateescape")
            digest.update(hashlib.sha256(raw).digest())
        return "files:" + digest.hexdigest()
    digest = hashlib.sha256(repr((len(records), tuple(records.record_shape))).encode())
    for _, chunk in iter_batches(records, 1024):
        digest.update(chunk.to(torch.float32).contiguous().numpy().tobytes())
    return "records:" + digest.hexdigest()


def folder_key(setup: RunSetup, records: RecordSource | None) -> str | None:
    """How a folder's plan was keyed before the key named its files by their bytes: its path (None: records)."""
    return str(setup.opts.folder().resolve()) if records is None else None


def plan_seeds(setup: RunSetup, data_key: str, old_data_key: str | None = None) -> Seeds:
    """Warn about a large delta; the query plan's seed (``runs.json``, or the database) and the release generator.
    ``old_data_key``: how an older ldpclient keyed the same folder (its path), for a plan made before."""
    opts, plan = setup.opts, setup.plan
    warned = delta_warning(plan.mechanism.guarantee(plan.shape).delta_record, plan.records)
    if warned:
        logging.getLogger("ldpclient").warning(warned)
    run_key = {
        "private_dir": data_key,
        "teacher": setup.scope,
        "mechanism": plan.mechanism.config(),
        "augment": opts.augment,
        "postprocess": plan.release.postprocess,
        "queries": plan.num_queries,
        "batch_size": opts.batch_size,
        "records": plan.records,
    }
    # the same run under the other keys runs.json may hold it by: the teacher's identity instead of its redacted
    # address, and the folder's path instead of its files' bytes
    legacy = [{**run_key, "teacher": setup.identity}]
    if old_data_key is not None:
        legacy += [{**key, "private_dir": old_data_key} for key in (run_key, legacy[0])]
    plan_seed = RunState(setup.state, database=opts.state).seed_for(run_key, opts.seed, legacy_keys=legacy)
    generator = torch.Generator().manual_seed(opts.seed) if opts.seed is not None else None
    return Seeds(seed=plan_seed, generator=generator, data_key=data_key)


def result_cache(setup: RunSetup, seeds: Seeds) -> ResultCache | None:
    """Where the run keeps its trained result (:mod:`ldpclient.transfer.result_cache`): this host's state
    directory, under what the run labels."""
    from ..transfer.result_cache import STUDENTS_FOLDER, ResultCache

    return ResultCache(setup.state / STUDENTS_FOLDER, seeds.data_key) if seeds.data_key else None
