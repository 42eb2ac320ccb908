"""The words a run's summary, report and page use about its guarantee and what its labels are worth: the weak
privacy warning, the data-free run's note, where accuracy was measured, money that was not counted."""

from __future__ import annotations

from typing import Mapping

from ..io.document import Document, integer, integer_or_none, items, number, number_or_none, section_or_none
from ..names import DECLINE_KINDS, IMAGE_CHANGES
from ..privacy import defaults as privacy_defaults


def weak_privacy_note(epsilon_record: float) -> str | None:
    """The words a summary and report add when the per-record epsilon is above the ceiling (else None)."""
    ceiling = privacy_defaults.epsilon_ceiling()
    if epsilon_record <= ceiling:
        return None
    return (
        f"WEAK PRIVACY: per-record epsilon {epsilon_record:.4g} is above the ceiling {ceiling:g} "
        "(--allow-weak-privacy); at such epsilons the teacher can reconstruct and re-identify most images"
    )


#: What a data-free run (``label --epsilon 0``) sends, in the summary's and the report's words.
DATA_FREE_NOTE = (
    "epsilon 0 per record and per element: no private information left the device. The teacher saw only blank "
    "images noised here (data-free); the clean images stayed on this device, to adapt the student and to be labelled"
)


def utility_note(data_free: bool) -> str:
    """The words that say what the epsilon bought: accuracy needs ground truth, so say how to measure it."""
    compare = (
        "the labels a private run adds over these" if data_free
        else "--baseline writes the data-free labels (epsilon 0) beside these, to compare"
    )
    return (
        f"not measured here (no ground truth): {compare}; --check FILE with a hundred hand-labelled images "
        "measures it"
    )


def unpriced_note(price_per_query: float | None, billing: object) -> str | None:
    """The words that stand for the money spent when no price was given (``--price`` 0, its default): the run
    cannot count money, and "0" would read as "free"; with what the teacher billed when it reported it
    (``billing``: the report's ``cost.billing`` mapping, ``billed_units`` over the batches it reported for). None
    when a price was given."""
    if price_per_query:
        return None
    billed = billing.get("billed_units") if isinstance(billing, dict) else None
    told = f"; the teacher billed {billed:,} image(s) this run" if isinstance(billed, int) and billed > 0 else ""
    return f"not counted: no --price given{told}"


def money_parts(spent_run: float, spent_public: float | None, baseline: Document | None) -> str:
    """What a run's money went on, in words: `` (private queries X, data-free baseline Y, public images Z)`` with
    the parts it has (money in the unit of ``--price``); ``""`` where all of it went on the private queries."""
    public = float(spent_public or 0.0)
    base = (number_or_none(baseline, "spent") or 0.0) if baseline else 0.0
    if not public and not base:
        return ""
    parts = [f"private queries {spent_run - public - base:.4g}"]
    parts += [f"data-free baseline {base:.4g}"] if base else []
    parts += [f"public images {public:.4g}"] if public else []
    return f" ({', '.join(parts)})"


def declined_words(declined: Mapping[str, int]) -> str:
    """Why the teacher declined queries, most first: "12 cannot tell, 3 refused" (``declined``: count per key of
    :data:`ldpclient.names.DECLINE_KINDS`; an unknown key is shown as it is)."""
    ranked = sorted(declined.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{n:,} {DECLINE_KINDS.get(kind, kind)}" for kind, n in ranked if n)


def waits_words(busy: int, busy_s: float, paced_s: float) -> str:
    """A busy teacher's waits in words: "waited out 689 rate limits (2.3 min in all)", with the time requests were
    held back for its limit; ``""`` when there were none. ``busy``: 429/503 answers waited out; seconds."""
    if not busy and paced_s < 0.05:
        return ""
    words = [f"waited out {busy:,} rate limit{'s' if busy != 1 else ''} ({_duration(busy_s)} in all)"] if busy else []
    words += [f"held requests back {_duration(paced_s)} for the teacher's rate limit"] if paced_s >= 0.05 else []
    return "; ".join(words)


def _duration(seconds: float) -> str:
    """``"0.4 s"``, ``"2.3 min"`` or ``"1.5 h"``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def weights_note(weights: Document | None) -> str:
    """Which weights the student started from, in words: the file's name and digest, or random ones."""
    if not weights:
        return "random weights"
    return (f"{weights.get('name')} (SHA-256 {str(weights.get('sha256'))[:16]}...), a {weights.get('architecture')} "
            f"feature extractor at {weights.get('input_size')} px, frozen under a new head")


def image_changes_words(adaptation: Document | None) -> str | None:
    """Which larger changes of the images adaptation also showed them under, in words, with the shares of labels
    the student kept under them and under a shift, and how many views of how many images (those the adapted student
    was unsure of) their labels are the mean over (None: not checked). Only the known changes' names are said."""
    changes = section_or_none(adaptation, "image_changes") if adaptation else None
    if adaptation is None or changes is None or not integer(changes, "images"):
        return None
    views = integer_or_none(adaptation, "label_views") or 1
    viewed = integer_or_none(adaptation, "labelled_through_views") or 0
    labelled = (f"; the {viewed} images the adapted student was unsure of labelled by the mean over {views} views of "
                "each" if views > 1 and viewed else "")
    shares = section_or_none(changes, "shares") or {}
    kept = [str(n) for n in items(changes, "kept") if n in IMAGE_CHANGES and shares.get(str(n)) is not None]
    shift = f"{100 * number(changes, 'shift'):.0f}% under a shift, of {integer(changes, 'images')} images"
    if not kept:
        return f"no larger change kept the student's labels as often as a shift ({shift}): not shown changed{labelled}"
    kept_shares = ", ".join(f"{100 * number(shares, n):.0f}%" for n in kept)
    return (f"also shown {' or '.join(IMAGE_CHANGES[n] for n in kept)} (the student kept {kept_shares} of its "
            f"labels so, {shift}){labelled}")


__all__ = [
    "DATA_FREE_NOTE", "declined_words", "money_parts", "unpriced_note", "utility_note", "waits_words",
    "weak_privacy_note", "weights_note", "image_changes_words",
]


def token_prices_words(price_input: float | None, price_output: float | None, batch_factor: float | None) -> str:
    """The token prices a run's money was counted at: "at 0.15 and 0.6 a million" (input, output), and the share of
    them a batch API bills where the run asked through one."""
    words = f"at {price_input or 0:g} and {price_output or 0:g} a million"
    if batch_factor is None:
        return words
    share = "half" if batch_factor == 0.5 else f"{batch_factor:g} of"
    return f"{words}, {share} that through the Batch API"
