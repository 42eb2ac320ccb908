"""A chat teacher against the mock's OpenAI-compatible Chat Completions API (the trivial 8x8 teacher, 4 classes)."""

from __future__ import annotations

from typing import Any

import requests
import torch

import mock_server
from ldpclient.privacy import Domain, Guarantee
from ldpclient.privacy.release import _RELEASE_TOKEN, Release
from ldpclient.teachers import connect
from ldpclient.teachers.http import RetryPolicy
from ldpclient.teachers.openai_chat import ChatTeacher

CHAT_TOKEN = "sk-mock-SECRET-7f3a"
#: the trivial mock teacher's class names
CHAT_NAMES = ["0", "1", "2", "3"]


def chat_queries(n: int = 12) -> Release:
    """``n`` 8x8 grey queries whose mean intensity spans [0, 1] (the trivial mock teacher's four buckets)."""
    values = torch.linspace(0.02, 0.98, n).view(-1, 1, 1, 1).expand(n, 1, 8, 8).contiguous()
    g = Guarantee("laplace", 1.0, 0.0, 64.0, 0.0, 64, Domain())
    return Release(values, g, (1, 8, 8), _token=_RELEASE_TOKEN)


def serve_chat(**options: Any) -> Any:
    """The trivial mock teacher that takes :data:`CHAT_TOKEN` (``options`` on top), as a context manager."""
    return mock_server.serve(model="trivial", image_size=8, num_classes=4, tokens=[CHAT_TOKEN], **options)


def chat_teacher(srv: Any, **options: Any) -> ChatTeacher:
    """A chat teacher of ``srv``'s API, billed at 0.15 and 0.6 a million tokens, with quick retries."""
    options.setdefault("retry", RetryPolicy(max_attempts=8, initial_wait=0.01, max_wait=0.05, jitter=0.0, max_total=30))
    teacher: ChatTeacher = connect(f"openai+{srv.url}/v1", model="digits", class_names=CHAT_NAMES,
                                   input_shape=(1, 8, 8), token=CHAT_TOKEN, price_input_tokens=0.15,
                                   price_output_tokens=0.6, **options)
    return teacher


def chat_usage(srv: Any) -> dict[str, Any]:
    """What the mock billed, in all."""
    return dict(requests.get(f"{srv.url}/usage", headers={"Authorization": f"Bearer {CHAT_TOKEN}"},
                             timeout=5).json()["total"])
