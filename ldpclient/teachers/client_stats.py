"""What a :class:`~ldpclient.teachers.client.QueryClient` counts over its runs (:class:`ClientStats`), and the
report's billing section made from those counts and the cost meter's reconciliation."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field

import torch

from .cost import Reconciliation
from .result import ABSTAINED, InferResult
from .retry import Waits

__all__ = ["ClientStats", "billing_section"]


@dataclass
class ClientStats:
    """Counters of one client (all runs of ``label_batches`` on it).

    ``batches_sent``/``batches_from_journal``: plan batches answered by the teacher
    vs read back from the journal. ``queries_sent``: queries in sent batches.
    ``requests``: HTTP requests answered; ``attempts``: including retries.
    ``bytes_sent``/``bytes_received``: body bytes. ``wall_s``: wall time inside
    ``label_batches``; ``teacher_s``: summed time workers spent waiting on the teacher.
    """

    batches_sent: int = 0
    batches_from_journal: int = 0
    queries_sent: int = 0
    queries_from_journal: int = 0
    requests: int = 0
    attempts: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    wall_s: float = 0.0
    teacher_s: float = 0.0
    #: requests in flight abandoned at a stop (a second Ctrl-C, or an error): the server may have billed them
    abandoned: int = 0
    #: queries the teacher declined to label (:data:`~ldpclient.teachers.result.ABSTAINED`), sent or from the journal
    abstained: int = 0
    #: tokens the server reported for the answered requests (teachers billed in tokens; 0 otherwise)
    input_tokens: int = 0
    output_tokens: int = 0
    #: answers of a busy server (429, 503) waited out, the seconds spent waiting them out, and the seconds requests
    #: were held back because the server said its rate limit was reached (summed over the requests)
    waits: Waits = field(default_factory=Waits)
    #: of ``abstained``, the queries sent this run, by why the teacher declined them (keys of
    #: :data:`ldpclient.names.DECLINE_KINDS`; the journal keeps no reason for an answer read back from it)
    declined: dict[str, int] = field(default_factory=dict)
    #: answers billed in tokens whose ``usage`` was missing or not believable: charged at their booking
    unbilled: int = 0
    #: of ``queries_sent``, the answers collected from Batch API jobs an earlier run sent
    collected_earlier: int = 0

    def add_sent(self, parts: list[InferResult], labels: torch.Tensor, seconds: float) -> None:
        """Count one batch the teacher answered: its requests' ``parts``, its ``labels``, the ``seconds`` it took."""
        self.batches_sent += 1
        self.queries_sent += len(labels)
        self.requests += sum(p.requests for p in parts)
        self.attempts += sum(p.attempts for p in parts)
        self.bytes_sent += sum(p.bytes_sent for p in parts)
        self.bytes_received += sum(p.bytes_received for p in parts)
        self.teacher_s += seconds
        self.abstained += int((labels == ABSTAINED).sum())
        self.input_tokens += sum(p.input_tokens for p in parts)
        self.output_tokens += sum(p.output_tokens for p in parts)
        for p in parts:
            self.waits.add(p.waits)
            self.unbilled += p.unbilled
            self.collected_earlier += p.collected_earlier
            for kind, n in p.declined.items():
                self.declined[kind] = self.declined.get(kind, 0) + n

    def snapshot(self) -> ClientStats:
        """A copy of the counters as they stand now, apart from the ones that go on counting."""
        return copy.deepcopy(self)

    def add_journaled(self, labels: torch.Tensor) -> None:
        """Count one batch read back from the journal, with its ``labels``."""
        self.batches_from_journal += 1
        self.queries_from_journal += len(labels)
        self.abstained += int((labels == ABSTAINED).sum())


def billing_section(r: Reconciliation, stats: ClientStats, *, token_billed: bool) -> dict[str, object]:
    """The report's billing: the units the server billed against the queries, and the line that says so; for a
    teacher billed in tokens, the line gives the tokens its answers reported and the answers whose usage was not
    believed."""
    words = r.summary()
    if token_billed:
        words = (f"tokens reported by the server: {stats.input_tokens:,} input and {stats.output_tokens:,} output "
                 f"for {stats.queries_sent:,} queries sent")
        if stats.unbilled:
            words += f"; {stats.unbilled:,} answer(s) reported no believable usage: charged at their booking"
    return {"expected_units": r.expected_units, "billed_units": r.billed_units,
            "unreported_batches": r.unreported_batches,
            "differences": [dataclasses.asdict(d) for d in r.differences], "summary": words}
