"""``ldpclient budget --html``: the ledger's spend on one self-contained page.

Per-record epsilon as a histogram over every image the ledger knows, the same per teacher identity,
the mechanisms each teacher's releases used, and the images at the cap: named when the user points
at their folder (``--private``: the ledger holds keyed hashes, never names), counted otherwise. The
page holds numbers and, with ``--private``, file names; no pixel and no record key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from .html import bar_chart, page, paragraph, section, table, text


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


def budget_page(summary: Mapping[str, Any], spend: LedgerSpend, private_dir: Path | None) -> str:
    """The HTML document of ``ldpclient budget --html`` (see the module doc)."""
    cap = summary.get("cap_epsilon")
    eps = summary["epsilon"]
    overview = table([
        ("ledger", summary["path"]),
        ("images with spend", summary["records"]),
        ("stored releases", summary["releases"]),
        ("per-record epsilon, largest", f"{eps['max']:.4g}"),
        ("per-record epsilon, mean", f"{eps['mean']:.4g}"),
        ("cap (per record)", "none given (--privacy-cap)" if cap is None else f"{cap:.4g}"),
        ("images at the cap", "-" if cap is None else summary["records_at_cap"]),
    ])
    counts, names = spend_histogram(spend.overall, cap)
    parts = [
        overview,
        paragraph("Each image's epsilon is per record: the sum over every release of it, for every teacher, "
                  "shape and mechanism (a second release of the same image adds up; reusing a stored release "
                  "costs nothing)."),
        bar_chart("images by total per-record epsilon spent", counts, names),
    ]
    if summary.get("legacy_records"):
        parts.append(paragraph(f"{summary['legacy_records']} records from an older ledger are still counted per "
                               "decoded tensor until a run sees their image again.", note=True))
    body = section("Spend per image", *parts) + _teachers_section(summary, spend, cap) + \
        _at_cap_section(summary, spend, cap, private_dir)
    return page("ldpclient budget: privacy spent per image", body)


def _teachers_section(summary: Mapping[str, Any], spend: LedgerSpend, cap: float | None) -> str:
    parts = []
    for scope, values in spend.by_scope.items():
        counts, names = spend_histogram(values, cap)
        mechanisms = [m for m in summary.get("by_mechanism", []) if m["scope"] == scope]
        parts.append(f"<h3>{text(scope)}</h3>")
        parts.append(table(
            ((m["mechanism"], "x".join(str(s) for s in m["record_shape"]), m["releases"],
              f"{m['epsilon_per_release']:.4g}") for m in mechanisms),
            header=("mechanism", "image shape", "releases", "epsilon per release (per record)"),
        ))
        parts.append(bar_chart(f"images by per-record epsilon spent on this teacher ({len(values)} images)",
                               counts, names, colour="#7a9cc6"))
    if not parts:
        parts.append(paragraph("No release is stored."))
    return section("Per teacher", *parts)


def _at_cap_section(summary: Mapping[str, Any], spend: LedgerSpend, cap: float | None,
                    private_dir: Path | None) -> str:
    if cap is None:
        return section("Images at the cap", paragraph("No cap was given: pass --privacy-cap to see which images "
                                                      "have no budget left."))
    if spend.at_cap is None:
        return section("Images at the cap", paragraph(
            f"{summary['records_at_cap']} images have no budget left under the cap {cap:.4g}. The ledger keeps "
            "keyed hashes, not names: pass --private FOLDER to name those of a folder."))
    named = spend.at_cap
    parts = [paragraph(f"{len(named)} images of {private_dir} have no budget left under the cap {cap:.4g} (of "
                       f"{summary['records_at_cap']} in the ledger); a label run would refuse to release them "
                       "again.")]
    if named:
        parts.append(table(((name,) for name in named[:MAX_NAMED]), header=("image",)))
    if len(named) > MAX_NAMED:
        parts.append(paragraph(f"... and {len(named) - MAX_NAMED} more.", note=True))
    return section("Images at the cap", *parts)
