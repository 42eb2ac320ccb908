"""The OpenAI-compatible chat adapter against the mock's /v1/chat/completions, and the mock held to what the
official ``openai`` client expects: abstentions, refusals, content-policy errors, rate limits and token money."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest

openai = pytest.importorskip("openai")
mock_server = pytest.importorskip("mock_server")

from ldpclient.teachers import CostCapReached, CostMeter, Journal, QueryClient, connect  # noqa: E402
from ldpclient.teachers.chat_wire import CANNOT_TELL, prompt_text  # noqa: E402
from ldpclient.teachers.openai_chat import ChatTeacher, TokenPrices, parse_duration  # noqa: E402
from ldpclient.teachers.result import ABSTAINED  # noqa: E402
from support.chat import CHAT_NAMES, CHAT_TOKEN, chat_queries, chat_teacher, chat_usage, serve_chat  # noqa: E402


def _png(level: int = 200) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8), level, np.uint8)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def test_the_official_openai_client_reads_the_mocks_models_completions_and_errors() -> None:
    with serve_chat(chat_policy_rate=0.0) as srv:
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key=CHAT_TOKEN, max_retries=0)
        assert [m.id for m in client.models.list()] == ["digits"]
        teacher = chat_teacher(srv)
        body = teacher.wire.request_body(base64.b64decode(_png(250).split(",", 1)[1]))
        done = client.chat.completions.create(**body)
        assert done.choices[0].finish_reason == "stop" and done.choices[0].message.refusal is None
        assert done.choices[0].message.content == '{"label": "3"}'
        assert done.usage.prompt_tokens > 85 and done.usage.completion_tokens >= 1
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{srv.url}/v1", api_key="sk-wrong", max_retries=0).models.list()
        with pytest.raises(openai.NotFoundError) as missing:
            client.chat.completions.create(**{**body, "model": "gpt-9"})
        assert missing.value.code == "model_not_found"
    with serve_chat(chat_policy_rate=1.0) as srv:
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key=CHAT_TOKEN, max_retries=0)
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(**body)
        assert refused.value.code == "content_policy_violation"
    for header in ("retry-after", "retry-after-ms", "x-ratelimit-reset-requests"):
        with serve_chat(rate_429=1.0, rate_limit_header=header) as srv:
            client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key=CHAT_TOKEN, max_retries=0)
            with pytest.raises(openai.RateLimitError) as limited:
                client.chat.completions.create(**body)
            assert header in {k.lower() for k in limited.value.response.headers}


def test_labels_and_money_equal_what_the_mock_billed_to_the_token() -> None:
    with serve_chat() as srv:
        with chat_teacher(srv) as teacher:
            client = QueryClient(teacher, workers=3)
            labels = client.label(chat_queries())
        assert labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
        billed = chat_usage(srv)
        s = client.stats
        assert (s.input_tokens, s.output_tokens, s.requests) == (billed["input_tokens"], billed["output_tokens"], 12)
        assert client.cost.spent_run == pytest.approx(billed["cost"], abs=1e-12)
        assert s.abstained == 0


def test_without_token_prices_a_chat_teacher_is_priced_per_query_by_the_caller() -> None:
    with serve_chat() as srv:
        chat = connect(
            f"openai+{srv.url}/v1", model="digits", class_names=CHAT_NAMES, input_shape=(1, 8, 8), token=CHAT_TOKEN
        )
        assert chat.most_per_query() is None
        client = QueryClient(chat, cost=CostMeter(price_per_query=0.002))
        client.label(chat_queries(5))
        assert client.cost.spent_run == pytest.approx(5 * 0.002)  # not the zero its token prices would give


@pytest.mark.parametrize(
    "server, teacher, reason",
    [
        ({"chat_abstain_below": 1.0}, {}, "cannot tell"),
        ({"chat_refusal_rate": 1.0}, {}, "refusal"),
        ({"chat_off_list_rate": 1.0}, {"answer_format": "text"}, "outside the list"),
        ({"chat_cut_off": True}, {}, "cut off"),
        ({"chat_policy_rate": 1.0}, {}, "content policy"),
    ],
)
def test_every_kind_of_declined_answer_is_an_abstention_never_a_class(server, teacher, reason) -> None:
    with serve_chat(**server) as srv, chat_teacher(srv, **teacher) as chat:
        client = QueryClient(chat, workers=2)
        labels = client.label(chat_queries(8))
        assert labels.tolist() == [ABSTAINED] * 8, reason
        assert client.stats.abstained == 8 and client.stats.requests == (0 if "policy" in reason else 8)
        billed = chat_usage(srv)
        assert client.cost.spent_run == pytest.approx(billed["cost"], abs=1e-12)  # refusals billed, policy errors not
        assert (billed["cost"] == 0) == ("policy" in reason)


def test_a_content_policy_error_on_one_image_neither_fails_the_batch_nor_resends_the_others() -> None:
    with serve_chat(chat_policy_rate=0.4, fault_seed=3) as srv, chat_teacher(srv) as chat:
        client = QueryClient(chat)
        labels = client.label(chat_queries(12))
        declined = int((labels == ABSTAINED).sum())
        assert 0 < declined < 12
        billed = chat_usage(srv)
        assert billed["requests"] == 12 - declined and billed["rejected"] == declined  # each image asked once
        assert client.cost.spent_run == pytest.approx(billed["cost"], abs=1e-12)


def test_a_server_without_structured_outputs_is_asked_in_text_and_still_labels() -> None:
    with serve_chat(chat_no_schema=True) as srv, chat_teacher(srv) as chat:
        labels = QueryClient(chat).label(chat_queries())
        assert labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
        assert chat.answer_format == "text"


@pytest.mark.parametrize("header", ["retry-after", "retry-after-ms", "x-ratelimit-reset-requests"])
def test_429s_are_waited_out_and_money_still_equals_the_bill(header) -> None:
    with (
        serve_chat(rate_429=0.3, fault_seed=5, retry_after=0, rate_limit_header=header) as srv,
        chat_teacher(srv) as chat,
    ):
        client = QueryClient(chat, workers=2)
        labels = client.label(chat_queries())
        assert labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
        billed = chat_usage(srv)
        assert billed["rejected"] > 0 and client.stats.attempts > 12
        assert client.cost.spent_run == pytest.approx(billed["cost"], abs=1e-12)


def test_requests_are_paced_to_the_limit_the_server_states() -> None:
    with serve_chat(chat_requests_per_window=4, chat_window=0.3) as srv, chat_teacher(srv) as chat:
        QueryClient(chat).label(chat_queries())
        assert chat_usage(srv)["rejected"] == 0  # never ran into the limit: waited for its reset instead


def test_a_money_cap_holds_on_the_booking_at_the_most_and_a_resumed_run_pays_nothing_twice(tmp_path) -> None:
    with serve_chat(chat_refusal_rate=0.25, rate_429=0.2, retry_after=0, fault_seed=2) as srv:
        with chat_teacher(srv, image_tokens=85) as chat:  # the booking near the bill, so that the cap binds mid-run
            most = chat.most_per_query()
            journal = Journal(tmp_path / "journal.sqlite")
            cap = 3 * most  # about seven answers at what they cost
            client = QueryClient(chat, batch_size=1, journal=journal, cost=CostMeter(cap=cap))
            with pytest.raises(CostCapReached):
                client.label(chat_queries())
            paid_once = chat_usage(srv)
            assert paid_once["cost"] <= cap and journal.total_spend(chat.journal_scope) == pytest.approx(
                paid_once["cost"], abs=1e-12)
            resumed = QueryClient(chat, batch_size=1, journal=journal)
            labels = resumed.label(chat_queries())
            assert resumed.stats.queries_from_journal == client.stats.queries_sent
            billed = chat_usage(srv)
            assert journal.total_spend(chat.journal_scope) == pytest.approx(billed["cost"], abs=1e-12)
            assert set(labels.tolist()) <= {ABSTAINED, 0, 1, 2, 3}
            journal.close()


def test_the_key_comes_from_ldpclient_token_else_the_services_own_variable(monkeypatch) -> None:
    monkeypatch.delenv("LDPCLIENT_TOKEN", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", CHAT_TOKEN)
    with serve_chat() as srv:
        chat = connect(f"openai+{srv.url}/v1", model="digits", class_names=CHAT_NAMES, input_shape=(1, 8, 8))
        assert QueryClient(chat).label(chat_queries(4)).tolist() == [0, 1, 2, 3]
        monkeypatch.setenv("LDPCLIENT_TOKEN", "sk-other-key-0000")
        wrong = connect(f"openai+{srv.url}/v1", model="digits", class_names=CHAT_NAMES, input_shape=(1, 8, 8))
        with pytest.raises(Exception, match="401"):
            QueryClient(wrong).label(chat_queries(1))


def test_the_prompt_the_booking_and_the_refusals_of_bad_settings() -> None:
    text = prompt_text(["cat", "dog"], {"cat": "a small feline"})
    assert "- cat: a small feline\n- dog\n" in text and f'"{CANNOT_TELL}"' in text
    assert TokenPrices(1.0, 2.0).cost(1_000_000, 500_000) == pytest.approx(2.0)
    assert parse_duration("6m0s") == 360 and parse_duration("120ms") == pytest.approx(0.12)
    assert parse_duration("1.5") == 1.5 and parse_duration("soon") is None
    base = dict(model="m", class_names=["a", "b"], input_shape=(1, 8, 8), token="sk-abcd-1234")
    with pytest.raises(ValueError, match="--model"):
        ChatTeacher("https://h/v1", **{**base, "model": None})
    with pytest.raises(ValueError, match="--class-names"):
        ChatTeacher("https://h/v1", **{**base, "class_names": None})
    with pytest.raises(ValueError, match="cannot tell"):
        ChatTeacher("https://h/v1", **{**base, "class_names": ["a", "Cannot  Tell"]})
    with pytest.raises(ValueError, match="finite number"):
        ChatTeacher("https://h/v1", **base, price_input_tokens=float("nan"))
    teacher = ChatTeacher("https://h/v1", **base, price_input_tokens=1.0, price_output_tokens=1.0)
    assert teacher.most_per_query() * 1e6 >= 2833 + teacher.max_tokens  # the image at its most, and the answer
    assert "sk-abcd" not in repr(teacher)  # the key is never shown
