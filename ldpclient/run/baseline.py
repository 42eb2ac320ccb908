"""The zero-privacy baseline beside a label run (``--baseline``): the same transfer on blank public input, noised
at the free level, with the run's public images; how far its labels agree with the private run's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..io.records import RecordSource
from ..names import Mode
from .handoffs import Baseline, RunSetup
from .label_report import label_histogram, last_val_accuracy
from .progress import StageProgress
from .run_keys import Seeds, result_cache

if TYPE_CHECKING:
    from ..teachers.client_stats import ClientStats
    from ..transfer.pipeline import KnowledgeTransfer
    from ..transfer.result import TransferResult
    from .session import LabelSession

__all__ = ["baseline_transfer", "run_baseline"]


def baseline_transfer(setup: RunSetup, session: LabelSession, seeds: Seeds) -> KnowledgeTransfer:
    """The data-free baseline's transfer (blank public input, no privacy cost), with a progress bar of its own,
    running the plan's baseline (:class:`~ldpclient.run.plan.BaselinePlan`) as it was resolved.

    Its blank queries are noised at the free level (the baseline plan's ``mechanism``), not at the private run's
    epsilon: the strongest data-free labels the study found, whatever epsilon is chosen. With public images it
    uses them too, as the private run does (their answers come from the journal).
    """
    from ..transfer.pipeline import KnowledgeTransfer

    planned = setup.plan.baseline
    assert planned is not None  # planned with --baseline
    base_seed = (seeds.seed * 1_000_003 + 0xB45E) % (2**31)
    given = planned.settings
    return KnowledgeTransfer(
        setup.teacher, planned.mechanism, mode=Mode.DATA_FREE, seed=base_seed,
        release_generator=torch.Generator().manual_seed(base_seed),  # public blank input: a fixed seed is harmless
        progress=StageProgress(setup.ui, "baseline ", session.client), client=session.client,
        result_cache=result_cache(setup, seeds), plan=given.plan, training=given.training,
        adaptation=given.adaptation, resolved=planned.resolved,
    )


def run_baseline(
    setup: RunSetup, session: LabelSession, base: KnowledgeTransfer, records: RecordSource, result: TransferResult,
    stats_private: ClientStats, spent_private: float, public: RecordSource | None,
) -> Baseline:
    """Run the data-free baseline ``base`` (:func:`baseline_transfer`); how far it agrees with the private run
    (whose client counters and money spent were ``stats_private`` and ``spent_private``)."""
    client, n = session.client, len(records)
    with setup.timer.stage("baseline"):
        base_result = base.run(records, public=public)
    if isinstance(base.progress, StageProgress):
        base.progress.close()
    agree = float((base_result.labels == result.labels).float().mean())
    base_conf = (
        base_result.confidences if base_result.confidences is not None else torch.full((n,), float("nan"))
    )
    section = {
        "mode": str(Mode.DATA_FREE) + (" with the public images" if public is not None else ""),
        "epsilon_record": 0.0,
        "blank_query_noise": base.mechanism.config(),
        "student": base_result.training.student,
        "queries_sent": client.stats.queries_sent - stats_private.queries_sent,
        "queries_from_journal": client.stats.queries_from_journal - stats_private.queries_from_journal,
        "spent": client.cost.spent_run - spent_private,
        "agreement_with_private_run": agree,
        "student_val_accuracy": last_val_accuracy(base_result),
        "label_histogram": label_histogram(base_result.labels, setup.meta.num_classes),
    }
    return Baseline(section=section, labels=base_result.labels, confidences=base_conf,
                     unadapted=base_result.unadapted_labels)
