"""Terminal output of the command line: progress per stage, summaries, errors, JSON.

Progress and human-readable text go to stderr, so that ``--json`` leaves stdout
holding exactly one JSON document. Nothing here prints pixels or secrets: every
JSON document and error line is scrubbed of the secrets it is given.
"""

from __future__ import annotations

import json
import logging
import sys
import textwrap
from contextlib import contextmanager, redirect_stdout
from typing import Callable, Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column, Table

from ..io.document import Document, as_number, integer, items, number, number_or_none, rows, section, section_or_none
from ..io.output import scrub, to_json
from ..io.text import printable
from ..privacy.guarantee import coefficient_treatment, coefficients_named
from ..report.notes import (
    DATA_FREE_NOTE,
    declined_words,
    image_changes_words,
    money_parts,
    token_prices_words,
    unpriced_note,
    utility_note,
    waits_words,
    weak_privacy_note,
    weights_note,
)
from ..report.run_report import CostSection, LedgerSection, QueriesSection, RunReport, StudentSection, TeacherSection
from ..transfer.decode_check import decoding_note
from ..transfer.mirror_check import mirror_note
from ..transfer.rounds import rounds_in_words
from .verdict import accuracy_words

#: What a caller hears of a run's progress (``UI(on_progress=...)``, ``ldpclient.label(progress=...)``): the
#: stage as the bars name it ("loading", "noising", "querying", "training", ...), done so far and the total (None:
#: not known yet), in the stage's own units (images, queries, epochs).
ProgressCallback = Callable[[str, float, "float | None"], None]


class StageProgress:
    """Handle of one progress bar: ``update(completed, info="...")``; no-op when quiet, but for the callback."""

    def __init__(self, progress: Progress | None, task: TaskID | None, *, stage: str = "",
                 on_progress: ProgressCallback | None = None, total: float | None = None) -> None:
        self._progress = progress
        self._task = task
        self._stage, self._on_progress, self._total = stage, on_progress, total

    def update(self, completed: float | None = None, *, total: float | None = None, info: str | None = None) -> None:
        if total is not None:
            self._total = total
        if self._on_progress is not None and completed is not None:
            self._on_progress(self._stage, float(completed), self._total)
        if self._progress is None or self._task is None:
            return
        if info is None:
            self._progress.update(self._task, completed=completed, total=total)
        else:
            self._progress.update(self._task, completed=completed, total=total, info=printable(info))


class UI:
    """What the CLI shows. ``quiet``: no progress and no summary; ``json_mode``: errors also as JSON on stdout."""

    def __init__(self, *, quiet: bool = False, json_mode: bool = False, console: Console | None = None,
                 on_progress: ProgressCallback | None = None) -> None:
        self.quiet = quiet
        self.json_mode = json_mode
        #: called on every progress update of every stage, quiet or not (:data:`ProgressCallback`)
        self.on_progress = on_progress
        self.console = console or Console(stderr=True, highlight=False, soft_wrap=True)
        self.out = Console(file=sys.stdout, highlight=False, soft_wrap=True)
        self._progress: Progress | None = None

    @contextmanager
    def stdout_kept_for_json(self) -> Iterator[None]:
        """In JSON mode, whatever a library prints on stdout while this lasts (Ray's driver prints its cluster's
        error messages there) goes to stderr instead, so that stdout holds the one JSON document alone."""
        if not self.json_mode:
            yield
            return
        with redirect_stdout(sys.stderr):
            yield

    # ---------------------------------------------------------------- messages

    def capture_logs(self, *, secrets: tuple[str | None, ...] = ()) -> None:
        """Show ldpclient's log warnings (retries, billing differences) as one line each on stderr.

        Quiet/JSON mode shows none. Messages are scrubbed of ``secrets``.
        """
        ui = self

        class _Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if ui.quiet:
                    return
                try:
                    text = scrub(record.getMessage(), secrets)
                except Exception:  # noqa: BLE001 - a bad log call must not kill the run
                    return
                ui.console.print(f"{record.levelname.lower()}: {printable(' '.join(text.split()))}", markup=False)

        logger = logging.getLogger("ldpclient")
        for h in list(logger.handlers):
            if getattr(h, "_ldpclient_ui", False):
                logger.removeHandler(h)
        handler = _Handler(level=logging.WARNING)
        handler._ldpclient_ui = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)
        logger.propagate = False

    def info(self, message: str) -> None:
        if not self.quiet:
            self.console.print(printable(message), markup=False)

    def error(self, message: str, exit_code: int, *, secrets: tuple[str | None, ...] = ()) -> None:
        message = printable(scrub(message, secrets))
        self.console.print(f"error: {message}", markup=False, soft_wrap=True)
        if self.json_mode:
            self.out.print(json.dumps({"ok": False, "error": message, "exit_code": exit_code}), markup=False)

    def print_json(self, obj: object, *, secrets: tuple[str | None, ...] = ()) -> None:
        self.out.print(to_json(obj, secrets=secrets), markup=False, soft_wrap=True)

    # ---------------------------------------------------------------- progress

    @contextmanager
    def stage(self, description: str, total: float | None = None) -> Iterator[StageProgress]:
        """A progress bar for one stage (shared live display across stages)."""
        if self.quiet:
            yield StageProgress(None, None, stage=description, on_progress=self.on_progress, total=total)
            return
        if self._progress is None:
            self._progress = Progress(*self._columns(), console=self.console, transient=False, expand=True)
            self._progress.start()
        task = self._progress.add_task(printable(description), total=total, info="")
        handle = StageProgress(self._progress, task, stage=description, on_progress=self.on_progress, total=total)
        try:
            yield handle
        finally:  # an interrupted stage's bar stays where it stopped
            if self._progress is not None:
                self._progress.refresh()

    @staticmethod
    def _columns() -> tuple[ProgressColumn, ...]:
        """The bar's columns: the stage, the bar, done/total, time spent and left keep their width at any terminal
        width (80 columns included); the stage's own words take what is left and end in "..." when it is not
        enough."""
        return (
            TextColumn("[bold]{task.description:<10}", table_column=Column(no_wrap=True, min_width=10)),
            BarColumn(bar_width=20, table_column=Column(no_wrap=True, min_width=20)),
            MofNCompleteColumn(table_column=Column(no_wrap=True, min_width=11)),
            TimeElapsedColumn(table_column=Column(no_wrap=True, min_width=7)),
            TimeRemainingColumn(table_column=Column(no_wrap=True, min_width=7)),
            TextColumn("{task.fields[info]}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
        )

    def stop_progress(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    # ---------------------------------------------------------------- summaries

    def _table(self, title: str, rows: list[tuple[str, str]]) -> None:
        """Plain ``key  value`` lines, never truncated: on a terminal each value wraps between words under itself
        (at 80 columns too); elsewhere (a file, a pipe) one line per key, easy to grep."""
        self.console.print(title, style="bold", markup=False)
        width = max(len(k) for k, _ in rows)
        room = self.console.width - width - 4 if self.console.is_terminal else 0
        for k, v in rows:
            line = f"  {printable(k):<{width}}  {printable(v)}"
            if room >= 20 and len(line) > self.console.width:
                line = textwrap.fill(line, width=self.console.width, subsequent_indent=" " * (width + 4),
                                     break_long_words=False, break_on_hyphens=False)
            self.console.print(line, markup=False, soft_wrap=True)

    def summary(self, report: RunReport | Document) -> None:
        """Final summary of ``ldpclient label`` (a :class:`RunReport`, or its dict, ``LabelRun.report``)."""
        self.stop_progress()
        if self.quiet:
            return
        r = report if isinstance(report, RunReport) else RunReport.from_dict(report)
        g, q = r.guarantee, r.queries
        rows = [
            *_verdict_rows(r.verdict),
            ("labels", f"{r.counts.labelled} written to {r.outputs['labels']}"),
            ("privacy", _guarantee_line(g)),
            ("sampling", str(g.get("sampling", "unknown"))),
            ("accuracy", accuracy_words(r.verdict) or utility_note(bool(g.get("public_input")))),
            *_assumed_rows(r.teacher),
            ("ledger", _label_ledger_line(r.ledger)),
            ("queries", _sent_words(q) + f", {q.from_journal} answered from the journal (not paid again)"
             + (f"; of them {q.public_sent} and {q.public_from_journal} public: {r.counts.public_images} images "
                "sent as they are" + (f" and {r.counts.mirror_check_queries} mirrored and shifted copies of them, "
                                      "for the mirror check" if r.counts.mirror_check_queries else "")
                if r.counts.public_images else "")
             + (f"; {r.counts.decode_check_queries} for the decoder check" if r.counts.decode_check_queries else "")
             + (f"; the teacher declined {q.abstained} of them (never trained on"
                + (f": {declined_words(q.declined)}" if q.declined else "") + ")" if q.abstained else "")
             + (f"; {waits}" if (waits := waits_words(q.busy, q.busy_wait_s, q.paced_s)) else "")),
            *([("decoding", decoding_note(r.decoding))] if r.decoding else []),
            *([("rounds", rounds_in_words(q.rounds, r.run_plan))] if q.rounds else []),
            ("money", _money_line(r.cost, r.baseline)),
            ("student", _student_line(r.student)),
        ]
        if r.adaptation:
            changed = number_or_none(r.adaptation, "labels_changed")
            shown = image_changes_words(r.adaptation)
            rows.append(("adaptation", "fine-tuned on the clean private images on this device"
                         + (f" ({100 * changed:.1f}% of labels changed)" if changed is not None else "")
                         + (f"; {shown}" if shown else "")
                         + "; the student has seen them: keep it here"))
        if r.baseline:
            b = r.baseline
            student = f", student {b['student']}" if b.get("student") else ""
            rows.append(("baseline", f"data-free (epsilon 0 per record){student}: {b.get('queries_sent', 0)} queries; "
                         f"{_agreement_line(b)}"))
        if r.counts.skipped or r.counts.public_skipped:
            where = f" (reasons in {r.outputs['report']})" if "report" in r.outputs else ""
            both = [f"{r.counts.skipped} private"] + ([f"{r.counts.public_skipped} public"]
                                                      if r.counts.public_skipped else [])
            rows.append(("skipped", f"{', '.join(both)} files{where}"))
        rows.append(("time", ", ".join(f"{k} {v:.1f}s" for k, v in r.timings.items())))
        rows.append(("report", str(r.outputs["report"])))
        if "html" in r.outputs:
            rows.append(("page", f"{r.outputs['html']} (open it in a browser)"))
        verdict = r.verdict or {}
        level, standing = verdict.get("level"), str(verdict.get("standing") or verdict.get("level"))
        self._table("ldpclient label: done" + (f"; the labels are {standing.upper()}" if level and standing != "usable"
                                               else ""), rows)

    def plan_summary(self, report: Document) -> None:
        """``label --dry-run``'s ``report``: the resolved plan (:meth:`ldpclient.run.plan.RunPlan.describe`), nothing
        done, and its ``warnings``: what the plan may cross (a cap it can only bound)."""
        if self.quiet:
            return
        plan = section(report, "plan")
        lines = _plan_rows(plan)
        if baseline := section_or_none(plan, "baseline"):
            noise = section(baseline, "blank_query_noise")
            lines.append(("baseline", f"data-free, student {baseline['student']}; blank queries noised by "
                                      f"{noise['name']} at epsilon {noise['epsilon']:g} per {noise['per']}"))
        lines.append(("note", str(section(plan, "spend")["note"])))
        lines += [("warning", str(w)) for w in items(report, "warnings")]
        self._table("ldpclient label --dry-run: nothing decoded, noised, sent or charged", lines)

    def noise_summary(self, result: Document) -> None:
        if self.quiet:
            return
        self.stop_progress()
        counts, outputs, guarantee = section(result, "counts"), section(result, "outputs"), section(result, "guarantee")
        lines = [
            ("noised", f"{counts['noised']} records -> {outputs['dir']}"),
            ("preview", str(outputs["preview"])),
            ("privacy", _guarantee_line(guarantee)),
            ("sampling", str(guarantee.get("sampling", "unknown"))),
            ("ledger", _ledger_line(section_or_none(result, "ledger") or {})),
            *([("decoding", decoding_note(d, "written"))] if (d := section_or_none(result, "decoding")) else []),
        ]
        for key in ("skipped", "public_skipped"):
            if left_out := rows(result, key)[:5]:
                lines.append((key.replace("_", " "), "; ".join(f"{s['path']}: {s['reason']}" for s in left_out)))
        self._table("ldpclient noise: done", lines)

    def budget_summary(self, s: Document) -> None:
        epsilon = section(s, "epsilon")
        lines = [
            ("ledger", str(s["path"])),
            ("records", f"{s['records']} images (sources) with spend, {s['releases']} stored releases"),
            ("epsilon", f"per record: max {epsilon['max']:.4g}, mean {epsilon['mean']:.4g}"),
            ("delta", f"per record: max {section(s, 'delta')['max']:.3g}"),
            ("cap", "none" if s.get("cap_epsilon") is None else f"epsilon {s['cap_epsilon']:.4g} per record; "
             f"{s['records_at_cap']} records at the cap" + (
                 f", {s['records_over_cap']} of them over it (charged before the cap was lowered; frozen)"
                 if s.get("records_over_cap") else "")),
        ]
        history = rows(s, "cap_history")
        if history:
            last = history[-1]
            lines.append(("cap set", f"by {last['origin']} on {_when(number(last, 'set_at'))}"
                          + (f" ({len(history)} changes in all)" if len(history) > 1 else "")))
        if s.get("legacy_records"):
            lines.append(("legacy", f"{s['legacy_records']} records from an older ledger are still counted per "
                          "decoded tensor: their source image is not known until a run sees them again"))
        for m in rows(s, "by_mechanism"):
            lines.append((f"  {m['mechanism']}", f"scope {m['scope']}: {m['releases']} releases, "
                          f"epsilon {m['epsilon_per_release']:.4g} per record each"))
        outputs = section_or_none(s, "outputs") or {}
        if "html" in outputs:
            lines.append(("page", f"{outputs['html']} (open it in a browser)"))
        self._table("ldpclient budget", lines)

    def demo_summary(self, result: Document) -> None:
        self.stop_progress()
        table = Table(title="ldpclient demo: accuracy of the labels against the true digits", title_justify="left")
        for col in ("method", "accuracy (truth)", "eps per element", "eps per record", "queries", "money"):
            table.add_column(col, justify="right" if col != "method" else "left")
        for row in rows(result, "rows"):
            table.add_row(
                str(row["method"]),
                f"{100 * number(row, 'accuracy'):.1f}%",
                _fmt_eps(row["epsilon_element"]),
                _fmt_eps(row["epsilon_record"]),
                str(row["queries"]),
                f"{row['money']:.2f}",
            )
        self.console.print(table)
        for line in items(result, "notes"):
            self.console.print(str(line), markup=False)


def _when(seconds: float) -> str:
    """A time since the epoch as local ``YYYY-MM-DD HH:MM``."""
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))



def _plan_rows(plan: Document) -> list[tuple[str, str]]:
    """The dry run's rows: the teacher, the images, the release, the privacy, the queries, the money, the student."""
    t, rel, sp, im = (section(plan, key) for key in ("teacher", "release", "spend", "images"))
    mech = f"{rel['mechanism']} on {rel['basis']}" + (f" (reduce {rel['reduce']})" if rel["basis"] == "pool" else "")
    public = f", {im['public']} public (sent as they are)" if im["public"] else ""
    note = f"; {rel['note']}" if rel.get("note") else ""
    cap = "no cap" if sp["privacy_cap"] is None else f"cap {sp['privacy_cap']:g} per image"
    return [
        ("teacher", f"{t['address']}: input {'x'.join(map(str, items(t, 'input_shape')))}, {t['num_classes']} classes"),
        ("images", f"{im['private']} private{public}"),
        ("release", f"{mech}, post-processing {rel['postprocess'] or 'none'}{note}"),
        ("privacy", f"epsilon {_fmt_eps(rel['epsilon_record'])} per image ({_fmt_eps(rel['epsilon_element'])} per "
                    f"element over {rel['elements_per_record']}), delta {rel['delta_record']:.3g}; {cap}"),
        ("queries", _plan_queries(plan)),
        ("money", _plan_money(section(plan, "queries"), sp)),
        ("student", _plan_student(section_or_none(plan, "student"))),
        *([("decoding", _plan_decoding(d))] if (d := section_or_none(plan, "decoding")) else []),
    ]


def _plan_decoding(d: Document) -> str:
    """The dry run's decoding row: why not, or the images the decoder decodes into and the check that decides."""
    if d.get("note"):
        return f"not decoded: {d['note']}"
    words = f"releases decoded into {d['public_images']} public images (nothing to train)"
    if d.get("check_queries"):
        return (words + f"; used if the teacher reads it better: asked with {d['check_images']} public images and "
                        f"{d['check_records']} private releases, raw and decoded ({d['check_queries']} queries)")
    return words + "; used without a check (--decode always)"


def _plan_queries(plan: Document) -> str:
    """The dry run's queries row: how many, in what batches, in rounds, through the Batch API."""
    q = section(plan, "queries")
    per = "job" if q.get("batch_api") else "request"
    words = (f"{plan['mode']}: at most {q['private']} private (--augment {q['augment']}), {q['public']} public, "
             f"{q['baseline']} baseline" + (f", {q['decode_check']} for the decoder check" if q.get("decode_check")
                                            else "")
             + f"; {q['batch_size']} per {per}, at most {q['requests_at_most']} {per}s")
    if _rounds(q) > 1:
        words += (f"; in up to {q['rounds']} rounds of doubling size, at least {q['private_at_least']} private (the "
                  "first two rounds)")
    if q.get("batch_api"):
        words += "; through the Batch API, each job answered within 24 hours"
    return words


def _rounds(queries: Document) -> int:
    """The query rounds a dry run's plan holds (1 where it does not say)."""
    return integer(queries, "rounds") if "rounds" in queries else 1


def _plan_money(q: Document, sp: Document) -> str:
    """The dry run's money row: at least (in rounds), at most, the cap, the Batch API's price."""
    words = f"at least {sp['money_at_least']:.4g}, " if _rounds(q) > 1 else ""
    words += f"at most {sp['money_at_most']:.4g}"
    if sp["money_cap"] is not None:
        words += f" (cap {sp['money_cap']:g})"
    if q.get("batch_api"):
        words += f"; at the Batch API's price, at most {sp['money_per_query']:.4g} a query"
    if b := section_or_none(sp, "booking"):
        words += (f"; each query booked at {sp['money_per_query']:.4g}: {b['input_tokens']:,} input and "
                  f"{b['output_tokens']:,} output tokens (an image's tokens: {b['image_tokens_from']})")
    return words


def _plan_student(st: Document | None) -> str:
    """The dry run's student row: the model and how it trains, adapts and labels."""
    if st is None:
        return "none (SIDP: the teacher's answers are the labels)"
    parts = [f"{st['model']}, {st['epochs']} epochs, batch {st['train_batch_size']}"]
    if weights := section_or_none(st, "weights"):
        parts.append(f", started from {weights_note(weights)}")
    if "students" in st and integer(st, "students") > 1:
        parts.append(f", {st['students']} of them (labels from their mean output)")
    if st.get("crop_pixels"):
        parts.append(f", rows shifted up to {st['crop_pixels']} px")
    if st.get("flip"):
        parts.append(", mirrored half the time")
    if st.get("mirror_check_images"):
        parts.append(f", mirrored half the time if the teacher keeps its answers under a mirror (asked about "
                     f"{st['mirror_check_images']} public images)")
    if st["public_repeats"]:
        parts.append(f", each public image {st['public_repeats']}x per epoch")
    if st.get("warmup_epochs"):
        parts.append(f"; first a warm-up of {st['warmup_epochs']} epochs over the clean images ({st['warmup_rows']} "
                     "rows)")
    if st["adapt"]:
        parts.append("; then adapted on the clean images here")
    if st.get("balance"):
        parts.append("; adaptation pseudo-labels from its outputs aligned to equal shares over the classes present"
                     if st["adapt"] else "; labels from its outputs re-weighted to equal class shares")
    return "".join(parts)

def _fmt_eps(x: object) -> str:
    """An epsilon as a report holds it: a number, words (``"(no privacy)"``) or None."""
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return f"{as_number(x):.4g}"


def _assumed_rows(teacher: TeacherSection) -> list[tuple[str, str]]:
    """One line naming what was assumed about the teacher's model rather than published or given."""
    return [("assumed", "; ".join(str(a) for a in teacher.assumed))] if teacher.assumed else []


def _label_ledger_line(ledger: LedgerSection) -> str:
    cap_s = "no cap" if ledger.cap_epsilon is None else f"cap {ledger.cap_epsilon:.4g}"
    skipped = f", {ledger.not_released} not released (no query uses them)" if ledger.not_released else ""
    return (
        f"{ledger.fresh} records noised now, {ledger.reused} reused{skipped}; "
        f"max total spend per record epsilon {ledger.max_spent_epsilon:.4g} ({cap_s})"
    )


def _sent_words(q: QueriesSection) -> str:
    """``"1200 sent"``, or what part of them a Batch API job an earlier run sent answered."""
    if not q.collected_earlier:
        return f"{q.sent} sent"
    fresh = q.sent - q.collected_earlier
    return f"{fresh} sent, collected {q.collected_earlier} from a Batch job sent earlier (paid once)"


def _money_line(cost: CostSection, baseline: Document | None) -> str:
    unpriced = unpriced_note(cost.price_per_query, cost.billing)
    if unpriced is not None:  # (a money cap needs a price: never both)
        return unpriced
    cap_s = "" if cost.cap is None else f" (cap {cost.cap:.4g})"
    parts = money_parts(cost.spent_run, cost.spent_public_run, baseline)
    prices = token_prices_words(cost.price_input_tokens, cost.price_output_tokens, cost.batch_price_factor)
    tokens = (f" ({cost.input_tokens} input and {cost.output_tokens} output tokens {prices})"
              if cost.price_input_tokens is not None else "")
    unbilled = (f"; {cost.usage_not_reported:,} answer(s) reported no believable usage: charged as booked"
                if cost.usage_not_reported else "")
    return (f"{cost.spent_run:.4g} this run{tokens}{parts}, {cost.spent_total:.4g} in total with this teacher{cap_s}"
            f"{unbilled}")


def _student_line(student: StudentSection) -> str:
    if student.model is None:
        return "none (SIDP: the teacher's answers to the releases are the labels)"
    acc_s = "n/a" if student.val_accuracy is None else f"{100 * student.val_accuracy:.1f}%"
    many = (f", {student.students} of them (labels from their mean output; the first one's figures)"
            if student.students > 1 else "")
    line = f"{student.model}{many}, validation accuracy on held-out teacher labels {acc_s}"
    if student.reused:
        line += " (trained by a run before on the same answers, kept in the state directory: nothing trained now)"
    if student.flip or student.mirror_check:
        line += f"; {mirror_note(student.flip, student.mirror_check)}"
    return line + (f"; predictions {student.inference}" if student.inference else "")


def _guarantee_line(g: Document) -> str:
    if g.get("public_input"):
        return DATA_FREE_NOTE
    pr, pe = section(g, "per_record"), section(g, "per_element")
    delta = f", delta {pr['delta']:.3g}" if pr.get("delta") else ""
    weak = weak_privacy_note(number(pr, "epsilon"))
    params = section_or_none(g, "params") or {}
    named = coefficients_named(params)
    if named is not None:  # a record-level vector: no per-element composition to state
        what = f"{g['elements_per_record']} {named} {coefficient_treatment(params)}"
        return f"per record epsilon {pr['epsilon']:.4g}{delta} ({g['mechanism']}, {what})" + (
            f". {weak}" if weak else ""
        )
    return (
        f"per record epsilon {pr['epsilon']:.4g}{delta} ({g['mechanism']}, {g['elements_per_record']} released "
        f"elements); per element epsilon {pe['epsilon']:.4g}" + (f". {weak}" if weak else "")
    )


def _ledger_line(ledger: Document) -> str:
    if not ledger:
        return "-"
    cap = ledger.get("cap_epsilon")
    cap_s = "no cap" if cap is None else f"cap {cap:.4g}"
    return (
        f"{ledger.get('fresh', 0)} records noised now, {ledger.get('reused', 0)} reused; "
        f"max total spend per record epsilon {ledger.get('max_spent_epsilon', 0.0):.4g} ({cap_s})"
    )


def _verdict_rows(verdict: Document | None) -> list[tuple[str, str]]:
    """The verdict's lines: its level and deciding reason, then the other reasons (none for a report without a
    verdict)."""
    if not verdict:
        return []
    reasons = list(items(verdict, "reasons"))
    return [("verdict", str(verdict["headline"])), *(("", str(why)) for why in reasons[1:])]


def _agreement_line(b: Document) -> str:
    agr = number_or_none(b, "agreement_with_private_run")
    return "n/a" if agr is None else f"its labels agree with the private run's on {100 * agr:.1f}% of records"
