"""Per-API-key billing: requests, images and cost, with an optional image quota. Thread-safe."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass

ANONYMOUS = "anonymous"


def key_id(token: str | None) -> str:
    """Short, non-reversible fingerprint of a bearer token (first 12 hex of its SHA-256), or "anonymous"."""
    if token is None:
        return ANONYMOUS
    return hashlib.sha256(token.encode()).hexdigest()[:12]


class QuotaExceeded(Exception):
    """A batch would take a key past its image quota; ``remaining`` images are still allowed."""

    def __init__(self, key: str, remaining: int, requested: int) -> None:
        super().__init__(f"quota exceeded for key {key}: {remaining} images left, batch has {requested}")
        self.remaining = remaining


@dataclass
class _Account:
    requests: int = 0
    images: int = 0
    rejected: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    batch_input_tokens: int = 0
    batch_output_tokens: int = 0


class Billing:
    """Counts per key. ``charge`` is atomic check-and-add, so concurrent requests neither
    lose counts nor overrun the quota. Cost = images x ``price_per_image`` (currency units)."""

    def __init__(self, price_per_image: float, quota_images: int | None = None,
                 price_input_tokens: float = 0.0, price_output_tokens: float = 0.0,
                 batch_price_factor: float = 1.0) -> None:
        self.price_per_image = float(price_per_image)
        self.price_input_tokens = float(price_input_tokens)
        self.price_output_tokens = float(price_output_tokens)
        self.batch_price_factor = float(batch_price_factor)
        self.quota_images = quota_images
        self._lock = threading.Lock()
        self._accounts: dict[str, _Account] = {}

    def charge(self, key: str, images: int) -> None:
        """Bill one request of ``images`` images, or raise QuotaExceeded without billing anything."""
        with self._lock:
            acct = self._accounts.setdefault(key, _Account())
            if self.quota_images is not None and acct.images + images > self.quota_images:
                acct.rejected += 1
                raise QuotaExceeded(key, self.quota_images - acct.images, images)
            acct.requests += 1
            acct.images += images

    def charge_tokens(self, key: str, input_tokens: int, output_tokens: int, *, batch: bool = False) -> None:
        """Bill one answered chat request by its tokens (prices per million; ``batch``: a line of a batch, its
        tokens at ``batch_price_factor`` of the prices)."""
        with self._lock:
            acct = self._accounts.setdefault(key, _Account())
            acct.requests += 1
            if batch:
                acct.batch_input_tokens += input_tokens
                acct.batch_output_tokens += output_tokens
            else:
                acct.input_tokens += input_tokens
                acct.output_tokens += output_tokens

    def refund(self, key: str, images: int) -> None:
        """Undo one ``charge`` (the server failed before answering)."""
        with self._lock:
            acct = self._accounts[key]
            acct.requests -= 1
            acct.images -= images
            acct.rejected += 1

    def reject(self, key: str) -> None:
        """Count an infer request of ``key`` that was answered with an error (not billed)."""
        with self._lock:
            self._accounts.setdefault(key, _Account()).rejected += 1

    def snapshot(self) -> dict:
        """The ``GET /usage`` document: per key and total requests, images, cost (images at the image price plus
        tokens at the token prices, a batch's at ``batch_price_factor`` of them), rejected, and input and output
        tokens where the chat API was asked (``batch_input_tokens``/``batch_output_tokens`` where its Batch API was)."""
        with self._lock:
            accounts = {k: (a.requests, a.images, a.rejected, a.input_tokens, a.output_tokens, a.batch_input_tokens,
                            a.batch_output_tokens) for k, a in self._accounts.items()}

        def entry(requests: int, images: int, rejected: int, input_tokens: int, output_tokens: int,
                  batch_input_tokens: int, batch_output_tokens: int) -> dict:
            tin, tout = self.price_input_tokens, self.price_output_tokens
            tokens = (input_tokens * tin + output_tokens * tout) / 1e6
            tokens += (batch_input_tokens * tin + batch_output_tokens * tout) * self.batch_price_factor / 1e6
            cost = round(images * self.price_per_image + tokens, 12)
            out = {"requests": requests, "images": images, "cost": cost, "rejected": rejected}
            if input_tokens or output_tokens:  # a key that asked the chat API
                out.update(input_tokens=input_tokens, output_tokens=output_tokens)
            if batch_input_tokens or batch_output_tokens:  # a key that asked its Batch API
                out.update(batch_input_tokens=batch_input_tokens, batch_output_tokens=batch_output_tokens)
            return out

        totals = [sum(v[i] for v in accounts.values()) for i in range(7)]
        return {
            "price_per_image": self.price_per_image,
            "price_input_tokens": self.price_input_tokens,
            "price_output_tokens": self.price_output_tokens,
            "batch_price_factor": self.batch_price_factor,
            "quota_images": self.quota_images,
            "keys": {k: entry(*v) for k, v in sorted(accounts.items())},
            "total": entry(*totals),
        }
