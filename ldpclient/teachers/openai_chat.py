"""OpenAI-compatible Chat Completions adapter: a chat model that sees images, as a teacher (``openai+https://...``).

The address is the API's base URL (``openai+https://api.openai.com/v1``; any server that speaks the API: Azure
OpenAI's, Gemini's OpenAI-compatible endpoint, vLLM, Ollama, llama.cpp); ``model=`` names the model. Each query
is one request to ``{base}/chat/completions``: a PNG data URL of the query at its own size (``detail: low``), and
a prompt naming the classes (:func:`prompt_text`). The answer is constrained where the server can
(``answer_format="json_schema"``: Structured Outputs, a strict schema whose ``label`` is one of the class names or
:data:`CANNOT_TELL`; a server that refuses the schema is asked in plain text from then on); a plain-text answer
is matched to a class name exactly, case and whitespace aside. Anything else is an abstention
(:data:`~ldpclient.teachers.result.ABSTAINED`), never a guessed class, counted by its kind
(:data:`ldpclient.names.DECLINE_KINDS`): "cannot tell" (however spelled), a refusal, a content filter or a
content-policy error on the image, an answer outside the list (markup and control characters included), an
answer cut off at ``max_tokens``, unreadable, or finished for a reason other than ``stop``.

Money is counted in the unit the service bills: ``prices`` (money per million input and output tokens) times the
``usage`` each answer reports. Before it is sent, an attempt is booked (:meth:`ChatTeacher.most_per_query`, by
:class:`~ldpclient.teachers.token_booking.TokenBooking`: the prompt's text, the image at the model family's
published tokens or ``image_tokens``, and ``max_tokens`` of answer), and charged the answer's usage, or its
booking when the usage is missing or not believable. A 429 or 503 is waited out, quietly and counted, for as long
as ``Retry-After``, ``retry-after-ms`` or ``x-ratelimit-reset-*`` asks (a longer wait than the retry budget ends
the request at once), and requests are held back while an answer's ``x-ratelimit-remaining-requests`` is 0 or
its ``x-ratelimit-remaining-tokens`` is below a query's booking, until the matching reset. Token: ``token=``,
else ``LDPCLIENT_TOKEN``, else ``OPENAI_API_KEY``; never sent over plain ``http://`` except to this machine.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import re
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
import requests
import torch

from .base import Queries, Teacher, TeacherMetadata
from .billing import BillingGuard
from .chat_wire import ANSWER_FORMATS, CANNOT_TELL, QUESTION, Answer, ChatWire, answer_tokens
from .encoding import to_png, to_wire
from .errors import MalformedResponse, RetriesExhausted, TeacherRequestError
from .http import CallInfo, HttpTransport, TransportOptions, transport_from_options
from .identity import adapter_scope
from .openai_batch import BatchRunner, BatchSettings
from .registry import register_adapter
from .result import ABSTAINED, InferResult, name_key
from .token_booking import TokenBooking, TokenPrices

if TYPE_CHECKING:
    from typing_extensions import Unpack

log = logging.getLogger("ldpclient.teachers.openai_chat")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(value: str | None) -> float | None:
    """Seconds in an ``x-ratelimit-reset-*`` value (``"1s"``, ``"6m0s"``, ``"120ms"``, ``"0.5"``), else None."""
    if value is None:
        return None
    text = value.strip().lower()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def rate_limit_wait(resp: requests.Response) -> float | None:
    """The wait a 429/503 without ``Retry-After`` asks for: ``retry-after-ms``, else the longer of the
    ``x-ratelimit-reset-requests`` and ``x-ratelimit-reset-tokens`` resets (seconds), else None."""
    ms = resp.headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    resets = [parse_duration(resp.headers.get(f"x-ratelimit-reset-{k}")) for k in ("requests", "tokens")]
    known = [r for r in resets if r is not None]
    return max(known) if known else None


class _Pacer:
    """Holds the next request back while the server's last answer said its limit is used up: no request left
    (``x-ratelimit-remaining-requests: 0``) or fewer tokens left than a request may take
    (``x-ratelimit-remaining-tokens``), until the matching ``x-ratelimit-reset-*``. ``longest``: the longest wait
    made (seconds); a server that asks for more ends the request at once (:class:`RetriesExhausted`)."""

    def __init__(self, longest: float, tokens_per_request: Callable[[], int]) -> None:
        self._lock = threading.Lock()
        self._not_before = 0.0
        self.longest = longest
        self.tokens_per_request = tokens_per_request

    def wait(self) -> float:
        """Hold the caller back as the server's last headers ask; the seconds held."""
        with self._lock:
            delay = self._not_before - time.monotonic()
        if delay <= 0:
            return 0.0
        if delay > self.longest:
            raise RetriesExhausted(
                f"the server said its rate limit resets in {delay:.0f} s, more than a request may wait "
                f"({self.longest:g} s: --max-retry-time); run again later", attempts=0, elapsed_s=0.0)
        time.sleep(delay)
        return delay

    def update(self, headers: Mapping[str, str]) -> None:
        resets = []
        if _count(headers.get("x-ratelimit-remaining-requests")) == 0:
            resets.append(parse_duration(headers.get("x-ratelimit-reset-requests")))
        tokens = _count(headers.get("x-ratelimit-remaining-tokens"))
        if tokens is not None and tokens < self.tokens_per_request():
            resets.append(parse_duration(headers.get("x-ratelimit-reset-tokens")))
        reset = max((r for r in resets if r), default=None)
        if reset:
            with self._lock:
                self._not_before = max(self._not_before, time.monotonic() + reset)


def _count(value: str | None) -> int | None:
    """A header's whole count (``"0"``, ``"149984"``), else None."""
    text = (value or "").strip()
    return int(text) if text.isdigit() and len(text) < 19 else None


def _checked_options(
    base_url: str, model: str | None, class_names: Sequence[str] | None, input_shape: Sequence[int] | None,
    answer_format: str, max_tokens: int | None,
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """ValueError naming the option (as the command line and the API spell it) for a chat teacher's option that
    cannot work; the class names as strings and the input shape as integers."""
    base = base_url.strip().rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"chat teachers are addressed openai+https://host/v1 (the API's base URL), got {base_url!r}")
    if not model:
        raise ValueError("a chat teacher needs its model's name: --model NAME (API: model=)")
    if not class_names or len(class_names) < 2:
        raise ValueError("a chat teacher needs the task's classes: --class-names FILE (API: class_names=)")
    if not input_shape:
        raise ValueError("a chat teacher needs the queries' shape: --input-shape C,H,W (API: input_shape=)")
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {', '.join(ANSWER_FORMATS)}, got {answer_format!r}")
    if max_tokens is not None and not 1 <= int(max_tokens) <= 4096:
        raise ValueError(f"max_tokens must be in 1..4096, got {max_tokens}")
    names = tuple(str(c) for c in class_names)
    if name_key(CANNOT_TELL) in {name_key(n) for n in names} or len({name_key(n) for n in names}) != len(names):
        raise ValueError(f"class names must differ from each other and from {CANNOT_TELL!r}, case and spaces aside")
    return names, tuple(int(s) for s in input_shape)


class ChatTeacher(Teacher):
    """A chat model that sees images, behind an OpenAI-compatible Chat Completions API.

    ``base_url``: the API's base (``https://api.openai.com/v1``); ``model``: the model's name. ``class_names``:
    the task's classes in label order (required: a chat model publishes none); ``class_descriptions``: an optional
    one-line description per class name, put in the prompt. ``input_shape``: the queries' ``(C, H, W)``.
    ``answer_format``: ``"json_schema"`` (Structured Outputs; a server that refuses it is asked in text) or
    ``"text"``. ``max_tokens``: the longest answer (a longer one is cut off: an abstention; default
    :func:`answer_tokens`, what the longest answer the schema allows takes). ``prices``:
    :class:`TokenPrices` (or ``price_input_tokens=``/``price_output_tokens=``, money per million tokens).
    ``image_tokens``: what one image costs, in input tokens (default: the published rule of the model's family, else
    learnt from the answers' ``usage``: :mod:`~ldpclient.teachers.token_booking`).
    ``batch``: ask through the Batch API (``True``, or :class:`~ldpclient.teachers.openai_batch.BatchSettings`):
    a batch of queries is one job, answered within 24 h, at the settings' share of the token prices.
    Connection options as in :class:`~ldpclient.teachers.huggingface.HFTeacher`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        class_names: Sequence[str] | None = None,
        class_descriptions: Mapping[str, str] | None = None,
        input_shape: Sequence[int] | None = None,
        value_range: tuple[float, float] = (0.0, 1.0),
        answer_format: str = "json_schema",
        max_tokens: int | None = None,
        prices: TokenPrices | None = None,
        price_input_tokens: float | None = None,
        price_output_tokens: float | None = None,
        image_tokens: int | None = None,
        batch: bool | BatchSettings = False,
        transport: HttpTransport | None = None,
        **transport_options: Unpack[TransportOptions],
    ) -> None:
        base = base_url.strip().rstrip("/")
        self.http = transport_from_options(transport, transport_options, adapter="ChatTeacher", name=f"openai:{model}",
                                           url=base_url,
                                           token_env=("LDPCLIENT_TOKEN", "OPENAI_API_KEY"))
        names, shape = _checked_options(
            base_url, model, class_names, input_shape, answer_format, max_tokens
        )
        if prices is None:
            prices = TokenPrices(float(price_input_tokens or 0.0), float(price_output_tokens or 0.0))
        elif price_input_tokens is not None or price_output_tokens is not None:
            raise ValueError("give prices= or price_input_tokens=/price_output_tokens=, not both")
        self.base_url = base
        self.url = f"{base}/chat/completions"
        self.prices = prices
        self.wire = ChatWire(str(model), names, class_descriptions, answer_format=answer_format,
                             max_tokens=int(max_tokens) if max_tokens is not None else answer_tokens(names))
        self._shape = shape
        self._value_range = (float(value_range[0]), float(value_range[1]))
        self.batch = BatchSettings() if batch is True else (batch or None)
        self.booking = TokenBooking(prices, model=self.model, size=(shape[-1], shape[-2]),
                                    text=self.wire.prompt + QUESTION, max_tokens=self.max_tokens,
                                    image_tokens=image_tokens, factor=self.batch.price_factor if self.batch else 1.0)
        self._pacer = _Pacer(min(self.http.retry.max_total, self.http.retry.max_retry_after),
                             lambda: sum(self.booking.tokens()))
        self._meta = TeacherMetadata(
            name=self.model, input_shape=self._shape, datatype="UINT8", num_classes=len(names), class_names=names,
            max_batch_size=self._lines_per_job(), value_range=self._value_range, abstains=True,
            batch_api=self.batch is not None,
        )
        asked = hashlib.sha256(json.dumps([self.wire.prompt, answer_format, self.max_tokens]).encode()).hexdigest()
        self.journal_scope = f"{adapter_scope('openai', self.url)}?model={self.model}&prompt={asked[:12]}"

    @property
    def model(self) -> str:
        """The model asked, as the requests name it."""
        return self.wire.model

    @property
    def max_tokens(self) -> int:
        """The longest answer a request allows, in tokens."""
        return self.wire.max_tokens

    def metadata(self) -> TeacherMetadata:
        return self._meta

    @property
    def answer_format(self) -> str:
        """What the server is asked for now: ``"json_schema"``, or ``"text"`` once it refused the schema."""
        return self.wire.answer_format

    def _lines_per_job(self) -> int | None:
        """In batch mode, the most queries one job's file holds: the line limit, or as many of the largest request
        (a PNG that does not compress, in base64, and the prompt) as its byte limit takes; else None."""
        if self.batch is None:
            return None
        raw = math.prod(self._shape) + self._shape[-2] + 128
        line = 4 * (raw + 5 * (raw // 16_000 + 1)) // 3 + 4 + len(self.wire.prompt.encode()) + 1024
        return max(1, min(self.batch.max_lines, self.batch.max_bytes // line))

    def requests_for(self, n: int) -> int:
        return n

    def most_per_query(self) -> float | None:
        """What one query is booked at now, at the token prices (in batch mode, at the Batch API's share of them:
        :class:`~ldpclient.teachers.token_booking.TokenBooking`); None without them: the caller prices per query."""
        return self.booking.most() if self.prices.given else None

    def classify(self, queries: Queries) -> torch.Tensor:
        """Labels int64 ``(Q,)``; :data:`~ldpclient.teachers.result.ABSTAINED` where the model declined."""
        return self.infer(queries).labels

    def _parse(self, resp: requests.Response, fmt: str) -> Answer:
        """The answer to a request asked in ``fmt`` (an answer format)."""
        self._pacer.update(resp.headers)
        try:
            doc = resp.json()
        except ValueError:  # not asked again: a 200 may well have been billed
            raise MalformedResponse(f"response is not JSON: {resp.text[:80]!r}", transient=False) from None
        return self.wire.answer_of(doc, fmt)

    def _ask(self, png: bytes, request_id: str | None, billing: BillingGuard | None) -> tuple[Answer, CallInfo | None]:
        """One query's answer and its call info; a content-policy error on the image is that query's abstention."""
        paced = 0.0
        while True:
            paced += self._pacer.wait()
            fmt = self.wire.answer_format
            headers = {"Content-Type": "application/json"}
            if request_id:
                headers["X-Client-Request-Id"] = request_id[:512]
            try:
                answer, info = self.http.call(
                    "POST", self.url, data=json.dumps(self.wire.request_body(png, fmt)).encode(), headers=headers,
                    parse=functools.partial(self._parse, fmt=fmt), what=f"ask {self.model}", units=1, billing=billing,
                    retry_hint=rate_limit_wait,
                )
                info.waits.paced_s += paced
                return answer, info
            except TeacherRequestError as exc:
                refusal = self.wire.read_refusal(exc.status, f"{exc.server_message} {exc}", fmt)
                if refusal == "policy":
                    return Answer(ABSTAINED, 0, 0, "policy"), None
                if refusal != "ask_in_text":
                    raise

    def batch_runner(self, settings: BatchSettings) -> BatchRunner:
        """What sends this teacher's queries as Batch API jobs under ``settings``."""
        return BatchRunner(self.wire, self.http, self.base_url, self.booking, settings)

    def _infer_batch(self, queries: Queries, request_id: str | None, billing: BillingGuard | None) -> InferResult:
        """The queries' answers through the Batch API (:mod:`~ldpclient.teachers.openai_batch`)."""
        assert self.batch is not None
        m = self._meta
        pngs = [to_png(row, m.datatype, m.value_range) for row in to_wire(queries, m)]
        got = self.batch_runner(self.batch).run(pngs, request_id or f"q-{uuid.uuid4().hex}", billing)
        labels = np.asarray([got.answers[k].label for k in range(len(pngs))], dtype=np.int64)
        res = InferResult(labels=torch.from_numpy(labels), requests=got.lines, billed=None, attempts=got.lines,
                          bytes_sent=got.bytes_sent, bytes_received=got.bytes_received,
                          cost=got.cost if self.prices.given else None, input_tokens=got.input_tokens,
                          output_tokens=got.output_tokens, unbilled=got.unbilled, collected_earlier=got.earlier)
        for answer in got.answers.values():
            if answer.reason is not None:
                res.decline(answer.reason)
        return res

    def infer(
        self, queries: Queries, *, request_id: str | None = None, billing: BillingGuard | None = None
    ) -> InferResult:
        if self.batch is not None:
            return self._infer_batch(queries, request_id, billing)
        m = self._meta
        wire = to_wire(queries, m)
        most = self.most_per_query()
        res = InferResult(labels=torch.zeros(0, dtype=torch.int64), requests=0, billed=None, attempts=0,
                          cost=None if most is None else 0.0)
        labels = []
        for k, row in enumerate(wire):
            rid = f"{request_id}/{k}" if request_id else None
            answer, info = self._ask(to_png(row, m.datatype, m.value_range), rid, billing)
            labels.append(answer.label)
            if answer.reason is not None:
                res.decline(answer.reason)
            if info is None:
                continue  # refused before it was answered: nothing billed
            res.count_call(info)
            if most is not None:  # priced by its tokens; without token prices, the caller's price per query
                cost, believed = self.booking.charge(answer.input_tokens, answer.output_tokens)
                res.unbilled += 0 if believed else 1
                settle = getattr(billing, "settle_attempt", None)
                if callable(settle):
                    settle(1, cost)
                res.cost = float(res.cost or 0.0) + cost
            res.input_tokens += answer.input_tokens or 0
            res.output_tokens += answer.output_tokens or 0
        res.labels = torch.from_numpy(np.asarray(labels, dtype=np.int64))
        return res

    def close(self) -> None:
        self.http.close()

    def __repr__(self) -> str:
        return f"ChatTeacher({self.base_url!r}, model={self.model!r}, token={'***' if self.http.has_token else None})"


@register_adapter("openai", takes=ChatTeacher)
def connect_openai(target: str, **opts: Any) -> ChatTeacher:
    """``openai+https://host/v1`` with ``model=`` (see :class:`ChatTeacher`)."""
    return ChatTeacher(target, **opts)
