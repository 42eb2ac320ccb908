"""How a query to a chat model billed in tokens is booked before it is sent, and charged once it is answered.

A query is booked at what it can cost (:meth:`TokenBooking.most`): its prompt's input tokens and ``max_tokens`` of
answer, at the token prices. The prompt is its text (:func:`text_tokens`, a bound for ordinary text) and its image:

* ``--image-tokens N`` (``image_tokens=``) when given;
* else the rule of the model's family (:mod:`~.image_tokens`);
* else :data:`~.image_tokens.MOST_IMAGE_TOKENS` until an answer reports its ``usage``; from then on
  :data:`LEARNT_MARGIN` times the largest prompt billed so far.

A booking is never below the largest prompt and answer billed so far. An answer is charged what its ``usage``
reports (:meth:`TokenBooking.charge`); a ``usage`` that is missing, zero, negative or beyond :data:`ABSURD` times
the booking is not believed: the query is charged its booking, and counted as a bill not reported.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from .image_tokens import MOST_IMAGE_TOKENS, rule_for

#: Tokens a chat template adds around the prompt's text at most (role markers, separators, the answer's priming).
TEMPLATE_TOKENS = 32
#: Characters of ASCII text per token at least, in the bound :func:`text_tokens` puts on a prompt (English text
#: averages about four per token on the models' tokenizers; any other character counts one token per byte).
ASCII_CHARS_PER_TOKEN = 3
#: Booking of a model no rule covers, once answers report what it bills: this many times the largest prompt billed.
LEARNT_MARGIN = 1.25
#: A ``usage`` more than this many times the booking is not believed (a broken or hostile server).
ABSURD = 10


def text_tokens(text: str) -> int:
    """A bound on the tokens of ``text``: one per :data:`ASCII_CHARS_PER_TOKEN` ASCII characters, one per byte of
    anything else."""
    ascii_chars = sum(1 for c in text if ord(c) < 128)
    return math.ceil(ascii_chars / ASCII_CHARS_PER_TOKEN) + len(text.encode()) - ascii_chars


@dataclass(frozen=True)
class TokenPrices:
    """Money per million tokens: ``input`` (the prompt, its image included) and ``output`` (the answer)."""

    input: float = 0.0
    output: float = 0.0

    def __post_init__(self) -> None:
        for name in ("input", "output"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"token price {name} must be a finite number >= 0, got {v!r}")

    @property
    def given(self) -> bool:
        """Whether any price is set (else the caller prices the queries, e.g. per image)."""
        return bool(self.input or self.output)

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """Money for ``input_tokens`` and ``output_tokens``."""
        return (input_tokens * self.input + output_tokens * self.output) / 1e6


class TokenBooking:
    """The booking of one chat teacher's queries (see the module doc). ``prices``; ``model``: its name (for the
    family's rule); ``size``: the image's ``(width, height)`` in pixels; ``text``: the prompt's text, all messages;
    ``max_tokens``: the longest answer; ``image_tokens``: what one image costs, when the user says it (None: the
    rule, else learnt); ``factor``: the share of the prices charged (a Batch API's 0.5; 1 otherwise)."""

    def __init__(self, prices: TokenPrices, *, model: str, size: tuple[int, int], text: str, max_tokens: int,
                 image_tokens: int | None = None, factor: float = 1.0) -> None:
        if image_tokens is not None and int(image_tokens) < 1:
            raise ValueError(f"--image-tokens must be >= 1, got {image_tokens}")
        rule = rule_for(model)
        self.image: int | None
        if image_tokens is not None:
            self.image, self.source = int(image_tokens), "given (--image-tokens)"
        elif rule is not None:
            self.image, self.source = int(rule.tokens(*size)), f"the published rule of {rule.family}"
        else:
            self.image, self.source = None, (f"not published for {model[:60]!r}: {MOST_IMAGE_TOKENS:,} tokens an "
                                             "image until the answers' usage shows its count (--image-tokens N "
                                             "books at N)")
        self.prices, self.factor = prices, factor
        self.text = text_tokens(text) + TEMPLATE_TOKENS
        self.max_tokens = int(max_tokens)
        self._lock = threading.Lock()
        self._billed_in = 0
        self._billed_out = 0

    def tokens(self) -> tuple[int, int]:
        """The input and output tokens a query is booked at now."""
        with self._lock:
            billed_in, billed_out = self._billed_in, self._billed_out
        if self.image is not None:
            booked = self.text + self.image
        elif billed_in:
            booked = math.ceil(LEARNT_MARGIN * billed_in)
        else:
            booked = self.text + MOST_IMAGE_TOKENS
        return max(booked, billed_in), max(self.max_tokens, billed_out)

    def most(self) -> float:
        """Money a query is booked at now (what the dry run states and the money cap holds on)."""
        tin, tout = self.tokens()
        return self.prices.cost(tin, tout) * self.factor

    def describe(self) -> dict[str, object]:
        """The booking now, for a plan or a report: tokens a query is booked at, an image's tokens and their
        source."""
        tin, tout = self.tokens()
        return {"input_tokens": tin, "output_tokens": tout, "image_tokens": self.image,
                "image_tokens_from": self.source}

    def charge(self, input_tokens: object, output_tokens: object) -> tuple[float, bool]:
        """What an answer whose ``usage`` reports ``input_tokens`` and ``output_tokens`` is charged, and whether
        that usage was believed (else the booking is charged)."""
        booked_in, booked_out = self.tokens()
        tin, tout = token_count(input_tokens), token_count(output_tokens)
        if not tin or tout is None or tin > ABSURD * booked_in or tout > ABSURD * booked_out:
            return self.prices.cost(booked_in, booked_out) * self.factor, False
        with self._lock:
            self._billed_in = max(self._billed_in, tin)
            self._billed_out = max(self._billed_out, tout)
        return self.prices.cost(tin, tout) * self.factor, True

def token_count(value: object) -> int | None:
    """A ``usage`` field's count: ``value`` when it is a whole number >= 0 (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


__all__ = ["ABSURD", "LEARNT_MARGIN", "TEMPLATE_TOKENS", "TokenBooking", "TokenPrices", "text_tokens", "token_count"]
