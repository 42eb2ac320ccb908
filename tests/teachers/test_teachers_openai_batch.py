"""A chat teacher through the Batch API (``ChatTeacher(batch=True)``, ``ldpclient label --batch``) against the
mock's /v1/files and /v1/batches, the mock held to what the official ``openai`` client reads: jobs kept in the
journal and collected by a run started again, expired lines sent again, nothing paid twice, money equal to the
mock's bill."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import responses

openai = pytest.importorskip("openai")
mock_server = pytest.importorskip("mock_server")

from ldpclient.run.demo import write_demo_folder  # noqa: E402
from ldpclient.teachers import CostCapReached, CostMeter, Journal, QueryClient, connect  # noqa: E402
from ldpclient.teachers.encoding import to_png, to_wire  # noqa: E402
from ldpclient.teachers.errors import TeacherRequestError  # noqa: E402
from ldpclient.teachers.openai_batch import BatchRunner, BatchSettings  # noqa: E402
from ldpclient.teachers.result import ABSTAINED  # noqa: E402
from support.chat import CHAT_TOKEN, chat_queries, chat_teacher, chat_usage, serve_chat  # noqa: E402


def _batched(srv, **settings):
    return chat_teacher(srv, batch=BatchSettings(**{"poll_s": 0.02, "max_poll_s": 0.1, **settings}))


def _jobs(srv) -> list[dict]:
    client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key=CHAT_TOKEN, max_retries=0)
    return [b.model_dump() for b in client.batches.list(limit=100)]


def test_the_official_openai_client_uploads_starts_reads_and_lists_batches_on_the_mock() -> None:
    with mock_server.serve(model="trivial", image_size=8, num_classes=4, tokens=[CHAT_TOKEN, "sk-other"],
                           batch_expire_first=1) as srv:
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key=CHAT_TOKEN, max_retries=0)
        teacher = chat_teacher(srv)
        bodies = [teacher.wire.request_body(to_png(row, "UINT8", (0.0, 1.0))) for row in to_wire(chat_queries(4),
                                                                                          teacher.metadata())]
        lines = "\n".join(json.dumps({"custom_id": f"q{k}", "method": "POST", "url": "/v1/chat/completions",
                                      "body": b}) for k, b in enumerate(bodies))
        uploaded = client.files.create(file=("in.jsonl", io.BytesIO(lines.encode())), purpose="batch")
        assert uploaded.purpose == "batch" and uploaded.bytes == len(lines)
        assert client.files.content(uploaded.id).text == lines
        first = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                      completion_window="24h", metadata={"run": "a"})
        expired = client.batches.retrieve(first.id)  # the mock's first batch expires half done
        assert expired.status == "expired" and expired.request_counts.completed == 2
        out = [json.loads(x) for x in client.files.content(expired.output_file_id).text.splitlines()]
        assert [x["custom_id"] for x in out] == ["q0", "q1"] and out[0]["response"]["status_code"] == 200
        err = [json.loads(x) for x in client.files.content(expired.error_file_id).text.splitlines()]
        assert [x["error"]["code"] for x in err] == ["batch_expired"] * 2
        second = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                       completion_window="24h")
        done = client.batches.retrieve(second.id)
        assert done.status == "completed" and done.request_counts.total == 4 and done.error_file_id is None
        assert [b.id for b in client.batches.list()] == [second.id, first.id]
        assert client.batches.retrieve(first.id).metadata == {"run": "a"}
        bad = client.files.create(file=("bad.jsonl", io.BytesIO(b'{"custom_id": "x"}\n')), purpose="batch")
        failed = client.batches.retrieve(client.batches.create(input_file_id=bad.id, endpoint="/v1/chat/completions",
                                                               completion_window="24h").id)
        assert failed.status == "failed" and failed.errors.data[0].line == 1
        with pytest.raises(openai.NotFoundError):
            openai.OpenAI(base_url=f"{srv.url}/v1", api_key="sk-other", max_retries=0).batches.retrieve(first.id)
        billed = chat_usage(srv)
        assert billed["batch_input_tokens"] > 0 and "input_tokens" not in billed  # 6 lines ran, at the batch price


def test_a_batch_answers_as_the_chat_api_does_at_half_the_price_and_expired_lines_are_sent_once_more(
        tmp_path: Path) -> None:
    faults = {"chat_policy_rate": 0.15, "chat_refusal_rate": 0.1, "fault_seed": 5}
    with serve_chat(**faults) as srv, chat_teacher(srv) as chat:
        unlearnt = chat.most_per_query()  # before any answer: the model's name publishes no image tokens
        direct = QueryClient(chat).label(chat_queries(40))
    with serve_chat(batch_expire_first=1, **faults) as srv, _batched(srv) as teacher:
        assert teacher.most_per_query() == pytest.approx(unlearnt / 2)
        client = QueryClient(teacher, journal=Journal(tmp_path / "journal.sqlite"))
        labels = client.label(chat_queries(40))
        billed = chat_usage(srv)
        jobs = _jobs(srv)
    assert labels.tolist() == direct.tolist() and 0 < int((labels == ABSTAINED).sum()) < 40
    assert [j["status"] for j in jobs] == ["completed", "expired"]  # newest first: the expired half sent again
    assert jobs[0]["request_counts"]["total"] == 20 and jobs[1]["request_counts"]["total"] == 40
    ran = billed["requests"]  # each query's line ran once (refusals billed, policy errors not)
    assert client.stats.requests == ran + sum(j["request_counts"]["failed"] for j in jobs) - 20
    assert client.cost.spent_run == pytest.approx(billed["cost"], abs=1e-12)
    assert client.journal.total_spend() == pytest.approx(billed["cost"], abs=1e-12)  # nothing booked is left over
    assert (client.stats.input_tokens, client.stats.output_tokens) == (billed["batch_input_tokens"],
                                                                       billed["batch_output_tokens"])


@pytest.mark.parametrize("faults", [
    {"batch_fail_first": 2},  # the key's queue is full: waited out, the lines sent again
    {"rate_429": 0.5, "rate_limit_header": "retry-after-ms", "fault_seed": 2},  # uploads and new jobs meet 429s
    {"error_rate_503": 0.5, "fault_seed": 4},
    {"batch_expire_first": 3, "chat_refusal_rate": 0.2},
])
def test_each_batch_fault_is_waited_out_or_sent_again_and_nothing_is_paid_twice(faults, tmp_path: Path) -> None:
    with serve_chat(**faults) as srv, _batched(srv) as teacher:
        client = QueryClient(teacher, journal=Journal(tmp_path / "j.sqlite"), cost=CostMeter(cap=1.0))
        labels = client.label(chat_queries(12))
        billed = chat_usage(srv)
    if not faults.get("chat_refusal_rate"):
        assert labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert billed["requests"] == 12  # every query's line ran once
    assert client.journal.total_spend() == pytest.approx(billed["cost"], abs=1e-12) == client.cost.spent_total


def test_a_job_the_api_fails_ends_the_run_in_one_line_and_costs_nothing(tmp_path: Path) -> None:
    with serve_chat() as srv, connect(f"openai+{srv.url}/v1", model="another-model", class_names=["0", "1", "2", "3"],
                                  input_shape=(1, 8, 8), token=CHAT_TOKEN, price_input_tokens=0.15,
                                  batch=BatchSettings(poll_s=0.02)) as teacher:
        client = QueryClient(teacher, journal=Journal(tmp_path / "j.sqlite"))
        with pytest.raises(TeacherRequestError) as failed:
            client.label(chat_queries(4))
        billed = chat_usage(srv)
    assert "failed: this mock serves one model" in str(failed.value) and "\n" not in str(failed.value)
    assert billed.get("requests", 0) == 0 and client.journal.total_spend() == 0


def test_a_run_started_again_collects_the_jobs_the_journal_keeps_and_adopts_one_it_lost(tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite"
    with serve_chat(batch_seconds=0.6) as srv:
        with _batched(srv) as teacher:
            first = QueryClient(teacher, journal=Journal(journal))
            pending = first.label_batches([("b-0", chat_queries(10))])
            _interrupt_the_next_wait()  # a Ctrl-C right after the job started
            with pytest.raises(KeyboardInterrupt):
                next(pending)
            pending.close()
            first.journal.close()
        (job,) = _jobs(srv)
        assert job["status"] == "in_progress" and Journal(journal).jobs(first.scope, "b-0") == [job["id"]]
        with _batched(srv) as teacher:
            again = QueryClient(teacher, journal=Journal(journal))
            labels = dict(again.label_batches([("b-0", chat_queries(10))]))["b-0"]
        billed = chat_usage(srv)
        assert len(_jobs(srv)) == 1 and billed["requests"] == 10  # collected, nothing sent twice
        assert labels.tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 3, 3]
        assert again.journal.total_spend() == pytest.approx(billed["cost"], abs=1e-12)
        # a job started whose id never reached the journal is found by its file and adopted, not sent again
        with _batched(srv) as teacher:
            book = QueryClient(teacher)  # no journal: the id is kept in memory only, and lost with this client
            dict(book.label_batches([("b-1", chat_queries(6))]))
        with _batched(srv) as teacher:
            adopted = QueryClient(teacher)
            labels = dict(adopted.label_batches([("b-1", chat_queries(6))]))["b-1"]
        assert len(_jobs(srv)) == 2 and chat_usage(srv)["requests"] == 16 and labels.tolist() == [0, 0, 1, 2, 3, 3]


def _interrupt_the_next_wait() -> None:
    """The next wait for a job raises KeyboardInterrupt (as a Ctrl-C would), the ones after it wait."""
    original = BatchRunner._wait

    def interrupted(self, job_id, billing, out):
        BatchRunner._wait = original
        raise KeyboardInterrupt

    BatchRunner._wait = interrupted


def test_the_money_cap_holds_on_the_batch_booking_before_any_job_is_sent(tmp_path: Path) -> None:
    batch = BatchSettings(poll_s=0.02, max_poll_s=0.1)
    with serve_chat() as srv, chat_teacher(srv, batch=batch, image_tokens=85) as teacher:  # a booking that stays
        most = teacher.most_per_query()
        client = QueryClient(teacher, journal=Journal(tmp_path / "j.sqlite"), cost=CostMeter(cap=most * 10.2))
        with pytest.raises(CostCapReached):
            dict(client.label_batches([("b-0", chat_queries(10)), ("b-1", chat_queries(10))]))
        assert [j["request_counts"]["total"] for j in _jobs(srv)] == [10]  # the second batch was never sent
        assert client.journal.total_spend() == pytest.approx(chat_usage(srv)["cost"], abs=1e-12)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "ldpclient.cli", "label", *args]


def test_a_batch_run_killed_after_submitting_and_run_again_collects_without_sending_a_query_twice(
        tmp_path: Path) -> None:
    write_demo_folder(tmp_path, count=60)
    (tmp_path / "classes.json").write_text(json.dumps([str(d) for d in range(10)]))
    env = {**os.environ, "LDPCLIENT_TOKEN": CHAT_TOKEN}
    with mock_server.serve(model="digits", image_size=28, tokens=[CHAT_TOKEN], batch_seconds=5.0) as srv:
        args = _cli(str(tmp_path / "private"), "--teacher", f"openai+{srv.url}/v1", "--model", "digits",
                    "--class-names", str(tmp_path / "classes.json"), "--input-shape", "1,28,28", "--batch",
                    "--price-input-tokens", "0.15", "--price-output-tokens", "0.6", "--queries", "600",
                    "--epochs", "2", "--seed", "1", "--state-dir", str(tmp_path / "state"),
                    "--output", str(tmp_path / "labels.csv"), "--json")
        dry = subprocess.run([*args[:-1], "--dry-run"], capture_output=True, text=True, env=env, timeout=120)
        assert dry.returncode == 0, dry.stderr
        assert "at the Batch API's price, at most" in dry.stderr and "through the Batch API" in dry.stderr
        first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        deadline = time.monotonic() + 120
        while not _jobs(srv) and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        assert len(_jobs(srv)) == 1 and chat_usage(srv).get("requests", 0) == 0  # submitted, not yet answered
        again = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
        assert again.returncode == 0, again.stderr
        report = json.loads(again.stdout)
        billed = requests.get(f"{srv.url}/usage", headers={"Authorization": f"Bearer {CHAT_TOKEN}"}, timeout=5).json()
        jobs = _jobs(srv)
    assert len(jobs) == 1 and jobs[0]["status"] == "completed" and billed["total"]["requests"] == 600  # once each
    assert report["cost"]["spent_total"] == pytest.approx(billed["total"]["cost"], abs=1e-9)
    assert report["cost"]["batch_price_factor"] == 0.5 and report["queries"]["sent"] == 600
    assert report["queries"]["collected_earlier"] == 600  # all of it from the job the killed run sent


#: A finished job and its files, in the shapes of OpenAI's API reference (the batch object) and Batch guide (the
#: output and error lines), with this run's custom ids.
RECORDED_JOB = {
    "id": "batch_abc123", "object": "batch", "endpoint": "/v1/chat/completions", "errors": None,
    "input_file_id": "file-abc123", "completion_window": "24h", "status": "completed",
    "output_file_id": "file-cvaTdG", "error_file_id": "file-HOWS94", "created_at": 1711471533,
    "in_progress_at": 1711471538, "expires_at": 1711557933, "finalizing_at": 1711493133, "completed_at": 1711493163,
    "failed_at": None, "expired_at": None, "cancelling_at": None, "cancelled_at": None,
    "request_counts": {"total": 2, "completed": 1, "failed": 1}, "metadata": {"ldpclient_batch": "b"},
}
RECORDED_OUTPUT = {"id": "batch_req_123", "custom_id": "b/0", "response": {
    "status_code": 200, "request_id": "req_123", "body": {
        "id": "chatcmpl-123", "object": "chat.completion", "created": 1711652795, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": '{"label": "1"}'}, "logprobs": None,
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 22, "completion_tokens": 2, "total_tokens": 24}, "system_fingerprint": "fp_123"}},
    "error": None}
RECORDED_ERROR = {"id": "batch_req_456", "custom_id": "b/1", "response": {
    "status_code": 400, "request_id": "req_456", "body": {"error": {
        "message": "Your request was rejected as a result of our safety system.", "type": "invalid_request_error",
        "param": None, "code": "content_policy_violation"}}}, "error": None}


@responses.activate
def test_a_recorded_job_and_its_files_in_the_apis_shapes_are_read_by_custom_id() -> None:
    base = "https://api.openai.com/v1"
    responses.add(responses.GET, f"{base}/batches/batch_abc123", json=RECORDED_JOB)
    responses.add(responses.GET, f"{base}/files/file-cvaTdG/content", body=json.dumps(RECORDED_OUTPUT) + "\n")
    responses.add(responses.GET, f"{base}/files/file-HOWS94/content", body=json.dumps(RECORDED_ERROR) + "\n")
    teacher = connect(f"openai+{base}", model="gpt-4o-mini", class_names=["0", "1", "2", "3"], input_shape=(1, 8, 8),
                      token="sk-test", price_input_tokens=0.15, price_output_tokens=0.6, batch=True)

    class Kept:  # the job an earlier run started, as the journal keeps it
        def jobs(self) -> list[str]:
            return ["batch_abc123"]

        def add_job(self, job_id: str) -> None:
            raise AssertionError("nothing is sent: the kept job answers every query")

    got = teacher.batch_runner(BatchSettings()).run([b"png-0", b"png-1"], "b", Kept())
    assert {k: a.label for k, a in got.answers.items()} == {0: 1, 1: ABSTAINED}
    assert (got.input_tokens, got.output_tokens, got.lines) == (22, 2, 2)
    assert got.cost == pytest.approx((22 * 0.15 + 2 * 0.6) / 1e6 * 0.5)
    assert [c.request.method for c in responses.calls] == ["GET", "GET", "GET"]
