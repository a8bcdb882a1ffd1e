"""The official SDKs receive the gateway's own rate-limit refusal (issue 14) as their dialect's 429.

Each test makes a workspace of its own through GraphQL (admin), limits it to one request a
minute (and a generous tokens-per-minute, so that both kinds of headers are sent), and calls
`sim-fast` twice with a proxy token of that workspace: the second call is refused before any
upstream is asked. The SDK must raise its rate-limit error (status 429, retries disabled) with
the dialect's body, and the refusal's headers must be readable from it: `retry-after`, OpenAI's
`x-ratelimit-*`, Anthropic's `anthropic-ratelimit-*`; Gemini's `RESOURCE_EXHAUSTED`. The stored
row says the request was `rate_limited` by the workspace's requests per minute.
"""

from __future__ import annotations

import json
import secrets
import time
import urllib.request
from dataclasses import dataclass

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

MODEL = "sim-fast"
PROMPT = "Why was my request refused?"
REQUEST_ID_HEADER = "x-laptime-request-id"
# High enough never to refuse: it only makes the gateway send the tokens headers too.
TPM = 1_000_000


def gql(gateway, query: str, variables: dict | None = None) -> dict:
    """One GraphQL call with the admin token; its `data` (errors fail the test)."""
    req = urllib.request.Request(
        f"{gateway.base_url}/graphql",
        data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Authorization": f"Bearer {gateway.token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        out = json.loads(resp.read())
    assert not out.get("errors"), out
    return out["data"]


@dataclass
class Limited:
    workspace_id: str
    token: str


@pytest.fixture
def limited(gateway) -> Limited:
    """A new workspace limited to one request a minute, and a proxy token of it."""
    name = f"sdk-limited-{secrets.token_hex(4)}"
    ws = gql(gateway, "mutation($n: String!) { createWorkspace(name: $n) { id } }", {"n": name})[
        "createWorkspace"
    ]["id"]
    limits = gql(
        gateway,
        "mutation($ws: ID!, $tpm: Int) { setLimits(workspaceId: $ws, rpm: 1, tpm: $tpm) "
        "{ rpm tpm } }",
        {"ws": ws, "tpm": TPM},
    )["setLimits"]
    assert limits == {"rpm": 1, "tpm": TPM}, limits
    token = gql(
        gateway,
        "mutation($ws: ID!) { createToken(workspaceId: $ws, scope: PROXY) { token } }",
        {"ws": ws},
    )["createToken"]["token"]
    return Limited(workspace_id=ws, token=token)


def assert_retry_after_within_a_minute(headers) -> None:
    # One request a minute, just spent: the next fits within a minute (less the first call's
    # time, seconds on a busy machine with a debug build).
    after = int(headers["retry-after"])
    assert 1 <= after <= 60, after


def assert_row_refused_by_workspace_rpm(
    gateway, limited: Limited, request_id: str, dialect: str
) -> None:
    """The stored row, read through GraphQL (admin; REST reads the caller's own workspace)."""
    query = (
        "query($ws: ID!, $id: ID!) { request(workspaceId: $ws, requestId: $id) "
        "{ outcome status dialect refusedBy } }"
    )
    deadline = time.monotonic() + 3.0
    while True:
        row = gql(gateway, query, {"ws": limited.workspace_id, "id": request_id})["request"]
        if row is not None or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # the row is written asynchronously
    assert row == {
        "outcome": "rate_limited",
        "status": 429,
        "dialect": dialect,
        "refusedBy": "workspace_rpm",
    }, row


def test_openai_chat_sdk_raises_rate_limit_error_with_the_openai_body_and_headers(
    gateway, limited
):
    client = openai.OpenAI(
        api_key=limited.token, base_url=gateway.openai_base_url, max_retries=0, timeout=10.0
    )
    messages = [{"role": "user", "content": PROMPT}]
    first = client.chat.completions.create(model=MODEL, messages=messages)
    assert first.choices[0].message.content
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model=MODEL, messages=messages)
    client.close()
    err = caught.value
    assert err.status_code == 429
    # The SDK keeps the `error` object of the body, and reads its type and code.
    assert err.type == "rate_limit_error", err.body
    assert err.code == "rate_limit_exceeded", err.body
    assert "workspace_rpm" in err.body["message"], err.body
    headers = err.response.headers
    assert_retry_after_within_a_minute(headers)
    assert headers["x-ratelimit-limit-requests"] == "1"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"].endswith("s"), headers
    assert headers["x-ratelimit-limit-tokens"] == str(TPM)
    # The first request's tokens were settled and refilled within moments: a count, not a refusal.
    assert 0 <= int(headers["x-ratelimit-remaining-tokens"]) <= TPM, headers
    assert_row_refused_by_workspace_rpm(gateway, limited, headers[REQUEST_ID_HEADER], "chat")


def test_openai_responses_stream_is_refused_before_it_starts_with_rate_limit_error(
    gateway, limited
):
    client = openai.OpenAI(
        api_key=limited.token, base_url=gateway.openai_base_url, max_retries=0, timeout=10.0
    )
    with client.responses.stream(model=MODEL, input=PROMPT) as stream:
        assert stream.get_final_response().output_text
    with pytest.raises(openai.RateLimitError) as caught:
        with client.responses.stream(model=MODEL, input=PROMPT) as stream:
            stream.get_final_response()
    client.close()
    err = caught.value
    assert err.status_code == 429
    assert (err.type, err.code) == ("rate_limit_error", "rate_limit_exceeded"), err.body
    headers = err.response.headers
    assert_retry_after_within_a_minute(headers)
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert_row_refused_by_workspace_rpm(gateway, limited, headers[REQUEST_ID_HEADER], "responses")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_anthropic_sdk_raises_rate_limit_error_with_the_anthropic_body_and_headers(
    gateway, limited, stream
):
    client = anthropic.Anthropic(
        api_key=limited.token, base_url=gateway.anthropic_base_url, max_retries=0, timeout=10.0
    )
    messages = [{"role": "user", "content": PROMPT}]

    def call():
        if stream:
            with client.messages.stream(model=MODEL, max_tokens=64, messages=messages) as s:
                return s.get_final_message()
        return client.messages.create(model=MODEL, max_tokens=64, messages=messages)

    assert call().content[0].text
    with pytest.raises(anthropic.RateLimitError) as caught:
        call()
    client.close()
    err = caught.value
    assert err.status_code == 429
    assert err.body["type"] == "error", err.body
    assert err.body["error"]["type"] == "rate_limit_error", err.body
    assert "workspace_rpm" in err.body["error"]["message"], err.body
    headers = err.response.headers
    assert_retry_after_within_a_minute(headers)
    assert headers["anthropic-ratelimit-requests-limit"] == "1"
    assert headers["anthropic-ratelimit-requests-remaining"] == "0"
    reset = headers["anthropic-ratelimit-requests-reset"]
    assert reset.endswith("Z") and "T" in reset, reset
    assert headers["anthropic-ratelimit-tokens-limit"] == str(TPM)
    assert_row_refused_by_workspace_rpm(gateway, limited, headers[REQUEST_ID_HEADER], "messages")


def test_gemini_sdk_raises_resource_exhausted(gateway, limited):
    client = genai.Client(
        api_key=limited.token,
        http_options=types.HttpOptions(
            base_url=gateway.base_url,
            timeout=10_000,
            retry_options=types.HttpRetryOptions(attempts=1),
        ),
    )
    assert client.models.generate_content(model=MODEL, contents=PROMPT).text
    with pytest.raises(genai.errors.ClientError) as caught:
        client.models.generate_content(model=MODEL, contents=PROMPT)
    client.close()
    err = caught.value
    assert err.code == 429
    assert err.status == "RESOURCE_EXHAUSTED"
    assert "workspace_rpm" in err.message, err.message
    headers = {k.lower(): v for k, v in err.response.headers.items()}
    assert_retry_after_within_a_minute(headers)
    assert_row_refused_by_workspace_rpm(gateway, limited, headers[REQUEST_ID_HEADER], "gemini")
