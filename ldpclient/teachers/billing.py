"""The billing hook of a batch: told about every attempt of a billable request, so that money is
counted conservatively whatever is lost on the way.

The hook is passed explicitly, down the call chain that sends the batch:
:class:`~ldpclient.teachers.QueryClient` makes one :class:`BillingGuard` per batch and calls
``teacher.infer(queries, request_id=..., billing=guard)``; an adapter hands it to
``HttpTransport.call(..., units=n, billing=billing)``, which runs every attempt through
:func:`billed_attempt`. A teacher whose ``infer`` takes no ``billing`` is called without it
(:func:`takes_billing`): its batch is then counted as a whole, answered or not.
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable, Protocol, TypeVar

from .errors import MalformedResponse, RequestNotSent, TeacherError, TransientTeacherError

T = TypeVar("T")


class BillingGuard(Protocol):
    """Told about every attempt of a billable call.

    ``before_attempt(units)`` runs before each attempt is sent (``units``: queries it carries) and
    raises (e.g. :class:`~ldpclient.teachers.errors.CostCapReached`) to stop instead; a guard may
    also have ``attempt_started(abort)``: called once the attempt is on its way, with a function
    that abandons it at once (shuts its socket: the attempt then ends as ``"lost"``);
    ``after_attempt(outcome, units)`` reports how it ended: ``"answered"``, ``"refused"`` (not sent,
    or an error answer the server did not bill) or ``"lost"`` (sent, and may have been billed for
    ``units`` queries, but no usable answer came back: a dropped connection, a timeout, a
    malformed 200).
    """

    def before_attempt(self, units: int) -> None: ...

    def after_attempt(self, outcome: str, units: int) -> None: ...


def billed_attempt(
    guard: BillingGuard,
    units: int,
    send: Callable[[Callable[[Callable[[], None]], None] | None], T],
    billed_so_far: Callable[[], int],
) -> T:
    """One attempt of a billable request of ``units`` queries, reported to ``guard``.

    ``send(on_start)`` makes the attempt (``on_start``: the guard's ``attempt_started``, or None);
    ``billed_so_far()``: queries the server said it billed over the call's attempts so far
    (``X-Billed-Images``). A failed attempt the server billed is reported as lost for what it billed.
    """
    guard.before_attempt(units)
    billed_before = billed_so_far()
    outcome = "lost"
    try:
        result = send(getattr(guard, "attempt_started", None))
        outcome = "answered"
        return result
    except MalformedResponse:
        raise  # a 200 that could not be used: it may well have been billed
    except RequestNotSent:
        outcome = "refused"
        raise
    except TransientTeacherError as exc:
        outcome = "refused" if exc.status is not None else "lost"  # an error answer vs no answer at all
        raise
    except TeacherError:  # an error answer (4xx, redirect) or a request that could not be made (TLS)
        outcome = "refused"
        raise
    finally:
        billed = billed_so_far() - billed_before  # the server's own word, when it gave one
        if outcome != "answered" and billed > 0:
            guard.after_attempt("lost", billed)
        else:
            guard.after_attempt(outcome, units)


def takes_billing(infer: Callable[..., object]) -> bool:
    """Whether an ``infer`` method accepts ``billing=`` (a parameter of that name, or ``**kwargs``).

    A bound method is judged by its function, whose signature is read once (callers ask per batch)."""
    func = getattr(infer, "__func__", infer)
    try:
        return _function_takes_billing(func)
    except TypeError:  # an unhashable callable: read its signature each time
        return _reads_billing(func)


@functools.lru_cache(maxsize=256)
def _function_takes_billing(func: Callable[..., object]) -> bool:
    return _reads_billing(func)


def _reads_billing(func: Callable[..., object]) -> bool:
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    return "billing" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


__all__ = ["BillingGuard", "billed_attempt", "takes_billing"]
