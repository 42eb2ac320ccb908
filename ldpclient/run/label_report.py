"""The run report of ``ldpclient label``: the typed report of a finished run, the partial one of a stopped run.

Reads the stage outputs of :mod:`ldpclient.run.label` (``RunSetup``, ``RunOutcome``, ``WrittenOutputs``)
and builds the sections of :class:`~ldpclient.report.run_report.RunReport`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence, TypedDict

import torch

from ..io.document import JSONDict, number, section_or_none
from ..io.output import versions, write_json
from ..io.records import RecordSource
from ..report.notes import DATA_FREE_NOTE, utility_note, weak_privacy_note
from ..report.run_report import (
    CostSection,
    CountsSection,
    LedgerSection,
    MechanismSection,
    QueriesSection,
    RunReport,
    StopLedgerSection,
    StoppedSection,
    StopQueriesSection,
    StopReport,
    StudentSection,
    TeacherSection,
)
from ..teachers.errors import CostCapReached
from ..teachers.openai_batch import BatchSettings
from ..teachers.units import ByteUnitsTeacher
from ..transfer.student import compute_layout
from .check_score import check_evidence
from .verdict import Verdict, accuracy_words, judge

if TYPE_CHECKING:
    from ..privacy.ledger import Ledger
    from ..teachers.base import Teacher
    from ..teachers.client import QueryClient
    from ..teachers.client_stats import ClientStats
    from ..transfer.result import TransferResult
    from .handoffs import RunOutcome, RunSetup, WrittenOutputs
    from .images import Images
    from .options import LabelOptions


def judge_run(setup: RunSetup, names: Sequence[str], outcome: RunOutcome) -> Verdict:
    """What the labels of a finished run are worth (:mod:`ldpclient.run.verdict`): the check set's score (the
    data-free run's beside it), collapse against the teacher's answers, the gain over the data-free run, the
    student's agreement on held-out noised queries. Reads nothing more than the run has; sends nothing."""
    result, meta, baseline = outcome.result, setup.meta, outcome.baseline
    labels = result.labels.tolist()
    free = baseline.labels.tolist() if baseline is not None else None
    conf = result.confidences.tolist() if result.confidences is not None else None
    free_conf = baseline.confidences.tolist() if baseline is not None else None
    evidence = (check_evidence(setup.check, names, labels, free, conf, free_conf)
                if setup.check is not None else None)
    same = float((baseline.labels == result.labels).float().mean()) if baseline is not None else None
    return judge(num_classes=meta.num_classes, label_counts=label_histogram(result.labels, meta.num_classes),
                 answer_counts=list(result.teacher_label_histogram), check=evidence, same_as_free=same,
                 answers_apart=result.answers_apart,
                 held_out_agreement=last_val_accuracy(result) if result.student is not None else None,
                 public_held_out=((result.public_held_out["agree"], result.public_held_out["images"])
                                  if result.public_held_out else None),
                 class_names=[str(c) for c in meta.class_names] if meta.class_names else None,
                 abstained=_abstained(outcome.stats_private), declined=outcome.stats_private.declined,
                 release_shift=_shift(result.release_shift))


def _shift(found: JSONDict | None) -> tuple[float, float] | None:
    """``(shift, limit)`` of the result's ``release_shift`` (None without one)."""
    return (number(found, "shift"), number(found, "limit")) if found is not None else None


def _abstained(stats: ClientStats) -> tuple[int, int] | None:
    """``(declined, answered)`` over the run's private queries, for the verdict (None: none declined)."""
    answered = stats.queries_sent + stats.queries_from_journal
    return (stats.abstained, answered) if stats.abstained else None


def build_report(
    setup: RunSetup, images: Images, outcome: RunOutcome, written: WrittenOutputs, verdict: Verdict
) -> RunReport:
    """The run report of a finished label run (``ui.py`` and ``ldpclient audit`` read it; JSON via ``to_dict``)."""
    opts, meta, mechanism, result = setup.opts, setup.meta, setup.mechanism, outcome.result
    judged = verdict.as_dict()
    return RunReport(
        command="label",
        ok=True,
        private_dir=None if opts.private_dir is None else str(opts.private_dir),
        teacher=TeacherSection(address=setup.identity, model=meta.name, input_shape=list(setup.shape),
                               datatype=meta.datatype, num_classes=meta.num_classes,
                               value_range=list(meta.value_range), wire=_wire_used(setup.teacher),
                               assumed=list(meta.assumed)),
        mechanism=MechanismSection(name=opts.mechanism, epsilon=opts.epsilon, epsilon_unit=opts.epsilon_unit,
                                   delta=opts.delta, reduce=setup.plan.release.reduce,
                                   config=mechanism.config()),
        guarantee=result.guarantee.as_dict(),
        guarantee_note=_guarantee_note(result, accuracy_words(judged)),
        augment=opts.augment,
        postprocess=setup.plan.release.postprocess,
        # the full query plan: with the teacher's query log it maps every logged query to its records
        # (`ldpclient audit --run REPORT --queries LOG --private DIR`)
        plan=result.plan.as_dict() if result.plan is not None else None,
        **_usage_sections(setup, images, outcome, written.labelled),
        student=StudentSection(
            model=result.training.student if result.student is not None else None,
            epochs=opts.epochs if result.student is not None else 0,
            val_accuracy=last_val_accuracy(result),
            train_accuracy=result.history.train_accuracy[-1] if result.history else None,
            loss=result.history.loss[-1] if result.history else None,
            note="validation accuracy = agreement with the teacher's labels on held-out noised queries",
            inference=_inference(result),
            public_repeats=int(result.counts.get("public_repeats", 0)),
            crop_pixels=result.training.crop_pixels,
            flip=result.training.flip,
            warmup_epochs=result.training.warmup_epochs,
            students=result.training.students,
            mirror_check=dict(result.training.mirror_check) if result.training.mirror_check is not None else None,
            reused=result.training.reused,
            weights=dict(result.training.weights) if result.training.weights is not None else None,
        ),
        adaptation=_adaptation_section(result, meta.num_classes),
        baseline=outcome.baseline.section if outcome.baseline is not None else None,
        label_histogram=label_histogram(result.labels, meta.num_classes),
        timings=setup.timer.as_dict(),
        skipped=[s.as_dict() for s in images.skipped],
        # file names that are not valid UTF-8: labelled, and written with \xNN escapes
        escaped_names=list(images.escaped_paths),
        outputs=written.outputs,
        versions=versions(),
        run_plan=setup.plan.describe(),
        verdict=judged,
        public_skipped=[s.as_dict() for s in outcome.public_skipped],
        decoding=dict(result.decoding) if result.decoding is not None else None,
        release_shift=dict(result.release_shift) if result.release_shift is not None else None,
    )


def _guarantee_note(result: TransferResult, measured: str | None) -> str:
    """The report's words beside the guarantee: what the figure means, and what it bought (``measured``: the
    accuracy on the check set in words, None without one)."""
    data_free = result.guarantee.public_input
    return " ".join(filter(None, (
        DATA_FREE_NOTE + "." if data_free else
        "per record is the figure that matters: it bounds what the teacher can learn about one whole image; "
        "post-processing (augmentation, blur, clipping) adds nothing; inputs are clipped to the declared domain "
        "before noising.",
        weak_privacy_note(result.guarantee.epsilon_record),
        f"Accuracy: {measured or utility_note(data_free)}.",
    )))


class _UsageSections(TypedDict):
    counts: CountsSection
    queries: QueriesSection
    cost: CostSection
    ledger: LedgerSection


def _usage_sections(setup: RunSetup, images: Images, outcome: RunOutcome, labelled: int) -> _UsageSections:
    """The report's ``counts``, ``queries``, ``cost`` and ``ledger`` sections, in that order."""
    opts, counts, n, price = setup.opts, outcome.result.counts, len(images), setup.plan.terms.price
    stats = outcome.stats_private
    return {
        "counts": CountsSection(
            files_found=n + sum(1 for s in images.skipped if not s.path.endswith("/")),
            records=n,
            labelled=labelled,
            skipped=len(images.skipped),
            releases_fresh=int(counts.get("releases_fresh", 0)),
            releases_reused=int(counts.get("releases_reused", 0)),
            public_images=int(counts.get("public_queries", 0)),
            mirror_check_queries=int(counts.get("mirror_check_queries", 0)),
            decode_check_queries=int(counts.get("decode_check_queries", 0)),
            public_skipped=len(outcome.public_skipped),
            not_released=int(counts.get("not_released", 0)),
        ),
        "queries": _queries_section(setup, outcome),
        "cost": CostSection(
            price_per_query=price,
            spent_run=outcome.spent_run,
            spent_total=outcome.spent_total,
            cap=opts.money_cap,
            billing=outcome.billing,
            spent_public_run=_spent_public(price, int(counts.get("public_sent", 0)), outcome.spent_run,
                                           stats.queries_sent if opts.facts.token_priced else None),
            price_input_tokens=opts.facts.price_input_tokens if opts.facts.token_priced else None,
            price_output_tokens=opts.facts.price_output_tokens if opts.facts.token_priced else None,
            input_tokens=stats.input_tokens,
            output_tokens=stats.output_tokens,
            usage_not_reported=stats.unbilled,
            batch_price_factor=BatchSettings().price_factor if opts.facts.batch_api and opts.facts.token_priced
            else None,
        ),
        "ledger": LedgerSection(
            path=str(outcome.ledger_path),
            fresh=int(counts.get("releases_fresh", 0)),
            reused=int(counts.get("releases_reused", 0)),
            # what this run charged: each fresh release costs the release's per-record epsilon (the ledger
            # charges exactly that), reused ones nothing; no second pass over the records to difference
            spent_this_run_max_epsilon=(
                float(outcome.result.guarantee.epsilon_record) if int(counts.get("releases_fresh", 0)) else 0.0
            ),
            max_spent_epsilon=float(outcome.spent_after.max()),
            cap_epsilon=outcome.ledger_cap,
            not_released=int(counts.get("not_released", 0)),
        ),
    }


def _spent_public(price: float, public_sent: int, spent_run: float, sent: int | None) -> float:
    """Money this run spent on the public images' queries: ``public_sent`` at ``price`` each; for a teacher billed in
    tokens (``sent``: every query the run sent), their share of what it spent, as every image costs the same input
    tokens (``price`` is then the booked price of a query, above what a query is billed)."""
    if sent is None:
        return price * public_sent
    return spent_run * public_sent / sent if sent else 0.0


def _queries_section(setup: RunSetup, outcome: RunOutcome) -> QueriesSection:
    """The report's ``queries``: what was planned, sent and read back, declined, and waited for."""
    counts, stats = outcome.result.counts, outcome.stats_private
    return QueriesSection(
        planned=int(counts.get("queries_planned", counts.get("queries", 0))),
        batches=int(counts.get("batches", 0)),
        sent=stats.queries_sent,
        from_journal=stats.queries_from_journal,
        requests=stats.requests,
        batch_size=outcome.query_batch_size,
        plan_seed_source="--seed" if setup.opts.seed is not None else "runs.json",
        answers_histogram=list(outcome.result.teacher_label_histogram),
        public_sent=int(counts.get("public_sent", 0)),
        public_from_journal=int(counts.get("public_from_journal", 0)),
        rounds=[r.as_dict() for r in outcome.result.query_rounds] or None,
        abstained=stats.abstained,
        declined=dict(stats.declined) or None,
        collected_earlier=stats.collected_earlier,
        busy=stats.waits.busy,
        busy_wait_s=round(stats.waits.busy_s, 3),
        paced_s=round(stats.waits.paced_s, 3),
    )


ADAPTATION_NOTE = (
    "the student was fine-tuned on the clean private images, on this device only (no query, no privacy cost); "
    "it has seen them, is not covered by the LDP guarantee and must not leave the device; the queries and the "
    "teacher's answers keep their meaning"
)


def _adaptation_section(result: TransferResult, num_classes: int) -> JSONDict | None:
    summary = section_or_none(result.summary(), "adaptation")
    if summary is None:
        return None
    changed, before = None, None
    if result.unadapted_labels is not None:
        changed = float((result.unadapted_labels != result.labels).float().mean())
        before = label_histogram(result.unadapted_labels, num_classes)
    return {**summary, "labels_changed": changed, "unadapted_label_histogram": before, "note": ADAPTATION_NOTE}


def label_histogram(labels: torch.Tensor, num_classes: int) -> list[int]:
    """How many records got each class (``num_classes`` counts, in class order)."""
    return torch.bincount(labels, minlength=num_classes).tolist()


def report_path_for(opts: LabelOptions) -> Path | None:
    """The run report's path: ``--report``, else ``<output stem>.report.json`` beside the labels (None: no files)."""
    if opts.report is not None:
        return opts.report
    return None if opts.output is None else opts.output.with_name(opts.output.stem + ".report.json")


def write_stop_report(
    setup: RunSetup, exc: Exception, client: QueryClient, ledger: Ledger, records: RecordSource
) -> None:
    """A partial report for a run stopped at the money or privacy cap: what was spent and answered."""
    opts = setup.opts
    path = report_path_for(opts)
    if path is None:
        return
    spent = ledger.spent(records).epsilon
    stopped = "money cap" if isinstance(exc, CostCapReached) else "privacy cap"
    costs = client.report()
    report = StopReport(
        command="label",
        ok=False,
        stopped=StoppedSection(reason=stopped, message=" ".join(str(exc).split())),
        private_dir=None if opts.private_dir is None else str(opts.private_dir),
        teacher={"address": setup.identity},
        queries=StopQueriesSection(sent=client.stats.queries_sent, from_journal=client.stats.queries_from_journal,
                                   requests=client.stats.requests),
        cost={"price_per_query": setup.plan.terms.price, "cap": opts.money_cap,
              **{k: costs[k] for k in ("spent_run", "spent_total", "spent_unconfirmed", "billing")}},
        ledger=StopLedgerSection(path=ledger.location, max_spent_epsilon=float(spent.max()) if len(spent) else 0.0,
                                 cap_epsilon=ledger.cap_epsilon),
        outputs={"report": str(path)},
        versions=versions(),
    )
    write_json(path, report.to_dict(), secrets=(setup.token,))


def _wire_used(teacher: Teacher) -> str | None:
    """``"binary"``/``"json"`` for an Open Inference Protocol teacher (after negotiation), else None."""
    from ..teachers.oip import OIPTeacher

    inner = teacher.inner if isinstance(teacher, ByteUnitsTeacher) else teacher
    if not isinstance(inner, OIPTeacher):
        return None
    return "binary" if inner.binary else "json"


def last_val_accuracy(result: TransferResult) -> float | None:
    if result.history is None or not result.history.val_accuracy:
        return None
    v = result.history.val_accuracy[-1]
    return None if v != v else float(v)


def _inference(result: TransferResult) -> str | None:
    """How the student's prediction passes ran: memory layout and intra-op threads (None without a student)."""
    if result.student is None:
        return None
    device = next(result.student.parameters()).device
    threads = torch.get_num_threads()
    return f"{compute_layout(device)}, {threads} thread{'' if threads == 1 else 's'}, float32"
