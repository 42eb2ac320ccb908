"""What the ledger raises: it cannot be used safely, or a release would pass a per-record cap."""

from __future__ import annotations

from functools import partial
from typing import Callable


class LedgerError(Exception):
    """The ledger cannot be used safely (unreadable or mismatched key file, bad database)."""


class BudgetExceeded(LedgerError):
    """A fresh release would push some records over the per-record cap; nothing was sampled or charged.

    Attributes: ``n_exceeding`` (records that would exceed), ``n_fresh`` (records in
    the batch that would be charged), ``epsilon_cost``/``delta_cost`` (per-record cost
    of this release), ``remaining_epsilon``/``remaining_delta`` ((min, max) remaining
    budget over the exceeding records), ``cap_epsilon``/``cap_delta``.
    """

    def __init__(
        self,
        message: str,
        *,
        n_exceeding: int,
        n_fresh: int,
        epsilon_cost: float,
        delta_cost: float,
        remaining_epsilon: tuple[float, float],
        remaining_delta: tuple[float, float],
        cap_epsilon: float | None,
        cap_delta: float | None,
    ) -> None:
        super().__init__(message)
        self.n_exceeding = n_exceeding
        self.n_fresh = n_fresh
        self.epsilon_cost = epsilon_cost
        self.delta_cost = delta_cost
        self.remaining_epsilon = remaining_epsilon
        self.remaining_delta = remaining_delta
        self.cap_epsilon = cap_epsilon
        self.cap_delta = cap_delta

    def __reduce__(self) -> tuple[Callable[[str], BudgetExceeded], tuple[str]]:
        """Pickled with its attributes (a worker's refusal reaches the driver whole)."""
        return partial(type(self), **self.__dict__), (str(self),)


class CapRaiseRefused(ValueError):
    """A run asked for a per-record cap above the one the ledger holds; caps are raised only explicitly
    (:meth:`Ledger.set_caps`, ``ldpclient budget --set-cap``). Nothing was changed."""
