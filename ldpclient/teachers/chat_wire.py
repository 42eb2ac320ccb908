"""What a chat model that sees images is asked and how its answer is read, on the wire of the OpenAI Chat
Completions API: shared by the direct path (:mod:`~ldpclient.teachers.openai_chat`, one request a query) and the
Batch API path (:mod:`~ldpclient.teachers.openai_batch`, one line a query).

A query is a PNG data URL (``detail: low``) beside a prompt naming the classes (:func:`prompt_text`). The answer
is constrained where the server can (``"json_schema"``: Structured Outputs, a strict schema whose ``label`` is one
of the class names or :data:`CANNOT_TELL`); a server that refuses the schema is asked in plain text from then on
(:meth:`ChatWire.read_refusal`), and a plain-text answer is matched to a class name exactly, case and whitespace
aside. Anything else is a decline (:data:`~ldpclient.teachers.result.ABSTAINED`), never a guessed class, counted
by its kind (:data:`ldpclient.names.DECLINE_KINDS`).
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass
from typing import Mapping, Sequence

from .result import ABSTAINED, name_key
from .token_booking import text_tokens, token_count

__all__ = ["ANSWER_FORMATS", "CANNOT_TELL", "QUESTION", "Answer", "ChatWire", "answer_schema", "answer_tokens",
           "prompt_text"]

#: The schema's value, and the prompt's word, for "this image shows none of the classes I can tell apart".
CANNOT_TELL = "cannot tell"
#: Answer formats: Structured Outputs (a strict JSON schema with the class names as an enum), or plain text.
ANSWER_FORMATS = ("json_schema", "text")
#: ``finish_reason`` values of a complete answer (a server that sends none is read as complete); any other
#: (``"length"``, ``"tool_calls"``, one not known yet) declines the query.
FINISHED = ("stop", None)
#: Spellings of "I cannot tell" a model may answer instead of :data:`CANNOT_TELL` (compared by :func:`plain_words`).
CANNOT_TELL_SPELLINGS = frozenset({
    "cannot tell", "can not tell", "cant tell", "i cannot tell", "i cant tell", "cannot determine",
    "cant determine", "unknown", "unsure", "not sure", "unclear", "uncertain", "none", "no idea", "n a", "na",
    "undetermined", "none of them", "none of the above",
})
#: The user message's text beside the image.
QUESTION = "Which class is this image?"


def prompt_text(class_names: Sequence[str], descriptions: Mapping[str, str] | None = None) -> str:
    """The system prompt: the task, the classes (with their one-line descriptions) and the one word for none."""
    lines = []
    for name in class_names:
        about = (descriptions or {}).get(name)
        lines.append(f"- {name}: {about}" if about else f"- {name}")
    return (
        "You label images for an image classifier. Answer with exactly one of these class names and nothing "
        f"else:\n{chr(10).join(lines)}\nIf the image shows none of them, or you cannot tell which, answer "
        f"\"{CANNOT_TELL}\"."
    )


def answer_schema(class_names: Sequence[str]) -> dict[str, object]:
    """The Structured Outputs ``response_format``: an object whose ``label`` is a class name or :data:`CANNOT_TELL`."""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "image_class",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"label": {"type": "string", "enum": [*class_names, CANNOT_TELL]}},
                "required": ["label"],
                "additionalProperties": False,
            },
        },
    }


def answer_tokens(class_names: Sequence[str]) -> int:
    """The longest answer a chat teacher asks for, in tokens: what the schema's longest answer
    (``{"label": "<the longest class name or cannot tell>"}``) takes at most, and a few to spare; at least 8."""
    longest = max([*class_names, CANNOT_TELL], key=lambda n: text_tokens(json.dumps({"label": n})))
    return max(8, text_tokens(json.dumps({"label": longest})) + 4)


def plain_words(text: str) -> str:
    """``text`` as words only: lower case, apostrophes dropped, anything else that is not a letter or a digit
    (markup, punctuation, quotes, control characters) a space, runs of spaces one. ``"**Can't tell.**"`` ->
    ``"cant tell"``."""
    folded = text[:200].casefold().replace("'", "").replace("\u2019", "")
    return " ".join("".join(c if c.isalnum() else " " for c in folded).split())


@dataclass(frozen=True)
class Answer:
    """One query's answer: its label (:data:`~ldpclient.teachers.result.ABSTAINED` for a decline), the tokens
    the server reported for it (None: not reported), and why it is a decline."""

    label: int
    input_tokens: int | None
    output_tokens: int | None
    reason: str | None  # why it is an abstention: a key of ldpclient.names.DECLINE_KINDS (None: a class)


class ChatWire:
    """The request a query is sent as and how its answer is read, for one model and one list of classes.
    ``answer_format``: what the server is asked for now (``"json_schema"``, or ``"text"`` once it refused the
    schema); it changes under a lock, whichever path (direct or Batch) found the refusal."""

    def __init__(self, model: str, names: Sequence[str], descriptions: Mapping[str, str] | None, *,
                 max_tokens: int, answer_format: str) -> None:
        self.model = model
        self.names = tuple(names)
        self.prompt = prompt_text(self.names, descriptions)
        self.max_tokens = max_tokens
        self._index = {name_key(n): i for i, n in enumerate(self.names)}
        self._format = answer_format
        self._lock = threading.Lock()

    @property
    def answer_format(self) -> str:
        return self._format

    def read_refusal(self, status: int | None, said: str, fmt: str) -> str | None:
        """What the server's refusal of a request asked in ``fmt`` means (``status``: its HTTP status; ``said``:
        its words): ``"policy"`` (the image broke its content policy: the query's decline), ``"ask_in_text"``
        (it takes no schema: from now on every request asks for plain text; the request is to be asked again),
        else None (another error)."""
        if status != 400:
            return None
        if "content_policy_violation" in said:
            return "policy"
        if fmt == "json_schema" and ("response_format" in said or "json_schema" in said):
            with self._lock:
                self._format = "text"
            return "ask_in_text"
        return None

    def request_body(self, png: bytes, fmt: str | None = None) -> dict[str, object]:
        """The Chat Completions request for one query's PNG, asking for answers in ``fmt`` (default: the
        answer format asked in now)."""
        url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        body: dict[str, object] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": self.prompt},
                {"role": "user", "content": [
                    {"type": "text", "text": QUESTION},
                    {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
                ]},
            ],
            "temperature": 0,
            "max_tokens": self.max_tokens,
        }
        if (fmt or self.answer_format) == "json_schema":
            body["response_format"] = answer_schema(self.names)
        return body

    def label_of(self, content: str, structured: bool) -> tuple[int, str | None]:
        """The label a message's ``content`` names (read as the schema's object when ``structured``), and why it
        is a decline (None: a class)."""
        text = content
        if structured:  # a server that ignored the schema and answered in text is read as text
            try:
                doc = json.loads(content)
            except RecursionError:
                return ABSTAINED, "unreadable"
            except ValueError:
                doc = None
            if isinstance(doc, dict) and isinstance(doc.get("label"), str):
                text = doc["label"]
            elif doc is not None:
                return ABSTAINED, "unreadable"
        key = name_key(text)
        if key in self._index:
            return self._index[key], None
        if plain_words(text) in CANNOT_TELL_SPELLINGS:
            return ABSTAINED, "cannot_tell"
        return ABSTAINED, "off_list"

    def answer_of(self, doc: object, fmt: str) -> Answer:
        """The answer a chat completion ``doc`` gives to a request asked in ``fmt`` (an answer format); a document
        that is not a chat completion is an unreadable answer, declined (asking again would pay again)."""
        completion: dict[str, object] = doc if isinstance(doc, dict) else {}
        choices = completion.get("choices")
        usage = completion.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        tin, tout = token_count(usage.get("prompt_tokens")), token_count(usage.get("completion_tokens"))
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return Answer(ABSTAINED, tin, tout, "unreadable")
        choice = choices[0]
        message: dict[str, object] = choice["message"] if isinstance(choice.get("message"), dict) else {}
        finish = choice.get("finish_reason")
        if message.get("refusal"):
            return Answer(ABSTAINED, tin, tout, "refusal")
        if finish == "content_filter":
            return Answer(ABSTAINED, tin, tout, "policy")
        if finish not in FINISHED:  # cut off at max_tokens ("length"), a tool call, or a reason not known yet
            return Answer(ABSTAINED, tin, tout, "unreadable")
        content = message.get("content")
        if not isinstance(content, str):
            return Answer(ABSTAINED, tin, tout, "unreadable")
        label, reason = self.label_of(content, fmt == "json_schema")
        return Answer(label, tin, tout, reason)
