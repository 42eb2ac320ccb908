"""A paid API's routine and hostile answers: rate limits waited out quietly and counted, a wait longer than the run
allows ending it at once, money booked as the model bills and charged at the booking when the bill is missing or
absurd, a key never sent in clear nor shown, and answers that nest without end, name no class, finish oddly or
come in the wrong number turned into declined queries or one-line refusals."""

from __future__ import annotations

import json
import logging

import pytest
import responses
import torch

from ldpclient.teachers import CostCapReached, CostMeter, QueryClient, connect
from ldpclient.teachers.errors import MalformedResponse, RetriesExhausted, TokenInClear, TransientTeacherError
from ldpclient.teachers.http import HttpTransport, RetryPolicy
from ldpclient.teachers.image_tokens import MOST_IMAGE_TOKENS, image_tokens
from ldpclient.teachers.openai_batch import BatchSettings
from ldpclient.teachers.result import ABSTAINED
from ldpclient.teachers.retry import Waits, with_retries
from ldpclient.teachers.token_booking import LEARNT_MARGIN
from support.chat import CHAT_NAMES, CHAT_TOKEN, chat_queries, chat_teacher, chat_usage, serve_chat

API = "https://api.example.test/v1"
KEY = "sk-test-0123456789abcdef"


def _chat(**options):
    options.setdefault("retry", RetryPolicy(max_attempts=3, initial_wait=0.0, jitter=0.0, max_total=10))
    return connect(f"openai+{API}", model="gpt-4o", class_names=CHAT_NAMES, input_shape=(1, 8, 8), token=KEY,
                   price_input_tokens=0.15, price_output_tokens=0.6, **options)


def _completion(content: object = "1", finish: object = "stop", usage: object = None) -> dict:
    return {"choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 2} if usage is None else usage}


# -- waiting ------------------------------------------------------------------------------------------------------
def test_routine_rate_limits_are_waited_out_counted_and_never_printed(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="ldpclient")
    with serve_chat(rate_429=1 / 30, retry_after=0, fault_seed=4) as srv, chat_teacher(srv) as chat:
        client = QueryClient(chat, workers=2)
        client.label(chat_queries(150))
        rejected = chat_usage(srv)["rejected"]
    assert rejected > 0 and client.stats.waits.busy == rejected == client.stats.attempts - client.stats.requests
    assert caplog.records == []  # 150 queries, a few 429s: not one line


@pytest.mark.parametrize("status, wait, warned", [(429, 0.2, False), (503, 0.2, False), (429, 11.0, True),
                                                  (500, None, True)])
def test_only_a_long_wait_or_a_fault_is_a_warning(caplog, status, wait, warned) -> None:
    caplog.set_level(logging.WARNING, logger="ldpclient")
    slept: list[float] = []
    policy = RetryPolicy(initial_wait=0.5, jitter=0.0, sleep=slept.append)
    calls = iter([TransientTeacherError("busy", status=status, retry_after=wait), None])

    def attempt() -> str:
        exc = next(calls)
        if exc is not None:
            raise exc
        return "ok"

    waits = Waits()
    assert with_retries(attempt, policy, what="ask", attempts=lambda: 1, waits=waits) == "ok"
    assert bool(caplog.records) == warned and slept == [wait if wait is not None else 0.5]
    assert (waits.busy, waits.busy_s) == ((1, wait) if status in (429, 503) else (0, 0.0))


@pytest.mark.parametrize("header", ["retry-after", "x-ratelimit-reset-requests"])
def test_a_wait_longer_than_the_run_allows_ends_it_at_once_naming_the_wait(header) -> None:
    slept: list[float] = []
    retry = RetryPolicy(max_total=120, sleep=slept.append)
    with serve_chat(rate_429=1.0, retry_after=7200, rate_limit_header=header) as srv, \
            chat_teacher(srv, retry=retry) as chat:
        with pytest.raises(RetriesExhausted, match="asked to wait 7200 s"):
            QueryClient(chat).label(chat_queries(1))
    assert slept == []


@responses.activate
def test_requests_are_paced_by_the_tokens_left_and_a_reset_of_hours_ends_the_run_at_once() -> None:
    short = {"x-ratelimit-remaining-tokens": "10", "x-ratelimit-reset-tokens": "50ms"}
    responses.add(responses.POST, f"{API}/chat/completions", json=_completion(), headers=short)
    responses.add(responses.POST, f"{API}/chat/completions", json=_completion(),
                  headers={"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2h"})
    with _chat() as chat:
        client = QueryClient(chat, batch_size=1)
        with pytest.raises(RetriesExhausted, match="resets in 7200 s"):
            client.label(chat_queries(3))
    assert len(responses.calls) == 2 and client.stats.waits.paced_s > 0  # the second waited for the tokens' reset


# -- money --------------------------------------------------------------------------------------------------------
def test_published_image_tokens_by_model_family() -> None:
    assert [image_tokens(m, 28, 28) for m in ("gpt-4o", "gpt-4o-2024-08-06", "gpt-4o-mini", "openai/gpt-4.1",
                                              "gpt-5", "o3", "gemini-2.0-flash")] == [85, 85, 2833, 85, 70, 75, 258]
    assert image_tokens("gpt-4.1-mini", 64, 64) == 7  # four 32-px patches x 1.62, rounded up
    assert image_tokens("claude-3-5-sonnet", 300, 250) == 100 and image_tokens("my-deployment", 28, 28) is None


def test_a_known_model_is_booked_within_half_again_its_bill_and_the_dry_run_figure_is_that_booking() -> None:
    with serve_chat(model_name="gpt-4o") as srv:
        chat = connect(f"openai+{srv.url}/v1", model="gpt-4o", class_names=CHAT_NAMES, input_shape=(1, 8, 8),
                       token=CHAT_TOKEN, price_input_tokens=0.15, price_output_tokens=0.6)
        booked = chat.most_per_query()
        client = QueryClient(chat)
        client.label(chat_queries(12))
        billed = chat_usage(srv)["cost"] / 12
    assert billed <= booked <= 1.5 * billed
    assert chat.booking.describe()["image_tokens"] == 85 == image_tokens("gpt-4o", 8, 8)


def test_an_unknown_model_is_booked_at_the_most_until_its_answers_show_what_it_bills() -> None:
    with serve_chat() as srv, chat_teacher(srv) as chat:  # "digits": no published rule
        first = chat.booking.tokens()[0]
        QueryClient(chat).label(chat_queries(4))
        learnt = chat.booking.tokens()[0]
        most_billed = chat_usage(srv)["input_tokens"] / 4
    assert first > MOST_IMAGE_TOKENS and most_billed <= learnt <= LEARNT_MARGIN * most_billed + 1
    with serve_chat() as srv, chat_teacher(srv, image_tokens=85) as told:
        assert told.booking.tokens()[0] < 300 and told.booking.describe()["image_tokens_from"].startswith("given")


@pytest.mark.parametrize("usage", [None, {}, {"prompt_tokens": 0, "completion_tokens": 0},
                                   {"prompt_tokens": -5, "completion_tokens": 2},
                                   {"prompt_tokens": 10**12, "completion_tokens": 2}])
@responses.activate
def test_a_bill_missing_zero_negative_or_absurd_is_charged_at_the_booking_and_the_cap_holds(usage) -> None:
    body = _completion()
    if usage is None:
        del body["usage"]
    else:
        body["usage"] = usage
    responses.add(responses.POST, f"{API}/chat/completions", json=body)
    with _chat() as chat:
        most = chat.most_per_query()
        client = QueryClient(chat, batch_size=1, cost=CostMeter(cap=3.5 * most))
        with pytest.raises(CostCapReached):
            client.label(chat_queries(6))
    assert client.stats.queries_sent == 3 and client.stats.unbilled == 3
    assert client.cost.spent_run == pytest.approx(3 * most) and client.cost.spent_run <= 3.5 * most
    assert "no believable usage" in client.report()["billing"]["summary"]


# -- keys ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("address", ["openai+http://api.example.test/v1", "oip+http://10.0.0.7:8000/v2/models/m",
                                     "vision+http://vision.example.test/v1"])
@responses.activate
def test_a_token_is_never_sent_in_clear_to_another_host(address, monkeypatch) -> None:
    facts = {"model": "m", "class_names": CHAT_NAMES, "input_shape": (1, 8, 8), "label_map": {"0": ["x"]}}
    keep = {"openai": ("model", "class_names", "input_shape"), "oip": (),
            "vision": ("class_names", "input_shape", "label_map")}[address.split("+")[0]]
    options = {k: facts[k] for k in keep}
    with pytest.raises(TokenInClear, match="use an https:// address, or drop the token") as caught:
        connect(address, token=KEY, **options)
    assert KEY not in str(caught.value) and len(responses.calls) == 0
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # a key from the environment too
    if address.startswith("openai"):
        with pytest.raises(TokenInClear):
            connect(address, **options)
    for loopback in ("127.0.0.1:9", "localhost:9", "[::1]:9"):  # this machine: allowed
        HttpTransport(token=KEY).refuse_clear_token(f"http://{loopback}/v1")


@responses.activate
def test_a_key_the_server_echoes_in_an_error_a_body_or_a_redirect_is_never_shown() -> None:
    url = f"{API}/chat/completions"
    responses.add(responses.POST, url, status=401, json={"error": {"message": f"Incorrect API key: Bearer {KEY}"}})
    responses.add(responses.POST, url, status=200, body=f"not json {KEY} " * 20)
    responses.add(responses.POST, url, status=302, headers={"Location": f"https://evil.test/{KEY}/x"})
    said = []
    with _chat(retry=RetryPolicy(max_attempts=1)) as chat:
        for _ in range(3):
            with pytest.raises(Exception) as caught:
                QueryClient(chat).label(chat_queries(1))
            said.append(str(caught.value))
    assert all(KEY not in s and KEY[:12] not in s for s in said) and "401" in said[0] and "not followed" in said[2]


# -- hostile answers ----------------------------------------------------------------------------------------------
@responses.activate
def test_an_answer_that_nests_without_end_is_a_one_line_refusal_not_a_crash() -> None:
    responses.add(responses.POST, f"{API}/chat/completions", body="[" * 200_000 + "]" * 200_000)
    with _chat() as chat, pytest.raises(MalformedResponse, match="nests deeper") as caught:
        QueryClient(chat).label(chat_queries(1))
    assert not caught.value.transient and len(responses.calls) == 1  # not asked (nor paid) twice


@pytest.mark.parametrize("content, finish, kind", [
    ('{"label": ' * 50_000, "stop", "unreadable"),  # a structured answer that nests without end
    ("**1**", "stop", "off_list"), ("1\x1b[31m", "stop", "off_list"), ("<b>2</b>", "stop", "off_list"),
    ("Can't tell.", "stop", "cannot_tell"), ("UNKNOWN", "stop", "cannot_tell"), ("none of the above", "stop",
                                                                                 "cannot_tell"),
    ("7", "stop", "off_list"), ("1", "tool_calls", "unreadable"), ("1", "something_new", "unreadable"),
    ("1", "length", "unreadable"), ("1", "content_filter", "policy"),
])
@responses.activate
def test_every_odd_answer_is_a_declined_query_of_its_kind_never_a_class(content, finish, kind) -> None:
    raw = kind == "unreadable" and finish == "stop"  # the unreadable structured answer is sent as it is
    responses.add(responses.POST, f"{API}/chat/completions",
                  json=_completion(content if raw else json.dumps({"label": content}), finish))
    with _chat(answer_format="json_schema") as chat:
        client = QueryClient(chat)
        labels = client.label(chat_queries(2))
    assert labels.tolist() == [ABSTAINED, ABSTAINED] and client.stats.declined == {kind: 2}


@pytest.mark.parametrize("returned", [1, 3])
@responses.activate
def test_vision_answers_in_the_wrong_number_are_refused_once_never_matched_to_images(returned) -> None:
    responses.add(responses.POST, f"{API}/images:annotate", json={"responses": [{"labelAnnotations": []}] * returned})
    vision = connect(f"vision+{API}", class_names=CHAT_NAMES, input_shape=(1, 8, 8), token=KEY,
                     label_map={"0": ["/m/zero"], "1": ["one"]})
    with vision, pytest.raises(MalformedResponse, match="one per image sent"):
        QueryClient(vision).label(chat_queries(2))
    assert len(responses.calls) == 1


def test_a_label_map_naming_a_class_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match="not one of the class names"):
        connect(f"vision+{API}", class_names=CHAT_NAMES, input_shape=(1, 8, 8), token=KEY, label_map={"cat": ["x"]})


def _line(custom_id: str, label: str) -> str:
    body = _completion(json.dumps({"label": label}), usage={"prompt_tokens": 100, "completion_tokens": 3})
    return json.dumps({"custom_id": custom_id, "response": {"status_code": 200, "body": body}})


class _Kept:
    def __init__(self, *jobs: str) -> None:
        self.kept = list(jobs)

    def jobs(self) -> list[str]:
        return list(self.kept)

    def add_job(self, job_id: str) -> None:
        self.kept.append(job_id)


def _job(status: str = "completed") -> dict:
    return {"id": "batch_1", "status": status, "output_file_id": "file-out", "request_counts": {"total": 2},
            "metadata": {"ldpclient_batch": "b", "ldpclient_format": "json_schema"}}


@responses.activate
def test_batch_lines_with_unknown_repeated_or_foreign_ids_answer_nothing_and_are_not_paid_twice() -> None:
    lines = [_line("zzz/0", "3"), _line("c/0", "3"), _line("b/0", "1"), _line("b/0", "2"), _line("b/1", "0")]
    responses.add(responses.GET, f"{API}/batches/batch_1", json=_job())
    responses.add(responses.GET, f"{API}/files/file-out/content", body="\n".join(lines) + "\n")
    with _chat(batch=True) as chat:
        got = chat.batch_runner(BatchSettings()).run([b"png-0", b"png-1"], "b", _Kept("batch_1"))
    assert {k: a.label for k, a in got.answers.items()} == {0: 1, 1: 0} and got.input_tokens == 200
    assert got.earlier == 2


@pytest.mark.parametrize("bad", ["{not json", "[" * 200_000])
@responses.activate
def test_a_batch_file_with_a_line_that_cannot_be_read_is_a_one_line_refusal(bad) -> None:
    responses.add(responses.GET, f"{API}/batches/batch_1", json=_job())
    responses.add(responses.GET, f"{API}/files/file-out/content", body=_line("b/0", "1") + "\n" + bad + "\n")
    with _chat(batch=True) as chat, pytest.raises(MalformedResponse, match="cannot be read") as caught:
        chat.batch_runner(BatchSettings()).run([b"png-0", b"png-1"], "b", _Kept("batch_1"))
    assert "\n" not in str(caught.value) and not caught.value.transient


@responses.activate
def test_a_batch_job_that_never_ends_stops_the_run_at_its_deadline_and_stays_in_the_journal() -> None:
    responses.add(responses.GET, f"{API}/batches/batch_1", json=_job("in_progress"))
    kept = _Kept("batch_1")
    settings = BatchSettings(poll_s=0.02, max_poll_s=0.05, max_wait_s=0.2)
    with _chat(batch=True) as chat, pytest.raises(Exception, match="did not end within 0.2 s"):
        chat.batch_runner(settings).run([b"png-0"], "b", kept)
    assert kept.jobs() == ["batch_1"]


def test_the_querying_bar_counts_declined_answers() -> None:
    from ldpclient.transfer.student import LabelStore

    store = LabelStore(4, 3)
    store.set(torch.tensor([0, 1, 2]), torch.tensor([1, ABSTAINED, ABSTAINED]))
    assert (store.num_labelled, store.num_answered) == (1, 3)


def test_the_run_books_its_next_batches_at_what_the_answers_showed_and_the_cap_still_holds() -> None:
    with serve_chat() as srv, chat_teacher(srv) as chat:  # "digits": no rule, first booked at 2,833 image tokens
        cap = 3 * chat.most_per_query()
        client = QueryClient(chat, batch_size=1, cost=CostMeter(cap=cap))
        labels = client.label(chat_queries(12))  # booked at the most, all 12 would need 4 times the cap
        billed = chat_usage(srv)["cost"]
    assert len(labels) == 12 and client.cost.spent_run == pytest.approx(billed, abs=1e-12) and billed <= cap
    assert client.cost.price_per_query < cap / 12  # the booking followed the bill


@responses.activate
def test_an_answer_far_over_any_sane_size_is_refused_once_without_being_kept() -> None:
    responses.add(responses.POST, f"{API}/chat/completions", body=b'{"choices": "' + b"x" * (3 << 20) + b'"}')
    with _chat(max_response_bytes=1 << 20) as chat, pytest.raises(MalformedResponse, match="larger than") as caught:
        QueryClient(chat).label(chat_queries(1))
    assert not caught.value.transient and len(responses.calls) == 1


@pytest.mark.parametrize("workers", [1, 4])
def test_the_money_cap_holds_with_several_requests_in_flight(workers) -> None:
    with serve_chat(rate_429=0.2, retry_after=0, fault_seed=7) as srv, chat_teacher(srv, image_tokens=85) as chat:
        cap = 5.5 * chat.most_per_query()
        client = QueryClient(chat, batch_size=1, workers=workers, cost=CostMeter(cap=cap))
        with pytest.raises(CostCapReached):
            client.label(chat_queries(12))
        billed = chat_usage(srv)["cost"]
    assert 0 < billed <= cap and client.cost.spent_run == pytest.approx(billed, abs=1e-12)


@pytest.mark.parametrize("body, declined", [({"id": "chatcmpl-1", "usage": {"prompt_tokens": 9}}, True),
                                            ({"choices": "none"}, True), ("<html>bad gateway</html>", False)])
@responses.activate
def test_a_200_that_is_no_chat_completion_is_declined_or_refused_and_never_asked_twice(body, declined) -> None:
    responses.add(responses.POST, f"{API}/chat/completions", **({"json": body} if isinstance(body, dict)
                                                                else {"body": body}))
    with _chat() as chat:
        client = QueryClient(chat, batch_size=1)
        if declined:
            assert client.label(chat_queries(1)).tolist() == [ABSTAINED]
            assert client.stats.declined == {"unreadable": 1}
        else:
            with pytest.raises(MalformedResponse, match="not JSON"):
                client.label(chat_queries(1))
    assert len(responses.calls) == 1


@pytest.mark.parametrize("oddity", [{"request_counts": {"total": "many"}}, {"request_counts": {"total": 10**9}},
                                    {"metadata": ["x"]}, {"errors": ["x"], "request_counts": None}])
@responses.activate
def test_a_batch_job_whose_fields_are_odd_is_read_without_a_crash(oddity) -> None:
    lines = [_line("b/0", "1"), _line("b/1", "0")]
    responses.add(responses.GET, f"{API}/batches/batch_1", json={**_job(), **oddity})
    responses.add(responses.GET, f"{API}/files/file-out/content", body="\n".join(lines) + "\n")
    with _chat(batch=True) as chat:
        got = chat.batch_runner(BatchSettings()).run([b"png-0", b"png-1"], "b", _Kept("batch_1"))
    assert {k: a.label for k, a in got.answers.items()} == {0: 1, 1: 0}
