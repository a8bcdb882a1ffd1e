"""The translation matrix: each official SDK as a client of every dialect (openai for Chat and
Responses, anthropic for Messages, google-genai for Gemini), against a sim channel pinned to
every dialect (the same one as a control, the others translated), streamed and not. The
tests that read the sim-echo summary (written per upstream dialect, Gemini's included) and the
image test run over every pair too; where docs/translation.md refuses a pair by design (an image
URL to a Gemini upstream), the test asserts the 400 naming the field, in the client's dialect.
A streamed cell's stored marks are checked against the preset's scripted instants.

The presets' expected values are in expectations.json, shared with the Node matrix.

The gateway is `translation_gateway` (conftest.py): the public model `via-<upstream>/<preset>`
reaches the sim preset `<preset>` through a channel that is called in `<upstream>` only. Every
expected value below comes from the preset's definition in the sim
(crates/laptime-sim/src/script.rs, `scenario`, and the generated words of
crates/laptime-sim/src/wire/mod.rs), never from what the gateway answered; each test then
checks what the SDK reconstructed and what the gateway stored for the request.
"""

from __future__ import annotations

import base64
import json
import numbers
from dataclasses import dataclass, field, replace
from pathlib import Path

import anthropic
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from conftest import DIALECTS, via

REQUEST_ID_HEADER = "x-laptime-request-id"
MAX_TOKENS = 64
TEMPERATURE = 0.5
SYSTEM = "Answer briefly."
PROMPT = "What is the weather in Paris?"
# A 1×1 transparent PNG.
PNG_BASE64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)
IMAGE_URL = "https://example.com/cat.png"

TOOLS = {
    "get_weather": {"description": "The weather forecast for a place.", "key": "query"},
    "get_time": {"description": "The local time of a place.", "key": "location"},
}

def _matrix(clients, upstreams):
    return [
        pytest.param(client, upstream, stream, id=f"{client}-via-{upstream}-{'stream' if stream else 'whole'}")
        for client in clients
        for upstream in upstreams
        for stream in (True, False)
    ]


MATRIX = _matrix(DIALECTS, DIALECTS)
BODY_DIALECTS = ("chat", "responses", "messages")
# The error tests read each OpenAI and Anthropic SDK's exceptions; a Gemini client's 429 has its
# own test below.
MATRIX_ERRORS = _matrix(BODY_DIALECTS, DIALECTS)


# --- What each preset sends (mirrors the sim's definitions) ---------------------------------


@dataclass(frozen=True)
class Usage:
    """In the sim's terms: `input` excludes cached tokens (Anthropic's convention)."""

    input: int | None  # None: the body the sim was sent, counted (see with_counted_input)
    cache_read: int
    cache_write: int
    output: int
    reasoning: int

    @property
    def input_total(self) -> int:
        return self.input + self.cache_read + self.cache_write


@dataclass(frozen=True)
class Preset:
    text: str = ""
    reasoning: str = ""
    calls: tuple = ()  # (name, arguments)
    stop: str = "end"  # end | tool | max_tokens, in no dialect's words
    usage: Usage | None = None


# The presets' definitions, shared with the Node matrix (tests/sdk-node/translation.test.js).
EXPECTATIONS = json.loads((Path(__file__).parent / "expectations.json").read_text())
_PRESETS = EXPECTATIONS["presets"]
PRESETS = {
    name: Preset(
        text=p["text"] or "",
        reasoning=p["reasoning"],
        calls=tuple((n, a) for n, a in p["calls"]),
        stop=p["stop"],
        usage=Usage(**p["usage"]),
    )
    for name, p in _PRESETS.items()
    if "usage" in p
}
OVERLOAD_TEXT = _PRESETS["sim-overloaded-in-band"]["text"]  # 5 words, then the error
OVERLOAD_MESSAGE = EXPECTATIONS["overload_message"]  # the sim's message for HTTP 529, in every dialect
RATE_LIMIT_MESSAGE = EXPECTATIONS["rate_limit_message"]

# The scripted instants of each preset, in ms from the sim's receipt of the request (see the
# JSON file's comment: first_response = the first effective output, first_text = the first
# visible text, upstream_done = the terminal event).
SCRIPT_MARKS = {name: p["marks"] for name, p in _PRESETS.items()}
# A Gemini upstream sends each functionCall whole, at the instant of its last fragment.
GEMINI_FIRST_CALL_MS = {n: p["gemini_first_call_ms"] for n, p in _PRESETS.items() if "gemini_first_call_ms" in p}
# Real sockets and real time: a mark may be late by scheduling (how late depends on the
# machine's load, so it is not asserted here; crates/laptime-proxy/tests/timeline.rs proves
# exact marks through translation under paused time), but never earlier than the sim sent it.
MARK_EARLY_MS = EXPECTATIONS["mark_early_ms"]


def stop_word(client: str, stop: str) -> str:
    """The client dialect's own word for a preset's ending."""
    return {
        "chat": {"end": "stop", "tool": "tool_calls", "max_tokens": "length"},
        "responses": {"end": "completed", "tool": "completed", "max_tokens": "incomplete:max_output_tokens"},
        "messages": {"end": "end_turn", "tool": "tool_use", "max_tokens": "max_tokens"},
        "gemini": {"end": "STOP", "tool": "STOP", "max_tokens": "MAX_TOKENS"},
    }[client][stop]


def expected_usage(client: str, upstream: str, u: Usage) -> dict:
    """The usage fields the client's SDK shows for preset usage `u` sent by an `upstream` sim:
    OpenAI counts cached tokens in the input, Anthropic does not; Anthropic reports no
    reasoning tokens, so none can reach an OpenAI client from it. Gemini reports no cache
    writes: its prompt count holds them, so from a Gemini upstream they are input, not writes."""
    reasoning = None if upstream == "messages" else u.reasoning
    if upstream == "gemini":
        u = Usage(input=u.input + u.cache_write, cache_read=u.cache_read, cache_write=0,
                  output=u.output, reasoning=u.reasoning)
    if client == "gemini":
        return {
            "prompt_token_count": u.input_total,
            "cached_content_token_count": u.cache_read,
            "candidates_token_count": u.output - (reasoning or 0),
            "thoughts_token_count": reasoning,
        }
    if client == "chat":
        return {
            "prompt_tokens": u.input_total,
            "completion_tokens": u.output,
            "cached_tokens": u.cache_read,
            "cache_write_tokens": u.cache_write,
            "reasoning_tokens": reasoning,
        }
    if client == "responses":
        return {
            "input_tokens": u.input_total,
            "output_tokens": u.output,
            "cached_tokens": u.cache_read,
            "cache_write_tokens": u.cache_write,
            "reasoning_tokens": reasoning,
        }
    return {
        "input_tokens": u.input,
        "output_tokens": u.output,
        "cache_read_input_tokens": u.cache_read,
        "cache_creation_input_tokens": u.cache_write,
    }


def assert_usage(got: dict, expected: dict, at: str) -> None:
    # A count of zero may be absent in one dialect and 0 in another (Chat leaves out a zero
    # cache write, Anthropic always sends it); a non-zero count must be there, exactly.
    for key, value in expected.items():
        seen = got.get(key)
        if not value:
            assert seen in (None, 0), f"{at}: usage {key} = {seen!r}, expected 0 or absent; {got}"
        else:
            assert seen == value, f"{at}: usage {key} = {seen!r}, expected {value}; {got}"


# --- The SDKs, as a customer uses them ------------------------------------------------------


@dataclass
class Got:
    """What one SDK call reconstructed."""

    request_id: str
    text: str = ""
    reasoning: str = ""
    calls: list = field(default_factory=list)  # (name, parsed arguments)
    call_ids: list = field(default_factory=list)
    stop: str | None = None
    usage: dict = field(default_factory=dict)


@pytest.fixture(scope="module")
def openai_client(translation_gateway):
    client = openai.OpenAI(
        api_key=translation_gateway.token,
        base_url=translation_gateway.openai_base_url,
        max_retries=0,
        timeout=10.0,
    )
    yield client
    client.close()


@pytest.fixture(scope="module")
def anthropic_client(translation_gateway):
    client = anthropic.Anthropic(
        api_key=translation_gateway.token,
        base_url=translation_gateway.anthropic_base_url,
        max_retries=0,
        timeout=10.0,
    )
    yield client
    client.close()


@pytest.fixture(scope="module")
def gemini_client(translation_gateway):
    client = genai.Client(
        api_key=translation_gateway.token,
        http_options=genai_types.HttpOptions(
            base_url=translation_gateway.base_url, api_version="v1beta", timeout=10_000
        ),
    )
    yield client
    client.close()


@pytest.fixture
def sdk(openai_client, anthropic_client, gemini_client):
    """`sdk(client_dialect)` returns the function that runs one conversation in that dialect."""

    def pick(client: str):
        return {
            "chat": lambda **kw: run_chat(openai_client, **kw),
            "responses": lambda **kw: run_responses(openai_client, **kw),
            "messages": lambda **kw: run_messages(anthropic_client, **kw),
            "gemini": lambda **kw: run_gemini(gemini_client, **kw),
        }[client]

    return pick


def _extra(obj, name):
    """A field the SDK's types do not declare (kept by its models as an extra)."""
    if obj is None:
        return None
    value = getattr(obj, name, None)
    if value is None and getattr(obj, "model_extra", None):
        value = obj.model_extra.get(name)
    return value


# Conversations, in the dialect-neutral form the runners turn into each SDK's own shapes:
# ("user", [parts]) with parts "text:<s>", "image_url", "image_base64"; ("assistant_calls",
# [(id, name, arguments)]); ("tool_results", [(id, text, is_error)]).
PLAIN = [("user", [f"text:{PROMPT}"])]


def chat_messages(conversation) -> list:
    out = [{"role": "system", "content": SYSTEM}]
    for kind, items in conversation:
        if kind == "user":
            parts = []
            for p in items:
                if p.startswith("text:"):
                    parts.append({"type": "text", "text": p[5:]})
                elif p == "image_url":
                    parts.append({"type": "image_url", "image_url": {"url": IMAGE_URL}})
                elif p == "image_base64":
                    url = f"data:image/png;base64,{PNG_BASE64}"
                    parts.append({"type": "image_url", "image_url": {"url": url}})
            out.append({"role": "user", "content": parts})
        elif kind == "assistant_calls":
            calls = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for i, n, a in items
            ]
            out.append({"role": "assistant", "content": None, "tool_calls": calls})
        elif kind == "tool_results":
            for i, text, is_error in items:
                content = f"Error: {text}" if is_error else text
                out.append({"role": "tool", "tool_call_id": i, "content": content})
    return out


def responses_input(conversation) -> list:
    out = []
    for kind, items in conversation:
        if kind == "user":
            parts = []
            for p in items:
                if p.startswith("text:"):
                    parts.append({"type": "input_text", "text": p[5:]})
                elif p == "image_url":
                    parts.append({"type": "input_image", "image_url": IMAGE_URL, "detail": "auto"})
                elif p == "image_base64":
                    url = f"data:image/png;base64,{PNG_BASE64}"
                    parts.append({"type": "input_image", "image_url": url, "detail": "auto"})
            out.append({"role": "user", "content": parts})
        elif kind == "assistant_calls":
            for i, n, a in items:
                out.append(
                    {"type": "function_call", "call_id": i, "name": n, "arguments": json.dumps(a)}
                )
        elif kind == "tool_results":
            for i, text, is_error in items:
                output = f"Error: {text}" if is_error else text
                out.append({"type": "function_call_output", "call_id": i, "output": output})
    return out


def messages_messages(conversation) -> list:
    out = []
    for kind, items in conversation:
        if kind == "user":
            parts = []
            for p in items:
                if p.startswith("text:"):
                    parts.append({"type": "text", "text": p[5:]})
                elif p == "image_url":
                    parts.append({"type": "image", "source": {"type": "url", "url": IMAGE_URL}})
                elif p == "image_base64":
                    source = {"type": "base64", "media_type": "image/png", "data": PNG_BASE64}
                    parts.append({"type": "image", "source": source})
            out.append({"role": "user", "content": parts})
        elif kind == "assistant_calls":
            blocks = [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in items]
            out.append({"role": "assistant", "content": blocks})
        elif kind == "tool_results":
            blocks = [
                {"type": "tool_result", "tool_use_id": i, "content": text, "is_error": is_error}
                for i, text, is_error in items
            ]
            out.append({"role": "user", "content": blocks})
    return out


def gemini_contents(conversation) -> list:
    """google-genai's own shapes: `Part.from_uri` / `Part.from_bytes` for images, the calls in a
    `model` turn as `function_call` parts, and each result as a `function_response` part (its
    text under `output`, or under `error` for a failed tool) in the next user turn."""
    names = {}
    out = []
    for kind, items in conversation:
        if kind == "user":
            parts = []
            for p in items:
                if p.startswith("text:"):
                    parts.append(genai_types.Part(text=p[5:]))
                elif p == "image_url":
                    parts.append(genai_types.Part.from_uri(file_uri=IMAGE_URL, mime_type="image/png"))
                elif p == "image_base64":
                    parts.append(
                        genai_types.Part.from_bytes(data=base64.b64decode(PNG_BASE64), mime_type="image/png")
                    )
            out.append(genai_types.Content(role="user", parts=parts))
        elif kind == "assistant_calls":
            parts = []
            for i, n, a in items:
                names[i] = n
                parts.append(genai_types.Part(function_call=genai_types.FunctionCall(id=i, name=n, args=a)))
            out.append(genai_types.Content(role="model", parts=parts))
        elif kind == "tool_results":
            parts = [
                genai_types.Part(
                    function_response=genai_types.FunctionResponse(
                        id=i, name=names[i], response={"error": text} if is_error else {"output": text}
                    )
                )
                for i, text, is_error in items
            ]
            out.append(genai_types.Content(role="user", parts=parts))
    return out


def _schema(name: str) -> dict:
    key = TOOLS[name]["key"]
    return {"type": "object", "properties": {key: {"type": "string"}}, "required": [key]}


def run_chat(client, *, model, stream, conversation=PLAIN, tools=()) -> Got:
    params = dict(
        model=model,
        messages=chat_messages(conversation),
        max_completion_tokens=MAX_TOKENS,
        temperature=TEMPERATURE,
    )
    if tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {"name": t, "description": TOOLS[t]["description"], "parameters": _schema(t)},
            }
            for t in tools
        ]
    if stream:
        raw = client.chat.completions.with_raw_response.create(
            stream=True, stream_options={"include_usage": True}, **params
        )
        got = Got(request_id=raw.headers.get(REQUEST_ID_HEADER))
        calls: dict[int, list] = {}
        usage = None
        for chunk in raw.parse():
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                delta = choice.delta
                got.text += delta.content or ""
                got.reasoning += _extra(delta, "reasoning_content") or ""
                for tc in delta.tool_calls or []:
                    call = calls.setdefault(tc.index, [None, None, ""])
                    if tc.id:
                        call[0] = tc.id
                    if tc.function and tc.function.name:
                        call[1] = tc.function.name
                    if tc.function and tc.function.arguments:
                        call[2] += tc.function.arguments
                if choice.finish_reason:
                    got.stop = choice.finish_reason
        for index in sorted(calls):
            call_id, name, arguments = calls[index]
            got.call_ids.append(call_id)
            got.calls.append((name, json.loads(arguments)))
    else:
        raw = client.chat.completions.with_raw_response.create(**params)
        got = Got(request_id=raw.headers.get(REQUEST_ID_HEADER))
        completion = raw.parse()
        message = completion.choices[0].message
        got.text = message.content or ""
        got.reasoning = _extra(message, "reasoning_content") or ""
        for tc in message.tool_calls or []:
            got.call_ids.append(tc.id)
            got.calls.append((tc.function.name, json.loads(tc.function.arguments)))
        got.stop = completion.choices[0].finish_reason
        usage = completion.usage
    if usage is not None:
        prompt = usage.prompt_tokens_details
        completion_details = usage.completion_tokens_details
        got.usage = {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "cached_tokens": prompt.cached_tokens if prompt else None,
            "cache_write_tokens": _extra(prompt, "cache_write_tokens"),
            "reasoning_tokens": completion_details.reasoning_tokens if completion_details else None,
        }
    return got


def _responses_got(got: Got, response) -> Got:
    for item in response.output:
        if item.type == "reasoning":
            got.reasoning += "".join(s.text for s in item.summary or [])
        elif item.type == "function_call":
            got.call_ids.append(item.call_id)
            got.calls.append((item.name, json.loads(item.arguments)))
    got.text = response.output_text
    got.stop = response.status
    if response.status == "incomplete" and response.incomplete_details:
        got.stop = f"incomplete:{response.incomplete_details.reason}"
    u = response.usage
    if u is not None:
        got.usage = {
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cached_tokens": u.input_tokens_details.cached_tokens if u.input_tokens_details else None,
            "cache_write_tokens": _extra(u.input_tokens_details, "cache_write_tokens"),
            "reasoning_tokens": u.output_tokens_details.reasoning_tokens
            if u.output_tokens_details
            else None,
        }
    return got


def run_responses(client, *, model, stream, conversation=PLAIN, tools=()) -> Got:
    params = dict(
        model=model,
        instructions=SYSTEM,
        input=responses_input(conversation),
        max_output_tokens=MAX_TOKENS,
        temperature=TEMPERATURE,
    )
    if tools:
        params["tools"] = [
            {
                "type": "function",
                "name": t,
                "description": TOOLS[t]["description"],
                "parameters": _schema(t),
                "strict": False,
            }
            for t in tools
        ]
    raw = client.responses.with_raw_response.create(stream=stream, **params)
    got = Got(request_id=raw.headers.get(REQUEST_ID_HEADER))
    if not stream:
        return _responses_got(got, raw.parse())
    events = list(raw.parse())
    types = [e.type for e in events]
    terminal = [e for e in events if e.type in ("response.completed", "response.incomplete")]
    assert len(terminal) == 1, f"one terminal event expected: {types}"
    assert types[0] == "response.created", types
    assert types[-1] == terminal[0].type, types
    _responses_got(got, terminal[0].response)
    # The deltas the SDK yielded add up to what the terminal response says.
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == got.text, f"text deltas {deltas!r} != output_text {got.text!r}"
    reasoning = "".join(
        e.delta for e in events if e.type == "response.reasoning_summary_text.delta"
    )
    assert reasoning == got.reasoning, f"reasoning deltas {reasoning!r} != {got.reasoning!r}"
    return got


def run_messages(client, *, model, stream, conversation=PLAIN, tools=()) -> Got:
    params = dict(
        model=model,
        system=SYSTEM,
        messages=messages_messages(conversation),
        max_tokens=MAX_TOKENS,
    )
    if tools:
        params["tools"] = [
            {"name": t, "description": TOOLS[t]["description"], "input_schema": _schema(t)}
            for t in tools
        ]
    if stream:
        with client.messages.stream(**params) as s:
            got = Got(request_id=s.response.headers.get(REQUEST_ID_HEADER))
            streamed_text = "".join(s.text_stream)
            message = s.get_final_message()
    else:
        raw = client.messages.with_raw_response.create(**params)
        got = Got(request_id=raw.headers.get(REQUEST_ID_HEADER))
        message = raw.parse()
        streamed_text = None
    for block in message.content:
        if block.type == "text":
            got.text += block.text
        elif block.type == "thinking":
            got.reasoning += block.thinking
        elif block.type == "tool_use":
            got.call_ids.append(block.id)
            got.calls.append((block.name, block.input))
    if streamed_text is not None:
        assert streamed_text == got.text, f"text_stream {streamed_text!r} != {got.text!r}"
    got.stop = message.stop_reason
    u = message.usage
    got.usage = {
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_input_tokens": u.cache_read_input_tokens,
        "cache_creation_input_tokens": u.cache_creation_input_tokens,
    }
    return got


def gemini_config(tools=()) -> genai_types.GenerateContentConfig:
    declarations = [
        genai_types.FunctionDeclaration(
            name=t, description=TOOLS[t]["description"], parameters_json_schema=_schema(t)
        )
        for t in tools
    ]
    return genai_types.GenerateContentConfig(
        system_instruction=SYSTEM,
        max_output_tokens=MAX_TOKENS,
        temperature=TEMPERATURE,
        tools=[genai_types.Tool(function_declarations=declarations)] if declarations else None,
        automatic_function_calling=genai_types.AutomaticFunctionCallingConfig(disable=True),
    )


def _gemini_request_id(response) -> str | None:
    http = getattr(response, "sdk_http_response", None)
    headers = getattr(http, "headers", None) or {}
    return {k.lower(): v for k, v in headers.items()}.get(REQUEST_ID_HEADER)


def run_gemini(client, *, model, stream, conversation=PLAIN, tools=()) -> Got:
    contents = gemini_contents(conversation)
    config = gemini_config(tools)
    if stream:
        responses = list(
            client.models.generate_content_stream(model=model, contents=contents, config=config)
        )
    else:
        responses = [client.models.generate_content(model=model, contents=contents, config=config)]
    got = Got(request_id=_gemini_request_id(responses[0]))
    for r in responses:
        for candidate in (r.candidates or [])[:1]:
            for part in (candidate.content.parts if candidate.content else None) or []:
                if part.function_call:
                    got.call_ids.append(part.function_call.id)
                    got.calls.append((part.function_call.name, dict(part.function_call.args or {})))
                elif part.thought:
                    got.reasoning += part.text or ""
                else:
                    got.text += part.text or ""
            if candidate.finish_reason:
                got.stop = candidate.finish_reason.value
    u = responses[-1].usage_metadata
    if u is not None:
        got.usage = {
            "prompt_token_count": u.prompt_token_count,
            "cached_content_token_count": u.cached_content_token_count,
            "candidates_token_count": u.candidates_token_count,
            "thoughts_token_count": u.thoughts_token_count,
        }
    return got


# --- The stored record ----------------------------------------------------------------------


def _is_ms(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and value >= 0


def assert_row(gw, request_id, *, client, upstream, stream, model, outcome="completed",
               usage: Usage | None = None, has_text=True, status=200) -> dict:
    assert request_id and request_id.startswith("req_"), f"bad request id: {request_id!r}"
    row = gw.stored_request(request_id)
    at = f"row {request_id}"
    assert row["model"] == model, (at, row)
    assert row["dialect"] == client, (at, row)
    assert row["client_dialect"] == client, (at, row)
    assert row["upstream_dialect"] == upstream, (at, row)
    assert row["translated"] is (client != upstream), (at, row)
    assert row["stream"] is stream, (at, row)
    assert row["status"] == status, (at, row)
    assert row["outcome"] == outcome, (at, row)
    if usage is not None:
        # Recorded in the upstream's terms: Gemini reports no cache writes.
        writes = 0 if upstream == "gemini" else usage.cache_write
        assert row["input_tokens"] == usage.input_total, (at, row)
        assert row["output_tokens"] == usage.output, (at, row)
        assert (row["cache_read_tokens"] or 0) == usage.cache_read, (at, row)
        assert (row["cache_write_tokens"] or 0) == writes, (at, row)
    timing = row["other"]["timing"]
    assert _is_ms(timing["upstream_headers_ms"]), (at, timing)
    if status == 200 and stream:
        # The stream's marks, stamped in the upstream's dialect.
        assert _is_ms(timing["first_sse_event_ms"]), (at, timing)
        assert _is_ms(timing["first_response_ms"]), (at, timing)
        assert timing["first_response_ms"] >= timing["first_sse_event_ms"], (at, timing)
        if has_text:
            assert _is_ms(timing["first_text_delta_ms"]), (at, timing)
            assert timing["first_text_delta_ms"] >= timing["first_response_ms"], (at, timing)
        else:
            assert timing["first_text_delta_ms"] is None, (at, timing)
        assert_marks_equal_the_script(row, model.split(".", 1)[1], upstream, at)
    elif status == 200:
        # A whole answer has no stream marks; its end is the upstream's.
        assert _is_ms(timing["upstream_done_ms"]), (at, timing)
    return row


def assert_marks_equal_the_script(row: dict, preset: str, upstream: str, at: str) -> None:
    """A streamed row's marks are the preset's scripted instants, give or take scheduling.

    `other.timing`'s milestones are offsets from t0, the request's arrival (views.rs
    `TimingView`); the script's are from the sim's receipt of the attempt, which is after its
    dispatch t1. The row's `upstream_ms` is upstream_done − t1, so t1 = upstream_done_ms −
    upstream_ms, and each mark from the dispatch is the mark − t1."""
    timing = row["other"]["timing"]
    assert _is_ms(timing["upstream_done_ms"]) and _is_ms(row["upstream_ms"]), (at, row)
    dispatch = timing["upstream_done_ms"] - row["upstream_ms"]
    assert dispatch >= -0.01, (at, "dispatch before arrival", row)
    expected = dict(SCRIPT_MARKS[preset])
    if upstream == "gemini" and preset in GEMINI_FIRST_CALL_MS:
        expected["first_response_ms"] = GEMINI_FIRST_CALL_MS[preset]
    got = {k: None if timing[k] is None else round(timing[k] - dispatch, 3) for k in expected}
    at = f"{at}: marks from dispatch {got}, scripted {expected}"
    seen = [got[k] for k in expected if got[k] is not None]
    assert seen == sorted(seen), f"{at}: out of order"
    for key, want in expected.items():
        if want is None:
            assert got[key] is None, f"{at}: {key}"
            continue
        assert got[key] is not None, f"{at}: {key} missing"
        assert got[key] >= want - MARK_EARLY_MS, f"{at}: {key} early"


def with_counted_input(gw, preset: Preset, request_id: str, model: str, relayed: bool) -> Preset:
    """A preset whose script pins no input (`sim-fast`) reports the body the sim was sent, a
    token per four bytes rounded up. Untranslated, that is the client's body with the mapped
    model name spliced in (its size is the row's `bytes_in`); translated, the test cannot see it,
    so the count the sim answered (the row's) stands, and the SDK must get the same."""
    if preset.usage is None or preset.usage.input is not None:
        return preset
    row = gw.stored_request(request_id)
    counted = row["input_tokens"]
    assert counted >= 1, row
    if relayed:
        sent = row["bytes_in"] - len(model) + len(preset_name_of(model))
        assert counted == -(-sent // 4), row
    return replace(preset, usage=replace(preset.usage, input=counted))


def preset_name_of(model: str) -> str:
    """The preset a matrix model name maps to (`via`'s inverse)."""
    return next(p for p in PRESETS if any(model == via(u, p) for u in DIALECTS))


def check_answer(gw, got: Got, preset_name: str, *, client, upstream, stream) -> None:
    preset = PRESETS[preset_name]
    at = f"{client} via {upstream}, stream={stream}"
    assert got.text == preset.text, at
    assert got.reasoning == preset.reasoning, at
    assert got.calls == list(preset.calls), at
    if not (client == upstream == "gemini"):
        # Untranslated, Gemini's calls carry no id (the sim sends none, as Google does).
        assert all(got.call_ids) and len(set(got.call_ids)) == len(got.call_ids), (at, got.call_ids)
    assert got.stop == stop_word(client, preset.stop), at
    # Gemini's model goes in the path and its body is not the client's byte for byte: only the
    # others are checked against the client's body.
    relayed = client == upstream != "gemini"
    preset = with_counted_input(gw, preset, got.request_id, via(upstream, preset_name), relayed)
    assert_usage(got.usage, expected_usage(client, upstream, preset.usage), at)
    outcome = "incomplete" if preset.stop == "max_tokens" else "completed"
    assert_row(
        gw, got.request_id, client=client, upstream=upstream, stream=stream,
        model=via(upstream, preset_name), outcome=outcome, usage=preset.usage,
        has_text=bool(preset.text),
    )


# --- The matrix -----------------------------------------------------------------------------


@pytest.mark.parametrize("client,upstream,stream", MATRIX)
def test_plain_text(translation_gateway, sdk, client, upstream, stream):
    got = sdk(client)(model=via(upstream, "sim-fast"), stream=stream)
    check_answer(translation_gateway, got, "sim-fast", client=client, upstream=upstream, stream=stream)


@pytest.mark.parametrize("client,upstream,stream", MATRIX)
def test_reasoning_then_text(translation_gateway, sdk, client, upstream, stream):
    got = sdk(client)(model=via(upstream, "sim-reasoning"), stream=stream)
    check_answer(
        translation_gateway, got, "sim-reasoning", client=client, upstream=upstream, stream=stream
    )


@pytest.mark.parametrize("client,upstream,stream", MATRIX)
def test_tool_call_only(translation_gateway, sdk, client, upstream, stream):
    got = sdk(client)(model=via(upstream, "sim-tool-call"), stream=stream, tools=("get_weather",))
    check_answer(
        translation_gateway, got, "sim-tool-call", client=client, upstream=upstream, stream=stream
    )


@pytest.mark.parametrize("client,upstream,stream", MATRIX)
def test_parallel_tool_calls(translation_gateway, sdk, client, upstream, stream):
    got = sdk(client)(
        model=via(upstream, "sim-parallel-tools"), stream=stream, tools=("get_weather", "get_time")
    )
    check_answer(
        translation_gateway, got, "sim-parallel-tools", client=client, upstream=upstream, stream=stream
    )


@pytest.mark.parametrize("client,upstream,stream", MATRIX)
def test_incomplete_at_max_tokens(translation_gateway, sdk, client, upstream, stream):
    got = sdk(client)(model=via(upstream, "sim-max-tokens"), stream=stream)
    check_answer(
        translation_gateway, got, "sim-max-tokens", client=client, upstream=upstream, stream=stream
    )


def run_echo(gw, sdk, client, upstream, stream, conversation, tools=()) -> dict:
    """Runs `conversation` against sim-echo; checks the answer like any other and returns the
    summary of what the upstream received, in its own dialect."""
    got = sdk(client)(
        model=via(upstream, "sim-echo"), stream=stream, conversation=conversation, tools=tools
    )
    at = f"{client} via {upstream}, stream={stream}"
    assert got.stop == stop_word(client, "end"), at
    assert_usage(got.usage, expected_usage(client, upstream, PRESETS["sim-echo"].usage), at)
    assert_row(
        gw, got.request_id, client=client, upstream=upstream, stream=stream,
        model=via(upstream, "sim-echo"), usage=PRESETS["sim-echo"].usage,
    )
    summary = json.loads(got.text)
    # What every request of these tests says, in any upstream's words. A Gemini upstream's
    # model and stream are in the URL, so its summary says null and false.
    assert summary["dialect"] == upstream, (at, summary)
    assert summary["model"] == (None if upstream == "gemini" else "sim-echo"), (at, summary)
    assert summary["stream"] is (stream and upstream != "gemini"), (at, summary)
    assert summary["system"] == SYSTEM, (at, summary)
    assert summary["max_tokens"] == MAX_TOKENS, (at, summary)
    # This Anthropic SDK has no `temperature` parameter; the OpenAI clients send one.
    temperature = None if client == "messages" else TEMPERATURE
    assert summary["temperature"] == temperature, (at, summary)
    if upstream == "chat" and stream:
        assert summary["include_usage"] is True, (at, summary)
    return summary


@pytest.mark.parametrize("client,upstream,stream", MATRIX)
def test_text_after_tool_results_reaches_the_upstream_in_its_own_shape(
    translation_gateway, sdk, client, upstream, stream
):
    conversation = [
        ("user", [f"text:{PROMPT} And what time is it in Tokyo?"]),
        (
            "assistant_calls",
            [
                ("call_1", "get_weather", {"query": "Paris"}),
                ("call_2", "get_time", {"location": "Tokyo"}),
            ],
        ),
        ("tool_results", [("call_1", "22 C and sunny", False), ("call_2", "no such city", True)]),
    ]
    summary = run_echo(
        translation_gateway, sdk, client, upstream, stream, conversation,
        tools=("get_weather", "get_time"),
    )
    calls = ["tool_call:get_weather:call_1", "tool_call:get_time:call_2"]
    # The error flag: Anthropic's is_error reaches an OpenAI upstream as an `Error: ` text
    # (docs/translation.md), and that text passes between the OpenAI dialects as it is; an
    # OpenAI client has no flag, so its `Error: ` text reaches Anthropic as plain text, not as
    # is_error (laptime-core translate::request tests: "OpenAI clients have no error flag"),
    # nor as Gemini's `response.error`. A Gemini client's `response.error` is the flag itself.
    flagged = client in ("messages", "gemini") or upstream in ("chat", "responses")
    error = ":error" if flagged else ""
    results = ["tool_result:call_1", "tool_result:call_2" + error]
    user = {"role": "user", "parts": ["text"]}
    expected_turns = {
        "chat": [
            user,
            {"role": "assistant", "parts": calls},
            {"role": "tool", "parts": results[:1]},
            {"role": "tool", "parts": results[1:]},
        ],
        "responses": [
            user,
            {"item": "function_call", "parts": calls[:1]},
            {"item": "function_call", "parts": calls[1:]},
            {"item": "function_call_output", "parts": results[:1]},
            {"item": "function_call_output", "parts": results[1:]},
        ],
        # Anthropic: every result of a turn in the next user message.
        "messages": [user, {"role": "assistant", "parts": calls}, {"role": "user", "parts": results}],
        # Gemini: the calls in a `model` turn, every result (named by its call) in the next
        # user turn.
        "gemini": [
            user,
            {"role": "model", "parts": calls},
            {
                "role": "user",
                "parts": ["tool_result:get_weather:call_1", "tool_result:get_time:call_2" + error],
            },
        ],
    }[upstream]
    assert summary["turns"] == expected_turns, summary
    assert summary["tools"] == ["get_weather", "get_time"], summary


@pytest.mark.parametrize("client,upstream,stream", MATRIX)
def test_image_input_by_url_and_base64_reaches_the_upstream(
    translation_gateway, sdk, client, upstream, stream
):
    if upstream == "gemini" and client != "gemini":
        # An image URL cannot be carried to Gemini (test below); its base64 image can.
        conversation = [("user", ["text:What is in this picture?", "image_base64"])]
        parts = ["text", "image:base64"]
    else:
        conversation = [("user", ["text:What is in these two pictures?", "image_url", "image_base64"])]
        parts = ["text", "image:url", "image:base64"]
    summary = run_echo(translation_gateway, sdk, client, upstream, stream, conversation)
    assert summary["turns"] == [{"role": "user", "parts": parts}], summary
    assert summary["tools"] in (None, []), summary


# Where each client wrote the URL of the first user message's second part (Chat's messages[0]
# is the system message).
IMAGE_URL_FIELD = {
    "chat": "messages[1].content[1].image_url.url",
    "responses": "input[0].content[1].image_url",
    "messages": "messages[0].content[1].source",  # the url source as a whole
}


@pytest.mark.parametrize("client", BODY_DIALECTS)
@pytest.mark.parametrize("stream", (True, False), ids=("stream", "whole"))
def test_an_image_url_to_a_gemini_upstream_is_refused_naming_the_field(
    translation_gateway, sdk, client, stream
):
    """docs/translation.md: an image by URL is refused for a Gemini upstream (`fileData` needs a
    MIME type): a 400 in the client's dialect whose message names the field."""
    conversation = [("user", ["text:What is in these two pictures?", "image_url", "image_base64"])]
    expected = anthropic.BadRequestError if client == "messages" else openai.BadRequestError
    with pytest.raises(expected) as excinfo:
        sdk(client)(model=via("gemini", "sim-echo"), stream=stream, conversation=conversation)
    err = excinfo.value
    assert err.status_code == 400, err
    body = err.response.json()
    assert_error_body(client, body, "invalid_request_error")
    field = IMAGE_URL_FIELD[client]
    assert f"`{field}` cannot be carried" in body["error"]["message"], body


# --- Errors ---------------------------------------------------------------------------------


def assert_error_body(client: str, body: dict, anthropic_type: str) -> None:
    """The error body is in the client's dialect: Anthropic's `{"type":"error","error":{type,
    message}}`, or OpenAI's `{"error":{message,type,param,code}}` (no top-level `type`)."""
    if client == "messages":
        assert body.get("type") == "error", body
        assert body["error"]["type"] == anthropic_type, body
    else:
        assert "type" not in body, f"an Anthropic-shaped error reached an OpenAI client: {body}"
        assert {"message", "type", "code"} <= set(body["error"]), body


def _raise_for(client: str, model: str, stream: bool, openai_client, anthropic_client):
    if client == "chat":
        return openai_client.chat.completions.create(
            model=model, messages=chat_messages(PLAIN), max_completion_tokens=MAX_TOKENS, stream=stream
        )
    if client == "responses":
        return openai_client.responses.create(
            model=model, input=responses_input(PLAIN), max_output_tokens=MAX_TOKENS, stream=stream
        )
    return anthropic_client.messages.create(
        model=model, messages=messages_messages(PLAIN), max_tokens=MAX_TOKENS, stream=stream
    )


@pytest.mark.parametrize("client,upstream,stream", MATRIX_ERRORS)
def test_an_upstream_429_raises_rate_limit_error(
    translation_gateway, openai_client, anthropic_client, client, upstream, stream
):
    model = via(upstream, "sim-rate-limited")
    expected = anthropic.RateLimitError if client == "messages" else openai.RateLimitError
    with pytest.raises(expected) as excinfo:
        _raise_for(client, model, stream, openai_client, anthropic_client)
    err = excinfo.value
    assert err.status_code == 429
    assert RATE_LIMIT_MESSAGE in str(err), str(err)
    body = err.response.json()
    assert_error_body(client, body, "rate_limit_error")
    assert body["error"]["message"].startswith(RATE_LIMIT_MESSAGE), body
    assert err.response.headers.get("retry-after") == "1", dict(err.response.headers)
    assert_row(
        translation_gateway, err.response.headers.get(REQUEST_ID_HEADER), client=client,
        upstream=upstream, stream=stream, model=model, outcome="upstream_error", status=429,
    )


@pytest.mark.parametrize("client,upstream,stream", MATRIX_ERRORS)
def test_an_in_band_overload_error(
    translation_gateway, openai_client, anthropic_client, client, upstream, stream
):
    model = via(upstream, "sim-overloaded-in-band")
    if not stream:
        # Not streamed, the sim answers HTTP 529 with the overload error. 529 is Anthropic's
        # alone: translated for an OpenAI client it is OpenAI's overload status, 503
        # (laptime-core translate::stream::error); untranslated it is the sim's own.
        expected = anthropic.InternalServerError if client == "messages" else openai.InternalServerError
        status = 529 if client == "messages" or client == upstream else 503
        with pytest.raises(expected) as excinfo:
            _raise_for(client, model, stream, openai_client, anthropic_client)
        assert excinfo.value.status_code == status
        assert OVERLOAD_MESSAGE in str(excinfo.value), str(excinfo.value)
        assert_error_body(client, excinfo.value.response.json(), "overloaded_error")
        assert_row(
            translation_gateway, excinfo.value.response.headers.get(REQUEST_ID_HEADER),
            client=client, upstream=upstream, stream=stream, model=model,
            outcome="upstream_error", status=status,
        )
        return

    text = ""
    if client == "messages":
        # The Anthropic SDK raises on `event: error`, after the text it already yielded.
        with pytest.raises(anthropic.APIStatusError) as excinfo:
            with anthropic_client.messages.stream(
                model=model, messages=messages_messages(PLAIN), max_tokens=MAX_TOKENS
            ) as s:
                request_id = s.response.headers.get(REQUEST_ID_HEADER)
                for t in s.text_stream:
                    text += t
        assert excinfo.value.body["error"]["type"] == "overloaded_error", excinfo.value.body
        assert OVERLOAD_MESSAGE in str(excinfo.value)
    elif client == "chat":
        # The OpenAI SDK raises on a chunk carrying `error`.
        raw = openai_client.chat.completions.with_raw_response.create(
            model=model, messages=chat_messages(PLAIN), max_completion_tokens=MAX_TOKENS,
            stream=True, stream_options={"include_usage": True},
        )
        request_id = raw.headers.get(REQUEST_ID_HEADER)
        finish = []
        with pytest.raises(openai.APIError) as excinfo:
            for chunk in raw.parse():
                for c in chunk.choices:
                    text += c.delta.content or ""
                    finish += [c.finish_reason] if c.finish_reason else []
        assert OVERLOAD_MESSAGE in str(excinfo.value), str(excinfo.value)
        assert finish == [], "no finish reason before the error"
    else:
        # The Responses SDK raises on an `error` event that nests its `error` object, and
        # yields one that carries code and message flat; either way no completed response.
        raw = openai_client.responses.with_raw_response.create(
            model=model, input=responses_input(PLAIN), max_output_tokens=MAX_TOKENS, stream=True
        )
        request_id = raw.headers.get(REQUEST_ID_HEADER)
        events = []
        raised = None
        try:
            for e in raw.parse():
                events.append(e)
        except openai.APIError as err:
            raised = err
        types = [e.type for e in events]
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert "response.completed" not in types and "response.incomplete" not in types, types
        if raised is not None:
            assert OVERLOAD_MESSAGE in str(raised), str(raised)
        else:
            errors = [e for e in events if e.type in ("error", "response.failed")]
            assert errors, f"neither raised nor yielded an error: {types}"
            first = errors[0]
            message = first.message if first.type == "error" else first.response.error.message
            assert OVERLOAD_MESSAGE in message, message
    assert text == OVERLOAD_TEXT
    assert_row(
        translation_gateway, request_id, client=client, upstream=upstream, stream=stream,
        model=model, outcome="upstream_error",
    )


@pytest.mark.parametrize("upstream", DIALECTS)
@pytest.mark.parametrize("stream", (True, False), ids=("stream", "whole"))
def test_a_gemini_client_gets_an_overload_as_googles_error(translation_gateway, gemini_client, upstream, stream):
    """google-genai raises `errors.ServerError` for a 5xx status and, streamed, for a chunk that
    starts `{"error":` (`_api_client.request_streamed` calls `APIError.raise_error` with the
    chunk's code), after yielding the chunks before it. Translated, the overload is Google's
    503 UNAVAILABLE (the status word from the HTTP status, docs/translation.md); untranslated
    it is the sim's own: code 529, whose word `google_status` makes INTERNAL."""
    model = via(upstream, "sim-overloaded-in-band")
    code, word = (529, "INTERNAL") if upstream == "gemini" else (503, "UNAVAILABLE")
    contents = gemini_contents(PLAIN)
    text, finish, request_id = "", [], None
    with pytest.raises(genai_errors.ServerError) as excinfo:
        if stream:
            for r in gemini_client.models.generate_content_stream(
                model=model, contents=contents, config=gemini_config()
            ):
                request_id = request_id or _gemini_request_id(r)
                for candidate in (r.candidates or [])[:1]:
                    for part in (candidate.content.parts if candidate.content else None) or []:
                        text += part.text or ""
                    finish += [candidate.finish_reason] if candidate.finish_reason else []
        else:
            gemini_client.models.generate_content(model=model, contents=contents, config=gemini_config())
    err = excinfo.value
    at = f"gemini via {upstream}, stream={stream}: {err}"
    assert err.code == code, at
    assert err.status == word, at
    assert OVERLOAD_MESSAGE in (err.message or ""), at
    headers = {k.lower(): v for k, v in (getattr(err.response, "headers", None) or {}).items()}
    request_id = request_id or headers.get(REQUEST_ID_HEADER)
    if stream:
        assert text == OVERLOAD_TEXT, at
        assert finish == [], f"{at}: no finish reason before the error"
    assert_row(
        translation_gateway, request_id, client="gemini", upstream=upstream, stream=stream,
        model=model, outcome="upstream_error", status=200 if stream else code,
    )


@pytest.mark.parametrize("upstream", DIALECTS)
@pytest.mark.parametrize("stream", (True, False), ids=("stream", "whole"))
def test_a_gemini_client_gets_googles_429(translation_gateway, gemini_client, upstream, stream):
    model = via(upstream, "sim-rate-limited")
    contents = [genai_types.Content(role="user", parts=[genai_types.Part(text=PROMPT)])]
    with pytest.raises(genai_errors.ClientError) as excinfo:
        if stream:
            list(gemini_client.models.generate_content_stream(
                model=model, contents=contents, config=gemini_config()))
        else:
            gemini_client.models.generate_content(model=model, contents=contents, config=gemini_config())
    err = excinfo.value
    assert err.code == 429, err
    assert err.status == "RESOURCE_EXHAUSTED", err
    assert RATE_LIMIT_MESSAGE in (err.message or ""), err
