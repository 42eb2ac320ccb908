"""Seeded fault injection and per-key rate limiting for infer requests.

Determinism: the n-th infer request to reach the injector (0-based, in arrival
order) draws its fault and latency from its own generator seeded with
``(fault_seed, n)``, so a client that sends requests one at a time sees the same
faults on every run, whatever the timing.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass

from .config import MALFORMED_KINDS, ServerConfig


@dataclass(frozen=True)
class Decision:
    """What to do to one infer request. ``action``: None (serve normally), "status"
    (answer ``status`` instead), "drop", "malformed" (with ``malformed_kind``) or "slow"."""

    index: int
    latency: float
    action: str | None = None
    status: int | None = None
    malformed_kind: str | None = None


class FaultInjector:
    """Draws one ``Decision`` per infer request from the config's rates."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._next = 0
        self.counts: Counter[str] = Counter()
        c = config
        self._table = [
            (c.error_rate_500, "status", 500), (c.error_rate_503, "status", 503), (c.rate_429, "status", 429),
            (c.drop_rate, "drop", None), (c.malformed_rate, "malformed", None), (c.slow_rate, "slow", None),
        ]

    def decide(self) -> Decision:
        c = self.config
        with self._lock:
            n = self._next
            self._next += 1
        rng = random.Random(f"{c.fault_seed}:{n}")
        u = rng.random()
        latency = c.latency + (rng.uniform(0.0, c.latency_jitter) if c.latency_jitter else 0.0)
        if n < c.fail_first:
            decision = Decision(n, latency, "status", c.fail_status)
        else:
            decision = Decision(n, latency)
            edge = 0.0
            for rate, action, status in self._table:
                edge += rate
                if u < edge:
                    kind = (c.malformed_kind or rng.choice(MALFORMED_KINDS)) if action == "malformed" else None
                    decision = Decision(n, latency, action, status, kind)
                    break
        with self._lock:
            label = decision.action if decision.action != "status" else f"status_{decision.status}"
            self.counts[label or "ok"] += 1
        return decision

    def stats(self) -> dict[str, int]:
        """How many infer requests got each treatment so far ("ok", "status_503", "drop", ...)."""
        with self._lock:
            return dict(self.counts)


class RateLimiter:
    """Token bucket per API key: ``rate`` requests/s, bucket of ``burst`` (default max(1, rate))."""

    def __init__(self, rate: float, burst: int | None = None, clock=time.monotonic) -> None:
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(1.0, rate))
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}

    def acquire(self, key: str) -> float:
        """Take a token: 0.0 when allowed, else the seconds until one is available."""
        with self._lock:
            now = self._clock()
            tokens, last = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate


def retry_after_header(seconds: float) -> str:
    """HTTP Retry-After value: whole seconds, rounded up."""
    return str(max(0, math.ceil(seconds)))
