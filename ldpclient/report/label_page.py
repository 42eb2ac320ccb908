"""``label --html``: one self-contained page that shows what left the device and how far the labels go.

:func:`label_page` builds it from the run report (the dict ``label`` writes as JSON) and the few
releases and queries the run kept (:class:`~ldpclient.transfer.result.SentSample`); the clean private
images are on it only when the user asks (``--html-private``), and the page then says so on top. The
page's size does not grow with the folder: it shows at most
:data:`~ldpclient.transfer.result.SAMPLE_SIZE` releases and queries, one bar per class and the first
:data:`MAX_LISTED` skipped files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch

from ..io.document import (
    Document,
    JSONDict,
    as_number,
    items,
    number,
    number_or_none,
    section,
    section_or_none,
    text,
)
from ..names import PRIVACY_BOUGHT, VERDICT_LEVELS
from ..privacy.guarantee import coefficient_treatment, coefficients_named
from ..transfer.decode_check import decoding_note
from ..transfer.mirror_check import mirror_note
from ..transfer.result import SentSample
from ..transfer.rounds import rounds_in_words
from .html import bar_chart, png_data_uri, render
from .notes import (
    DATA_FREE_NOTE,
    declined_words,
    image_changes_words,
    money_parts,
    token_prices_words,
    unpriced_note,
    waits_words,
    weak_privacy_note,
    weights_note,
)
from .run_report import CostSection, RunReport, StudentSection

#: Skipped files and escaped names listed by name; the rest are counted.
MAX_LISTED = 50
#: Bars per chart: a teacher with more classes gets its most frequent ones charted (the table lists the rest).
MAX_BARS = 40

PRIVATE_BANNER = (
    "This page holds PRIVATE images: the clean private images are shown beside their releases (--html-private). "
    "Keep it on this device; do not share it."
)


@dataclass(frozen=True)
class PageImages:
    """What the page shows of the images: the sample the run kept (values in ``value_range``), and with
    ``--html-private`` the clean private images of its releases (``[0, 1]`` units) and the file names of
    every record the sample shows, by record index (``None`` otherwise)."""

    sample: SentSample | None
    value_range: tuple[float, float]
    clean: torch.Tensor | None = None
    clean_names: Mapping[int, str] | None = None


def label_page(report: RunReport, images: PageImages, class_names: Sequence[str]) -> str:
    """The HTML document of one finished label run (see the module doc): ``templates/label.html.j2`` filled with
    what each of its sections says, in the order the page shows them."""
    return render(
        "label.html.j2",
        title="ldpclient label: what left this device",
        banner=PRIVATE_BANNER if images.clean is not None else None,
        summary=_summary(report),
        verdict=_verdict(report),
        guarantee=_guarantee(report),
        sent=_sent(report, images, class_names),
        counts=_counts(report),
        student=_student(report, class_names),
        timings=_timings(report),
        files=_files(report),
        about=_about(report),
    )


# --------------------------------------------------------------------------- what each section says


def _summary(report: RunReport) -> JSONDict:
    """The band the page opens with: the verdict, the check set's score, epsilon per image, images, queries, money
    (as the terminal's summary writes it) and time."""
    verdict = report.verdict or {}
    level = text(verdict, "level") if verdict else None
    g, q, cost = report.guarantee, report.queries, report.cost
    shown = [("labels", str(verdict.get("standing") or level))] if level else []
    check = section_or_none(verdict, "check")
    if check:
        shown.append(("on the check set", f"{100 * number(check, 'accuracy'):.1f}% ({check['images']} images)"))
    eps = 0.0 if g.get("public_input") else number(section(g, "per_record"), "epsilon")
    shown += [
        ("epsilon per image", f"{eps:.4g}" + (" (data-free)" if g.get("public_input") else "")),
        ("images labelled", f"{report.counts.labelled:,}"),
        (
            "queries",
            f"{q.sent:,} sent"
            + (f", {q.from_journal:,} from the journal" if q.from_journal else "")
            + (f", {q.abstained:,} declined by the teacher" if q.abstained else ""),
        ),
        (
            "money this run",
            unpriced_note(cost.price_per_query, cost.billing)
            or f"{cost.spent_run:.4g}{money_parts(cost.spent_run, cost.spent_public_run, report.baseline)}",
        ),
        ("time", f"{_total_seconds(report.timings):.0f} s"),
    ]
    return {"level": _band_level(verdict), "items": shown}


def _band_level(verdict: Document) -> str | None:
    """The level whose colour the band and the verdict take: usable labels whose privacy bought nothing take
    doubtful's (amber: run data-free instead), so that no green says what the words below take back."""
    if not verdict:
        return None
    usable, doubtful = VERDICT_LEVELS[:2]
    if verdict["level"] == usable and verdict.get("privacy_bought") == PRIVACY_BOUGHT[1]:
        return doubtful
    return text(verdict, "level")


def _stage_parts(timings: Mapping[str, float]) -> set[str]:
    """The stages named ``<stage>_<part>``: parts of another stage (``adapting_predict``), not counted twice."""
    return {name for name in timings if any(name.startswith(other + "_") for other in timings if other != name)}


def _total_seconds(timings: Mapping[str, float]) -> float:
    parts = _stage_parts(timings)
    return sum(seconds for name, seconds in timings.items() if name not in parts)


def _interval(score: Document) -> str:
    return f"{100 * number(score, 'low'):.1f}-{100 * number(score, 'high'):.1f}%"


def _verdict(report: RunReport) -> JSONDict | None:
    """What the labels are worth, first on the page: the verdict's level and reasons, the check set's score beside
    the data-free run's (None for a report without one)."""
    verdict = report.verdict
    if not verdict:
        return None
    rows = []
    check = section_or_none(verdict, "check")
    if check:
        rows.append(("these labels", f"{100 * number(check, 'accuracy'):.1f}%", _interval(check), check["images"]))
        base = section_or_none(check, "baseline")
        if base:
            rows.append(("data-free run (no privacy spent)", f"{100 * number(base, 'accuracy'):.1f}%",
                         _interval(base), base["images"]))
    return {"level": _band_level(verdict), "standing": str(verdict.get("standing") or verdict["level"]),
            "reasons": [str(why) for why in items(verdict, "reasons")], "check_rows": rows}


def _guarantee(report: RunReport) -> JSONDict:
    g = report.guarantee
    if g.get("public_input"):
        return {"data_free": DATA_FREE_NOTE + "."}
    pr, pe = section(g, "per_record"), section(g, "per_element")
    eps = number(pr, "epsilon")
    params = section_or_none(g, "params") or {}
    named = coefficients_named(params)
    if named is not None:
        what = (f"one record-level vector of {g['elements_per_record']} {named} of the image "
                f"was {coefficient_treatment(params)}; the teacher got its reconstruction as an image")
        per_element = "There is no per-element figure to state: the whole vector is one release."
    else:
        what = f"{g['elements_per_record']} released elements (pixels, after any pooling) were noised one by one"
        per_element = (f"Per released element: epsilon {number(pe, 'epsilon'):.4g}"
                       + (f", delta {number(pe, 'delta'):.3g}" if pe.get("delta") else "")
                       + f"; the per-image figure is their composition over the {g['elements_per_record']} elements.")
    delta = f" and delta {number(pr, 'delta'):.3g}" if pr.get("delta") else ""
    factor = _factor_in_words(eps)
    domain, ledger = section(g, "domain"), report.ledger
    rows = [
        ("mechanism", f"{g['mechanism']} ({g.get('sampling', 'unknown sampling')})"),
        ("per image (record)", f"epsilon {eps:.4g}{delta}"),
        ("what was released", what),
        ("value range (declared)", f"{domain['low']:g} to {domain['high']:g}; inputs clipped to it first"),
        ("ledger", f"largest total spend of one image so far: epsilon {ledger.max_spent_epsilon:.4g}"
         + ("" if ledger.cap_epsilon is None else f" (cap {ledger.cap_epsilon:.4g})")),
    ]
    meaning = (
        "What epsilon means here: for any two images of this size, the probability that the teacher receives "
        f"any given set of answers differs by a factor of at most e^epsilon (here {factor})"
        + (f", plus a probability {number(pr, 'delta'):.3g}" if pr.get("delta") else "")
        + ", whatever the teacher does with every query built from one image's release. Smaller is stronger. "
        "Another release of the same image (another teacher, another mechanism) adds its own epsilon: the "
        "ledger row above is the sum so far. A factor "
        "this large promises little by itself; what protects an image in practice is how much the noise "
        "hides, which the pictures below show and `ldpclient audit` measures. Augmenting, averaging, "
        "blurring and clipping releases costs nothing more: only a new release of the same image does, and "
        "the ledger sums those.")
    return {
        "data_free": None,
        "weak": weak_privacy_note(eps),
        "words": (f"Each private image was noised once, on this device, before anything was sent: {what}. "
                  f"The guarantee per image is epsilon {eps:.4g}{delta}. {per_element}"),
        "rows": rows,
        "meaning": meaning,
        "note": report.guarantee_note,
        "notes": [str(n) for n in items(g, "notes")],
    }


def _factor_in_words(epsilon: float) -> str:
    """e^epsilon as a person reads it: ``about 2.7`` for a small one, ``about 10^43`` past a thousand."""
    if epsilon < math.log(1000):
        return f"about {math.exp(epsilon):.2g}"
    return f"about 10^{round(epsilon / math.log(10))}"


def _unit(values: torch.Tensor, value_range: tuple[float, float]) -> torch.Tensor:
    lo, hi = value_range
    return (values.float() - lo) / (hi - lo)


def _class(names: Sequence[str], k: int) -> str:
    return str(names[k]) if 0 <= k < len(names) else ("no answer" if k < 0 else str(k))


def _sent(report: RunReport, images: PageImages, class_names: Sequence[str]) -> JSONDict | None:
    """The sample of releases and queries exactly as sent, as ``(data URI, caption)`` cells (None: nothing sent)."""
    sample = images.sample
    if sample is None:
        return None
    names = images.clean_names

    def caption(k: int) -> str:
        return str(names[k]) if names is not None else f"image #{k + 1}"
    clean = None
    if images.clean is not None:
        clean = [(png_data_uri(img), caption(int(k)))
                 for img, k in zip(images.clean, sample.release_indices, strict=False)]
    public = report.guarantee.get("public_input")
    releases_intro = (("Blank releases (data-free: the teacher got noise on blank images, nothing private)" if public
                       else "Their releases, after the free post-processing "
                            "(" + str(report.postprocess or "none")
                       + "): what every query is built from")
                      + ("; with --augment none exactly what was sent." if report.augment == "none" else "."))
    how = {"sup": "each the average of two images' releases (LDPKiT-Sup)",
           "rand": "each a release with a second layer of noise (LDPKiT-Rand)",
           "none": "the releases themselves (SIDP)"}.get(report.augment, "")
    return {
        "clean": clean,
        "releases_intro": releases_intro,
        "releases": [(png_data_uri(_unit(v, images.value_range)), caption(int(k)))
                     for v, k in zip(sample.releases, sample.release_indices, strict=True)],
        "queries_intro": (f"The first {len(sample.query_ids)} of {report.queries.planned} queries exactly as "
                          f"sent, {how}, with the teacher's answer:"),
        "queries": [(png_data_uri(_unit(v, images.value_range)),
                     f"{_built_from(src, caption)} → {_class(class_names, int(y))}")
                    for v, src, y in zip(sample.queries, sample.query_sources, sample.query_labels, strict=True)],
        "named": names is not None,
    }


def _built_from(sources: Sequence[int], caption: Callable[[int], str]) -> str:
    return "blank" if not sources else " + ".join(caption(k) for k in sources)


def _counts(report: RunReport) -> JSONDict:
    c, q, cost = report.counts, report.queries, report.cost
    rows: list[Sequence[object]] = [
        ("image files found", c.files_found),
        ("images labelled", c.labelled),
        ("files skipped", c.skipped),
        ("releases made now (charged)", c.releases_fresh),
        ("releases reused from the ledger (free)", c.releases_reused),
        ("queries planned", q.planned),
        ("queries sent (paid)", q.sent),
        ("queries answered from the journal (not paid again)", q.from_journal),
        ("requests", q.requests),
        ("queries per request", q.batch_size),
    ]
    if q.abstained:
        why = f" ({declined_words(q.declined)})" if q.declined else ""
        rows.insert(8, ("of them, declined by the teacher (never trained on)", f"{q.abstained:,}{why}"))
    waits = waits_words(q.busy, q.busy_wait_s, q.paced_s)
    if waits:
        rows.append(("the teacher's rate limits", waits))
    if q.rounds:
        rows.insert(7, ("query rounds (--query-rounds)", rounds_in_words(q.rounds, report.run_plan)))
    if c.public_images:
        rows[6:6] = [("public images (--public: declared not private, sent as they are, each once)",
                      c.public_images),
                     ("of the queries sent, public images", q.public_sent),
                     ("of the queries from the journal, public images", q.public_from_journal)]
    if report.decoding:
        rows.append(("decoding (--decode)", decoding_note(report.decoding)
                     + (f"; the check sent {c.decode_check_queries:,} queries" if c.decode_check_queries else "")))
    if report.baseline:
        b = report.baseline
        rows += [("baseline queries sent (blank images)", b.get("queries_sent", 0)),
                 ("baseline queries from the journal", b.get("queries_from_journal", 0))]
    return {"rows": rows + _money_rows(report.baseline, cost), "cap_share": _cap_share(cost)}


def _money_rows(baseline: Document | None, cost: CostSection) -> list[Sequence[object]]:
    """The money rows of the counts: the price, the tokens, what this run spent and on what, the total and cap."""
    unpriced = unpriced_note(cost.price_per_query, cost.billing)
    tokens = cost.price_input_tokens is not None
    baseline_spent = number_or_none(baseline, "spent") if baseline else None
    return [
        ("price per query, at most (each booked at it, then settled from its tokens)" if tokens else "price per query",
         unpriced if unpriced is not None else _money(cost.price_per_query)),
        *([("tokens this run: input, output", f"{cost.input_tokens:,}, {cost.output_tokens:,} "
            + token_prices_words(cost.price_input_tokens, cost.price_output_tokens, cost.batch_price_factor))]
          if tokens else []),
        ("money spent this run", _money(cost.spent_run)),
        *([("of it, the data-free baseline's queries", _money(baseline_spent))] if baseline_spent else []),
        *([("of it on public images", _money(cost.spent_public_run))] if cost.spent_public_run else []),
        ("money spent in total with this teacher", _money(cost.spent_total)),
        ("money cap", "none" if cost.cap is None else _money(cost.cap)),
    ]


def _cap_share(cost: CostSection) -> str | None:
    return f"{100 * cost.spent_total / cost.cap:.1f}% of the money cap is spent." if cost.cap else None


def _money(amount: float | None) -> float:
    """An amount of money as a person reads it: rounded to 6 significant digits, so that 14.36000000000001
    shows as 14.36."""
    return float(f"{float(amount or 0.0):.6g}")


def _student_rows(student: StudentSection, adaptation: Document | None) -> list[tuple[str, str]] | None:
    """The student's settings as rows (None: no student was trained)."""
    if student.model is None:
        return None
    val = student.val_accuracy
    repeats = student.public_repeats
    changed = number_or_none(adaptation, "labels_changed") if adaptation else None
    return [
        ("student", f"{student.model}, {student.epochs} epochs"
         + (f"; {student.students} of them, each with draws of its own, the labels from their mean "
            "output" if student.students > 1 else "")
         + (f"; each public image trained on {repeats} times per epoch" if repeats else "")),
        ("started from", weights_note(student.weights)),
        ("mirrors", mirror_note(student.flip, student.mirror_check)),
        ("warm-up", "off" if not student.warmup_epochs else
         f"{student.warmup_epochs} epochs telling rotations of the clean private images apart, on this "
         "device, before training"),
        ("agreement with the teacher", "n/a" if val is None else f"{100 * val:.1f}% on held-out noised queries "
         "(how well it learnt the teacher's answers; not accuracy on your images)"),
        ("adaptation", "off" if not adaptation else
         "fine-tuned on the clean private images on this device; "
         + ("" if changed is None else f"{100 * changed:.1f}% of labels changed by it")
         + (f"; {shown}" if (shown := image_changes_words(adaptation)) else "")),
    ]


def _baseline_words(baseline: Document) -> str:
    """What the data-free baseline's figures say, in words."""
    agree = number_or_none(baseline, "agreement_with_private_run")
    val = number_or_none(baseline, "student_val_accuracy")
    student = text(baseline, "student", "")
    named = f" ({student})" if student else ""
    return (
        "Data-free baseline (--baseline): the same pipeline on blank images, epsilon 0, no private information. "
        + ("" if agree is None else f"Its labels agree with this run's on {100 * agree:.1f}% of the images. ")
        + ("" if val is None else f"Its student{named} agrees with the teacher on {100 * val:.1f}% of held-out "
           "queries. ")
        + "What the private releases add is the difference between the two; it can only be measured against "
        "true labels.")


def _histogram(doc: Document | None, key: str) -> list[int] | None:
    """A per-class count list a report section holds (None where it holds none)."""
    if not doc or doc.get(key) is None:
        return None
    return [int(as_number(n, key)) for n in items(doc, key)]


def _student(report: RunReport, class_names: Sequence[str]) -> JSONDict:
    """The student's settings, the label histograms as charts (written labels, before adaptation, the data-free
    baseline's, the teacher's answers) and as a table by class."""
    adaptation, baseline = report.adaptation, report.baseline
    rows = _student_rows(report.student, adaptation)
    histogram = report.label_histogram
    names = [str(n) for n in class_names] or [str(k) for k in range(len(histogram))]
    shown = _charted(histogram)
    columns = [("labels written" + (" (adapted student)" if adaptation else ""), histogram, "#3b6ea8")]
    if (unadapted := _histogram(adaptation, "unadapted_label_histogram")) is not None:
        columns.append(("before adaptation", unadapted, "#7a9cc6"))
    if (blank := _histogram(baseline, "label_histogram")) is not None:
        columns.append(("data-free baseline", blank, "#9a9a9a"))
    if report.queries.answers_histogram is not None:
        columns.append(("the teacher's answers to the queries", report.queries.answers_histogram, "#b06c2c"))
    name = [names[k] if k < len(names) else str(k) for k in shown]
    charts = [bar_chart(title, [counts[k] for k in shown], name,
                        ylabel="queries" if title.startswith("the teacher") else "images", colour=colour)
              for title, counts, colour in columns]
    baseline_words = _baseline_words(baseline) if baseline else None
    counted = [k for k in range(len(histogram)) if any(counts[k] for _, counts, _ in columns)]
    return {
        "rows": rows,
        "charts": charts,
        "charted_note": (f"The charts show the {len(shown)} classes most often written, of {len(histogram)}."
                         if len(shown) < len(histogram) else None),
        "baseline_words": baseline_words,
        "class_header": ("class", *(title for title, _, _ in columns)),
        "class_rows": [[names[k] if k < len(names) else str(k), *(counts[k] for _, counts, _ in columns)]
                       for k in counted[:MAX_LISTED]],
        "more_classes": (f"... and {len(counted) - MAX_LISTED} more classes (all in the JSON report)."
                         if len(counted) > MAX_LISTED else None),
    }


def _charted(histogram: Sequence[int]) -> list[int]:
    """The classes the charts show, in class order: all of them, or the :data:`MAX_BARS` most often written."""
    if len(histogram) <= MAX_BARS:
        return list(range(len(histogram)))
    return sorted(sorted(range(len(histogram)), key=lambda k: -histogram[k])[:MAX_BARS])


def _timings(report: RunReport) -> list[tuple[str, str]]:
    """Seconds per stage; a stage named ``<stage>_<part>`` is a part of ``<stage>`` (``adapting_predict``): shown
    as such and left out of the total."""
    timings = report.timings
    parts = _stage_parts(timings)
    rows = [(f"  of which {name.split('_', 1)[1]}" if name in parts else name, f"{seconds:.1f} s")
            for name, seconds in timings.items()]
    rows.append(("total", f"{_total_seconds(timings):.1f} s"))
    return rows


def _files(report: RunReport) -> JSONDict | None:
    skipped, escaped = report.skipped, report.escaped_names
    if not skipped and not escaped:
        return None
    return {
        "skipped": [(s.get("path", ""), s.get("reason", "")) for s in skipped[:MAX_LISTED]],
        "more": (f"... and {len(skipped) - MAX_LISTED} more (all in the JSON report)."
                 if len(skipped) > MAX_LISTED else None),
        "escaped": (f"{len(escaped)} file names are not valid UTF-8: labelled, written with \\xNN escapes."
                    if escaped else None),
    }


def _about(report: RunReport) -> list[tuple[str, object]]:
    t = report.teacher
    rows: list[tuple[str, object]] = [
        ("teacher", t.address),
        ("model", f"{t.model}: input {'x'.join(str(s) for s in t.input_shape)}, {t.num_classes} classes"),
    ]
    if t.assumed:
        rows.append(("assumed", "; ".join(str(a) for a in t.assumed)))
    rows += [("labels", report.outputs.get("labels", "")), ("JSON report", report.outputs.get("report", ""))]
    rows += list(report.versions.items())
    return rows
