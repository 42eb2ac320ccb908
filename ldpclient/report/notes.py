"""The words a run's summary, report and page use about its guarantee and what its labels are worth: the weak
privacy warning, the data-free run's note, where accuracy was measured."""

from __future__ import annotations

from ..transfer import defaults


def weak_privacy_note(epsilon_record: float) -> str | None:
    """The words a summary and report add when the per-record epsilon is above the ceiling (else None)."""
    ceiling = defaults.epsilon_ceiling()
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
    """The words that say what the epsilon bought: accuracy needs ground truth, so point to where it was measured."""
    compare = (
        "the labels a private run adds over these" if data_free
        else "--baseline writes the data-free labels (epsilon 0) beside these, to compare"
    )
    return (
        f"not measured here (no ground truth): {compare}; BENCHMARKS.md, 'Utility against epsilon', has the "
        "accuracy bought by each per-record epsilon on two real datasets"
    )


__all__ = ["DATA_FREE_NOTE", "utility_note", "weak_privacy_note"]
