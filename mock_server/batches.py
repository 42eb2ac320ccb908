"""OpenAI's Batch API as the mock speaks it: ``/v1/files`` (upload, retrieve, content) and ``/v1/batches``
(create, retrieve, list, cancel), in the shapes of the API's public reference.

A batch is answered lazily: the first look at it (retrieve or list) once ``batch_seconds`` have passed since it
was created answers its lines through the chat endpoint's own code (:func:`mock_server.cloud.chat_completion`,
without its request window or injected faults) and writes an output file (lines answered 200) and an error file
(lines answered with an error status, and lines never run, with the error ``batch_expired`` or
``batch_cancelled``). The first ``batch_expire_first`` batches expire with the first half of their lines
answered; the first ``batch_fail_first`` fail at once with ``token_limit_exceeded`` (the API's answer when a key's
enqueued tokens are spent). Uploads and new batches meet the injected 429s and 503s of ``rate_429`` and
``error_rate_503``, as chat requests do. Lines answered in a batch are billed at :data:`BATCH_PRICE_FACTOR` of the
token prices, as OpenAI bills
its Batch API. Files and batches belong to the API key that made them: another key gets a 404.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .cloud import ApiError, chat_completion, json_object, openai_error
from .faults import Decision

#: Most lines one batch's input file may hold (the API's published limit).
MAX_BATCH_LINES = 50_000
#: What a token costs in a batch, as a share of its price in a chat request.
BATCH_PRICE_FACTOR = 0.5
#: The only completion window the API accepts.
COMPLETION_WINDOW = "24h"
ENDPOINT = "/v1/chat/completions"
_NOT_RUN = {"expired": ("batch_expired", "This request could not be executed before the completion window expired."),
            "cancelled": ("batch_cancelled", "This request was cancelled before it ran.")}


@dataclass
class _File:
    id: str
    key: str
    purpose: str
    filename: str
    data: bytes
    created_at: int

    def doc(self) -> dict[str, Any]:
        return {"id": self.id, "object": "file", "bytes": len(self.data), "created_at": self.created_at,
                "filename": self.filename, "purpose": self.purpose, "status": "processed", "status_details": None}


@dataclass
class _Batch:
    id: str
    key: str
    ordinal: int
    input_file_id: str
    metadata: dict[str, str] | None
    created_at: float
    lines: list[dict[str, Any]]
    status: str = "in_progress"
    errors: list[dict[str, Any]] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = field(default_factory=lambda: {"total": 0, "completed": 0, "failed": 0})
    ended_at: int | None = None

    def doc(self) -> dict[str, Any]:
        created = int(self.created_at)
        ended = {f"{self.status}_at": self.ended_at} if self.ended_at is not None else {}
        return {
            "id": self.id, "object": "batch", "endpoint": ENDPOINT, "input_file_id": self.input_file_id,
            "completion_window": COMPLETION_WINDOW, "status": self.status,
            "errors": {"object": "list", "data": self.errors} if self.errors else None,
            "output_file_id": self.output_file_id, "error_file_id": self.error_file_id, "created_at": created,
            "in_progress_at": created, "expires_at": created + 86400, "request_counts": dict(self.counts),
            "metadata": self.metadata, **ended,
        }


def _id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


_Owned = TypeVar("_Owned", _File, _Batch)


def _owned(table: dict[str, _Owned], key: str, object_id: str, kind: str) -> _Owned:
    """The ``kind`` object ``object_id`` of API key ``key``; the API's 404 for one that is missing or another's."""
    found = table.get(object_id)
    if found is None or found.key != key:
        raise openai_error(404, f"No such {kind} object: {object_id[:60]}", "invalid_request_error", param="id")
    return found


def _form_parts(content_type: str | None, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The fields of a ``multipart/form-data`` body: name -> (file name or None, bytes)."""
    if not content_type or not content_type.lower().startswith("multipart/form-data"):
        raise openai_error(400, "upload the file as multipart/form-data", "invalid_request_error")
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    parts: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts() if message.is_multipart() else ():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            parts[name] = (part.get_filename(), payload)
    return parts


def _input_lines(data: bytes, model: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A batch input file's requests, and the validation errors that fail the batch (none: it runs)."""
    lines: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            doc = json.loads(raw)
        except ValueError:
            errors.append({"code": "invalid_json_line", "message": "This line is not valid JSON.", "line": number})
            continue
        custom_id = doc.get("custom_id") if isinstance(doc, dict) else None
        if not isinstance(custom_id, str) or not custom_id:
            errors.append({"code": "missing_required_parameter", "message": "custom_id is required", "line": number})
        elif custom_id in seen:
            errors.append({"code": "duplicate_custom_id", "message": f"custom_id {custom_id[:60]!r} repeats an "
                           "earlier line's", "line": number})
        elif doc.get("method") != "POST" or doc.get("url") != ENDPOINT or not isinstance(doc.get("body"), dict):
            errors.append({"code": "invalid_request", "message": f"each line must POST a body to {ENDPOINT}",
                           "line": number})
        elif doc["body"].get("model") != model:
            errors.append({"code": "model_not_found", "message": "this mock serves one model", "line": number})
        else:
            seen.add(custom_id)
            lines.append(doc)
    if not lines and not errors:
        errors.append({"code": "empty_file", "message": "The input file holds no requests.", "line": None})
    if len(lines) > MAX_BATCH_LINES:
        errors.append({"code": "too_many_requests", "message": f"at most {MAX_BATCH_LINES} requests a batch",
                       "line": None})
    return lines, errors


class BatchStore:
    """The files and batches of every API key. Thread-safe; a batch is answered under the store's lock, once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[str, _File] = {}
        self._batches: dict[str, _Batch] = {}
        #: Lines answered in batches (each line a chat request), for tests that no query is asked twice.
        self.lines_run = 0

    # -- files -----------------------------------------------------------------------------------
    def upload(self, key: str, content_type: str | None, body: bytes) -> dict[str, Any]:
        parts = _form_parts(content_type, body)
        purpose = parts.get("purpose", (None, b""))[1].decode("utf-8", "replace")
        if purpose != "batch":
            raise openai_error(400, "this mock stores files of purpose 'batch'", "invalid_request_error",
                               param="purpose")
        if "file" not in parts:
            raise openai_error(400, "the form has no 'file' field", "invalid_request_error", param="file")
        filename, data = parts["file"]
        stored = _File(_id("file-"), key, purpose, filename or "upload.jsonl", data, int(time.time()))
        with self._lock:
            self._files[stored.id] = stored
        return stored.doc()

    def _file(self, key: str, file_id: str) -> _File:
        return _owned(self._files, key, file_id, "File")

    def file_doc(self, key: str, file_id: str) -> dict[str, Any]:
        with self._lock:
            return self._file(key, file_id).doc()

    def file_content(self, key: str, file_id: str) -> bytes:
        with self._lock:
            return self._file(key, file_id).data

    # -- batches ---------------------------------------------------------------------------------
    def create(self, server: Any, key: str, body: bytes) -> dict[str, Any]:
        doc = json_object(body)
        if doc.get("endpoint") != ENDPOINT:
            raise openai_error(400, f"this mock batches {ENDPOINT} only", "invalid_request_error", param="endpoint")
        if doc.get("completion_window") != COMPLETION_WINDOW:
            raise openai_error(400, f"completion_window must be {COMPLETION_WINDOW!r}", "invalid_request_error",
                               param="completion_window")
        metadata = doc.get("metadata")
        if metadata is not None and not (isinstance(metadata, dict) and len(metadata) <= 16
                                         and all(isinstance(v, str) for v in metadata.values())):
            raise openai_error(400, "metadata holds at most 16 string values", "invalid_request_error",
                               param="metadata")
        with self._lock:
            source = self._file(key, str(doc.get("input_file_id")))
            lines, errors = _input_lines(source.data, server.config.model_name)
            batch = _Batch(_id("batch_"), key, len(self._batches), source.id, metadata, time.time(), lines)
            batch.counts["total"] = len(lines)
            if not errors and batch.ordinal < server.config.batch_fail_first:
                errors = [{"code": "token_limit_exceeded", "message": "Enqueued token limit reached for this "
                           "organization. Please try again once some in_progress batches have been completed.",
                           "line": None}]
            if errors:
                batch.status, batch.errors, batch.ended_at = "failed", errors[:100], int(time.time())
            self._batches[batch.id] = batch
            return batch.doc()

    def _batch(self, key: str, batch_id: str) -> _Batch:
        return _owned(self._batches, key, batch_id, "Batch")

    def retrieve(self, server: Any, key: str, batch_id: str) -> dict[str, Any]:
        with self._lock:
            batch = self._batch(key, batch_id)
            self._advance(server, batch)
            return batch.doc()

    def cancel(self, server: Any, key: str, batch_id: str) -> dict[str, Any]:
        with self._lock:
            batch = self._batch(key, batch_id)
            if batch.status == "in_progress":
                self._finish(server, batch, run=0, status="cancelled")
            return batch.doc()

    def listing(self, server: Any, key: str, limit: int, after: str | None) -> dict[str, Any]:
        """``GET /v1/batches``: the key's batches, newest first, ``limit`` after the one ``after`` names."""
        with self._lock:
            mine = [b for b in reversed(self._batches.values()) if b.key == key]
            if after is not None:
                ids = [b.id for b in mine]
                mine = mine[ids.index(after) + 1:] if after in ids else []
            page = mine[:limit]
            for batch in page:
                self._advance(server, batch)
            docs = [b.doc() for b in page]
        return {"object": "list", "data": docs, "first_id": docs[0]["id"] if docs else None,
                "last_id": docs[-1]["id"] if docs else None, "has_more": len(mine) > len(page)}

    def _advance(self, server: Any, batch: _Batch) -> None:
        """Answer a batch in progress whose time has come (its first ``batch_expire_first`` expire half done)."""
        cfg = server.config
        if batch.status != "in_progress" or time.time() - batch.created_at < cfg.batch_seconds:
            return
        if batch.ordinal < cfg.batch_expire_first:
            self._finish(server, batch, run=(len(batch.lines) + 1) // 2, status="expired")
        else:
            self._finish(server, batch, run=len(batch.lines), status="completed")

    def _finish(self, server: Any, batch: _Batch, *, run: int, status: str) -> None:
        """Answer the first ``run`` lines of ``batch``, write its output and error files, and end it in ``status``."""
        answered: list[bytes] = []
        failed: list[bytes] = []
        for line in batch.lines[:run]:
            request_id = _id("req_")
            try:
                body, _ = chat_completion(server, json.dumps(line["body"]).encode(), batch.key, Decision(-1, 0.0),
                                          batch=True)
                response, sink = {"status_code": 200, "request_id": request_id, "body": body}, answered
            except ApiError as exc:
                response, sink = {"status_code": exc.status, "request_id": request_id, "body": exc.doc}, failed
            self.lines_run += 1
            sink.append(json.dumps({"id": _id("batch_req_"), "custom_id": line["custom_id"], "response": response,
                                    "error": None}).encode())
        if status in _NOT_RUN:
            code, message = _NOT_RUN[status]
            failed.extend(json.dumps({"id": _id("batch_req_"), "custom_id": line["custom_id"], "response": None,
                                      "error": {"code": code, "message": message}}).encode()
                          for line in batch.lines[run:])
        now = int(time.time())
        for lines, attr in ((answered, "output_file_id"), (failed, "error_file_id")):
            if lines:
                stored = _File(_id("file-"), batch.key, "batch_output", f"{batch.id}_{attr[:-8]}.jsonl",
                               b"\n".join(lines) + b"\n", now)
                self._files[stored.id] = stored
                setattr(batch, attr, stored.id)
        batch.counts.update(completed=len(answered), failed=len(failed))
        batch.status, batch.ended_at = status, now
