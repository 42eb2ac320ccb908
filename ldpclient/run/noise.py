"""The flow behind ``ldpclient noise``: release every image once (charged in the ledger) and write what a
teacher would see (``OUT/<relative path>.png`` and ``OUT/preview.png``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from ..io.document import JSONDict
from ..io.folders import Skipped, SpooledImages, spool_private_folder, to_uint8_image, to_value_range
from ..io.output import atomic_save_image, preview_grid, versions
from ..names import PLAN_KINDS
from ..report.run_report import NoiseCountsSection, NoiseLedgerSection, NoiseReport
from ..state import state_dir, state_lock
from ..teachers.http import redact_url
from ..teachers.limits import TeacherLimits
from .connect import connect_options, open_teacher
from .images import show_ledger
from .mechanism import fit_public_basis
from .memory import check_memory_for_shape
from .noise_decoding import noise_decoding, public_values
from .options import NoiseOptions
from .output_paths import check_output_paths
from .plan import PCA_NEEDS_PUBLIC, ReleaseSettings, build_mechanism, settle_release
from .ui import UI

if TYPE_CHECKING:
    from ..io.records import RecordSource
    from ..privacy.base import Mechanism
    from ..transfer.postprocess import ReleaseRows


@dataclass(frozen=True)
class _NoiseTarget:
    """What a noise run releases for: the record shape, the mechanism's value range and the ledger scope."""

    shape: tuple[int, ...]
    value_range: tuple[float, float]
    scope: str


def run_noise(opts: NoiseOptions, *, token: str | None = None, ui: UI | None = None) -> dict[str, object]:
    """Release every image of the folder once (charged in the ledger) and write what a teacher would see.

    Writes ``OUT/<relative path>.png`` per record (the post-processed release,
    clipped and quantised to 8 bits: free post-processing) and ``OUT/preview.png``
    (rows: clean, released, augmented). With ``teacher`` the release is made for
    that teacher (same ledger scope as ``ldpclient label``), so a later label run
    reuses it at no further cost.
    """
    ui = ui or UI(quiet=True)
    opts.validate()
    folders = {"PRIVATE_DIR": opts.private_dir, **({"--public": opts.public} if opts.public is not None else {})}
    check_output_paths({}, output_folders={"--out": Path(opts.out)}, input_folders=folders,
                       state=opts.state_locations(state_dir(opts.state_dir, create=False)))
    state = state_dir(opts.state_dir)
    with state_lock(state):  # one run at a time per state dir
        target = _noise_target(opts, token, state)
        settled = settle_release(opts, target.shape)
        if settled.basis == "pca" and opts.public is None:
            raise ValueError(PCA_NEEDS_PUBLIC)
        mechanism = build_mechanism(opts, settled, target.value_range, target.shape)  # pca: fitted once loaded
        lo, hi = target.value_range
        with ui.stage("loading", None) as bar:
            images = spool_private_folder(
                opts.private_dir, target.shape, directory=state, max_pixels=opts.max_pixels,
                convert=lambda r: to_value_range(r, target.value_range, integer=mechanism.domain.integer),
                progress=lambda d, t: bar.update(d, total=t),
            )
        with images:
            noised = _noise_and_write(opts, settled, images, mechanism, target, state, ui)
            preview_path = _write_preview(opts, Path(opts.out), images.records, noised.rows, noised.mechanism,
                                          lambda v: (v - lo) / (hi - lo))
        release, n = noised.rows.release, len(images)
        fresh, reused = int((~release.reused).sum()), int(release.reused.sum())
        return NoiseReport(
            command="noise",
            ok=True,
            private_dir=str(opts.private_dir),
            scope=target.scope,
            guarantee=release.guarantee.as_dict(),
            counts=NoiseCountsSection(noised=n, fresh=fresh, reused=reused, skipped=len(images.skipped)),
            ledger=NoiseLedgerSection(fresh=fresh, reused=reused, max_spent_epsilon=noised.max_spent,
                                      cap_epsilon=noised.cap),
            skipped=[s.as_dict() for s in images.skipped],
            public_skipped=[s.as_dict() for s in noised.public_skipped],
            outputs={"dir": str(opts.out), "preview": str(preview_path), "files": n},
            versions=versions(),
            decoding=noised.decoding,
        ).to_dict()


@dataclass(frozen=True)
class _Noised:
    """A noise run's releases (post-processed on demand), the mechanism that made them (a ``pca`` basis fitted), the
    largest per-record spend after it, the cap the ledger held it to (per record; None: no cap), and the public
    images left out as near copies of private ones (``--public-skip-copies``)."""

    rows: ReleaseRows
    mechanism: Mechanism
    max_spent: float
    cap: float | None
    decoding: JSONDict | None
    public_skipped: tuple[Skipped, ...]


def _noise_and_write(
    opts: NoiseOptions, settled: ReleaseSettings, images: SpooledImages, mechanism: Mechanism, target: _NoiseTarget,
    state: Path, ui: UI,
) -> _Noised:
    """Release the records in chunks through the ledger and write each one's post-processed release as
    ``OUT/<relative path>.png`` (clipped to the value range, quantised to 8 bits: free post-processing), decoded
    with ``--decode`` where ``label`` decodes (:mod:`.noise_decoding`)."""
    from ..privacy.ledger import Ledger
    from ..privacy.release import ReleaseBuilder
    from ..teachers.identity import merge_scope_aliases
    from ..transfer.postprocess import ReleaseRows, parse_postprocess
    from ..transfer.stages.release import release_in_chunks

    lo, hi = target.value_range
    transforms = parse_postprocess(settled.postprocess)
    generator = torch.Generator().manual_seed(opts.seed) if opts.seed is not None else None
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    whole = ReleaseBuilder(len(images))
    where = opts.state_locations(state)
    with Ledger(where.ledger, key_file=where.ledger_key, cap_epsilon=opts.privacy_cap,
                cap_origin="--privacy-cap") as ledger:
        merge_scope_aliases(ledger, target.scope)
        show_ledger(ledger, images.records)
        given = (public_values(opts, state, ledger, images, mechanism, target.value_range)
                 if opts.decode != "none" or settled.basis == "pca" else None)
        public = given.values if given is not None else None
        if settled.basis == "pca":
            assert public is not None  # --basis pca without --public was refused before loading
            basis = fit_public_basis(public, target.value_range, opts.coefficients)
            mechanism = build_mechanism(opts, settled, target.value_range, target.shape, pca=basis)
        decoding = noise_decoding(opts, state, images, mechanism, public, target.scope)
        chunks = release_in_chunks(images.records, lambda records, ids: ledger.release(
            mechanism, records, scope=target.scope, generator=generator, sources=ids))
        with ui.stage("noising", len(images)) as bar:
            for idx, release in chunks:
                whole.add(release)
                rows = ReleaseRows(release, transforms, "bilinear").with_decoder(decoding.decoder)
                for k, row in zip(idx.tolist(), rows.rows(torch.arange(len(release))).values, strict=True):
                    rel = images.paths[k]
                    path = out / (rel + ".png" if not rel.lower().endswith(".png") else rel)
                    atomic_save_image(path, to_uint8_image((row - lo) / (hi - lo)), sync=False)
                bar.update(int(idx[-1]) + 1)
        max_spent = float(ledger.spent(images.records).epsilon.max())
        cap = ledger.cap_epsilon
    rows = ReleaseRows(whole.build(), transforms, "bilinear").with_decoder(decoding.decoder)
    return _Noised(rows, mechanism, max_spent, cap, decoding.report, given.skipped if given is not None else ())


def _noise_target(opts: NoiseOptions, token: str | None, state: Path) -> _NoiseTarget:
    """Shape, value range and scope of a noise run: the named teacher's (asked once, then closed), else local."""
    value_range: tuple[float, float] = (0.0, 1.0)
    if opts.teacher:
        t = open_teacher(opts.teacher, token, connect_options(opts.teacher, opts.facts, opts.network, state))
        try:
            meta = t.metadata()
            scope = str(t.journal_scope)  # the teacher's one identity, as label uses it
        finally:
            t.close()
        shape = tuple(int(s) for s in meta.input_shape)
        value_range = (float(meta.value_range[0]), float(meta.value_range[1]))
        TeacherLimits().check_input_shape(shape, redact_url(opts.teacher))
        TeacherLimits().check_value_range(value_range, redact_url(opts.teacher))
        if len(shape) != 3:
            raise ValueError(f"teacher {scope!r} declares input shape {shape}; ldpclient noise needs (C, H, W) images")
    else:
        shape = (opts.channels, opts.size, opts.size)
        scope = "local-preview"
    if opts.mechanism == "discrete-tldp":
        value_range = (0.0, 255.0)  # its domain is the integers 0..255 (see ByteUnitsTeacher)
    check_memory_for_shape(shape, scope, opts.max_memory, query_batch=max(opts.preview, 1), train_batch=None)
    return _NoiseTarget(shape=shape, value_range=value_range, scope=scope)


def _write_preview(
    opts: NoiseOptions, out: Path, records: RecordSource, derived: ReleaseRows, mechanism: Mechanism,
    to_unit: Callable[[torch.Tensor], torch.Tensor],
) -> Path:
    """Write ``OUT/preview.png``: rows of clean records, their releases and augmented queries (the first few)."""
    from ..transfer.augment import QueryPlan

    n = len(records)
    k = min(opts.preview, n)
    aug_rows: list[torch.Tensor] = []
    kind = PLAN_KINDS[opts.augment]
    if kind == "sup" and n < 2:
        kind = "identity"
    plan = QueryPlan(
        kind=kind, n=n, num_queries=k if kind != "identity" else None, seed=opts.seed or 0, batch_size=max(k, 1)
    )
    for _, d in plan.batches(derived, mechanism=mechanism):
        aug_rows.extend(list(d.values[: k - len(aug_rows)]))
        if len(aug_rows) >= k:
            break
    first = torch.arange(k)
    grid = preview_grid([
        [to_unit(r) for r in records.read(first.numpy())],
        [to_unit(r) for r in derived.rows(first).values],
        [to_unit(r) for r in aug_rows[:k]],
    ])
    preview_path = out / "preview.png"
    atomic_save_image(preview_path, grid)
    return preview_path
