"""Continuation after a cut, through the official SDKs, unmodified: a stream the upstream cuts
after 40 of 60 tokens, or stalls after 20, is continued by the second channel, and each SDK
reconstructs the whole canonical answer (what the second channel alone answers); when the second
channel refuses the prefill, each SDK raises on the cut's own in-band error, never on the
prefill's 400. The stored row says both attempts and that the answer was continued."""

from __future__ import annotations

import anthropic
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from test_translation import (
    PLAIN,
    REQUEST_ID_HEADER,
    _gemini_request_id,
    chat_messages,
    gemini_config,
    gemini_contents,
    messages_messages,
    responses_input,
    run_chat,
    run_gemini,
    run_messages,
    run_responses,
)

CLIENTS = ("chat", "responses", "messages", "gemini")
CUT_MESSAGE = "closed the stream before it was complete"


@pytest.fixture(scope="module")
def clients(continuation_gateway):
    gw = continuation_gateway
    oa = openai.OpenAI(api_key=gw.token, base_url=gw.openai_base_url, max_retries=0, timeout=10.0)
    an = anthropic.Anthropic(api_key=gw.token, base_url=gw.anthropic_base_url, max_retries=0, timeout=10.0)
    ge = genai.Client(
        api_key=gw.token,
        http_options=genai_types.HttpOptions(base_url=gw.base_url, api_version="v1beta", timeout=10_000),
    )
    yield {"openai": oa, "anthropic": an, "gemini": ge}
    oa.close()
    an.close()
    ge.close()


def run(clients, client: str, model: str):
    return {
        "chat": lambda: run_chat(clients["openai"], model=model, stream=True),
        "responses": lambda: run_responses(clients["openai"], model=model, stream=True),
        "messages": lambda: run_messages(clients["anthropic"], model=model, stream=True),
        "gemini": lambda: run_gemini(clients["gemini"], model=model, stream=True),
    }[client]()


@pytest.fixture(scope="module")
def canonical(clients):
    """The whole answer, as the second channel gives it alone."""
    text = run(clients, "messages", "m-long").text
    assert len(text.split()) >= 50, text
    return text


@pytest.mark.parametrize("model", ("m-cut", "m-stall"))
@pytest.mark.parametrize("client", CLIENTS)
def test_a_cut_or_stalled_stream_reaches_the_sdk_whole(continuation_gateway, clients, canonical, client, model):
    got = run(clients, client, model)
    assert got.text == canonical, f"{client} {model}: {got.text!r}"
    assert got.stop not in (None, "length", "max_tokens", "MAX_TOKENS"), got.stop
    row = continuation_gateway.stored_request(got.request_id)
    assert row["outcome"] == "completed", row
    assert "continued" in row["flags"], row
    attempts = [(a["channel"], a["role"]) for a in row["attempts"]]
    assert attempts == [("first", "primary"), ("second", "continuation")], row["attempts"]
    expected_class = "timeout" if model == "m-stall" else "closed_early"
    assert row["attempts"][0]["error_class"] == expected_class, row["attempts"]
    # The timeline keeps the first attempt's marks: its first text came from `first`.
    assert row["channel"] == "first", row


def _stream_until_error(clients, client: str, model: str) -> tuple[str, str, str | None]:
    """Streams `model` in `client`'s SDK until it raises; (text before, error text, request id)."""
    text, request_id = "", None
    if client == "chat":
        raw = clients["openai"].chat.completions.with_raw_response.create(
            model=model, messages=chat_messages(PLAIN), stream=True
        )
        request_id = raw.headers.get(REQUEST_ID_HEADER)
        with pytest.raises(openai.APIError) as err:
            for chunk in raw.parse():
                for c in chunk.choices:
                    text += c.delta.content or ""
        return text, str(err.value), request_id
    if client == "responses":
        raw = clients["openai"].responses.with_raw_response.create(
            model=model, input=responses_input(PLAIN), stream=True
        )
        request_id = raw.headers.get(REQUEST_ID_HEADER)
        events, message = [], None
        try:
            for e in raw.parse():
                events.append(e)
        except openai.APIError as e:
            message = str(e)
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        types = [e.type for e in events]
        assert "response.completed" not in types, types
        if message is None:
            errors = [e for e in events if e.type == "error"]
            assert errors, types
            message = errors[0].message
        return text, message, request_id
    if client == "messages":
        with pytest.raises(anthropic.APIStatusError) as err:
            with clients["anthropic"].messages.stream(
                model=model, messages=messages_messages(PLAIN), max_tokens=64
            ) as s:
                request_id = s.response.headers.get(REQUEST_ID_HEADER)
                for t in s.text_stream:
                    text += t
        return text, str(err.value), request_id
    with pytest.raises(genai_errors.APIError) as err:
        for r in clients["gemini"].models.generate_content_stream(
            model=model, contents=gemini_contents(PLAIN), config=gemini_config()
        ):
            request_id = request_id or _gemini_request_id(r)
            for candidate in (r.candidates or [])[:1]:
                for part in (candidate.content.parts if candidate.content else None) or []:
                    text += part.text or ""
    return text, str(err.value), request_id


@pytest.mark.parametrize("client", CLIENTS)
def test_a_refused_prefill_leaves_the_sdk_the_cuts_own_error(continuation_gateway, clients, canonical, client):
    text, error, request_id = _stream_until_error(clients, client, "m-refused")
    assert CUT_MESSAGE in error, error
    assert "prefill" not in error, error
    assert text and canonical.startswith(text), f"{client}: {text!r}"
    assert len(text) < len(canonical)
    row = continuation_gateway.stored_request(request_id)
    assert row["outcome"] == "upstream_closed_early", row
    assert "continued" not in row["flags"], row
    second = [a for a in row["attempts"] if a["channel"] == "second"]
    assert [(a["role"], a["status"]) for a in second] == [("continuation", 400)], row["attempts"]
