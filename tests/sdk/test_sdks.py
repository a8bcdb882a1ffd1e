"""The official OpenAI, Anthropic and Google Gemini Python SDKs talk to a real laptime gateway.

The gateway (see conftest.py) serves the simulated model `sim-fast`, which
answers with 16 text tokens and reports usage output 16 in every dialect, and
as input the body it was sent, a token per four bytes rounded up. These tests use the SDKs exactly as a customer would, pointed at the
gateway's base URL, and then check what the gateway stored for the request.
"""

from __future__ import annotations

import numbers

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

MODEL = "sim-fast"
EXPECTED_OUTPUT_TOKENS = 16
PROMPT = "Why was my request slow?"
REQUEST_ID_HEADER = "x-laptime-request-id"
# What the sim streams for `sim-fast`: its first 16 text tokens.
SIM_FAST_TEXT = "Sure, here is the short answer: the request waited in a queue, the"


@pytest.fixture
def openai_client(gateway):
    client = openai.OpenAI(
        api_key=gateway.token, base_url=gateway.openai_base_url, max_retries=0, timeout=10.0
    )
    yield client
    client.close()


@pytest.fixture
def anthropic_client(gateway):
    client = anthropic.Anthropic(
        api_key=gateway.token, base_url=gateway.anthropic_base_url, max_retries=0, timeout=10.0
    )
    yield client
    client.close()


def sent_tokens(gateway, request_id: str) -> int:
    """The input sim-fast reports for a request: the body it was sent (the SDK's, relayed as
    sent; the gateway records its size as `bytes_in`), a token per four bytes rounded up."""
    sent = gateway.stored_request(request_id)["bytes_in"]
    return max(1, -(-sent // 4))


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def assert_stored_row_is_a_completed_stream(gateway, request_id: str, dialect: str) -> dict:
    assert request_id and request_id.startswith("req_"), f"bad request id header: {request_id!r}"
    row = gateway.stored_request(request_id)
    assert row["request_id"] == request_id
    assert row["outcome"] == "completed", row
    assert row["dialect"] == dialect, row
    assert row["stream"] is True, row
    assert row["model"] == MODEL, row
    assert row["output_tokens"] == EXPECTED_OUTPUT_TOKENS, row
    assert _is_number(row["ttft_ms"]) and row["ttft_ms"] >= 0, row
    assert _is_number(row["upstream_ms"]) and row["upstream_ms"] >= row["ttft_ms"], row
    first_text = row["other"]["timing"]["first_text_delta_ms"]
    assert _is_number(first_text) and first_text >= 0, row
    return row


def assert_server_timing_has_upstream_duration(headers) -> None:
    server_timing = headers.get("server-timing")
    assert server_timing, f"no Server-Timing header in {dict(headers)!r}"
    entries = [part.strip() for part in server_timing.split(",")]
    upstream = [e for e in entries if e.split(";", 1)[0].strip() == "upstream"]
    assert upstream, f"Server-Timing has no 'upstream' metric: {server_timing!r}"
    params = dict(
        p.strip().split("=", 1) for p in upstream[0].split(";")[1:] if "=" in p
    )
    assert "dur" in params and float(params["dur"]) >= 0, server_timing


# --- OpenAI: chat completions ---------------------------------------------


def test_openai_chat_completion_streams_text_and_reports_usage_in_the_final_chunk(
    gateway, openai_client
):
    raw = openai_client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": PROMPT}],
        stream=True,
        stream_options={"include_usage": True},
    )
    request_id = raw.headers.get(REQUEST_ID_HEADER)
    stream = raw.parse()

    chunks = list(stream)
    text = "".join(
        choice.delta.content or "" for chunk in chunks for choice in chunk.choices
    )
    finish_reasons = [c.finish_reason for chunk in chunks for c in chunk.choices if c.finish_reason]

    assert text.strip(), f"no text in {len(chunks)} chunks"
    assert finish_reasons == ["stop"]
    final = chunks[-1]
    assert final.choices == []
    assert final.usage is not None, final
    assert final.usage.completion_tokens == EXPECTED_OUTPUT_TOKENS
    assert final.usage.prompt_tokens == sent_tokens(gateway, request_id)
    assert all(chunk.usage is None for chunk in chunks[:-1])

    assert_stored_row_is_a_completed_stream(gateway, request_id, "chat")


def test_openai_chat_completion_without_streaming_returns_text_usage_and_server_timing(
    gateway, openai_client
):
    raw = openai_client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": PROMPT}]
    )
    completion = raw.parse()

    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content.strip()
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.completion_tokens == EXPECTED_OUTPUT_TOKENS
    assert completion.usage.prompt_tokens == sent_tokens(gateway, raw.headers.get(REQUEST_ID_HEADER))
    assert raw.headers.get(REQUEST_ID_HEADER, "").startswith("req_")
    assert_server_timing_has_upstream_duration(raw.headers)


# --- OpenAI: responses ----------------------------------------------------


def test_openai_responses_stream_text_deltas_and_finish_with_a_completed_event_carrying_usage(
    gateway, openai_client
):
    raw = openai_client.responses.with_raw_response.create(
        model=MODEL, input=PROMPT, stream=True
    )
    request_id = raw.headers.get(REQUEST_ID_HEADER)
    events = list(raw.parse())

    types = [event.type for event in events]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    done_texts = [e.text for e in events if e.type == "response.output_text.done"]
    completed = [e for e in events if e.type == "response.completed"]

    assert types[0] == "response.created", types
    assert types[-1] == "response.completed", types
    assert "".join(deltas).strip(), types
    assert done_texts == ["".join(deltas)]
    assert len(completed) == 1
    response = completed[0].response
    assert response.status == "completed"
    assert response.output_text == "".join(deltas)
    assert response.usage.output_tokens == EXPECTED_OUTPUT_TOKENS
    assert response.usage.input_tokens == sent_tokens(gateway, request_id)

    assert_stored_row_is_a_completed_stream(gateway, request_id, "responses")


def test_openai_responses_without_streaming_return_output_text_and_usage(
    gateway, openai_client
):
    raw = openai_client.responses.with_raw_response.create(model=MODEL, input=PROMPT)
    response = raw.parse()

    assert response.status == "completed"
    assert response.output_text.strip()
    assert response.usage.output_tokens == EXPECTED_OUTPUT_TOKENS
    assert response.usage.input_tokens == sent_tokens(gateway, raw.headers.get(REQUEST_ID_HEADER))
    assert response.usage.total_tokens == response.usage.input_tokens + EXPECTED_OUTPUT_TOKENS
    assert_server_timing_has_upstream_duration(raw.headers)


# --- Anthropic: messages --------------------------------------------------


def test_anthropic_message_stream_yields_text_and_a_final_message_that_ended_its_turn(
    gateway, anthropic_client
):
    with anthropic_client.messages.stream(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": PROMPT}]
    ) as stream:
        request_id = stream.response.headers.get(REQUEST_ID_HEADER)
        text = "".join(stream.text_stream)
        final = stream.get_final_message()

    assert text.strip()
    assert final.role == "assistant"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == EXPECTED_OUTPUT_TOKENS
    assert final.usage.input_tokens == sent_tokens(gateway, request_id)
    assert [block.type for block in final.content] == ["text"]
    assert final.content[0].text == text

    assert_stored_row_is_a_completed_stream(gateway, request_id, "messages")


def test_anthropic_create_with_stream_true_yields_the_documented_event_sequence(
    gateway, anthropic_client
):
    stream = anthropic_client.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=[{"role": "user", "content": PROMPT}],
        stream=True,
    )
    with stream:
        events = list(stream)

    types = [event.type for event in events]
    assert types[0] == "message_start", types
    assert types[-1] == "message_stop", types
    assert types[-2] == "message_delta", types
    text = "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    assert text.strip()
    message_delta = events[-2]
    assert message_delta.delta.stop_reason == "end_turn"
    assert message_delta.usage.output_tokens == EXPECTED_OUTPUT_TOKENS


def test_anthropic_message_without_streaming_returns_text_and_usage(
    gateway, anthropic_client
):
    raw = anthropic_client.messages.with_raw_response.create(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": PROMPT}]
    )
    message = raw.parse()

    assert message.content[0].type == "text"
    assert message.content[0].text.strip()
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == EXPECTED_OUTPUT_TOKENS
    assert message.usage.input_tokens == sent_tokens(gateway, raw.headers.get(REQUEST_ID_HEADER))
    assert raw.headers.get(REQUEST_ID_HEADER, "").startswith("req_")
    assert_server_timing_has_upstream_duration(raw.headers)


# --- Errors the SDKs must map to their typed exceptions -------------------


def _wrong_token() -> str:
    return "lt_" + "0" * 64


def test_openai_sdk_raises_authentication_error_for_a_wrong_token(gateway):
    client = openai.OpenAI(
        api_key=_wrong_token(), base_url=gateway.openai_base_url, max_retries=0, timeout=10.0
    )
    with client, pytest.raises(openai.AuthenticationError) as excinfo:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": PROMPT}]
        )
    assert excinfo.value.status_code == 401
    assert excinfo.value.response.headers.get(REQUEST_ID_HEADER, "").startswith("req_")


def test_anthropic_sdk_raises_authentication_error_for_a_wrong_token(gateway):
    client = anthropic.Anthropic(
        api_key=_wrong_token(), base_url=gateway.anthropic_base_url, max_retries=0, timeout=10.0
    )
    with client, pytest.raises(anthropic.AuthenticationError) as excinfo:
        client.messages.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": PROMPT}]
        )
    assert excinfo.value.status_code == 401
    assert excinfo.value.response.json()["error"]["type"] == "authentication_error"


def test_openai_sdk_raises_not_found_error_for_an_unknown_model_in_chat_completions(
    openai_client,
):
    with pytest.raises(openai.NotFoundError) as excinfo:
        openai_client.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": PROMPT}]
        )
    assert excinfo.value.status_code == 404
    assert excinfo.value.code == "model_not_found"


def test_openai_sdk_raises_not_found_error_for_an_unknown_model_in_responses(openai_client):
    with pytest.raises(openai.NotFoundError) as excinfo:
        openai_client.responses.create(model="no-such-model", input=PROMPT, stream=True)
    assert excinfo.value.status_code == 404


def test_anthropic_sdk_raises_not_found_error_for_an_unknown_model(anthropic_client):
    with pytest.raises(anthropic.NotFoundError) as excinfo:
        anthropic_client.messages.create(
            model="no-such-model", max_tokens=64, messages=[{"role": "user", "content": PROMPT}]
        )
    assert excinfo.value.status_code == 404
    assert excinfo.value.response.json()["error"]["type"] == "not_found_error"


def test_openai_sdk_lists_the_models_and_retrieves_one(openai_client):
    listed = [m.id for m in openai_client.models.list()]
    assert MODEL in listed, listed
    model = openai_client.models.retrieve(MODEL)
    assert (model.id, model.object) == (MODEL, "model")
    with pytest.raises(openai.NotFoundError) as excinfo:
        openai_client.models.retrieve("no-such-model")
    assert excinfo.value.code == "model_not_found"


def test_anthropic_sdk_lists_the_models_and_retrieves_one(anthropic_client):
    listed = [m.id for m in anthropic_client.models.list()]
    assert MODEL in listed, listed
    model = anthropic_client.models.retrieve(MODEL)
    assert (model.id, model.type) == (MODEL, "model")
    with pytest.raises(anthropic.NotFoundError) as excinfo:
        anthropic_client.models.retrieve("no-such-model")
    assert excinfo.value.response.json()["error"]["type"] == "not_found_error"


# A stream the upstream cuts after some text (the sim closes it before its terminal event): the
# gateway ends it with the dialect's error event, so each SDK raises instead of returning a
# truncated answer as if it were whole.
CUT = {"laptime_sim": {"text_tokens": 5, "end": "close"}}


def test_openai_chat_stream_cut_by_the_upstream_raises_in_the_sdk(openai_client):
    stream = openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": PROMPT}], stream=True, extra_body=CUT
    )
    with pytest.raises(openai.APIError) as excinfo:
        for _ in stream:
            pass
    assert "closed the stream before it was complete" in str(excinfo.value)


def test_openai_responses_stream_cut_by_the_upstream_yields_an_error_event(openai_client):
    stream = openai_client.responses.create(
        model=MODEL, input=PROMPT, stream=True, extra_body=CUT
    )
    events = list(stream)
    assert events[-1].type == "error", [e.type for e in events]
    assert events[-1].code == "upstream_closed_early"
    assert not any(e.type == "response.completed" for e in events)


def test_anthropic_stream_cut_by_the_upstream_raises_in_the_sdk(anthropic_client):
    with pytest.raises(anthropic.APIError) as excinfo:
        with anthropic_client.messages.stream(
            model=MODEL,
            max_tokens=64,
            messages=[{"role": "user", "content": PROMPT}],
            extra_body=CUT,
        ) as stream:
            for _ in stream:
                pass
    assert "closed the stream before it was complete" in str(excinfo.value)


# --- Google Gemini (google-genai), same dialect: /v1beta/models/{model}:… ---


@pytest.fixture
def gemini_client(gateway):
    client = genai.Client(
        api_key=gateway.token,
        http_options=types.HttpOptions(
            base_url=gateway.base_url,
            timeout=10_000,
            retry_options=types.HttpRetryOptions(attempts=1),
        ),
    )
    yield client
    client.close()


def _gemini_request_id(response) -> str:
    headers = response.sdk_http_response.headers or {}
    return {k.lower(): v for k, v in headers.items()}.get(REQUEST_ID_HEADER, "")


def test_gemini_generate_content_stream_reconstructs_the_sims_text_and_usage(
    gateway, gemini_client
):
    chunks = list(gemini_client.models.generate_content_stream(model=MODEL, contents=PROMPT))
    assert "".join(c.text or "" for c in chunks) == SIM_FAST_TEXT
    last = chunks[-1]
    assert last.candidates[0].finish_reason == types.FinishReason.STOP
    usage = last.usage_metadata
    assert usage.prompt_token_count == sent_tokens(gateway, _gemini_request_id(chunks[0]))
    assert usage.candidates_token_count == EXPECTED_OUTPUT_TOKENS
    row = assert_stored_row_is_a_completed_stream(gateway, _gemini_request_id(chunks[0]), "gemini")
    assert row["input_tokens"] == usage.prompt_token_count, row
    assert row["text_delta_count"] == EXPECTED_OUTPUT_TOKENS, row


def test_gemini_generate_content_returns_the_sims_text_usage_and_server_timing(
    gateway, gemini_client
):
    response = gemini_client.models.generate_content(
        model=MODEL,
        contents=PROMPT,
        config=types.GenerateContentConfig(max_output_tokens=64),
    )
    assert response.text == SIM_FAST_TEXT
    assert response.candidates[0].finish_reason == types.FinishReason.STOP
    assert response.usage_metadata.prompt_token_count == sent_tokens(gateway, _gemini_request_id(response))
    assert response.usage_metadata.candidates_token_count == EXPECTED_OUTPUT_TOKENS
    headers = {k.lower(): v for k, v in response.sdk_http_response.headers.items()}
    assert headers["server-timing"].startswith("upstream;dur="), headers
    row = gateway.stored_request(headers[REQUEST_ID_HEADER])
    assert row["outcome"] == "completed", row
    assert (row["dialect"], row["stream"], row["model"]) == ("gemini", False, MODEL), row
    assert (row["input_tokens"], row["output_tokens"]) == (
        response.usage_metadata.prompt_token_count,
        EXPECTED_OUTPUT_TOKENS,
    ), row


def test_gemini_sdk_raises_a_client_error_for_an_unknown_model(gemini_client):
    with pytest.raises(genai.errors.ClientError) as caught:
        gemini_client.models.generate_content(model="gemini-nonexistent", contents=PROMPT)
    assert caught.value.code == 404
    assert caught.value.status == "NOT_FOUND"
