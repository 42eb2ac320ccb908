"""``ldpclient budget --html``: the ledger's spend on one self-contained page.

Per-record epsilon as a histogram over every image the ledger knows, the same per teacher identity,
the mechanisms each teacher's releases used, and the images at the cap: named when the user points
at their folder (``--private``: the ledger holds keyed hashes, never names), counted otherwise. The
page holds numbers and, with ``--private``, file names; no pixel and no record key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..io.document import Document, JSONDict, items, number_or_none, rows, section
from .html import bar_chart, render


@dataclass(frozen=True)
class LedgerSpend:
    """What the budget page draws: every record's total per-record epsilon (``overall``), the same per teacher
    identity (``by_scope``: what that teacher's releases cost each record), and the images of a folder at the
    cap by printable relative path (``at_cap``; None when no folder was given)."""

    overall: list[float]
    by_scope: dict[str, list[float]]
    at_cap: list[str] | None


#: Bins of each spend histogram.
BINS = 20
#: Images at the cap listed by name; the rest are counted.
MAX_NAMED = 200


def spend_histogram(values: Sequence[float], cap: float | None) -> tuple[list[int], list[str]]:
    """Counts of ``values`` (per-record epsilon) in :data:`BINS` equal bins from 0 to the cap (or the largest
    value), and the bins' names; with a cap, the last bin holds exactly the records at it."""
    from ..privacy.ledger import cap_reached

    top = cap if cap is not None else max(values, default=0.0)
    if top <= 0:
        return [len(values)], ["0"]
    edges = [top * k / BINS for k in range(BINS + 1)]
    counts = [0] * BINS
    at_cap = 0
    for v in values:
        if cap_reached(v, cap):
            at_cap += 1
            continue
        counts[min(int(v / top * BINS), BINS - 1)] += 1
    names = [f"{edges[k]:.3g}-{edges[k + 1]:.3g}" for k in range(BINS)]
    if cap is not None:
        counts.append(at_cap)
        names.append(f"at cap {cap:.3g}")
    return counts, names


def _spend_axis(cap: float | None) -> str:
    """The spend charts' x axis (see :func:`spend_histogram`)."""
    return "per-record epsilon spent" + ("" if cap is None else " (the last bar: at the cap)")


def budget_page(summary: Document, spend: LedgerSpend, private_dir: Path | None) -> str:
    """The HTML document of ``ldpclient budget --html`` (see the module doc): ``templates/budget.html.j2`` filled
    with what each of its sections says."""
    cap = number_or_none(summary, "cap_epsilon")
    eps = section(summary, "epsilon")
    counts, names = spend_histogram(spend.overall, cap)
    return render(
        "budget.html.j2",
        title="ldpclient budget: privacy spent per image",
        banner=None,
        summary=None,
        overview=[
            ("ledger", summary["path"]),
            ("images with spend", summary["records"]),
            ("stored releases", summary["releases"]),
            ("per-record epsilon, largest", f"{eps['max']:.4g}"),
            ("per-record epsilon, mean", f"{eps['mean']:.4g}"),
            ("cap (per record)", "none given (--privacy-cap)" if cap is None else f"{cap:.4g}"),
            ("images at the cap", "-" if cap is None else summary["records_at_cap"]),
        ],
        spend_chart=bar_chart("images by total per-record epsilon spent", counts, names, xlabel=_spend_axis(cap)),
        legacy_records=summary.get("legacy_records") or 0,
        teachers=_teachers(summary, spend, cap),
        at_cap=_at_cap(summary, spend, cap, private_dir),
    )


def _teachers(summary: Document, spend: LedgerSpend, cap: float | None) -> list[JSONDict]:
    """Per teacher identity (scope): the mechanisms its releases used and the histogram of what it cost each image."""
    teachers: list[JSONDict] = []
    for scope, values in spend.by_scope.items():
        counts, names = spend_histogram(values, cap)
        teachers.append({
            "scope": scope,
            "mechanisms": [(m["mechanism"], "x".join(str(s) for s in items(m, "record_shape")), m["releases"],
                            f"{m['epsilon_per_release']:.4g}")
                           for m in rows(summary, "by_mechanism") if m["scope"] == scope],
            "chart": bar_chart(f"images by per-record epsilon spent on this teacher ({len(values)} images)",
                               counts, names, xlabel=_spend_axis(cap), colour="#7a9cc6"),
        })
    return teachers


def _at_cap(summary: Document, spend: LedgerSpend, cap: float | None, private_dir: Path | None) -> JSONDict:
    """The images with no budget left: named (at most :data:`MAX_NAMED`) when a folder was given, counted otherwise."""
    if cap is None:
        return {"words": "No cap was given: pass --privacy-cap to see which images have no budget left.",
                "named": [], "more": None}
    if spend.at_cap is None:
        return {"words": f"{summary['records_at_cap']} images have no budget left under the cap {cap:.4g}. The ledger "
                         "keeps keyed hashes, not names: pass --private FOLDER to name those of a folder.",
                "named": [], "more": None}
    named = spend.at_cap
    return {
        "words": (f"{len(named)} images of {private_dir} have no budget left under the cap {cap:.4g} (of "
                  f"{summary['records_at_cap']} in the ledger); a label run would refuse to release them again."),
        "named": [(name,) for name in named[:MAX_NAMED]],
        "more": f"... and {len(named) - MAX_NAMED} more." if len(named) > MAX_NAMED else None,
    }
