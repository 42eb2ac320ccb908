"""A label run's set-up, before any image is decoded: the teacher opened and described, the ``--check`` labels
read, and the plan resolved under the caps the state directory holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from ..io.text import printable
from ..report.label_files import StageTimer
from ..teachers.http import redact_url
from ..teachers.units import ByteUnitsTeacher
from .caps import check_release_fits
from .check_file import CheckSet, check_indices, parse_check_rows, read_check_file
from .connect import connect_options, open_teacher
from .handoffs import RunSetup
from .options import LabelOptions
from .plan import RunPlan, RunTerms, resolve_plan

if TYPE_CHECKING:
    from ..teachers.base import Teacher, TeacherMetadata
    from .ui import UI

__all__ = ["booked_price", "connect_teacher", "held_cap", "plan_under_caps", "prepare", "read_check"]


def connect_teacher(
    opts: LabelOptions, *, token: str | None, teacher: Teacher | None, state: Path
) -> tuple[Teacher, TeacherMetadata]:
    """The opened teacher and its metadata (``discrete-tldp`` talks to it in byte units 0..255). A teacher error
    here comes before anything was noised, sent or paid (``nothing_done``: no resume advice)."""
    from ..teachers.errors import TeacherError

    try:
        if teacher is None:
            teacher = open_teacher(opts.teacher, token, connect_options(opts.teacher, opts.facts, opts.network, state))
        meta = teacher.metadata()
    except TeacherError as exc:
        exc.nothing_done = True
        raise
    if opts.mechanism == "discrete-tldp" and tuple(meta.value_range) != (0.0, 255.0):
        teacher = ByteUnitsTeacher(teacher)
        meta = teacher.metadata()
    return teacher, meta


def read_check(opts: LabelOptions, meta: TeacherMetadata, names: Sequence[str]) -> CheckSet | None:
    """The ``--check`` hand labels (None without), every image among ``names``: ValueError naming the first that is
    not, before anything is noised or sent. The labels are read on this device only and never sent."""
    if opts.check is None:
        return None
    classes = [str(c) for c in meta.class_names] if meta.class_names else None
    if isinstance(opts.check, Mapping):
        check = parse_check_rows(list(opts.check.items()), classes, meta.num_classes, "check=")
    else:
        check = read_check_file(opts.check, classes, meta.num_classes)
    missing = check_indices(check, names)[2]
    if missing:
        raise ValueError(f"{check.source}: {len(missing)} of its {len(check)} images are not among the private images "
                         f"(e.g. {printable(missing[0][:120])!r}); name each as the labels file does: its path "
                         "relative to the private folder")
    return check


def prepare(
    opts: LabelOptions, *, token: str | None, teacher: Teacher | None, ui: UI, timer: StageTimer, state: Path,
    counts: tuple[int, int],
) -> RunSetup:
    """Connect to and describe the teacher, then resolve the run's plan for ``counts`` (private, public) images
    (every check before any data is read)."""
    with timer.stage("connect"):
        teacher, meta = connect_teacher(opts, token=token, teacher=teacher, state=state)
    plan = plan_under_caps(opts, teacher, meta, state, counts)
    return RunSetup(plan=plan, token=token, ui=ui, timer=timer, state=state, teacher=teacher)


def plan_under_caps(
    opts: LabelOptions, teacher: Teacher, meta: TeacherMetadata, state: Path, counts: tuple[int, int]
) -> RunPlan:
    """The plan of a run (and of its dry run) for ``counts`` (private, public) images against ``teacher``: each
    query booked at the teacher's price, under the privacy cap the run holds, its release checked against a
    ``--privacy-cap`` (what the ledger would charge; reuse is free)."""
    n, n_public = counts
    terms = RunTerms(booked_price(opts, teacher), held_cap(opts, state))
    plan = resolve_plan(opts, meta, identity=redact_url(opts.teacher), scope=str(teacher.journal_scope), records=n,
                        public=n_public, terms=terms)
    if opts.privacy_cap is not None:
        check_release_fits(plan)
    return plan


def held_cap(opts: LabelOptions, state: Path) -> float | None:
    """The privacy cap the run works under: the ledger's, tightened by ``--privacy-cap``
    (:func:`~ldpclient.privacy.ledger.cap_history.cap_for_run`; a cap above the ledger's is refused)."""
    from ..privacy.ledger.cap_history import cap_for_run

    return cap_for_run(opts.state_locations(state).ledger, opts.privacy_cap, "--privacy-cap")


def booked_price(opts: LabelOptions, teacher: Teacher) -> float:
    """The price each query is booked at: for a teacher billed in tokens, where token prices were given, the most
    a query can cost (what caps and plans book); else ``--price``."""
    most = teacher.most_per_query()
    return float(most) if most is not None and opts.facts.token_priced else opts.price
