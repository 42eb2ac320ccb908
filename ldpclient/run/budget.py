"""The flow behind ``ldpclient budget``: the privacy ledger's aggregate summary, and its page (``--html``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..privacy.ledger import Ledger


def parse_set_cap(text: str) -> float | None:
    """``budget --set-cap``'s value: a per-image epsilon (a finite number > 0), or ``none`` (no cap)."""
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"--set-cap must be a per-image epsilon (a finite number > 0) or 'none', got {text!r}")
    return value


def ledger_summary(
    state_dir: Path | None, set_cap: str | None = None, *, html: Path | None = None, private_dir: Path | None = None,
    state: str | None = None, ledger_key_file: Path | None = None, init: bool = False,
) -> dict[str, object]:
    """The ledger's aggregate summary for ``ldpclient budget`` (creates nothing when there is no ledger).

    ``set_cap``: first set the privacy cap the ledger holds (:func:`parse_set_cap`: raise, lower or ``none``),
    recorded in its history; the summary's ``cap_epsilon`` is the cap the ledger holds.
    ``html``: also write the ledger's page there (:mod:`ldpclient.report.budget_page`; its path is then in
    ``outputs``). ``state``/``ledger_key_file``: a PostgreSQL ledger (``--state``) and its key file. ``init``: start
    the ledger where there is none yet, with its key file as it is when one exists (a key provisioned for it:
    ``Ledger(start_with_key=True)``); a ledger that exists is opened as it is. ``private_dir``: a folder whose images
    the page names when they are at the cap (their file bytes are hashed here, as ``label`` does, and looked up;
    nothing is written about the others).
    """
    from ..state import state_dir as resolve_state_dir
    from ..state.locations import StateLocations, check_state_url

    check_state_url(state)
    where = StateLocations(resolve_state_dir(state_dir, create=False), state, ledger_key_file)
    if state is None and not Path(where.ledger).exists() and not init:
        raise ValueError(f"no ledger at {str(where.ledger)!r} yet (nothing has been noised with this --state-dir; "
                         "budget --init starts one)")
    new_cap = parse_set_cap(set_cap) if set_cap is not None else None
    if private_dir is not None and html is None:
        raise ValueError("--private names the images at the cap on the --html page: give --html FILE too")
    if html is not None:
        from .output_paths import check_output_paths

        check_output_paths({"--html": html}, input_folders={"--private": private_dir} if private_dir else {},
                           state=where)
    if init and state is None:
        where.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _open_ledger(where.ledger, where.ledger_key, init=init, writes=set_cap is not None) as ledger:
        if set_cap is not None:
            ledger.set_caps(new_cap, ledger.cap_delta, origin="budget --set-cap")
        summary = {"schema": 1, "command": "budget", "ok": True, **ledger.summary()}
        if html is not None:
            from ..report.budget_page import LedgerSpend

            spend = LedgerSpend(
                overall=ledger.epsilon_per_record(),
                by_scope=ledger.epsilon_per_record_by_scope(),
                at_cap=None if private_dir is None else images_at_cap(ledger, private_dir),
            )
    if html is not None:
        from ..io.output import atomic_write_text
        from ..report.budget_page import budget_page

        atomic_write_text(html, budget_page(summary, spend, private_dir))
        summary["outputs"] = {"html": str(html)}
    return summary


def _open_ledger(location: str | Path, key_file: Path | None, *, init: bool, writes: bool) -> Ledger:
    """The ledger ``budget`` reads (and writes with ``writes``: a cap, or ``init``); a ledger file that cannot be
    written (a read-only or full state) is opened only to be read when nothing is to be written."""
    from ..privacy.ledger import Ledger
    from ..state.database import StateUnwritable

    try:
        return Ledger(location, key_file=key_file, start_with_key=init)
    except StateUnwritable:
        if writes or init or not isinstance(location, Path):
            raise
        return Ledger(location, key_file=key_file, read_only=True)


def images_at_cap(ledger: Ledger, private_dir: Path) -> list[str]:
    """The images of ``private_dir`` (as ``label`` lists them) whose spend has reached the ledger's cap, by
    printable relative path; [] without a cap. Each file's bytes are hashed into its source id, as a label run
    keys it, through the same guarded read (a file that read refuses, as label would skip it, is passed over);
    DataError for a missing or empty folder."""
    from ..io.folders import ImageDecodeError, discover_images, printable_path, read_image_file, source_id
    from ..privacy.ledger import cap_reached

    if ledger.cap_epsilon is None:
        return []
    found = discover_images(private_dir)
    at_cap: list[str] = []
    chunk = 1024
    for start in range(0, len(found.files), chunk):
        names, ids = [], []
        for rel in found.files[start : start + chunk]:
            try:
                ids.append(source_id(read_image_file(Path(found.root) / rel)))
            except ImageDecodeError:
                continue
            names.append(rel)
        spent = ledger.spent_by_source(ids) if ids else []
        at_cap += [printable_path(rel) for rel, eps in zip(names, spent, strict=True)
                   if cap_reached(eps, ledger.cap_epsilon)]
    return at_cap
