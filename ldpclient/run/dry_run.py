"""``label --dry-run``: the plan a run would follow, from the teacher's metadata and the files found, with the
money the journal already recorded. Nothing is decoded, noised, sent or charged.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..io.folders import check_private_folder
from ..io.records import RecordSource
from ..state import state_dir
from .caps import check_plan_money
from .handoffs import LabelRun
from .images import find_images, image_counts, image_names
from .options import LabelOptions
from .prepare import connect_teacher, plan_under_caps, read_check

if TYPE_CHECKING:
    from ..teachers.base import Teacher

__all__ = ["dry_run"]


def dry_run(
    opts: LabelOptions, *, token: str | None, teacher: Teacher | None, records: RecordSource | None,
    public: RecordSource | None,
) -> LabelRun:
    """``label --dry-run``: the plan, from the teacher's metadata and the files found. Nothing is decoded, noised,
    sent or charged, and the state directory is only read (the remembered wire format), never created."""
    if records is None:
        check_private_folder(opts.folder(), max_pixels=opts.max_pixels)
    state = state_dir(opts.state_dir, create=False)
    teacher, meta = connect_teacher(opts, token=token, teacher=teacher, state=state)
    try:
        found = find_images(opts, records, public)
        plan = plan_under_caps(opts, teacher, meta, state, image_counts(found, records, public))
        read_check(opts, meta, image_names(found, records))
        spent, answered = _money_so_far(opts, plan.scope)
        warnings = check_plan_money(plan, spent_money=spent, journal_has_answers=answered)
    finally:
        teacher.close()
    booking = getattr(teacher, "booking", None)
    # what the cap holds on, per query, in tokens
    described = plan.describe(booking=booking.describe() if booking is not None and opts.facts.token_priced else None)
    return LabelRun(report={"dry_run": True, "plan": described, "warnings": warnings}, result=None, paths=())


def _money_so_far(opts: LabelOptions, scope: str) -> tuple[float, bool]:
    """What the journal in the state directory recorded for the teacher ``scope``: money spent, and whether it
    holds answered batches (nothing when there is no journal yet). Read only: spend recorded under an older
    spelling of the teacher's address is merged by the run, which checks the cap again exactly."""
    if opts.money_cap is None:
        return 0.0, False
    path = opts.state_locations(state_dir(opts.state_dir, create=False)).journal
    if not _journal_exists(path):
        return 0.0, False
    from ..teachers import Journal

    with Journal(path) as journal:
        return journal.total_spend(scope), journal.count(scope) > 0


def _journal_exists(path: str | Path) -> bool:
    """Whether a journal is there (a file, or the tables in a database) without making one."""
    if not isinstance(path, str):
        return path.exists()
    from ..state.database import JOURNAL_NAMESPACE, Database

    db = Database.open(path, namespace=JOURNAL_NAMESPACE)
    try:
        return "batches" in db.tables()
    finally:
        db.close()
