"""The flow behind ``ldpclient label``, usable without the CLI: one orchestrator, a function per stage.

:func:`label_run` wires a private folder (:mod:`ldpclient.io.folders`), a teacher
(:func:`ldpclient.teachers.connect` + :class:`~ldpclient.teachers.QueryClient`
with a journal and a money cap), a mechanism, the privacy ledger and
:class:`~ldpclient.transfer.pipeline.KnowledgeTransfer`, then writes the labels and a JSON
run report. State lives in one directory (``ledger.sqlite`` for per-record
privacy spend and stored releases, ``journal.sqlite`` for answered batches,
``runs.json`` for the query-plan seeds of earlier runs), so running the same
command again resumes: no record is noised again and no answered batch is sent
or paid again.

Units: records are decoded to ``[0, 1]`` and mapped linearly to the teacher's
declared value range, which is the mechanism's domain (sensitivity per element =
its width). Epsilon is in nats; the report always gives it per element *and* per
record.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..io.folders import check_private_folder
from ..io.output import write_json
from ..io.records import RecordSource, SubsetRecords
from ..names import Mode
from ..report.label_files import StageTimer
from ..state import state_dir, state_lock
from .baseline import baseline_transfer, run_baseline
from .caps import CapForeseen, foresee_money, foresee_privacy
from .dry_run import dry_run
from .handoffs import LabelRun, RunOutcome, RunSetup
from .images import Images, find_images, given_records, image_counts, image_names, spool
from .label_report import build_report, judge_run, report_path_for, write_stop_report
from .options import LabelOptions
from .outputs import check_label_outputs, page_images, write_outputs, write_page
from .prepare import prepare, read_check
from .progress import StageProgress
from .public_images import load_public, public_checked
from .run_keys import Seeds, data_key, folder_key, plan_seeds, result_cache
from .session import LabelSession
from .ui import UI

if TYPE_CHECKING:
    from ..io.folders import Discovery
    from ..report.label_page import PageImages
    from ..teachers.base import Teacher
    from ..transfer.result import TransferResult

__all__ = ["LabelOptions", "label_run", "resume_hint"]


def label_run(
    opts: LabelOptions,
    *,
    token: str | None = None,
    ui: UI | None = None,
    teacher: Teacher | None = None,
    records: RecordSource | None = None,
    public: RecordSource | None = None,
) -> LabelRun:
    """Run the whole label flow: the run (its report, also written to disk, its result, the images' names and the
    verdict). ``teacher``: an already opened Teacher to use instead of connecting to ``opts.teacher`` (embedding,
    tests); ``opts.teacher`` still names it in reports. Raises the underlying errors (DataError, ValueError,
    BudgetExceeded, CostCapReached, TeacherError) for the caller to present.

    ``records``: clean records to label instead of ``opts.private_dir``: a
    :class:`~ldpclient.io.records.RecordSource` of float values in ``[0, 1]`` at the teacher's
    input shape (as decoded images are), named ``0..N-1`` in the labels; their source ids,
    when the source has them, key the ledger (see ``Ledger.source_keys``). ``public``: images
    declared not private, in the same units, instead of ``opts.public``. ``opts.output``
    None writes no files (the report is still returned).
    """
    ui = ui or UI(quiet=True)
    opts.validate()
    check_label_outputs(opts, given_records=records is not None)
    if opts.dry_run:
        return dry_run(opts, token=token, teacher=teacher, records=records, public=public)
    timer = StageTimer()
    state = state_dir(opts.state_dir)
    with state_lock(state):  # one run at a time per state dir: ledger, journal and money cap are shared
        if records is None:
            # a missing, empty or unreadable folder fails before any network traffic
            check_private_folder(opts.folder(), max_pixels=opts.max_pixels)
        found = find_images(opts, records, public)
        setup = prepare(opts, token=token, teacher=teacher, ui=ui, timer=timer, state=state,
                         counts=image_counts(found, records, public))
        setup = replace(setup, check=read_check(opts, setup.meta, image_names(found, records)))
        if records is not None:
            images: Images = given_records(setup, records)
        else:
            assert found.private is not None  # listed when no records were handed over
            images = spool(setup, found.private, "loading")
        setup, outcome, shown = _label_images(setup, images, records, public, found.public)
        _merge_timings(timer, outcome.result)
        return _write(setup, images, outcome, shown)


def _label_images(
    setup: RunSetup, images: Images, records: RecordSource | None, public: RecordSource | None,
    public_found: Discovery | None,
) -> tuple[RunSetup, RunOutcome, PageImages | None]:
    """Load the public images, key the run and run the transfer on ``images``; the setup with the plan counted on
    the images decoded, the outcome, and what the page shows of the images. Every image spooled is closed (nothing
    of the clean records stays on disk)."""
    public_images = None
    try:
        public_images = load_public(setup, images.records, public, public_found)
        setup = replace(setup, plan=setup.plan.with_images(len(images), getattr(public_images, "records", None)))
        seeds = plan_seeds(setup, data_key(setup, records, images.records), folder_key(setup, records))
        outcome = _run_transfer(setup, seeds, images, public_images)
        return setup, outcome, page_images(setup, images, outcome)  # before the spool is closed
    finally:
        images.close()
        if public_images is not None:
            public_images.close()


def _write(setup: RunSetup, images: Images, outcome: RunOutcome, shown: PageImages | None) -> LabelRun:
    """Write the labels, the page and the report (each where the options say); the finished run."""
    report_path = report_path_for(setup.opts)
    written = write_outputs(setup, images, outcome, report_path)
    verdict = judge_run(setup, images.printable_paths, outcome)
    run_report = build_report(setup, images, outcome, written, verdict)
    report = run_report.to_dict()
    if shown is not None:
        write_page(setup, run_report, shown)
    if report_path is not None:
        write_json(report_path, report, secrets=(setup.token,))
    return LabelRun(report=report, result=outcome.result, paths=images.printable_paths, verdict=verdict)


def _run_transfer(setup: RunSetup, seeds: Seeds, images: Images, public_images: Images | None) -> RunOutcome:
    """Noise, query and train (then the baseline) on ``images``, the public images (or None) beside the private
    queries in both, less those found private (:func:`public_checked`), in a :class:`LabelSession` closed whatever
    happens; a stop report at a cap."""
    from ..privacy.ledger import BudgetExceeded
    from ..teachers import CostCapReached

    with LabelSession(setup, images.records) as session:
        try:
            return _transfer(setup, session, seeds, images, public_images)
        except CapForeseen:
            raise
        except (CostCapReached, BudgetExceeded) as exc:
            write_stop_report(setup, exc, session.client, session.ledger, images.records)
            raise


def _transfer(
    setup: RunSetup, session: LabelSession, seeds: Seeds, images: Images, public_images: Images | None
) -> RunOutcome:
    """Inside the open ``session``: the caps foreseen, then the transfer and the baseline run; what they left."""
    from ..transfer.pipeline import KnowledgeTransfer

    opts, ledger, client, progress = setup.opts, session.ledger, session.client, session.progress
    records, (plan, training, adaptation) = images.records, setup.plan.settings
    transfer = KnowledgeTransfer(
        setup.teacher, setup.mechanism, ledger=ledger, scope=setup.scope, mode=setup.plan.mode, seed=seeds.seed,
        release_generator=seeds.generator, progress=progress, client=client, stages=session.cluster, plan=plan,
        training=training, adaptation=adaptation, resolved=setup.plan.resolved, result_cache=result_cache(setup, seeds))
    public_images = public_checked(setup, ledger, transfer, images, public_images)
    public = public_images.records if public_images is not None else None
    base = baseline_transfer(setup, session, seeds) if setup.plan.baseline is not None else None
    # every cap the run can foresee, before anything is noised or sent (no stop report: nothing happened)
    if setup.plan.mode != Mode.DATA_FREE:
        to_release = transfer.records_to_release(records, public)  # None: every image
        foresee_privacy(ledger, setup.mechanism, records if to_release is None else SubsetRecords(records, to_release),
                        scope=setup.scope, cap=ledger.cap_epsilon)
    foresee_money(client, [p for t in (transfer, base) if t is not None for p in t.query_plans(records, public)],
                  opts.money_cap)
    with setup.timer.stage("pipeline"):
        result = transfer.run(records, public=public)
    progress.close()
    spent_after = ledger.spent(records).epsilon
    stats_private, spent_private = client.stats.snapshot(), client.cost.spent_run
    baseline = (run_baseline(setup, session, base, records, result, stats_private, spent_private, public)
                if base is not None else None)
    return RunOutcome(result=result, spent_after=spent_after, stats_private=stats_private, spent_private=spent_private,
                      spent_run=client.cost.spent_run, spent_total=client.cost.spent_total, billing=client.billing(),
                      ledger_cap=ledger.cap_epsilon, ledger_path=ledger.location,
                      query_batch_size=setup.plan.query_batch_size, baseline=baseline,
                      public_skipped=public_images.skipped if public_images is not None else ())


def _merge_timings(timer: StageTimer, result: TransferResult) -> None:
    """Replace the timer's ``pipeline`` stage by the pipeline's own stages, under the progress bars' names."""
    for k, v in result.timings.items():
        timer.seconds[StageProgress.stage_name(k)] = v
    timer.seconds.pop("pipeline", None)


def resume_hint(opts: LabelOptions) -> str:
    """What to tell a user whose run stopped: re-run the same command (state dir named)."""
    where = str(opts.state_dir) if opts.state_dir is not None else "the default state directory"
    return f"state kept in {where}; re-run the same command to resume without re-noising or paying twice"
