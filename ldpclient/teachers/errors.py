"""Errors raised by teacher adapters and the query client.

Every message is safe to show to a user: tokens are redacted before an error is
built (see :func:`ldpclient.teachers.http.redact`), and messages name the
teacher URL, the batch and the server's own ``error`` text where there is one.
"""

from __future__ import annotations


class TeacherError(RuntimeError):
    """Base class of everything a teacher or the client raises about a teacher. ``nothing_done``: raised before
    the run had noised, sent or paid anything (set where that is known: re-running has nothing to resume)."""

    nothing_done = False


class TransientTeacherError(TeacherError):
    """A failure that may go away when the request is repeated.

    Connection errors, timeouts, HTTP 408/429/5xx and Hugging Face's 503 "model is
    loading". ``retry_after`` is the wait in seconds the server asked for
    (``Retry-After`` header or ``estimated_time``), or None.
    """

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class RequestNotSent(TransientTeacherError):
    """The request never reached the server (connection refused, connect timeout): nothing was billed."""


class TeacherUnreachable(RequestNotSent):
    """Nothing answers at the teacher's address (connection refused, a host name that does not resolve, no route):
    nothing was sent or billed. The message says which, and what to check."""


class TokenInClear(TeacherError):
    """A token would go over plain ``http://`` to a host that is not this machine: refused before anything is
    sent."""

    nothing_done = True


class TeacherRequestError(TeacherError):
    """The server refused the request (a 4xx other than 408/429): not retried.

    ``status`` is the HTTP status, ``server_message`` the server's ``error`` text.
    """

    def __init__(self, message: str, *, status: int, server_message: str = ""):
        super().__init__(message)
        self.status = status
        self.server_message = server_message


class MalformedResponse(TeacherError):
    """The answer does not match the request or the declared metadata.

    Wrong number of labels, labels outside ``[0, num_classes)``, an undeclared
    datatype, unparseable bodies. ``transient`` says whether repeating the request
    might help (a truncated body might; a label the model cannot produce will
    not). The client retries a transient one once and never returns its labels.
    """

    def __init__(self, message: str, *, transient: bool = True):
        super().__init__(message)
        self.transient = transient


class RetriesExhausted(TeacherError):
    """A transient failure persisted past the retry policy (attempts or total time)."""

    def __init__(self, message: str, *, attempts: int, elapsed_s: float):
        super().__init__(message)
        self.attempts = attempts
        self.elapsed_s = elapsed_s


class Interrupted(TeacherError):
    """The run was interrupted (Ctrl-C, or another error in the run): this attempt was not sent."""


class AbandonedInFlight(KeyboardInterrupt):
    """A second Ctrl-C abandoned ``abandoned`` requests in flight: the server may bill them, and the run that
    resumes sends their batches again (so they may be paid twice). A KeyboardInterrupt, as the Ctrl-C it is."""

    def __init__(self, abandoned: int) -> None:
        super().__init__(f"{abandoned} request(s) in flight abandoned")
        self.abandoned = abandoned


class CostCapReached(TeacherError):
    """The next batch would cross the money cap, so it was not sent.

    ``done_batches``: batches answered in this run before stopping (journal-served
    ones included); ``spent_run``/``spent_total``: money spent in this run and in
    total (journal); ``cap``: the cap; ``next_batch``: id of the batch that was
    not sent and ``next_cost`` what it would have cost.
    """

    def __init__(
        self,
        *,
        cap: float,
        spent_run: float,
        spent_total: float,
        next_batch: str,
        next_cost: float,
        done_batches: int,
        currency: str = "",
    ):
        unit = f" {currency}" if currency else ""
        super().__init__(
            f"money cap reached: batch {next_batch!r} would cost {next_cost:.6g}{unit} and total "
            f"spend is {spent_total:.6g}{unit} of a cap of {cap:.6g}{unit}; it was not sent. "
            f"{done_batches} batch(es) answered so far (this run spent {spent_run:.6g}{unit}); "
            "their labels are saved in the journal, so raising the cap and re-running resumes here"
        )
        self.cap = cap
        self.spent_run = spent_run
        self.spent_total = spent_total
        self.next_batch = next_batch
        self.next_cost = next_cost
        self.done_batches = done_batches


class JournalMismatch(TeacherError):
    """A journaled batch id came back with different queries (the plan is not stable)."""


class JournalError(Exception):
    """The query journal cannot be used (corrupt or not a journal); the message says how to recover."""
