"""What one image costs in input tokens at a chat model, by the rules its provider publishes.

:func:`image_tokens` returns the tokens a ``width`` x ``height`` image sent at ``detail: low`` is billed at by the
model family its name belongs to, or None for a model no rule here covers (the chat adapter then books at
:data:`MOST_IMAGE_TOKENS` until the first answers' ``usage`` shows the model's count, or at ``--image-tokens``).
The rules (:data:`RULES`, matched on the model's name, the most specific prefix first):

* OpenAI, tile-based models: a low-detail image costs the model's base tokens whatever its size: gpt-5 and
  gpt-5-chat 70; gpt-4o, gpt-4.1 and gpt-4.5 85; gpt-4o-mini 2,833; o1, o1-pro and o3 75; computer-use-preview 65.
* OpenAI, patch-based models: ``ceil(w/32) * ceil(h/32)`` patches of 32 x 32 pixels (at most 1,536), times the
  model's multiplier, rounded up: gpt-5-mini and gpt-4.1-mini 1.62, gpt-5-nano and gpt-4.1-nano 2.46, o4-mini 1.72.
* Google Gemini (its OpenAI-compatible endpoint): an image of at most 384 pixels a side is 258 tokens; a larger one
  is cut into tiles of 768 x 768, 258 tokens each.
* Anthropic Claude: ``w * h / 750`` tokens, rounded up.

A model name may carry a provider prefix (``openai/gpt-4o``) or a date suffix (``gpt-4o-2024-08-06``); Azure
deployments carry names of their own choosing and need ``--image-tokens``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

#: Tokens a low-detail image costs at most on the models whose price lists publish it (gpt-4o-mini's 2,833, the
#: highest): the booking for a model no rule covers until its answers show its count.
MOST_IMAGE_TOKENS = 2833


@dataclass(frozen=True)
class TokenRule:
    """One family's rule: the model name prefixes it covers, and tokens of a ``(width, height)`` image."""

    family: str
    prefixes: tuple[str, ...]
    tokens: Callable[[int, int], int]


def _base(tokens: int) -> Callable[[int, int], int]:
    return lambda w, h: tokens


def _patches(multiplier: float) -> Callable[[int, int], int]:
    return lambda w, h: math.ceil(min(1536, math.ceil(w / 32) * math.ceil(h / 32)) * multiplier)


def _gemini(w: int, h: int) -> int:
    return 258 if max(w, h) <= 384 else 258 * math.ceil(w / 768) * math.ceil(h / 768)


def _claude(w: int, h: int) -> int:
    return math.ceil(w * h / 750)


#: The published rules, most specific prefixes first within each family.
RULES: tuple[TokenRule, ...] = (
    TokenRule("OpenAI patch-based (x1.62)", ("gpt-5-mini", "gpt-4.1-mini"), _patches(1.62)),
    TokenRule("OpenAI patch-based (x2.46)", ("gpt-5-nano", "gpt-4.1-nano"), _patches(2.46)),
    TokenRule("OpenAI patch-based (x1.72)", ("o4-mini",), _patches(1.72)),
    TokenRule("OpenAI gpt-4o-mini (2,833 a low-detail image)", ("gpt-4o-mini",), _base(2833)),
    TokenRule("OpenAI gpt-5 (70 a low-detail image)", ("gpt-5",), _base(70)),
    TokenRule("OpenAI gpt-4o, gpt-4.1, gpt-4.5 (85 a low-detail image)", ("gpt-4o", "gpt-4.1", "gpt-4.5"), _base(85)),
    TokenRule("OpenAI o1, o3 (75 a low-detail image)", ("o1", "o3"), _base(75)),
    TokenRule("OpenAI computer-use-preview (65 a low-detail image)", ("computer-use-preview",), _base(65)),
    TokenRule("Google Gemini (258 an image up to 384 px)", ("gemini",), _gemini),
    TokenRule("Anthropic Claude (w x h / 750)", ("claude",), _claude),
)


def rule_for(model: str) -> TokenRule | None:
    """The rule of ``model``'s family (its name without a provider prefix, case aside), else None."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    for rule in RULES:
        if any(name == p or name.startswith(p + "-") or name.startswith(p + ".") for p in rule.prefixes):
            return rule
    return None


def image_tokens(model: str, width: int, height: int) -> int | None:
    """Input tokens of one ``width`` x ``height`` image at ``detail: low`` on ``model``, else None (no rule)."""
    rule = rule_for(model)
    return None if rule is None else int(rule.tokens(int(width), int(height)))


__all__ = ["MOST_IMAGE_TOKENS", "RULES", "TokenRule", "image_tokens", "rule_for"]
