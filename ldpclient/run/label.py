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

import hashlib
import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence, Union

import numpy as np
import torch

from ..io.folders import (
    DecodedFolder,
    Discovery,
    Skipped,
    SpooledImages,
    check_private_folder,
    discover_images,
    printable_path,
    spool_private_folder,
    to_value_range,
)
from ..io.output import write_json
from ..io.records import MappedRecords, RecordSource, SubsetRecords, iter_batches, source_ids
from ..io.text import printable
from ..privacy.preprocess import delta_warning
from ..report.label_files import StageTimer, iter_label_rows, label_format_for, write_labels
from ..state import state_dir, state_lock
from ..teachers.http import redact_url
from ..teachers.units import ByteUnitsTeacher
from .caps import CapForeseen, check_plan_money, check_release_fits, foresee_money, foresee_privacy
from .check_file import CheckSet, check_indices, parse_check_rows, read_check_file
from .connect import connect_options, open_teacher
from .label_report import (
    build_report,
    judge_run,
    label_histogram,
    last_val_accuracy,
    report_path_for,
    write_stop_report,
)
from .options import LabelOptions
from .output_paths import check_output_paths
from .plan import resolve_plan
from .progress import StageProgress
from .run_state import RunState
from .stages import Baseline, LabelRun, RunOutcome, RunSetup, WrittenOutputs
from .ui import UI

if TYPE_CHECKING:
    from ..cluster.engine import Cluster
    from ..privacy.guarantee import Domain
    from ..privacy.ledger import Ledger
    from ..report.label_page import PageImages
    from ..teachers.base import Teacher, TeacherMetadata
    from ..teachers.client import QueryClient
    from ..transfer.mirror_check import MirrorCheck
    from ..transfer.pipeline import KnowledgeTransfer
    from ..transfer.result import TransferResult
    from ..transfer.result_cache import ResultCache

__all__ = ["Images", "LabelOptions", "known_private", "label_run", "refuse_known_private", "resume_hint",
           "without_copies"]



@dataclass(frozen=True)
class _Seeds:
    """The query-plan seed (kept in ``runs.json``, so a re-run plans the same batches), the release generator, and
    what the run labels (``data_key``: its records by their bytes or values), which keys its kept result."""

    seed: int
    generator: torch.Generator | None
    data_key: str = ""


@dataclass(frozen=True)
class _Session:
    """The run's open state: the ledger, the journalled query client, its progress bars, and the cluster the
    release and the student's passes run on (None: here)."""

    ledger: Ledger
    client: QueryClient
    progress: StageProgress
    cluster: Cluster | None = None


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
    _check_output_paths(opts, given_records=records is not None)
    if opts.dry_run:
        return _dry_run(opts, token=token, teacher=teacher, records=records, public=public)
    timer = StageTimer()
    state = state_dir(opts.state_dir)
    with state_lock(state):  # one run at a time per state dir: ledger, journal and money cap are shared
        if records is None:
            # a missing, empty or unreadable folder fails before any network traffic
            check_private_folder(opts.folder(), max_pixels=opts.max_pixels)
        found = _find_images(opts, records, public)
        setup = _prepare(opts, token=token, teacher=teacher, ui=ui, timer=timer, state=state,
                         counts=_image_counts(found, records, public))
        setup = replace(setup, check=read_check(opts, setup.meta, _names(found, records)))
        if records is not None:
            images: Images = _given_records(setup, records)
        else:
            assert found.private is not None  # listed when no records were handed over
            images = _spool(setup, found.private, "loading")
        carriers = None
        try:
            carriers = _load_public(setup, images.records, public, found.public)
            setup = replace(setup, plan=setup.plan.with_counts(len(images), len(carriers) if carriers else 0))
            seeds = _plan_seeds(setup, _data_key(setup, records, images.records), _folder_key(setup, records))
            session = _open_session(setup)
            outcome = _run_transfer(setup, session, seeds, images, carriers)
            page_images = _page_images(setup, images, outcome)  # before the spool is closed
        finally:
            images.close()  # the spooled clean records: nothing of them stays on disk
            if carriers is not None:
                carriers.close()
        _merge_timings(timer, outcome.result)

        report_path = report_path_for(setup.opts)
        written = _write_outputs(setup, images, outcome, report_path)
        verdict = judge_run(setup, images.printable_paths, outcome)
        report = build_report(setup, images, outcome, written, verdict).to_dict()
        if page_images is not None:
            _write_page(setup, report, page_images)
        if report_path is not None:
            write_json(report_path, report, secrets=(token,))
        return LabelRun(report=report, result=outcome.result, paths=images.printable_paths, verdict=verdict)


def _check_output_paths(opts: LabelOptions, *, given_records: bool) -> None:
    """ValueError before anything is noised or sent when a file the run writes is an input, another output or
    state (:func:`~ldpclient.run.output_paths.check_output_paths`)."""
    outputs: dict[str, Path] = {}
    if opts.output is not None:
        outputs["--output"] = opts.output
        if opts.adapt:
            outputs["--output's unadapted labels"] = _sibling(opts.output, ".unadapted")
        if opts.baseline:
            outputs["--baseline's labels"] = _sibling(opts.output, ".baseline")
            outputs["--baseline's unadapted labels"] = _sibling(opts.output, ".baseline.unadapted")
    if opts.html_path is not None:
        outputs["--html"] = opts.html_path
    report = report_path_for(opts)
    if report is not None:
        outputs["--report"] = report
    folders = {} if given_records else {"PRIVATE_DIR": opts.folder()}
    if opts.public is not None:
        folders["--public"] = opts.public
    check_output_paths(outputs, input_files={"--check": opts.check} if isinstance(opts.check, Path) else {},
                       input_folders=folders, state=opts.state_locations(state_dir(opts.state_dir, create=False)))


@dataclass(frozen=True)
class _GivenImages(DecodedFolder):
    """Records handed over in memory (``label_run(records=...)``): named ``0..N-1``, nothing skipped."""

    records: RecordSource

    def close(self) -> None:
        """Nothing to release: the caller owns the records."""


#: The images a run labels (or sends as public): a folder spooled to disk, or records handed over in memory; public
#: images may have some left out (``_KeptImages``, defined below).
Images = Union[SpooledImages, _GivenImages, "_KeptImages"]


def _given_records(setup: RunSetup, records: RecordSource) -> _GivenImages:
    """The caller's records (``[0, 1]`` units) in the teacher's value range, read lazily, with their source ids."""
    if tuple(records.record_shape) != tuple(setup.shape):
        raise ValueError(
            f"records of shape {tuple(records.record_shape)} do not match the teacher's input shape {setup.shape}"
        )
    if len(records) < 1:
        raise ValueError("no records to label")
    meta, integer = setup.meta, setup.mechanism.domain.integer
    source = MappedRecords(records, lambda r: to_value_range(r, meta.value_range, integer=integer))
    return _GivenImages(Path("<records>"), tuple(str(i) for i in range(len(records))), (), source)


def _load_public(
    setup: RunSetup, private: RecordSource, given: RecordSource | None, found: Discovery | None

) -> Images | None:
    """The images declared public (``given``, or the ``--public`` folder's listing ``found``) in the teacher's
    shape and value range, spooled like the private ones; None without any. ValueError when one of them is also
    a private image (:func:`public_overlap`): nothing private is ever sent without noise because it was called
    public."""
    meta = setup.meta
    if given is not None:
        carriers: Images = _given_records(setup, given)
    elif found is not None:
        carriers = _spool(setup, found, "public")
    else:
        return None
    where = _public_where(setup)
    try:
        both = public_overlap(private, carriers.records, (float(meta.value_range[0]), float(meta.value_range[1])))
        if both:
            name = carriers.printable_paths[both[0]]
            raise ValueError(f"{where}: {len(both)} image(s) are also in the private images (e.g. {name!r}); an "
                             "image cannot be both public and private: remove it from one of them")
    except BaseException:
        carriers.close()
        raise
    return carriers


def _public_where(setup: RunSetup) -> str:
    """How messages name the public images: the ``--public`` folder, or the records handed over."""
    return f"--public {str(setup.opts.public)!r}" if setup.opts.public is not None else "the public records"


#: Public images a refusal names on the terminal (the report's ``public_skipped`` lists every one left out).
NAMED_COPIES = 5


def known_private(ledger: Ledger, carriers: Images, *, domain: Domain, private: Images | None = None,
                  check: MirrorCheck | None = None) -> dict[int, str]:
    """The public images (``carriers``: their ``records``) that are private images, by index, each with the reason
    in words: charged before, from whatever folder, or a near copy of an image the ledger charged or of one of
    ``private`` (this run's private images, named by their files), as they are or mirrored, turned or inverted
    (``Ledger.private_copies``); or one whose copy the mirror check would send (``check``: a
    :class:`~ldpclient.transfer.mirror_check.MirrorCheck`, or None) is such a copy."""
    n = len(carriers.records)
    known = ledger.private_copies(carriers.records, domain=domain,
                                  private=private.records if private is not None else None,
                                  private_names=private.printable_paths if private is not None else None,
                                  more=check.images if check is not None else None)
    own = {k: why for k, why in known.items() if k < n}
    for k, why in known.items():  # the check's copies: named by the public image each was made from
        if k >= n:
            assert check is not None  # found beyond the images: among the check's copies
            own.setdefault(int(check.sample[(k - n) % check.size]), f"its mirror check's copy is {why}")
    return dict(sorted(own.items()))


def refuse_known_private(carriers: Images, copies: dict[int, str], where: str) -> None:
    """ValueError (before anything is sent) naming the public images ``copies`` found private
    (:func:`known_private`), the first :data:`NAMED_COPIES` with the private image each copies."""
    if not copies:
        return
    named = "; ".join(f"{carriers.printable_paths[k]!r}: {why}" for k, why in list(copies.items())[:NAMED_COPIES])
    more = f"; and {len(copies) - NAMED_COPIES} more" if len(copies) > NAMED_COPIES else ""
    raise ValueError(
        f"{where}: {len(copies)} image(s) are private images ({named}{more}); nothing was sent: a private image, or "
        "a copy of one, is never sent as public: remove them from the public images, or give --public-skip-copies "
        "to leave them out (each is then listed in the report)")


@dataclass(frozen=True)
class _KeptImages(DecodedFolder):
    """Public images without those found private: ``records`` the rest of ``whole``'s, ``skipped`` with each one left
    out and the private image it copies."""

    records: RecordSource
    whole: Union[SpooledImages, _GivenImages]

    def close(self) -> None:
        self.whole.close()


def without_copies(carriers: Images, copies: dict[int, str]) -> Images:
    """``carriers`` less the images ``copies`` (:func:`known_private`), each named in ``skipped`` with its reason."""
    keep = [k for k in range(len(carriers.records)) if k not in copies]
    whole = carriers.whole if isinstance(carriers, _KeptImages) else carriers
    left_out = tuple(Skipped(carriers.paths[k], f"not sent: {why}") for k, why in copies.items())
    return _KeptImages(carriers.root, tuple(carriers.paths[k] for k in keep),
                       tuple(sorted(carriers.skipped + left_out, key=lambda s: s.path)),
                       SubsetRecords(carriers.records, keep), whole)


def public_overlap(private: RecordSource, public: RecordSource, value_range: tuple[float, float]) -> list[int]:
    """Indices of the ``public`` records that are also ``private`` records: the same source id (a file's
    SHA-256, when both sources have them) or the same values on the 8-bit scale of ``value_range`` at the
    teacher's shape (the same picture in another file or format)."""
    by_id = source_ids(private, [0]) is not None and source_ids(public, [0]) is not None
    lo, hi = value_range

    def keys(source: RecordSource) -> Iterator[tuple[int, bytes]]:
        for idx, chunk in iter_batches(source, 1024):
            levels = ((chunk.double() - lo) / (hi - lo)).clamp(0, 1).mul(255).round().to(torch.uint8).numpy()
            for k, row in zip(idx.tolist(), levels, strict=True):
                yield k, b"pixels:" + hashlib.sha256(row.tobytes()).digest()
            if by_id:
                ids = source_ids(source, idx) or []
                for k, i in zip(idx.tolist(), ids, strict=True):
                    yield k, b"source:" + (i if isinstance(i, bytes) else str(i).encode())

    private_keys = {key for _, key in keys(private)}
    return sorted({k for k, key in keys(public) if key in private_keys})


def _data_key(setup: RunSetup, records: RecordSource | None, decoded: RecordSource) -> str:
    """What the run labels, for the plan key of its seed (``runs.json``, or the database): a folder's image files by
    their bytes, in the order the run takes them (the SHA-256 of each, as the ledger knows them), so that a host
    that mounts the folder elsewhere resumes the same plan; records handed over, by a digest of their values."""
    if records is None:
        ids = source_ids(decoded, np.arange(len(decoded)))
        if ids is None:  # pragma: no cover - a decoded folder always names its files by their bytes
            return _folder_key(setup, records) or ""
        digest = hashlib.sha256(b"ldpclient-folder-v1\x00")
        for sid in ids:
            raw = sid if isinstance(sid, bytes) else sid.encode("utf-8", "surrogateescape")
            digest.update(hashlib.sha256(raw).digest())
        return "files:" + digest.hexdigest()
    digest = hashlib.sha256(repr((len(records), tuple(records.record_shape))).encode())
    for _, chunk in iter_batches(records, 1024):
        digest.update(chunk.to(torch.float32).contiguous().numpy().tobytes())
    return "records:" + digest.hexdigest()


def _connect(
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


@dataclass(frozen=True)
class _Found:
    """The image files of the private and ``--public`` folders, listed once, before anything is decoded: the plan
    counts them and the decoding reads them (None where records were handed over, or without ``--public``)."""

    private: Discovery | None
    public: Discovery | None


def _find_images(opts: LabelOptions, records: RecordSource | None, public: RecordSource | None) -> _Found:
    return _Found(
        private=None if records is not None else discover_images(opts.folder()),
        public=None if public is not None or opts.public is None else discover_images(opts.public,
                                                                                      what="--public folder"),
    )


def _names(found: _Found, records: RecordSource | None) -> tuple[str, ...]:
    """The private images' names as the labels file writes them, before anything is decoded."""
    if records is not None:
        return tuple(str(i) for i in range(len(records)))
    assert found.private is not None
    return tuple(printable_path(f) for f in found.private.files)


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


def _image_counts(found: _Found, records: RecordSource | None, public: RecordSource | None) -> tuple[int, int]:
    """Private and public images to plan for, before anything is decoded: the records given, or the image files
    found (files that turn out undecodable are skipped later, and the plan follows: ``RunPlan.with_counts``)."""
    n = len(records) if records is not None else len(found.private.files if found.private is not None else ())
    if public is not None:
        return n, len(public)
    return n, len(found.public.files) if found.public is not None else 0


def _prepare(
    opts: LabelOptions, *, token: str | None, teacher: Teacher | None, ui: UI, timer: StageTimer, state: Path,
    counts: tuple[int, int],
) -> RunSetup:
    """Connect to and describe the teacher, then resolve the run's plan for ``counts`` (private, public) images
    (every check before any data is read)."""
    with timer.stage("connect"):
        teacher, meta = _connect(opts, token=token, teacher=teacher, state=state)
    opts = _priced_by_teacher(opts, teacher)
    n, n_public = counts
    plan = resolve_plan(_with_held_cap(opts, state), meta, identity=redact_url(opts.teacher),
                        scope=str(teacher.journal_scope), records=n, public=n_public)
    if opts.privacy_cap is not None:  # a held cap is checked against what the ledger would charge (reuse is free)
        check_release_fits(plan)
    return RunSetup(plan=plan, token=token, ui=ui, timer=timer, state=state, teacher=teacher)


def _with_held_cap(opts: LabelOptions, state: Path) -> LabelOptions:
    """``opts`` with the privacy cap the run works under: the ledger's, tightened by ``--privacy-cap``
    (:func:`~ldpclient.privacy.ledger.cap_history.cap_for_run`; a cap above the ledger's is refused)."""
    from ..privacy.ledger.cap_history import cap_for_run

    return replace(opts, privacy_cap=cap_for_run(opts.state_locations(state).ledger, opts.privacy_cap,
                                                  "--privacy-cap"))


def _priced_by_teacher(opts: LabelOptions, teacher: Teacher) -> LabelOptions:
    """``opts`` with the price per query a teacher billed in tokens books each query at (the most it can cost:
    what caps and plans book), where token prices were given."""
    most = teacher.most_per_query()
    return replace(opts, price=float(most)) if most is not None and opts.facts.token_priced else opts


def _dry_run(
    opts: LabelOptions, *, token: str | None, teacher: Teacher | None, records: RecordSource | None,
    public: RecordSource | None,
) -> LabelRun:
    """``label --dry-run``: the plan, from the teacher's metadata and the files found. Nothing is decoded, noised,
    sent or charged, and the state directory is only read (the remembered wire format), never created."""
    if records is None:
        check_private_folder(opts.folder(), max_pixels=opts.max_pixels)
    state = state_dir(opts.state_dir, create=False)
    held = _with_held_cap(opts, state)
    teacher, meta = _connect(opts, token=token, teacher=teacher, state=state)
    held = _priced_by_teacher(held, teacher)
    try:
        found = _find_images(opts, records, public)
        n, n_public = _image_counts(found, records, public)
        plan = resolve_plan(held, meta, identity=redact_url(opts.teacher),
                            scope=str(teacher.journal_scope), records=n, public=n_public)
        read_check(opts, meta, _names(found, records))
        if opts.privacy_cap is not None:
            check_release_fits(plan)
        warnings = check_plan_money(plan, **_money_so_far(opts, plan.scope))
    finally:
        teacher.close()
    described = plan.describe()
    booking = getattr(teacher, "booking", None)
    if booking is not None and opts.facts.token_priced:  # what the cap holds on, per query, in tokens
        described["spend"]["booking"] = booking.describe()
    return LabelRun(report={"dry_run": True, "plan": described, "warnings": warnings}, result=None, paths=())


def _money_so_far(opts: LabelOptions, scope: str) -> dict[str, Any]:
    """What the journal in the state directory recorded for the teacher ``scope``: money spent, and whether it
    holds answered batches (nothing when there is no journal yet). Read only: spend recorded under an older
    spelling of the teacher's address is merged by the run, which checks the cap again exactly."""
    if opts.money_cap is None:
        return {"spent_money": 0.0, "journal_has_answers": False}
    path = opts.state_locations(state_dir(opts.state_dir, create=False)).journal
    if not _journal_exists(path):
        return {"spent_money": 0.0, "journal_has_answers": False}
    from ..teachers import Journal

    with Journal(path) as journal:
        return {"spent_money": journal.total_spend(scope), "journal_has_answers": journal.count(scope) > 0}


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


def _spool(setup: RunSetup, found: Discovery, stage: str) -> SpooledImages:
    """Decode the listed images at the teacher's shape, in its value range, into a spool file in the state
    directory (an unlinked temporary file: memory O(chunk), nothing left behind), under a progress bar named
    ``stage``; the caller closes it."""
    opts, meta, integer = setup.opts, setup.meta, setup.mechanism.domain.integer
    with setup.timer.stage("loading"), setup.ui.stage(stage, None) as bar:
        return spool_private_folder(
            found, setup.shape, convert=lambda r: to_value_range(r, meta.value_range, integer=integer),
            directory=setup.state, max_pixels=opts.max_pixels, progress=lambda d, t: bar.update(d, total=t),
        )


def _folder_key(setup: RunSetup, records: RecordSource | None) -> str | None:
    """How a folder's plan was keyed before the key named its files by their bytes: its path (None: records)."""
    return str(setup.opts.folder().resolve()) if records is None else None


def _plan_seeds(setup: RunSetup, data_key: str, old_data_key: str | None = None) -> _Seeds:
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
        "postprocess": opts.postprocess,
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
    return _Seeds(seed=plan_seed, generator=generator, data_key=data_key)


def _open_session(setup: RunSetup) -> _Session:
    """Open the ledger and the journal, and build the query client and its progress bars."""
    from ..privacy.ledger import Ledger
    from ..teachers import CostMeter, Journal, QueryClient

    opts, where = setup.opts, setup.opts.state_locations(setup.state)
    ledger = Ledger(where.ledger, key_file=where.ledger_key, cap_epsilon=opts.privacy_cap, cap_origin="--privacy-cap")
    try:
        journal = Journal(where.journal)
    except BaseException:
        ledger.close()
        raise
    # a teacher billed in tokens books its own queries (the client asks it before each batch): no price of ours
    cost = CostMeter(price_per_query=0.0 if opts.facts.token_priced else opts.price, cap=opts.money_cap)
    client = QueryClient(
        setup.teacher, batch_size=opts.batch_size, workers=opts.workers, journal=journal, cost=cost, scope=setup.scope
    )
    cluster = None
    if opts.cluster is not None and opts.state is not None:  # validate() refused --cluster without --state
        from ..cluster.engine import Cluster, open_engine

        try:
            engine = open_engine(opts.cluster, timeout=min(10.0, opts.network.timeout))
            setup.ui.info(f"cluster: {engine.joined}")
        except BaseException:
            client.close()
            ledger.close()
            raise
        key = where.ledger_key
        cluster = Cluster(engine, opts.state, str(key) if key is not None else None, ledger.cap_epsilon,
                          ledger.cap_delta)
    return _Session(ledger=ledger, client=client, progress=StageProgress(setup.ui, "", client), cluster=cluster)


def _run_transfer(
    setup: RunSetup, session: _Session, seeds: _Seeds, images: Images, carriers: Images | None
) -> RunOutcome:
    """Noise, query and train (then the baseline) on ``images``, the public images (``carriers``, or None) beside
    the private queries in both, less those found private (:func:`_public_checked`); a stop report at a cap; client
    and ledger closed whatever happens."""
    from ..privacy.ledger import BudgetExceeded
    from ..teachers import CostCapReached
    from ..transfer.pipeline import KnowledgeTransfer

    opts, ledger, client, progress = setup.opts, session.ledger, session.client, session.progress
    records = images.records
    try:
        transfer = KnowledgeTransfer(
            setup.teacher, setup.mechanism, ledger=ledger, scope=setup.scope, mode=setup.plan.mode,
            seed=seeds.seed, release_generator=seeds.generator, progress=progress, client=client,
            stages=session.cluster, result_cache=_result_cache(setup, seeds), **setup.plan.settings.as_kwargs(),
        )
        carriers = _public_checked(setup, ledger, transfer, images, carriers)
        public = carriers.records if carriers is not None else None
        base = _baseline_transfer(setup, session, seeds) if opts.baseline else None
        # every cap the run can foresee, before anything is noised or sent (no stop report: nothing happened)
        if setup.plan.mode != "data-free":
            to_release = transfer.records_to_release(records)  # None: every image
            foresee_privacy(
                ledger,
                setup.mechanism,
                records if to_release is None else SubsetRecords(records, to_release),
                scope=setup.scope,
                cap=ledger.cap_epsilon,
            )
        foresee_money(client, [p for t in (transfer, base) if t is not None for p in t.query_plans(records, public)],
                      opts.money_cap)
        with setup.timer.stage("pipeline"):
            result = transfer.run(records, public=public)
        progress.close()
        spent_after = ledger.spent(records).epsilon
        stats_private = {**asdict(client.stats), "spent_run": client.cost.spent_run}
        baseline = None
        if base is not None:
            baseline = _run_baseline(setup, session, base, records, result, stats_private, public)
        client_report = client.report()
    except CapForeseen:
        raise
    except (CostCapReached, BudgetExceeded) as exc:
        write_stop_report(opts, exc, setup.identity, client, ledger, records, setup.token)
        raise
    finally:
        progress.close()
        client.close()
        if session.cluster is not None:
            session.cluster.close()
        ledger_cap = ledger.cap_epsilon
        ledger_path = ledger.location
        ledger.close()
    return RunOutcome(result=result, spent_after=spent_after, stats_private=stats_private,
                    client_report=client_report, ledger_cap=ledger_cap, ledger_path=ledger_path,
                    query_batch_size=setup.plan.query_batch_size, baseline=baseline,
                    public_skipped=tuple(getattr(carriers, "skipped", ())))


def _public_checked(
    setup: RunSetup, ledger: Ledger, transfer: KnowledgeTransfer, images: Images, carriers: Images | None
) -> Images | None:
    """``carriers`` once no public image is a private one (:func:`known_private`): those that are left out with
    ``--public-skip-copies`` (and the rest checked again, with the mirror check's copies of the rest), else the
    run refused (ValueError) before anything is sent."""
    if carriers is None:
        return None
    domain = setup.mechanism.domain
    copies = known_private(ledger, carriers, domain=domain, private=images,
                           check=transfer.mirror_check(images.records, carriers.records))
    if copies and setup.opts.public_skip_copies:
        carriers = without_copies(carriers, copies)
        if not len(carriers.records):
            raise ValueError(f"{_public_where(setup)}: every public image is a private image or a copy of one; "
                             "nothing was sent")
        copies = known_private(ledger, carriers, domain=domain, private=images,
                               check=transfer.mirror_check(images.records, carriers.records))
    refuse_known_private(carriers, copies, _public_where(setup))
    return carriers


def _baseline_transfer(setup: RunSetup, session: _Session, seeds: _Seeds) -> KnowledgeTransfer:
    """The data-free baseline's transfer (blank public input, no privacy cost), with a progress bar of its own.

    Its blank queries are noised at the free level (the plan's ``free_mechanism``), not at the private run's
    epsilon: the strongest data-free labels the study found, whatever epsilon is chosen. With public images it
    uses them too, as the private run does (their answers come from the journal).
    """
    from ..transfer.pipeline import KnowledgeTransfer

    plan = setup.plan
    assert plan.free_mechanism is not None  # planned with --baseline
    base_seed = (seeds.seed * 1_000_003 + 0xB45E) % (2**31)
    settings = plan.settings.as_kwargs()
    settings["plan"] = replace(settings["plan"], postprocess=plan.free_postprocess)
    return KnowledgeTransfer(
        setup.teacher, plan.free_mechanism, mode="data-free", seed=base_seed,
        release_generator=torch.Generator().manual_seed(base_seed),  # public blank input: a fixed seed is harmless
        progress=StageProgress(setup.ui, "baseline ", session.client), client=session.client,
        result_cache=_result_cache(setup, seeds), **settings,
    )


def _result_cache(setup: RunSetup, seeds: _Seeds) -> ResultCache | None:
    """Where the run keeps its trained result (:mod:`ldpclient.transfer.result_cache`): this host's state
    directory, under what the run labels."""
    from ..transfer.result_cache import ResultCache

    return ResultCache(setup.state / "students", seeds.data_key) if seeds.data_key else None


def _run_baseline(
    setup: RunSetup, session: _Session, base: KnowledgeTransfer, records: RecordSource, result: TransferResult,
    stats_private: Mapping[str, Any], public: RecordSource | None,
) -> Baseline:
    """Run the data-free baseline ``base`` (:func:`_baseline_transfer`); how far it agrees with the private run."""
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
        "mode": "data-free" + (" with the public images" if public is not None else ""),
        "epsilon_record": 0.0,
        "blank_query_noise": base.mechanism.config(),
        "queries_sent": client.stats.queries_sent - stats_private["queries_sent"],
        "queries_from_journal": client.stats.queries_from_journal - stats_private["queries_from_journal"],
        "spent": client.cost.spent_run - stats_private["spent_run"],
        "agreement_with_private_run": agree,
        "student_val_accuracy": last_val_accuracy(base_result),
        "label_histogram": label_histogram(base_result.labels, setup.meta.num_classes),
    }
    return Baseline(section=section, labels=base_result.labels, confidences=base_conf,
                     unadapted=base_result.unadapted_labels)


def _merge_timings(timer: StageTimer, result: TransferResult) -> None:
    """Replace the timer's ``pipeline`` stage by the pipeline's own stages, under the progress bars' names."""
    for k, v in result.timings.items():
        timer.seconds[StageProgress.stage_name(k)] = v
    timer.seconds.pop("pipeline", None)


def _write_outputs(setup: RunSetup, images: Images, outcome: RunOutcome, report_path: Path | None) -> WrittenOutputs:
    """Write the labels, the unadapted and baseline labels beside them (rows streamed); the ``outputs`` section."""
    opts, n, result = setup.opts, len(images), outcome.result
    if opts.output is None:  # the library asked for the result only
        return WrittenOutputs(labelled=n, outputs={})
    fmt = label_format_for(opts.output, opts.format)
    paths = images.printable_paths

    def write(path: Path, labels: torch.Tensor, confidences: torch.Tensor | None) -> None:
        conf = confidences if confidences is not None else _no_conf(n)
        write_labels(path, iter_label_rows(paths, labels, conf, setup.meta.class_names), fmt)

    write(opts.output, result.labels, result.confidences)
    outputs = {"labels": str(opts.output), "format": fmt, "report": str(report_path)}
    if opts.html_path is not None:
        outputs["html"] = str(opts.html_path)
    if result.unadapted_labels is not None:  # what the student said before adaptation, for comparison
        outputs["unadapted_labels"] = str(_sibling(opts.output, ".unadapted"))
        write(_sibling(opts.output, ".unadapted"), result.unadapted_labels, None)
    baseline = outcome.baseline
    if baseline is not None:
        outputs["baseline_labels"] = str(_sibling(opts.output, ".baseline"))
        write(_sibling(opts.output, ".baseline"), baseline.labels, baseline.confidences)
        if baseline.unadapted is not None:
            outputs["baseline_unadapted_labels"] = str(_sibling(opts.output, ".baseline.unadapted"))
            write(_sibling(opts.output, ".baseline.unadapted"), baseline.unadapted, None)
    return WrittenOutputs(labelled=n, outputs=outputs)


def _page_images(setup: RunSetup, images: Images, outcome: RunOutcome) -> PageImages | None:
    """What ``--html`` shows of the images (None without ``--html``): the run's sample of releases and queries,
    and with ``--html-private`` the clean images of those releases and their file names (read from the spool)."""
    from ..report.label_page import PageImages

    opts, sample = setup.opts, outcome.result.sent_sample
    if opts.html_path is None:
        return None
    value_range = (float(setup.meta.value_range[0]), float(setup.meta.value_range[1]))
    if not opts.html_private or sample is None:
        return PageImages(sample=sample, value_range=value_range)
    idx = sample.release_indices
    lo, hi = value_range
    clean = (images.records.read(idx).float() - lo) / (hi - lo)
    names = images.printable_paths
    shown = {int(k) for k in idx} | {k for sources in sample.query_sources for k in sources}
    return PageImages(sample=sample, value_range=value_range, clean=clean, clean_names={k: names[k] for k in shown})


def _write_page(setup: RunSetup, report: dict[str, Any], page_images: PageImages) -> None:
    """Write the ``--html`` page (its path is in the report's ``outputs``), peer text escaped, secrets scrubbed."""
    from ..io.output import atomic_write_text, scrub
    from ..report.label_page import label_page

    path = setup.opts.html_path
    assert path is not None
    html = label_page(report, page_images, [str(n) for n in setup.meta.class_names or ()])
    atomic_write_text(path, scrub(html, (setup.token,)))


def _sibling(output: Path, tag: str) -> Path:
    """``labels.csv`` -> ``labels<tag>.csv`` beside it."""
    return output.with_name(output.stem + tag + output.suffix)


def _no_conf(n: int) -> torch.Tensor:
    return torch.full((n,), float("nan"))


def resume_hint(opts: LabelOptions) -> str:
    """What to tell a user whose run stopped: re-run the same command (state dir named)."""
    where = str(opts.state_dir) if opts.state_dir is not None else "the default state directory"
    return f"state kept in {where}; re-run the same command to resume without re-noising or paying twice"
