"""The cloud APIs the mock also speaks, answering from its model: OpenAI's Chat Completions with image input
(``POST /v1/chat/completions``, ``GET /v1/models``) and Google Cloud Vision's ``POST /v1/images:annotate``
(LABEL_DETECTION).

Shapes follow the APIs' public references: a chat completion's ``choices[0].message`` (``content``, ``refusal``),
``finish_reason`` and ``usage`` tokens; the OpenAI error object ``{"error": {"message", "type", "param",
"code"}}``; rate-limit headers ``x-ratelimit-limit-requests`` / ``-remaining-requests`` / ``-reset-requests``;
Cloud Vision's ``{"responses": [{"labelAnnotations": [{"mid", "description", "score", "topicality"}]} or
{"error": {"code", "message"}}]}``. Tokens are counted as OpenAI publishes for low-detail images (85 per image)
and, for text, one token per four characters, rounded up, plus four per message and three to prime the answer.

Every behaviour a real service shows is a switch of :class:`~mock_server.config.ServerConfig` (``chat_*``,
``rate_limit_header``); a per-image behaviour (a content-policy error, a refusal, an off-list answer) is drawn
from the image's bytes and ``fault_seed``, so the same image meets the same behaviour on every request.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import math
import random
import threading
import time
import uuid
from typing import Any

import numpy as np

from .faults import Decision, retry_after_header

#: Tokens of one low-detail image (OpenAI's published figure for the gpt-4o family).
LOW_DETAIL_IMAGE_TOKENS = 85
#: Largest number of images one Cloud Vision ``images:annotate`` request may carry.
VISION_MAX_IMAGES = 16
REFUSAL = "I'm sorry, but I can't help with that image."
#: A label every Vision answer carries first, mapped to no class (as a real label list's "Rectangle" or "Font").
GENERIC_LABEL = {"mid": "/m/0mock_generic", "description": "Pattern"}


class ApiError(Exception):
    """An error answer in a cloud API's own shape: ``status``, the body ``doc``, extra ``headers`` (never billed)."""

    def __init__(self, status: int, doc: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(json.dumps(doc)[:200])
        self.status = status
        self.doc = doc
        self.headers = headers or {}


def openai_error(status: int, message: str, kind: str, code: str | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None) -> ApiError:
    return ApiError(status, {"error": {"message": message, "type": kind, "param": param, "code": code}}, headers)


def text_tokens(text: str) -> int:
    """Tokens of ``text`` as this mock counts them: one per four characters, rounded up."""
    return math.ceil(len(text) / 4)


class RequestWindow:
    """Requests per key per fixed window: what the ``x-ratelimit-*`` headers state, and the 429 beyond it."""

    def __init__(self, limit: int | None, seconds: float) -> None:
        self.limit, self.seconds = limit, seconds
        self._lock = threading.Lock()
        self._windows: dict[str, tuple[float, int]] = {}

    def take(self, key: str) -> tuple[bool, float, dict[str, str]]:
        """Count one request of ``key``: (allowed, seconds until the window resets, the rate-limit headers)."""
        if self.limit is None:
            return True, 0.0, {}
        with self._lock:
            now = time.monotonic()
            start, used = self._windows.get(key, (now, 0))
            if now - start >= self.seconds:
                start, used = now, 0
            allowed = used < self.limit
            used += 1 if allowed else 0
            self._windows[key] = (start, used)
        reset = max(0.0, start + self.seconds - now)
        return allowed, reset, {"x-ratelimit-limit-requests": str(self.limit),
                         "x-ratelimit-remaining-requests": str(max(0, self.limit - used)),
                         "x-ratelimit-reset-requests": f"{max(reset, 0.001):.3f}s"}


def _rng(config: Any, image: bytes, what: str) -> random.Random:
    return random.Random(f"{config.fault_seed}:{what}:{hashlib.sha256(image).hexdigest()}")


def decode_image(data: bytes, shape: tuple[int, int, int], value_range: tuple[float, float]) -> np.ndarray:
    """An encoded image as the model's input ``(C, H, W)`` float32 in ``value_range`` (resized to its size)."""
    from PIL import Image, UnidentifiedImageError

    try:
        opened = Image.open(io.BytesIO(data))
        opened.load()
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ValueError(f"not an image this server reads ({type(exc).__name__})") from None
    c, h, w = shape
    img = opened.convert("L" if c == 1 else "RGB")
    if img.size != (w, h):
        img = img.resize((w, h))
    arr = np.asarray(img, dtype=np.float32) / 255.0
    arr = arr[None] if c == 1 else np.moveaxis(arr, -1, 0)
    lo, hi = value_range
    return (arr * (hi - lo) + lo).astype(np.float32)


def rate_limited(config: Any, wait: float) -> ApiError:
    """The 429 of a rate limit, stating ``wait`` in the header ``config.rate_limit_header`` names."""
    style = config.rate_limit_header
    if style == "retry-after-ms":
        headers = {"retry-after-ms": str(max(1, math.ceil(wait * 1000)))}
    elif style == "x-ratelimit-reset-requests":
        headers = {"x-ratelimit-reset-requests": f"{wait:.3f}s", "x-ratelimit-remaining-requests": "0"}
    else:
        headers = {"Retry-After": retry_after_header(wait)}
    return openai_error(429, "Rate limit reached for requests (mock)", "requests", "rate_limit_exceeded",
                        headers=headers)


# ----------------------------------------------------------------------------------------- chat completions
def _chat_image(messages: Any) -> tuple[bytes, str, int]:
    """The one image of a chat request (bytes, detail) and the request's text tokens."""
    if not isinstance(messages, list) or not messages:
        raise openai_error(400, "messages must be a non-empty array", "invalid_request_error", param="messages")
    images: list[tuple[str, str]] = []
    tokens = 3
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer", "user", "assistant"):
            raise openai_error(400, "each message needs a role", "invalid_request_error", param="messages")
        tokens += 4
        content = m.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(parts, list):
            raise openai_error(400, "message content must be a string or an array", "invalid_request_error")
        for part in parts:
            if not isinstance(part, dict):
                raise openai_error(400, "content parts must be objects", "invalid_request_error")
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                tokens += text_tokens(part["text"])
            elif part.get("type") == "image_url" and isinstance(part.get("image_url"), dict):
                images.append((str(part["image_url"].get("url", "")), str(part["image_url"].get("detail", "auto"))))
            else:
                raise openai_error(400, f"unsupported content part {str(part.get('type'))[:40]!r}",
                                   "invalid_request_error")
    if len(images) != 1:
        raise openai_error(400, f"this mock answers about exactly one image per request, got {len(images)}",
                           "invalid_request_error", param="messages")
    url, detail = images[0]
    head, sep, payload = url.partition(",")
    if not sep or not head.startswith("data:image/") or not head.endswith(";base64"):
        raise openai_error(400, "image_url must be a base64 data URL (data:image/png;base64,...)",
                           "invalid_request_error", "invalid_image_url")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise openai_error(400, "image_url is not valid base64", "invalid_request_error", "invalid_image_url") from None
    return data, detail, tokens


def _schema_enum(doc: dict[str, Any], config: Any) -> list[str] | None:
    """The class names a Structured Outputs request allows, or None without one."""
    fmt = doc.get("response_format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        raise openai_error(400, "response_format must be text or json_schema here", "invalid_request_error",
                           param="response_format")
    if config.chat_no_schema:
        raise openai_error(400, "response_format json_schema is not supported with this model",
                           "invalid_request_error", param="response_format")
    try:
        enum = fmt["json_schema"]["schema"]["properties"]["label"]["enum"]
    except (KeyError, TypeError):
        raise openai_error(400, "this mock reads schemas of one enum property 'label'", "invalid_request_error",
                           param="response_format") from None
    if not isinstance(enum, list) or not all(isinstance(v, str) for v in enum):
        raise openai_error(400, "the schema's enum must list strings", "invalid_request_error")
    return enum


def json_object(body: bytes) -> dict[str, Any]:
    """A request body that must be a JSON object, else the OpenAI-shaped 400."""
    try:
        doc = json.loads(body)
    except ValueError:
        raise openai_error(400, "the body is not JSON", "invalid_request_error") from None
    if not isinstance(doc, dict):
        raise openai_error(400, "the body must be a JSON object", "invalid_request_error")
    return doc


def refuse_injected(cfg: Any, decision: Decision) -> None:
    """Raise the error answer ``decision`` injects, if any: a 429 stating its wait in ``rate_limit_header``, a 503
    with ``Retry-After``, or another status."""
    if decision.action == "status" and decision.status in (429, 503):
        raise rate_limited(cfg, float(cfg.retry_after)) if decision.status == 429 else openai_error(
            503, "The server is overloaded "
                 "(injected)", "server_error", headers={"Retry-After": retry_after_header(cfg.retry_after)})
    if decision.action == "status":
        raise openai_error(decision.status or 500, "injected failure", "server_error")


def chat_completion(server: Any, body: bytes, key: str, decision: Decision, *,
                    batch: bool = False) -> tuple[dict[str, Any], dict[str, str]]:
    """Answer one ``POST /v1/chat/completions``; raises :class:`ApiError` for an error answer. ``batch``: a line of
    a batch (:mod:`mock_server.batches`): outside the request window, billed at the batch price."""
    cfg, teacher = server.config, server.teacher
    doc = json_object(body)
    if doc.get("model") != cfg.model_name:
        raise openai_error(404, f"The model `{str(doc.get('model'))[:60]}` does not exist", "invalid_request_error",
                           "model_not_found")
    if doc.get("n", 1) != 1 or doc.get("stream"):
        raise openai_error(400, "this mock answers n=1 without streaming", "invalid_request_error")
    image, detail, tokens = _chat_image(doc.get("messages"))
    enum = _schema_enum(doc, cfg)
    allowed, reset, limit_headers = (True, 0.0, {}) if batch else server.chat_window.take(key)
    if not allowed:
        raise rate_limited(cfg, reset)
    refuse_injected(cfg, decision)
    rng = _rng(cfg, image, "chat")
    if rng.random() < cfg.chat_policy_rate:
        raise openai_error(400, "Your request was rejected as a result of our safety system.",
                           "invalid_request_error", "content_policy_violation")
    try:
        x = decode_image(image, teacher.input_shape, teacher.value_range)
    except ValueError as exc:
        raise openai_error(400, f"Invalid image: {exc}", "invalid_request_error", "invalid_image") from None
    probs = teacher.proba(x[None])[0]
    top = int(np.argmax(probs))
    name = "cannot tell" if probs[top] < cfg.chat_abstain_below else str(teacher.class_names[top])
    refused = rng.random() < cfg.chat_refusal_rate
    off_list = rng.random() < cfg.chat_off_list_rate
    if enum is not None:
        name = name if name in enum else enum[-1]
        content: str | None = json.dumps({"label": name})
    else:
        content = f"It looks like {name}, I think." if off_list else name
    finish = "stop"
    limit = doc.get("max_completion_tokens") or doc.get("max_tokens")
    completion = 1 if refused else text_tokens(content or "")
    if refused:
        content = None
    elif cfg.chat_cut_off or (isinstance(limit, int) and completion > limit):
        keep = 1 if cfg.chat_cut_off else int(limit or 1)
        content, completion, finish = (content or "")[: 4 * keep], keep, "length"
    prompt = tokens + (LOW_DETAIL_IMAGE_TOKENS if detail == "low" else 2 * LOW_DETAIL_IMAGE_TOKENS + 85)
    server.billing.charge_tokens(key, prompt, completion, batch=batch)
    answer = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
        "model": cfg.model_name, "system_fingerprint": "fp_mock",
        "choices": [{"index": 0, "finish_reason": finish, "logprobs": None,
                     "message": {"role": "assistant", "content": content, "refusal": REFUSAL if refused else None}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }
    return answer, limit_headers


def models_list(server: Any) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": server.config.model_name, "object": "model", "created": 0,
                                        "owned_by": "ldpclient-mock"}]}


# ----------------------------------------------------------------------------------------- cloud vision
def vision_error(status: int, message: str, reason: str = "INVALID_ARGUMENT") -> ApiError:
    return ApiError(status, {"error": {"code": status, "message": message, "status": reason}})


def annotate(server: Any, body: bytes, key: str, decision: Decision) -> dict[str, Any]:
    """Answer one ``POST /v1/images:annotate`` (LABEL_DETECTION); each image is billed unless its own entry is an
    error; raises :class:`ApiError` for an error answer of the whole request."""
    cfg, teacher = server.config, server.teacher
    try:
        doc = json.loads(body)
    except ValueError:
        raise vision_error(400, "Invalid JSON payload received.") from None
    requests = doc.get("requests") if isinstance(doc, dict) else None
    if not isinstance(requests, list) or not requests:
        raise vision_error(400, "requests must be a non-empty list")
    if len(requests) > VISION_MAX_IMAGES:
        raise vision_error(400, f"At most {VISION_MAX_IMAGES} images are allowed per request, got {len(requests)}.")
    if decision.action == "status":
        status = decision.status or 500
        reason = {429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}.get(status, "INTERNAL")
        raise ApiError(status, {"error": {"code": status, "message": "injected failure", "status": reason}},
                       {"Retry-After": retry_after_header(cfg.retry_after)} if status in (429, 503) else {})
    responses: list[dict[str, Any]] = []
    billed = 0
    for req in requests:
        try:
            image = base64.b64decode(str(req["image"]["content"]), validate=True)
            features = req.get("features") or []
            kinds = {f.get("type") for f in features if isinstance(f, dict)}
            most = max([int(f.get("maxResults", 10)) for f in features if isinstance(f, dict)] or [10])
        except (KeyError, TypeError, ValueError, binascii.Error):
            responses.append({"error": {"code": 3, "message": "Bad image data."}})
            continue
        if "LABEL_DETECTION" not in kinds:
            responses.append({"error": {"code": 3, "message": "this mock answers LABEL_DETECTION only"}})
            continue
        if _rng(cfg, image, "vision").random() < cfg.chat_policy_rate:
            responses.append({"error": {"code": 3, "message": "The image was rejected by the content policy."}})
            continue
        try:
            x = decode_image(image, teacher.input_shape, teacher.value_range)
        except ValueError:
            responses.append({"error": {"code": 3, "message": "Bad image data."}})
            continue
        probs = teacher.proba(x[None])[0]
        order = np.argsort(-probs, kind="stable")
        labels: list[dict[str, Any]] = [{**GENERIC_LABEL, "score": 0.97, "topicality": 0.97}]
        for rank, k in enumerate(order[: max(0, most - 1)]):
            p = float(probs[k])
            if p < cfg.chat_abstain_below or (rank and p < 0.5):  # the best class, and the others over one half
                break
            labels.append({"mid": f"/m/mock_{int(k)}", "description": str(teacher.class_names[k]),
                           "score": round(p, 6), "topicality": round(p, 6)})
        responses.append({"labelAnnotations": labels})
        billed += 1
    if billed:
        server.billing.charge(key, billed)
    return {"responses": responses}
