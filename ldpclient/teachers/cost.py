"""Money meter: prices, a hard cap checked before sending, reconciliation with the server."""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field

from .errors import CostCapReached

log = logging.getLogger("ldpclient.teachers.cost")


@dataclass(frozen=True)
class BillingDifference:
    """A batch where the server billed a different number of units than queries answered."""

    batch_id: str
    expected_units: int
    billed_units: int


@dataclass(frozen=True)
class Reconciliation:
    """Expected vs server-reported billed units over this run.

    ``expected_units``: queries answered in batches the server reported billing for;
    ``billed_units``: what it reported for them; ``unreported_batches``: answered
    batches without any billing report; ``differences``: per-batch mismatches.
    """

    expected_units: int
    billed_units: int
    unreported_batches: int
    differences: tuple[BillingDifference, ...]

    @property
    def matches(self) -> bool:
        return not self.differences

    def summary(self) -> str:
        if self.matches:
            s = f"billing reconciled: server billed {self.billed_units} unit(s) for {self.expected_units} queries"
        else:
            s = (
                f"billing MISMATCH: server billed {self.billed_units} unit(s) for {self.expected_units} queries "
                f"in {len(self.differences)} batch(es), e.g. "
                + ", ".join(f"{d.batch_id}: {d.billed_units} vs {d.expected_units}" for d in self.differences[:3])
            )
        if self.unreported_batches:
            s += f"; {self.unreported_batches} batch(es) without a billing report"
        return s


@dataclass
class CostMeter:
    """Prices and a money cap for one teacher.

    ``price_per_query``: money per query (image) answered; ``price_per_request``:
    money per HTTP request answered; ``cap``: largest total spend allowed (None = no
    cap). With a journal the cap covers the journal's total for this teacher (all
    runs), so restarting never resets it; without one it covers this run. A batch
    whose estimated cost would cross the cap is not sent (:class:`CostCapReached`).
    ``currency`` is only used in messages.
    """

    price_per_query: float = 0.0
    price_per_request: float = 0.0
    cap: float | None = None
    currency: str = ""
    spent_run: float = field(default=0.0, init=False)
    prior_total: float = field(default=0.0, init=False)
    _reserved: float = field(default=0.0, init=False, repr=False)
    _expected: int = field(default=0, init=False, repr=False)
    _billed: int = field(default=0, init=False, repr=False)
    _unreported: int = field(default=0, init=False, repr=False)
    #: money booked for attempts that may have been billed but brought no usable answer (part of spent_run)
    unconfirmed: float = field(default=0.0, init=False)
    _diffs: list[BillingDifference] = field(default_factory=list, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("price_per_query", "price_per_request"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v}")
        if self.cap is not None and not (math.isfinite(self.cap) and self.cap >= 0):
            raise ValueError(f"cost cap must be a finite number >= 0, got {self.cap}")

    @property
    def spent_total(self) -> float:
        """Spend recorded before this run (journal) plus this run."""
        return self.prior_total + self.spent_run

    def cost_of(self, queries: int, requests: int) -> float:
        """Money for ``queries`` answered in ``requests`` HTTP requests."""
        return queries * self.price_per_query + requests * self.price_per_request

    def reserve(self, batch_id: str, cost: float, *, done_batches: int) -> None:
        """Book ``cost`` for a batch about to be sent, or raise CostCapReached (nothing booked)."""
        with self._lock:
            if self.cap is not None and self.spent_total + self._reserved + cost > self.cap + 1e-12:
                raise CostCapReached(
                    cap=self.cap,
                    spent_run=self.spent_run,
                    spent_total=self.spent_total,
                    next_batch=batch_id,
                    next_cost=cost,
                    done_batches=done_batches,
                    currency=self.currency,
                )
            self._reserved += cost

    def unbook_prior(self, cost: float) -> None:
        """Take ``cost`` off what earlier runs booked (an earlier run's attempt, settled now for what it cost)."""
        with self._lock:
            self.prior_total = max(0.0, self.prior_total - float(cost))

    def book_unconfirmed(self, cost: float) -> None:
        """Count ``cost`` of an attempt that may have been billed without an answer as spent (conservative)."""
        with self._lock:
            self.spent_run += cost
            self.unconfirmed += cost

    def release(self, cost: float) -> None:
        """Give back a reservation for a batch that failed (nothing answered, nothing charged)."""
        with self._lock:
            self._reserved = max(0.0, self._reserved - cost)

    def settle(self, batch_id: str, reserved: float, cost: float, expected_units: int, billed: int | None) -> None:
        """Turn a reservation into spend and record the server's billed units for reconciliation."""
        with self._lock:
            self._reserved = max(0.0, self._reserved - reserved)
            self.spent_run += cost
            if billed is None:
                self._unreported += 1
                return
            self._expected += expected_units
            self._billed += billed
            if billed != expected_units:
                self._diffs.append(BillingDifference(batch_id, expected_units, billed))
                log.warning(
                    "server billed %d unit(s) for batch %s of %d queries", billed, batch_id, expected_units
                )

    def reconcile(self) -> Reconciliation:
        with self._lock:
            return Reconciliation(self._expected, self._billed, self._unreported, tuple(self._diffs))
