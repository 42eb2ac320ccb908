"""Caps speak before they bite: a label run that would cross ``--privacy-cap`` or ``--money-cap`` is refused
before anything is noised, sent or charged, naming the option and the smallest value that would do.

Two checks, both reading state only:

* from the plan alone (``--dry-run`` runs both): :func:`check_release_fits` (one release of an image costs
  more than the privacy cap; the run checks it too, before reading an image) and :func:`check_plan_money`
  (the most the run can spend, every query it may send at ``--price``, would take the money already spent
  with this teacher past the money cap). ``--dry-run`` knows nothing of the journal's answers to this run's
  batches, so where the journal holds answers from this teacher its money figure is an upper bound and it
  says so instead of refusing.
* in the run, once the query plans, the journal and the ledger are open: :func:`foresee_money` (the queries
  of every plan the run will send, public images, mirror check, private queries and the data-free baseline,
  that the journal has not answered, at their price) and :func:`foresee_privacy` (each image's spend so far
  plus one release where the ledger would charge it; a stored release is reused at no cost).

A cap crossed all the same later (a teacher that bills more than its price, a cap lowered by another run)
still stops the run at the batch or release that would cross it, as before, with nothing lost.

Units: epsilon per record (one image), in nats; money in the unit of ``--price`` (per query).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ..io.records import RecordSource, iter_batches, source_ids
from ..names import Mode
from ..privacy.ledger import BudgetExceeded
from ..teachers.errors import CostCapReached, TeacherError

if TYPE_CHECKING:
    from ..privacy.base import Mechanism
    from ..privacy.ledger import Ledger
    from ..teachers.client import QueryClient
    from ..transfer.augment import QueryPlan
    from .plan import RunPlan

#: Images read per chunk when the run asks the ledger what it would charge.
_CHUNK = 4096


class CapForeseen(Exception):
    """Marks a cap refusal made before anything was noised, sent or charged (the message says so)."""

    needed: float


class PrivacyCapForeseen(CapForeseen, BudgetExceeded):
    """The run would take some images past ``--privacy-cap``; ``needed``: the smallest cap that would do."""

    def __init__(self, message: str, *, needed: float, n_exceeding: int, n_fresh: int, epsilon_cost: float,
                 cap_epsilon: float) -> None:
        BudgetExceeded.__init__(self, message, n_exceeding=n_exceeding, n_fresh=n_fresh, epsilon_cost=epsilon_cost,
                                delta_cost=0.0, remaining_epsilon=(0.0, 0.0), remaining_delta=(0.0, 0.0),
                                cap_epsilon=cap_epsilon, cap_delta=None)
        self.needed = needed


class MoneyCapForeseen(CapForeseen, CostCapReached):
    """The run would take the money spent with this teacher past ``--money-cap``; ``needed``: the smallest cap
    that would do (what was spent before plus what this run would pay)."""

    def __init__(self, message: str, *, needed: float, cap: float, spent_total: float) -> None:
        TeacherError.__init__(self, message)  # CostCapReached's own words are about a batch in flight
        self.cap, self.spent_run, self.spent_total = cap, 0.0, spent_total
        self.next_batch, self.next_cost, self.done_batches = "", needed - spent_total, 0
        self.needed = needed


_NOTHING_DONE = "nothing was noised, sent or charged"


def check_release_fits(plan: RunPlan) -> None:
    """Refuse (:class:`PrivacyCapForeseen`) a plan whose one release of an image costs more than ``--privacy-cap``."""
    cap = plan.terms.privacy_cap
    eps = float(plan.mechanism.guarantee(plan.shape).epsilon_record)
    if cap is not None and plan.mode != Mode.DATA_FREE and eps > cap:
        raise PrivacyCapForeseen(
            f"--privacy-cap {cap:g} is below one release of an image (epsilon {eps:.6g} per image): "
            f"{_NOTHING_DONE}; the smallest cap that would do is {eps:.6g} (or a smaller --epsilon)",
            needed=eps, n_exceeding=plan.records, n_fresh=plan.records, epsilon_cost=eps, cap_epsilon=cap)


def check_plan_money(plan: RunPlan, *, spent_money: float, journal_has_answers: bool) -> list[str]:
    """``--dry-run``'s money check: refuse (:class:`MoneyCapForeseen`) a plan whose queries at ``--price`` must take
    ``spent_money`` (what the journal recorded for this teacher) past ``--money-cap``; where the journal holds
    answers from this teacher (some may be this plan's, not paid again) the figure is an upper bound, and the
    warning returned says so instead."""
    opts, price = plan.opts, plan.terms.price
    if opts.money_cap is None:
        return []
    queries = sum(plan.queries_sent_at_most().values())
    needed = spent_money + queries * price
    if needed <= opts.money_cap + 1e-12:
        return []
    words = (f"--money-cap {opts.money_cap:g}: the run may send {queries} queries at {price:g} "
             f"({queries * price:.6g}) on top of {spent_money:.6g} already spent with this teacher")
    if journal_has_answers:
        return [f"{words}; the journal has answers from this teacher, which are not paid again, so the run checks "
                "exactly before it noises or sends anything"]
    raise MoneyCapForeseen(f"{words}: {needed:.6g} in all; {_NOTHING_DONE}; the smallest cap that would do is "
                           f"{needed:.6g} (or fewer --queries)", needed=needed, cap=opts.money_cap,
                           spent_total=spent_money)


def foresee_money(client: QueryClient, plans: Iterable[QueryPlan], cap: float | None) -> None:
    """Refuse (:class:`MoneyCapForeseen`) a run whose query ``plans`` the ``client`` would pay past ``cap``: what
    the journal recorded for this teacher plus the batches it has not answered, at their price."""
    if cap is None:
        return
    batches = ((plan.batch_id(b), len(plan.batch_ids(b))) for plan in plans for b in range(plan.num_batches))
    queries, money = client.to_pay(batches)
    before = float(client.cost.spent_total)
    if before + money <= cap + 1e-12:
        return
    raise MoneyCapForeseen(
        f"--money-cap {cap:g}: the run would send {queries} queries not yet answered in the journal "
        f"({money:.6g}) on top of {before:.6g} already spent with this teacher: {before + money:.6g} in all; "
        f"{_NOTHING_DONE}; the smallest cap that would do is {before + money:.6g} (or fewer --queries)",
        needed=before + money, cap=cap, spent_total=before)


def foresee_privacy(
    ledger: Ledger, mechanism: Mechanism, records: RecordSource, *, scope: str, cap: float | None
) -> None:
    """Refuse (:class:`PrivacyCapForeseen`) a run that would take an image past ``cap``: its spend so far plus one
    release, where the ledger would charge it (an image with a stored release for ``scope`` and ``mechanism`` is
    reused at no cost). Reads the ledger and the images' source ids only; samples and charges nothing."""
    if cap is None:
        return
    from ..teachers.identity import merge_scope_aliases

    merge_scope_aliases(ledger, scope)  # releases stored under other spellings of this teacher are reused
    eps = float(mechanism.guarantee(tuple(records.record_shape)).epsilon_record)
    over, fresh, needed = 0, 0, 0.0
    for idx, chunk in iter_batches(records, _CHUNK):
        ids = source_ids(records, idx)
        charged = ledger.would_charge(mechanism, chunk, scope=scope, sources=ids)
        after = ledger.spent(chunk, sources=ids, domain=mechanism.domain).epsilon
        after = after + eps * charged.double()
        fresh += int(charged.sum())
        over += int((charged & (after > cap + 1e-9)).sum())
        needed = max(needed, float(after[charged].max()) if bool(charged.any()) else 0.0)
    if over:
        raise PrivacyCapForeseen(
            f"the privacy cap this state holds ({cap:g} per image): {over} of the {fresh} images this run would noise "
            f"have spent too much already for one more release (epsilon {eps:.6g} per image); {_NOTHING_DONE}; the "
            f"smallest cap that would do is {needed:.6g} (ldpclient budget --set-cap {needed:.6g})", needed=needed,
            n_exceeding=over, n_fresh=fresh, epsilon_cost=eps, cap_epsilon=cap)


__all__ = ["CapForeseen", "MoneyCapForeseen", "PrivacyCapForeseen", "check_plan_money", "check_release_fits",
           "foresee_money", "foresee_privacy"]
