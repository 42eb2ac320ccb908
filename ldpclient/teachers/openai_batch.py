"""A chat teacher's queries through the OpenAI Batch API (``ChatTeacher(batch=True)``, the CLI's ``--batch``).

A batch of the query plan is sent as one JSONL file (``POST {base}/files``, purpose ``batch``; several when it
passes :attr:`BatchSettings.max_lines` or :attr:`BatchSettings.max_bytes`) and one job per file
(``POST {base}/batches``, endpoint ``/v1/chat/completions``, window 24 h), each line the request a chat query
makes, its ``custom_id`` the plan batch's id and the query's place in it. The job's id is kept at once in the
query journal (:meth:`~ldpclient.teachers.journal.Journal.add_job`, through the batch's billing guard), and the
job carries the plan batch's id and the file's digest in its ``metadata``: a run started again (after a crash,
another day, on another host sharing the state) first collects the jobs the journal keeps, then adopts a job of
the same file it finds among the newest (one whose id was lost between its creation and the journal), and only
then sends what no job answered. Results are read from the job's output and error files by ``custom_id``, in any
order; a line that expired, was cancelled or failed is sent again in a later job (at most
:attr:`BatchSettings.resends` times); a content-policy error is that query's abstention.

Money: each job is booked before it is sent at its lines' most (:meth:`ChatTeacher.most_per_query`, which in batch
mode is :attr:`BatchSettings.price_factor` of the chat price: OpenAI bills its Batch API at half), and settled from
the ``usage`` of the lines answered; lines never run cost nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, Sequence, runtime_checkable

import urllib3

from ..io.text import printable
from .chat_wire import Answer, ChatWire
from .errors import Interrupted, MalformedResponse, RequestNotSent, TeacherRequestError, TransientTeacherError
from .result import ABSTAINED

if TYPE_CHECKING:
    import requests

    from .billing import BillingGuard
    from .http import HttpTransport
    from .token_booking import TokenBooking

log = logging.getLogger("ldpclient.teachers.openai_batch")

#: The job states after which nothing changes.
ENDED = ("completed", "expired", "cancelled", "failed")
#: What each line asks, relative to the API's host (the Batch API's own spelling, whatever the base URL).
LINE_URL = "/v1/chat/completions"
#: How long a job may take before the API expires it, and the wait for it (with an hour's grace).
COMPLETION_WINDOW = "24h"
MAX_WAIT_S = 25 * 3600.0
#: Jobs a run looks among (the newest) for one it created but could not keep the id of.
ADOPT_LOOKBACK = 100
#: Times starting a job is tried (an error answer, or no answer and no job found started).
START_TRIES = 5
#: The error of a job refused because the key's queue is full: its lines are sent again once others have ended.
QUEUE_FULL = "token_limit_exceeded"


@dataclass(frozen=True)
class BatchSettings:
    """How a chat teacher uses the Batch API. ``price_factor``: what a token costs in a batch, as a share of its
    chat price (OpenAI: 0.5). ``max_lines``/``max_bytes``: most lines and bytes one input file holds (the API's
    limits are 50,000 lines and 200 MB). ``poll_s``: the first wait between looks at a job in progress, doubling up
    to ``max_poll_s`` (seconds). ``resends``: times the lines a job did not answer (expired, cancelled, failed) are
    sent again in a new job. ``max_wait_s``: how long a job may run (or the queue stay full) before the run stops
    with the job kept in the journal (default :data:`MAX_WAIT_S`, the API's window and an hour's grace)."""

    price_factor: float = 0.5
    max_lines: int = 50_000
    max_bytes: int = 50 * 1000 * 1000
    poll_s: float = 1.0
    max_poll_s: float = 60.0
    resends: int = 3
    max_wait_s: float = MAX_WAIT_S

    def __post_init__(self) -> None:
        if not 0.0 < self.price_factor <= 1.0:
            raise ValueError(f"price_factor must be in (0, 1], got {self.price_factor}")
        if not 1 <= self.max_lines <= 50_000:
            raise ValueError(f"max_lines must be in 1..50000, got {self.max_lines}")
        if not 1024 <= self.max_bytes <= 200 * 1000 * 1000:
            raise ValueError(f"max_bytes must be in 1024..200,000,000, got {self.max_bytes}")
        if not (0.0 < self.poll_s <= self.max_poll_s):
            raise ValueError(f"poll_s must be > 0 and <= max_poll_s, got {self.poll_s} and {self.max_poll_s}")
        if self.resends < 0:
            raise ValueError(f"resends must be >= 0, got {self.resends}")
        if not self.max_wait_s > 0:
            raise ValueError(f"max_wait_s must be > 0 seconds, got {self.max_wait_s}")


@runtime_checkable
class JobBook(Protocol):
    """Where a plan batch's job ids are kept (the query client's billing guard keeps them in the journal)."""

    def jobs(self) -> list[str]: ...

    def add_job(self, job_id: str) -> None: ...


class _Book:
    """A :class:`JobBook` in memory, for a call without a journal."""

    def __init__(self) -> None:
        self._jobs: list[str] = []

    def jobs(self) -> list[str]:
        return list(self._jobs)

    def add_job(self, job_id: str) -> None:
        self._jobs.append(job_id)


@dataclass
class Collected:
    """What one plan batch's jobs answered: ``answers`` by the query's place, the lines that ran (answered or
    refused), their money (at the batch price) and tokens, the API calls made and the bytes they moved; of the
    answers, ``earlier``: those collected from jobs an earlier run sent; ``unbilled``: lines whose usage was not
    believed (charged at their booking)."""

    answers: dict[int, Answer]
    lines: int = 0
    cost: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    calls: int = 0
    queue_full: int = 0
    unbilled: int = 0
    earlier: int = 0


def _hook(billing: BillingGuard | None, name: str) -> Callable[..., object] | None:
    found = getattr(billing, name, None)
    return found if callable(found) else None


class BatchRunner:
    """Runs a chat teacher's plan batches as Batch API jobs (see the module's docstring)."""

    def __init__(self, wire: ChatWire, http: HttpTransport, base_url: str, booking: TokenBooking,
                 settings: BatchSettings) -> None:
        self.wire, self.http, self.base_url, self.booking = wire, http, base_url, booking
        self.settings = settings

    # -- the API -----------------------------------------------------------------------------------
    def _call(self, method: str, path: str, out: Collected, *, data: bytes | None = None,
              headers: dict[str, str] | None = None, what: str, raw: bool = False, retry: bool = True) -> Any:
        def parse(resp: requests.Response) -> Any:
            if raw:
                return resp.content
            try:
                return resp.json()
            except ValueError:
                raise MalformedResponse(f"{what}: the answer is not JSON: {resp.text[:80]!r}") from None

        result, info = self.http.call(method, f"{self.base_url}{path}", parse=parse, data=data,
                                              headers=headers, what=what, retry=retry)
        out.bytes_sent += info.bytes_sent
        out.bytes_received += info.bytes_received
        out.calls += 1
        return result

    def _job(self, job_id: str, out: Collected) -> dict[str, object]:
        doc = self._call("GET", f"/batches/{job_id}", out, what=f"look at batch job {job_id[:40]}")
        if not isinstance(doc, dict) or not isinstance(doc.get("status"), str):
            raise MalformedResponse(f"batch job {job_id[:40]}: expected a batch object, got {str(doc)[:100]}")
        return doc

    def _submit(self, lines: list[bytes], request_id: str, fmt: str, out: Collected) -> str:
        """Upload ``lines`` as a file and start a job on it; its id."""
        data = b"\n".join(lines) + b"\n"
        body, content_type = urllib3.encode_multipart_formdata(
            {"purpose": "batch", "file": (f"{request_id[:80]}.jsonl", data, "application/jsonl")})
        uploaded = self._call("POST", "/files", out, data=body, headers={"Content-Type": content_type},
                              what="upload a batch file")
        file_id = uploaded.get("id") if isinstance(uploaded, dict) else None
        if not isinstance(file_id, str) or not file_id:
            raise MalformedResponse(f"upload a batch file: expected a file object, got {str(uploaded)[:100]}")
        digest = _digest(data)
        request = {"input_file_id": file_id, "endpoint": LINE_URL, "completion_window": COMPLETION_WINDOW,
                   "metadata": {"ldpclient_batch": request_id[:512], "ldpclient_file": digest, "ldpclient_format": fmt}}
        return self._start(json.dumps(request).encode(), request_id, digest, out)

    def _start(self, request: bytes, request_id: str, digest: str, out: Collected) -> str:
        """Start a job (``POST /batches``) once: an error answer (429, 5xx) is retried after the wait it asks for;
        a request with no answer is retried only when no job of this file was started meanwhile (else that job)."""
        for attempt in range(START_TRIES):
            try:
                job = self._call("POST", "/batches", out, data=request, headers={"Content-Type": "application/json"},
                                 what="start a batch job", retry=False)
            except TransientTeacherError as exc:
                if attempt + 1 == START_TRIES:
                    raise
                if exc.status is None and not isinstance(exc, RequestNotSent):  # sent, and no answer came back
                    found = self._started_jobs(request_id, out).get(digest)
                    if found is not None:
                        return found
                time.sleep(min(exc.retry_after if exc.retry_after is not None else 2.0 ** attempt, 60.0))
                continue
            job_id = job.get("id") if isinstance(job, dict) else None
            if not isinstance(job_id, str) or not job_id:
                raise MalformedResponse(f"start a batch job: expected a batch object, got {str(job)[:100]}")
            return job_id
        raise AssertionError("unreachable")

    def _started_jobs(self, request_id: str, out: Collected) -> dict[str, str]:
        """The jobs among the newest that run a file of plan batch ``request_id`` and may still answer (not failed
        or cancelled): file digest -> job id (the newest job of a file)."""
        listing = self._call("GET", f"/batches?limit={ADOPT_LOOKBACK}", out, what="list batch jobs")
        found: dict[str, str] = {}
        for job in listing.get("data", []) if isinstance(listing, dict) else []:
            meta = job.get("metadata") if isinstance(job, dict) else None
            if (isinstance(meta, dict) and meta.get("ldpclient_batch") == request_id[:512]
                    and isinstance(meta.get("ldpclient_file"), str)
                    and job.get("status") not in ("failed", "cancelled", "cancelling")):
                found.setdefault(meta["ldpclient_file"], str(job["id"]))
        return found

    # -- waiting and reading -----------------------------------------------------------------------
    def _wait(self, job_id: str, billing: BillingGuard | None, out: Collected) -> dict[str, object]:
        """The job once it has ended (polled at growing intervals); Interrupted when the run is stopped."""
        started, pause = time.monotonic(), self.settings.poll_s
        while True:
            job = self._job(job_id, out)
            if job["status"] in ENDED:
                return job
            if time.monotonic() - started > self.settings.max_wait_s:
                raise TeacherRequestError(
                    f"batch job {job_id[:40]} did not end within {_span(self.settings.max_wait_s)} (the journal "
                    "keeps it: run the command again to collect it)", status=0)
            self._pause(billing, pause, f"batch job {job_id[:40]} is still running; the journal keeps it: run the "
                        "command again to collect its answers")
            pause = min(2 * pause, self.settings.max_poll_s)

    @staticmethod
    def _pause(billing: BillingGuard | None, seconds: float, stopped: str) -> None:
        """Sleep ``seconds``; Interrupted (saying ``stopped``) as soon as the run is stopped."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            if getattr(billing, "stopping", False):
                raise Interrupted(stopped)
            time.sleep(min(0.2, max(0.0, until - time.monotonic())))

    def _lines(self, file_id: object, out: Collected) -> Iterator[dict[str, object]]:
        if not isinstance(file_id, str) or not file_id:
            return
        data = self._call("GET", f"/files/{file_id}/content", out, what=f"read batch file {file_id[:40]}", raw=True)
        for raw in bytes(data).splitlines():
            if raw.strip():
                try:
                    doc = json.loads(raw)
                except (ValueError, RecursionError):
                    raise MalformedResponse(
                        f"batch file {file_id[:40]} holds a line that cannot be read (not JSON, or nested without "
                        "end); its job stays in the journal: the API's answer must be fixed before a run can use it",
                        transient=False) from None
                if isinstance(doc, dict):
                    yield doc

    def _collect(self, job_id: str, places: dict[str, int], billing: BillingGuard | None, got: Collected, *,
                 earlier: bool = False, sent: int = 0) -> None:
        """Wait for job ``job_id`` and take its answers to the queries ``places`` names (custom id -> place);
        settle its booking (``earlier``: an earlier run's; ``sent``: the lines this run sent in it) from the lines
        it answered."""
        job = self._wait(job_id, billing, got)
        if job["status"] == "failed" and not job.get("output_file_id"):
            errors = _errors(job) or [{}]
            said = printable(str(errors[0].get("message") or "no reason given"), max_chars=200)
            settle = _hook(billing, "settle_attempt")
            if settle is not None:  # nothing ran
                settle(sent or _lines_of(job, len(places)), 0.0, earlier=earlier)
            if any(e.get("code") == QUEUE_FULL for e in errors):
                log.info("batch job %s was refused (%s); its lines go again once others have ended", job_id, said)
                got.queue_full += 1
                return
            raise TeacherRequestError(f"batch job {job_id[:40]} failed: {said}", status=400, server_message=said)
        meta = job.get("metadata")
        fmt = str((meta if isinstance(meta, dict) else {}).get("ldpclient_format") or self.wire.answer_format)
        cost, ran = 0.0, 0
        total = min(sent, _lines_of(job, sent)) if sent else _lines_of(job, len(places))
        for line in [*self._lines(job.get("output_file_id"), got), *self._lines(job.get("error_file_id"), got)]:
            place = places.get(str(line.get("custom_id")))
            if place is None or place in got.answers:
                continue  # another batch's line, or one answered already
            if isinstance(line.get("response"), dict):
                ran += 1
            answer = self._answer(line, fmt)
            if answer is None:
                continue  # never ran, or failed: sent again
            got.answers[place] = answer
            got.earlier += 1 if earlier else 0
            got.input_tokens += answer.input_tokens or 0
            got.output_tokens += answer.output_tokens or 0
            if answer.reason == "policy" and not answer.input_tokens:
                continue  # refused before it ran: nothing billed
            charged, believed = self.booking.charge(answer.input_tokens, answer.output_tokens)
            cost += charged
            got.unbilled += 0 if believed else 1
        got.lines += ran
        got.cost += cost
        settle = _hook(billing, "settle_attempt")
        if settle is not None and self.booking.prices.given:  # else the caller prices the queries itself
            settle(total, cost, earlier=earlier)

    def _answer(self, line: dict[str, object], fmt: str) -> Answer | None:
        """A line's answer, an abstention for a content-policy error, else None (to be sent again, in plain text
        when the server refused the schema)."""
        response = line.get("response")
        if not isinstance(response, dict):
            return None
        status, body = response.get("status_code"), response.get("body")
        if status == 200:
            return self.wire.answer_of(body, fmt)
        said = json.dumps(body)[:2000] if body is not None else ""
        if self.wire.read_refusal(status if isinstance(status, int) else None, said, fmt) == "policy":
            return Answer(ABSTAINED, 0, 0, "policy")
        return None

    # -- one plan batch ----------------------------------------------------------------------------
    def _files(self, pngs: Sequence[bytes], missing: Sequence[int], ids: Sequence[str],
               fmt: str) -> Iterator[list[tuple[int, bytes]]]:
        """The lines of the ``missing`` queries, as files within the line and byte limits."""
        chunk: list[tuple[int, bytes]] = []
        size = 0
        for k in missing:
            line = json.dumps({"custom_id": ids[k], "method": "POST", "url": LINE_URL,
                               "body": self.wire.request_body(pngs[k], fmt)}, separators=(",", ":")).encode()
            if len(line) + 1 > self.settings.max_bytes:
                raise ValueError(f"one query's request is {len(line)} bytes, more than a batch file may hold "
                                 f"({self.settings.max_bytes})")
            if chunk and (len(chunk) >= self.settings.max_lines or size + len(line) + 1 > self.settings.max_bytes):
                yield chunk
                chunk, size = [], 0
            chunk.append((k, line))
            size += len(line) + 1
        if chunk:
            yield chunk

    def run(self, pngs: Sequence[bytes], request_id: str, billing: BillingGuard | None) -> Collected:
        """Answers to ``pngs`` (a plan batch's queries, as PNGs) from the jobs kept for ``request_id`` and new ones."""
        book: JobBook = billing if isinstance(billing, JobBook) else _Book()
        ids = [f"{request_id}/{k}" for k in range(len(pngs))]
        places = {cid: k for k, cid in enumerate(ids)}
        got = Collected(answers={})
        for job_id in book.jobs():
            self._collect(job_id, places, billing, got, earlier=True)
        started_at, round_ = time.monotonic(), 0
        while True:
            missing = [k for k in range(len(pngs)) if k not in got.answers]
            if not missing:
                return got
            if got.queue_full:  # refused for a full queue, not failed: waited out, within the job's own window
                if time.monotonic() - started_at > self.settings.max_wait_s:
                    raise TeacherRequestError(f"batch {request_id}: the Batch API's queue stayed full for "
                                              f"{_span(self.settings.max_wait_s)}; run the command again later",
                                              status=0)
                self._pause(billing, self.settings.max_poll_s, "waiting for room in the Batch API's queue")
                got.queue_full = 0
            elif round_ > self.settings.resends:
                break
            else:
                round_ += 1
            fmt = self.wire.answer_format
            started: list[tuple[str, int]] = []
            adopted_jobs: list[str] = []
            kept = set(book.jobs())  # jobs started here whose ids were lost: found by their file, once a round
            unkept = {d: j for d, j in self._started_jobs(request_id, got).items() if j not in kept}
            for chunk in self._files(pngs, missing, ids, fmt):
                lines = [line for _, line in chunk]
                digest = _digest(b"\n".join(lines) + b"\n")
                adopted = unkept.pop(digest, None)
                if adopted is not None:
                    log.info("batch %s: collecting job %s, which an earlier run started", request_id, adopted)
                    book.add_job(adopted)
                    adopted_jobs.append(adopted)
                    continue
                before = _hook(billing, "before_attempt")
                if before is not None:
                    before(len(lines))  # booked at the most before it is sent; raises at the money cap
                try:
                    job_id = self._submit(lines, request_id, fmt, got)
                except BaseException as exc:
                    after = _hook(billing, "after_attempt")
                    if after is not None:  # refused: nothing runs; else a job may exist: its booking stays, as spent
                        after("refused" if isinstance(exc, TeacherRequestError) else "lost", len(lines))
                    raise
                book.add_job(job_id)
                started.append((job_id, len(lines)))
            for job_id in adopted_jobs:
                self._collect(job_id, places, billing, got, earlier=True)
            for job_id, sent in started:
                self._collect(job_id, places, billing, got, sent=sent)
        left = len(pngs) - len(got.answers)
        raise TeacherRequestError(
            f"batch {request_id}: {left} queries still unanswered after {self.settings.resends + 1} batch jobs "
            "(expired or failed); run the command again to send them once more", status=0)


def _errors(job: dict[str, object]) -> list[dict[str, object]]:
    """The entries of a failed job's ``errors.data`` that are objects (a hostile job may send anything)."""
    errors = job.get("errors")
    data = errors.get("data") if isinstance(errors, dict) else None
    return [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []


def _lines_of(job: dict[str, object], most: int) -> int:
    """The lines a job says it held (``request_counts.total``), at most ``most`` (what was sent in it; a larger
    count would unbook money never booked), 0 when it says nothing usable."""
    counts = job.get("request_counts")
    total = counts.get("total") if isinstance(counts, dict) else None
    return min(total, most) if isinstance(total, int) and not isinstance(total, bool) and total > 0 else 0


def _span(seconds: float) -> str:
    """``"25 h"``, or ``"0.5 s"`` for a wait under a minute."""
    return f"{seconds / 3600:.0f} h" if seconds >= 3600 else f"{seconds:g} s"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]
