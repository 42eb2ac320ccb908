"""When and how long a teacher's request is retried: the policy and the loop that applies it.

:class:`RetryPolicy` holds the numbers (seconds); :func:`with_retries` runs one logical request
through tenacity with them: exponential backoff with jitter for transient failures (connection
errors, timeouts, 408, 429, 5xx), the server's own wait when it names one (``Retry-After``, or
an adapter's hint such as Hugging Face's ``estimated_time``), one retry of a malformed answer
that may be transient, and a cap on the total time. Other failures end the call at once.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

import tenacity

from .errors import MalformedResponse, RetriesExhausted, TransientTeacherError

log = logging.getLogger("ldpclient.teachers.http")

T = TypeVar("T")

#: statuses that may succeed when repeated
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504}) | frozenset(range(505, 600))
#: statuses of a server that is busy, not broken (rate limit, overload): waited out quietly and counted
BUSY_STATUSES = frozenset({429, 503})
#: A busy server's wait longer than this (seconds) is worth a warning line; shorter ones are only counted.
LONG_WAIT_S = 10.0


@dataclass
class Waits:
    """The waits of one logical request for a busy server (429, 503) and for the server's own pacing.

    ``busy``: answers 429/503 that were waited out; ``busy_s``: seconds spent waiting them out; ``paced_s``:
    seconds requests were held back before sending because the server said its limit was reached."""

    busy: int = 0
    busy_s: float = 0.0
    paced_s: float = 0.0

    def add(self, other: "Waits") -> None:
        self.busy += other.busy
        self.busy_s += other.busy_s
        self.paced_s += other.paced_s


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to retry. All times in seconds.

    ``max_attempts``: attempts per request including the first. ``initial_wait``:
    first backoff; it doubles each retry up to ``max_wait``; ``jitter``: uniform
    random extra wait in ``[0, jitter]``. ``max_total``: give up when the time since
    the first attempt plus the next wait would exceed it. ``max_retry_after``: the
    longest server-requested wait honoured (a longer one fails at once).
    ``malformed_retries``: retries of a malformed answer that might be transient.
    ``sleep``: the sleep function (tests record waits instead of sleeping).
    """

    max_attempts: int = 6
    initial_wait: float = 0.5
    max_wait: float = 20.0
    jitter: float = 0.5
    max_total: float = 180.0
    max_retry_after: float = 300.0
    malformed_retries: int = 1
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in ("initial_wait", "max_wait", "jitter", "max_total", "max_retry_after"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 seconds, got {getattr(self, name)}")

    def backoff(self, retry_number: int) -> float:
        """Wait before retry ``retry_number`` (1-based) when the server named none."""
        base = min(self.max_wait, self.initial_wait * (2 ** (retry_number - 1)))
        return float(base + random.uniform(0.0, self.jitter))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date), else None."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def with_retries(
    attempt: Callable[[], T], policy: RetryPolicy, *, what: str, attempts: Callable[[], int], retry: bool = True,
    fail_fast: tuple[type[BaseException], ...] = (), waits: Waits | None = None,
) -> T:
    """``attempt()`` until it succeeds or ``policy`` says stop; returns its result.

    ``attempts()``: how many attempts were made so far (for the message when giving up);
    ``retry=False``: one attempt only; ``fail_fast``: errors raised as they are, never retried (a first contact
    with a teacher that nothing answers for). ``waits``: where a busy server's answers (429, 503) and the time
    spent waiting them out are counted; such a wait is logged only past :data:`LONG_WAIT_S` (other retries, after
    a fault, always are). Gives up with :class:`RetriesExhausted` saying why.
    """
    rules = _RetryRules(policy, what=what, retry=retry, fail_fast=fail_fast, waits=waits)
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(rules.should_retry),
        wait=rules.wait,
        stop=rules.stop,
        sleep=policy.sleep,
        before_sleep=rules.before_sleep,
        reraise=False,
    )
    try:
        return retrying(attempt)
    except tenacity.RetryError as err:
        elapsed = time.monotonic() - rules.started
        raise RetriesExhausted(
            f"gave up on {what}: {_why_stopped(err.last_attempt.exception(), policy, elapsed, attempts())}; last "
            f"error: {err.last_attempt.exception()}", attempts=attempts(), elapsed_s=elapsed,
        ) from None


class _RetryRules:
    """The rules of one :func:`with_retries` loop, as tenacity asks for them: which error is retried, how long
    to wait, when to stop, and what a wait counts and logs."""

    def __init__(self, policy: RetryPolicy, *, what: str, retry: bool, fail_fast: tuple[type[BaseException], ...],
                 waits: Waits | None) -> None:
        self.policy, self.what, self.retry, self.fail_fast, self.waits = policy, what, retry, fail_fast, waits
        self.malformed_seen = 0
        self.started = time.monotonic()

    def should_retry(self, exc: BaseException) -> bool:
        if not self.retry or isinstance(exc, self.fail_fast):
            return False
        if isinstance(exc, TransientTeacherError):
            return True
        if isinstance(exc, MalformedResponse) and exc.transient:
            self.malformed_seen += 1
            return self.malformed_seen <= self.policy.malformed_retries
        return False

    def wait(self, state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        ra = getattr(exc, "retry_after", None)
        if ra is not None:
            return float(ra)
        return self.policy.backoff(state.attempt_number)

    def stop(self, state: tenacity.RetryCallState) -> bool:
        if state.attempt_number >= self.policy.max_attempts:
            return True
        upcoming = state.upcoming_sleep or 0.0
        exc = state.outcome.exception() if state.outcome else None
        if getattr(exc, "retry_after", None) is not None and upcoming > self.policy.max_retry_after:
            return True
        return (time.monotonic() - self.started) + upcoming > self.policy.max_total

    def before_sleep(self, state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        pause = state.upcoming_sleep or 0.0
        busy = getattr(exc, "status", None) in BUSY_STATUSES
        if busy and self.waits is not None:
            self.waits.busy += 1
            self.waits.busy_s += pause
        if not busy or pause > LONG_WAIT_S:
            log.warning("%s: retry %d in %.2f s after: %s", self.what, state.attempt_number, pause, exc)


def _why_stopped(last: BaseException | None, policy: RetryPolicy, elapsed: float, attempts: int) -> str:
    """Why the retries stopped, in words: a wait the server asked for that the policy refuses, or the attempts."""
    ra = getattr(last, "retry_after", None)
    if ra is not None and (ra > policy.max_retry_after or elapsed + ra > policy.max_total):
        left = max(0.0, min(policy.max_retry_after, policy.max_total - elapsed))
        return (f"the server asked to wait {ra:.0f} s, more than this request may still wait ({left:.0f} s; "
                "--max-retry-time, API: RetryPolicy(max_total=, max_retry_after=)); run again later")
    return (f"{attempts} attempt(s) in {elapsed:.1f} s (max_attempts={policy.max_attempts}, "
            f"max_total={policy.max_total:g} s)")


__all__ = [
    "BUSY_STATUSES", "LONG_WAIT_S", "RETRY_STATUSES", "RetryPolicy", "Waits", "parse_retry_after", "with_retries",
]
