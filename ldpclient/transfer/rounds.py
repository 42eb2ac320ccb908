"""Query rounds: send the plan's queries in rounds and stop where the student stops learning from them.

Queries cost money, not privacy (each private record is released once, before any query is built), so a run may
send fewer of them than it planned. With ``PlanSettings.query_rounds = R`` (more than 1), the plan's batches go
out in R rounds of doubling size: round ``r`` (1..R) ends after :func:`round_ends`' ``r``-th batch count, about
``Q * 2**(r - R)`` queries, so the last round completes the plan. After each round a student is trained on every
answer so far; from the second round on, the new student and the previous one are both scored on the same
held-out queries (the queries sent so far that training holds out by id, :func:`~.student.validation_mask`:
never trained on by either), and when the new one agrees with the teacher by less than ``min_round_gain`` more
than the previous one, the rest of the plan is not sent. The student of the last round sent goes on to adaptation
and labels the records.

Units: ``agreement`` and ``gain`` are shares of held-out queries in [0, 1] (a gain may be negative); ``queries``
counts the plan's queries sent so far (public images and the mirror check's copies not included).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

from ..io.document import Document, integer, integer_or_none, number, section_or_none


def round_ends(num_batches: int, rounds: int) -> list[int]:
    """The plan's batch count sent by the end of each round (strictly increasing, the last ``num_batches``):
    round ``r`` of ``rounds`` ends after ``ceil(num_batches * 2**(r - rounds))`` batches; rounds that would add
    no batch are merged (a plan of 3 batches has at most 3 rounds)."""
    if num_batches < 1:
        raise ValueError(f"num_batches must be >= 1, got {num_batches}")
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    ends: list[int] = []
    for r in range(1, rounds + 1):
        end = max(1, math.ceil(num_batches * 2.0 ** (r - rounds)))
        if not ends or end > ends[-1]:
            ends.append(end)
    return ends


@dataclass(frozen=True)
class QueryRound:
    """One round as it went: ``queries`` sent by its end (the plan's, cumulative); ``held_out`` queries it was
    scored on; ``agreement`` of its student with the teacher on them; ``previous`` the previous round's student's
    agreement on the same queries (None for the first round) and ``gain`` = ``agreement - previous``."""

    queries: int
    held_out: int
    agreement: float
    previous: float | None = None

    @property
    def gain(self) -> float | None:
        return None if self.previous is None else self.agreement - self.previous

    def as_dict(self) -> dict[str, float | int | None]:
        return {**asdict(self), "gain": self.gain}


def learnt_too_little(last: QueryRound, min_gain: float) -> bool:
    """Whether the round ``last`` added less than ``min_gain`` agreement over the previous round's student (then
    the rest of the plan is not sent). Never after the first round: it has nothing to compare with."""
    return last.gain is not None and last.gain < min_gain


def rounds_in_words(rounds: Sequence[Document], plan: Document | None) -> str:
    """The query rounds in words (``--query-rounds``): the queries sent and the held-out agreement by each round's
    end, what the last one added, and whether the rest of the plan was left unsent."""
    steps = "; ".join(
        f"{integer(r, 'queries')} queries: {100 * number(r, 'agreement'):.1f}% agreement on "
        f"{integer(r, 'held_out')} held-out"
        + ("" if r.get("gain") is None else f" ({100 * number(r, 'gain'):+.1f} points over the previous round's "
           "student)")
        for r in rounds)
    queries = section_or_none(plan, "queries") if plan else None  # the run plan's (RunPlan.describe)
    planned = integer_or_none(queries, "private") if queries else None
    sent = integer(rounds[-1], "queries")
    end = (f"stopped there: {planned - sent} of the {planned} planned queries not sent (not paid)"
           if planned and sent < planned else "every planned query sent")
    return f"{steps}; {end}"


__all__ = ["QueryRound", "learnt_too_little", "round_ends", "rounds_in_words"]
