"""The provider endpoints besides the model calls, judged by the official Python SDKs (openai,
anthropic, google-genai), unmodified, against the real gateway binary.

One `laptime sim` process stands in for every provider: the gateway (conftest's
`_run_gateway`, with its own config file) has a channel of each provider kind on it, told apart
by their keys (the sim keeps files, batches and stored responses per key, so two keys on one sim
are two providers):

  oa-a    openai, one key, `objects = true`: the calls that name no model (uploads, listings)
  oa-b    openai, two keys (`api_key_envs`), taken in turn
  az      azure-openai with `api_version`: deployment URLs, the key in `api-key`
  compat  openai-compatible, a model mapped to another upstream name
  claude  anthropic
  gem     gemini

Every test checks what the SDK made of the answer, what the sim received (`GET /sim/requests`:
path and query, which credential header with which key, the body's size and hash) and what the
gateway recorded (`GET /api/requests/{id}`: endpoint, channel, provider, key index, tokens,
bytes, and nulls where a record has nothing to say). The expected values come from the sim's
definitions (crates/laptime-sim/src/endpoints/*.rs, crates/laptime-sim/src/tokens.rs: a token
is ⌈bytes / 4⌉ of every string), never from what the gateway answered.
"""

from __future__ import annotations

import array
import base64
import json
import math
import numbers
import signal
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass

import anthropic
import httpx2
import openai
import pytest
from google import genai
from google.genai import types as genai_types

from conftest import _run_gateway, laptime_binary

REQUEST_ID = "x-laptime-request-id"
SIM_PREFIX = "laptime sim listening on "

# The provider keys, by environment variable; the gateway reads them at start.
KEYS = {
    "LT_EP_KEY_A": "sk-sim-oa-a",
    "LT_EP_KEY_B0": "sk-sim-oa-b0",
    "LT_EP_KEY_B1": "sk-sim-oa-b1",
    "LT_EP_KEY_AZ": "sim-azure-key",
    "LT_EP_KEY_C": "sk-sim-compat",
    "LT_EP_KEY_AN": "sk-ant-sim",
    "LT_EP_KEY_G": "sim-gemini-key",
}
KEY_A = KEYS["LT_EP_KEY_A"]
KEYS_B = [KEYS["LT_EP_KEY_B0"], KEYS["LT_EP_KEY_B1"]]
KEY_AZ = KEYS["LT_EP_KEY_AZ"]
KEY_C = KEYS["LT_EP_KEY_C"]
KEY_AN = KEYS["LT_EP_KEY_AN"]
KEY_G = KEYS["LT_EP_KEY_G"]
AZURE_API_VERSION = "2024-10-21"


def endpoints_config(sim: str) -> str:
    return f"""
[[channels]]
name = "oa-a"
provider = "openai"
base_url = "{sim}/v1"
api_key_env = "LT_EP_KEY_A"
objects = true
models = ["text-embedding-3-small", "sim-fast", "tts-1"]

[[channels]]
name = "oa-b"
provider = "openai"
base_url = "{sim}/v1"
api_key_envs = ["LT_EP_KEY_B0", "LT_EP_KEY_B1"]
models = ["sim-fast", "whisper-1", "omni-moderation-latest"]

[[channels]]
name = "az"
provider = "azure-openai"
base_url = "{sim}"
api_key_env = "LT_EP_KEY_AZ"
api_version = "{AZURE_API_VERSION}"
models = {{ "az-emb" = "emb-deploy", "az-chat" = "sim-fast", "az-whisper" = "whisper-deploy" }}

[[channels]]
name = "compat"
provider = "openai-compatible"
base_url = "{sim}/v1"
api_key_env = "LT_EP_KEY_C"
models = {{ "compat-emb" = "text-embedding-3-large", "compat-stt" = "whisper-1" }}

[[channels]]
name = "claude"
provider = "anthropic"
base_url = "{sim}"
api_key_env = "LT_EP_KEY_AN"
models = ["claude-count"]

[[channels]]
name = "gem"
provider = "gemini"
base_url = "{sim}"
api_key_env = "LT_EP_KEY_G"
models = ["text-embedding-004"]
"""


def tokens_of(*texts: str) -> int:
    """The sim's token rule: ⌈UTF-8 bytes / 4⌉ per string."""
    return sum(math.ceil(len(t.encode()) / 4) for t in texts)


def is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def f32(values) -> list[float]:
    """Values as the float32s they stand for (a float JSON number is a float32 printed)."""
    return array.array("f", values).tolist()


# --- The sim process ---------------------------------------------------------------------------


@dataclass
class Sim:
    url: str  # http://127.0.0.1:PORT

    def requests(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.url}/sim/requests", timeout=5) as r:
            return json.loads(r.read())

    def mark(self) -> str:
        """The id of the newest request the sim has received ('' for none); ids are
        `simreq_` and 16 hex digits, counting up, so later ones sort after it."""
        log = self.requests()
        return log[-1]["request_id"] if log else ""

    def since(self, mark: str, expect: int = 1) -> list[dict]:
        """The requests received after `mark`, oldest first; waits (briefly) for `expect` of
        them, as an upload is logged once its body has been read."""
        deadline = time.monotonic() + 3
        while True:
            seen = [r for r in self.requests() if r["request_id"] > mark]
            if len(seen) >= expect or time.monotonic() > deadline:
                return seen

    def one_since(self, mark: str) -> dict:
        seen = self.since(mark)
        assert len(seen) == 1, f"expected exactly one upstream request, the sim saw {seen}"
        return seen[0]


@pytest.fixture(scope="session")
def sim():
    proc = subprocess.Popen(
        [str(laptime_binary()), "sim", "--listen", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        bufsize=1,
    )
    found: dict[str, str] = {}
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not ready.is_set() and line.startswith(SIM_PREFIX):
                found["url"] = line[len(SIM_PREFIX):].strip().rstrip("/")
                ready.set()
        ready.set()

    threading.Thread(target=pump, name="laptime-sim-stdout", daemon=True).start()
    ready.wait(timeout=20)
    if "url" not in found:
        proc.kill()
        proc.wait(timeout=5)
        pytest.fail(f"laptime sim did not print '{SIM_PREFIX}…' (exit {proc.returncode})", pytrace=False)
    try:
        yield Sim(found["url"])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture(scope="session")
def gw(tmp_path_factory, sim):
    yield from _run_gateway(tmp_path_factory, endpoints_config(sim.url), extra_env=KEYS)


@pytest.fixture(scope="module")
def oai(gw):
    client = openai.OpenAI(api_key=gw.token, base_url=gw.openai_base_url, max_retries=0, timeout=15.0)
    yield client
    client.close()


@pytest.fixture(scope="module")
def claude(gw):
    client = anthropic.Anthropic(api_key=gw.token, base_url=gw.anthropic_base_url, max_retries=0, timeout=15.0)
    yield client
    client.close()


def row_of(gw, headers) -> dict:
    request_id = {k.lower(): v for k, v in dict(headers).items()}.get(REQUEST_ID, "")
    assert request_id.startswith("req_"), f"no {REQUEST_ID} header in {dict(headers)!r}"
    row = gw.stored_request(request_id)
    assert row["request_id"] == request_id
    return row


def assert_server_timing(headers) -> None:
    timing = {k.lower(): v for k, v in dict(headers).items()}.get("server-timing", "")
    assert timing.startswith("upstream;dur="), f"Server-Timing {timing!r}"
    assert float(timing.split("dur=", 1)[1].split(",")[0].split(";")[0]) >= 0


def assert_no_generation_marks(row: dict) -> None:
    """An endpoint answer that is not a model's generation has no stream marks."""
    timing = row["other"]["timing"]
    for mark in ("first_text_delta_ms", "first_sse_event_ms", "first_response_ms"):
        assert timing.get(mark) is None, f"{mark} in {timing}"
    assert row["text_delta_count"] == 0, row


def assert_served(row: dict, *, endpoint: str, channel: str, provider: str, key_index=None) -> None:
    assert row["outcome"] == "completed", row
    assert row["status"] == 200, row
    assert row["endpoint"] == endpoint, row
    assert row["channel"] == channel, row
    assert row["provider"] == provider, row
    assert row["key_index"] == key_index, row
    assert row["error_class"] is None and row["fault"] is None, row
    assert row["failover_count"] == 0, row
    assert is_number(row["ttft_ms"]) and row["ttft_ms"] > 0, row
    assert is_number(row["upstream_ms"]) and row["upstream_ms"] >= row["ttft_ms"], row


def openai_credentials_only(seen: dict, key: str) -> None:
    """The sim saw `Authorization: Bearer <key>` and no other credential header."""
    assert seen["authorization"] == f"Bearer {key}", seen
    assert (seen["api_key"], seen["x_api_key"], seen["x_goog_api_key"]) == (None, None, None), seen


# --- Embeddings ----------------------------------------------------------------------------------

EMBED_INPUT = ["one two", "three"]
EMBED_DIMS = 8


def test_embeddings_float_sdk_default_and_base64_are_one_vector_and_the_record_counts_tokens(gw, sim, oai):
    """`text-embedding-3-small` is served by oa-a (one key). The SDK asked for floats, by
    default (the SDK asks base64 on the wire and decodes it to floats) and for base64 (the SDK
    hands the string over): the same float32 vectors, of the asked dimensions."""
    expected_tokens = tokens_of(*EMBED_INPUT)  # 2 + 2
    vectors = {}
    for fmt in ("float", None, "base64"):
        mark = sim.mark()
        kwargs = {} if fmt is None else {"encoding_format": fmt}
        raw = oai.embeddings.with_raw_response.create(
            model="text-embedding-3-small", input=EMBED_INPUT, dimensions=EMBED_DIMS, **kwargs
        )
        sent = json.loads(raw.http_request.content)
        assert sent.get("encoding_format") == (fmt or "base64"), sent
        answer = raw.parse()
        assert answer.model == "text-embedding-3-small"
        assert [d.index for d in answer.data] == [0, 1]
        assert answer.usage.prompt_tokens == expected_tokens
        assert answer.usage.total_tokens == expected_tokens
        if fmt == "base64":
            assert all(isinstance(d.embedding, str) for d in answer.data), "asked base64, kept base64"
            got = [array.array("f", base64.b64decode(d.embedding)).tolist() for d in answer.data]
        else:
            assert all(isinstance(d.embedding, list) for d in answer.data)
            got = [f32(d.embedding) for d in answer.data]
        assert [len(v) for v in got] == [EMBED_DIMS, EMBED_DIMS]
        for v in got:
            assert abs(math.fsum(x * x for x in v) - 1.0) < 1e-4, "the sim's vectors are unit vectors"
        vectors[fmt] = got

        seen = sim.one_since(mark)
        assert (seen["method"], seen["path_and_query"]) == ("POST", "/v1/embeddings"), seen
        openai_credentials_only(seen, KEY_A)
        assert seen["model"] == "text-embedding-3-small"
        assert seen["body_bytes"] == len(raw.http_request.content)

        assert_server_timing(raw.headers)
        row = row_of(gw, raw.headers)
        assert_served(row, endpoint="embeddings", channel="oa-a", provider="openai", key_index=None)
        assert row["model"] == "text-embedding-3-small"
        assert row["stream"] is False
        assert row["input_tokens"] == expected_tokens, row
        assert row["output_tokens"] is None, "embeddings output nothing countable"
        assert row["reasoning_tokens"] is None and row["cache_read_tokens"] is None, row
        assert row["bytes_in"] == len(raw.http_request.content), row
        assert row["bytes_out"] == len(raw.content), row
        assert_no_generation_marks(row)
    assert vectors["float"] == vectors[None] == vectors["base64"]


def test_embeddings_on_an_openai_compatible_channel_go_out_under_the_mapped_model(gw, sim, oai):
    mark = sim.mark()
    raw = oai.embeddings.with_raw_response.create(
        model="compat-emb", input="compatible", dimensions=4, encoding_format="float"
    )
    answer = raw.parse()
    assert len(answer.data) == 1 and len(answer.data[0].embedding) == 4
    assert answer.usage.prompt_tokens == tokens_of("compatible")
    seen = sim.one_since(mark)
    assert seen["path_and_query"] == "/v1/embeddings", seen
    openai_credentials_only(seen, KEY_C)
    assert seen["model"] == "text-embedding-3-large", "the public name is mapped to the upstream's"
    row = row_of(gw, raw.headers)
    assert_served(row, endpoint="embeddings", channel="compat", provider="openai-compatible")
    assert row["model"] == "compat-emb"
    assert row["input_tokens"] == tokens_of("compatible") and row["output_tokens"] is None, row


# --- Azure -----------------------------------------------------------------------------------------


def test_azure_calls_go_to_the_deployment_url_with_the_api_version_and_the_key_in_api_key(gw, sim, oai):
    mark = sim.mark()
    raw = oai.embeddings.with_raw_response.create(model="az-emb", input="hello", encoding_format="float")
    answer = raw.parse()
    assert len(answer.data) == 1 and len(answer.data[0].embedding) == 1536  # the sim's default
    seen = sim.one_since(mark)
    assert seen["method"] == "POST"
    assert seen["path_and_query"] == f"/openai/deployments/emb-deploy/embeddings?api-version={AZURE_API_VERSION}"
    assert seen["path"] == "/openai/deployments/emb-deploy/embeddings"
    assert seen["api_key"] == KEY_AZ
    assert (seen["authorization"], seen["x_api_key"], seen["x_goog_api_key"]) == (None, None, None), seen
    row = row_of(gw, raw.headers)
    assert_served(row, endpoint="embeddings", channel="az", provider="azure-openai")
    assert row["model"] == "az-emb"
    assert row["input_tokens"] == tokens_of("hello") and row["output_tokens"] is None, row

    # A chat completion on the same channel: the deployment's chat URL, the same header.
    mark = sim.mark()
    raw = oai.chat.completions.with_raw_response.create(
        model="az-chat", messages=[{"role": "user", "content": "hi"}]
    )
    completion = raw.parse()
    assert completion.choices[0].message.content
    seen = sim.one_since(mark)
    # sim-fast: the body it was sent, a token per four bytes rounded up; 16 out.
    sent_tokens = -(-seen["body_bytes"] // 4)
    assert completion.usage.prompt_tokens == sent_tokens and completion.usage.completion_tokens == 16
    assert seen["path_and_query"] == f"/openai/deployments/sim-fast/chat/completions?api-version={AZURE_API_VERSION}"
    assert seen["api_key"] == KEY_AZ and seen["authorization"] is None, seen
    row = row_of(gw, raw.headers)
    assert_served(row, endpoint="generation", channel="az", provider="azure-openai")
    assert (row["input_tokens"], row["output_tokens"]) == (sent_tokens, 16), row

    # A transcription upload, routed by its form's model field: the deployment's audio URL.
    mark = sim.mark()
    raw = oai.audio.transcriptions.with_raw_response.create(file=("az.wav", b"\x01" * 16_000), model="az-whisper")
    assert raw.parse().text == "The sim heard 16000 bytes of az.wav."
    seen = sim.one_since(mark)
    assert seen["path_and_query"] == (
        f"/openai/deployments/whisper-deploy/audio/transcriptions?api-version={AZURE_API_VERSION}"
    ), seen
    assert seen["api_key"] == KEY_AZ and seen["authorization"] is None, seen
    assert seen["content_type"].startswith("multipart/form-data; boundary="), seen
    row = row_of(gw, raw.headers)
    assert_served(row, endpoint="audio_transcriptions", channel="az", provider="azure-openai")
    assert row["model"] == "az-whisper"
    # The form's model field names the deployment upstream: the bytes differ by the names alone.
    assert row["bytes_in"] - len("az-whisper") == seen["body_bytes"] - len("whisper-deploy"), row
    assert row["bytes_in"] > 16_000, row


# --- Token counts and Gemini -----------------------------------------------------------------------


def test_anthropic_count_tokens_is_answered_by_the_anthropic_channel_and_recorded(gw, sim, claude):
    system = "abcdefgh"
    text = "count these words please"
    mark = sim.mark()
    raw = claude.messages.with_raw_response.count_tokens(
        model="claude-count", system=system, messages=[{"role": "user", "content": text}]
    )
    counted = raw.parse()
    # Every string of system and messages, the role's name too: 2 + 1 + 6.
    expected = tokens_of(system, "user", text)
    assert counted.input_tokens == expected
    seen = sim.one_since(mark)
    assert (seen["method"], seen["path_and_query"]) == ("POST", "/v1/messages/count_tokens"), seen
    assert seen["x_api_key"] == KEY_AN
    assert seen["authorization"] is None and seen["api_key"] is None, seen
    assert seen["anthropic_version"], seen
    assert_server_timing(raw.headers)
    row = row_of(gw, raw.headers)
    assert_served(row, endpoint="count_tokens", channel="claude", provider="anthropic")
    assert row["dialect"] == "messages"
    assert row["model"] == "claude-count"
    assert row["input_tokens"] == expected, row
    assert row["output_tokens"] is None, row
    assert row["bytes_in"] == len(raw.http_request.content), row
    assert row["bytes_out"] == len(raw.http_response.content), row
    assert_no_generation_marks(row)


def _gemini_row(gw, response) -> dict:
    return row_of(gw, response.sdk_http_response.headers or {})


@pytest.fixture(params=["v1beta", "v1"])
def gemini(gw, request):
    """google-genai as a Gemini API client, under /v1beta/ (its default) and /v1/."""
    client = genai.Client(
        api_key=gw.token,
        http_options=genai_types.HttpOptions(
            base_url=gw.base_url,
            api_version=request.param,
            timeout=15_000,
            retry_options=genai_types.HttpRetryOptions(attempts=1),
        ),
    )
    yield client
    client.close()


def test_gemini_embed_content_and_count_tokens_through_google_genai(gw, sim, gemini):
    texts = ["embed me", "and me too"]
    mark = sim.mark()
    answer = gemini.models.embed_content(
        model="text-embedding-004",
        contents=texts,
        config=genai_types.EmbedContentConfig(output_dimensionality=16),
    )
    assert [len(e.values) for e in answer.embeddings] == [16, 16]
    for e in answer.embeddings:
        assert abs(math.fsum(x * x for x in e.values) - 1.0) < 1e-4
    assert answer.embeddings[0].values != answer.embeddings[1].values
    seen = sim.one_since(mark)
    # google-genai calls :batchEmbedContents for the Gemini API, one request for both texts
    # (the gateway calls the provider under /v1beta/ whichever version the client used).
    assert seen["method"] == "POST"
    assert seen["path_and_query"].endswith("/models/text-embedding-004:batchEmbedContents"), seen
    assert seen["x_goog_api_key"] == KEY_G
    assert (seen["authorization"], seen["api_key"], seen["x_api_key"]) == (None, None, None), seen
    row = _gemini_row(gw, answer)
    assert_served(row, endpoint="embeddings", channel="gem", provider="gemini")
    assert row["dialect"] == "gemini"
    assert row["model"] == "text-embedding-004"
    # Gemini's embedding answers report no usage: nothing to record.
    assert (row["input_tokens"], row["output_tokens"]) == (None, None), row
    assert_no_generation_marks(row)

    mark = sim.mark()
    text = "how many tokens"
    counted = gemini.models.count_tokens(model="text-embedding-004", contents=text)
    expected = tokens_of("user", text)  # the SDK sends the text as a user turn
    assert counted.total_tokens == expected
    seen = sim.one_since(mark)
    assert seen["path_and_query"].endswith("/models/text-embedding-004:countTokens"), seen
    assert seen["x_goog_api_key"] == KEY_G
    row = _gemini_row(gw, counted)
    assert_served(row, endpoint="count_tokens", channel="gem", provider="gemini")
    assert row["input_tokens"] == expected and row["output_tokens"] is None, row


# --- Files and batches -----------------------------------------------------------------------------


def batch_lines(n: int) -> bytes:
    lines = [
        {
            "custom_id": f"line-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "sim-fast", "messages": [{"role": "user", "content": f"question {i}"}]},
        }
        for i in range(n)
    ]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def test_a_file_upload_then_the_batch_naming_it_then_its_output_file_all_on_the_objects_channel(gw, sim, oai):
    content = batch_lines(3)
    mark = sim.mark()
    raw = oai.files.with_raw_response.create(file=("questions.jsonl", content), purpose="batch")
    uploaded = raw.parse()
    assert uploaded.id.startswith("file-"), uploaded
    assert (uploaded.bytes, uploaded.filename, uploaded.purpose) == (len(content), "questions.jsonl", "batch")
    seen = sim.one_since(mark)
    assert (seen["method"], seen["path_and_query"]) == ("POST", "/v1/files"), seen
    openai_credentials_only(seen, KEY_A)  # oa-a takes the calls naming no model
    assert seen["content_type"].startswith("multipart/form-data; boundary="), seen
    assert seen["body_bytes"] > len(content)
    row = row_of(gw, raw.headers)
    assert_served(row, endpoint="files", channel="oa-a", provider="openai")
    assert row["bytes_in"] == seen["body_bytes"], "the whole upload went through"
    assert row["bytes_out"] == len(raw.content), row
    assert (row["input_tokens"], row["output_tokens"]) == (None, None), row
    assert_no_generation_marks(row)

    # Read back through its channel.
    mark = sim.mark()
    again = oai.files.retrieve(uploaded.id)
    assert (again.id, again.bytes) == (uploaded.id, len(content))
    assert sim.one_since(mark)["path_and_query"] == f"/v1/files/{uploaded.id}"

    # The batch goes where its input file lives.
    mark = sim.mark()
    raw = oai.batches.with_raw_response.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    batch = raw.parse()
    assert batch.id.startswith("batch_") and batch.input_file_id == uploaded.id, batch
    assert batch.status == "validating"
    seen = sim.one_since(mark)
    assert (seen["method"], seen["path_and_query"]) == ("POST", "/v1/batches"), seen
    openai_credentials_only(seen, KEY_A)
    row = row_of(gw, raw.headers)
    assert_served(row, endpoint="batches", channel="oa-a", provider="openai")
    assert row["bytes_in"] == len(raw.http_request.content), row

    # Completed at the first read after creation, with one output line per input line.
    mark = sim.mark()
    raw = oai.batches.with_raw_response.retrieve(batch.id)
    done = raw.parse()
    assert done.status == "completed", done
    assert done.request_counts.total == done.request_counts.completed == 3, done
    # sim-fast's: each line's body (answered unstreamed: `"stream": false` added, as the sim
    # writes JSON) a token per four bytes rounded up, and 16 out.
    bodies = [dict(json.loads(line)["body"], stream=False) for line in content.decode().splitlines()]
    line_tokens = sum(-(-len(json.dumps(b, separators=(",", ":"))) // 4) for b in bodies)
    assert (done.usage.input_tokens, done.usage.output_tokens) == (line_tokens, 3 * 16), done.usage
    assert done.output_file_id and done.output_file_id.startswith("file-"), done
    seen = sim.one_since(mark)
    assert (seen["method"], seen["path_and_query"]) == ("GET", f"/v1/batches/{batch.id}"), seen
    openai_credentials_only(seen, KEY_A)
    row = row_of(gw, raw.headers)
    assert_served(row, endpoint="batches", channel="oa-a", provider="openai")
    # Reading a batch is not its work: its usage is not counted again per read.
    assert (row["input_tokens"], row["output_tokens"]) == (None, None), row

    # The output file was made by the provider; named by the batch, it is reached there.
    mark = sim.mark()
    raw = oai.files.with_raw_response.content(done.output_file_id)
    output = raw.parse()
    lines = [json.loads(line) for line in output.text.splitlines()]
    assert [line["custom_id"] for line in lines] == ["line-0", "line-1", "line-2"]
    assert all(line["response"]["status_code"] == 200 for line in lines), lines
    assert all(line["response"]["body"]["choices"][0]["message"]["content"] for line in lines)
    seen = sim.one_since(mark)
    assert seen["path_and_query"] == f"/v1/files/{done.output_file_id}/content", seen
    openai_credentials_only(seen, KEY_A)
    row = row_of(gw, raw.headers)
    assert_served(row, endpoint="files", channel="oa-a", provider="openai")
    assert row["bytes_out"] == len(output.content), row

    # A file put on the provider directly with the same key is not this workspace's: the
    # gateway's listing keeps only what the workspace created.
    direct = openai.OpenAI(api_key=KEY_A, base_url=f"{sim.url}/v1", max_retries=0)
    stranger = direct.files.create(file=("stranger.jsonl", b"{}\n"), purpose="batch")
    direct.close()
    listed = {f.id for f in oai.files.list()}
    assert {uploaded.id, done.output_file_id} <= listed, listed
    assert stranger.id not in listed
    with pytest.raises(openai.NotFoundError):
        oai.files.retrieve(stranger.id)

    # Deleted through its channel: then it is gone.
    deleted = oai.files.delete(uploaded.id)
    assert (deleted.id, deleted.deleted) == (uploaded.id, True)
    with pytest.raises(openai.NotFoundError):
        oai.files.retrieve(uploaded.id)


# --- Stored responses --------------------------------------------------------------------------------


def _first_response(oai, stream: bool):
    """A stored response (streamed or not): its id and the request's headers."""
    if not stream:
        raw = oai.responses.with_raw_response.create(model="sim-fast", input="hi")
        return raw.parse().id, raw.headers
    raw = oai.responses.with_raw_response.create(model="sim-fast", input="hi", stream=True)
    events = list(raw.parse())
    created = [e for e in events if e.type == "response.created"]
    completed = [e for e in events if e.type == "response.completed"]
    assert len(created) == 1 and len(completed) == 1, [e.type for e in events]
    assert created[0].response.id == completed[0].response.id
    return created[0].response.id, raw.headers


def test_a_response_continued_with_previous_response_id_reaches_the_channel_and_key_that_stored_it(gw, sim, oai):
    """`sim-fast` is served by oa-a (one key) and oa-b (two keys), three keys the sim tells
    apart: only the one that stored a response knows it (a wrong one is the sim's 400
    `previous_response_not_found`). Streamed and not, until responses were stored under at
    least two different keys."""
    stored_under = set()
    rounds = 0
    while rounds < 4 or len(stored_under) < 2:
        assert rounds < 40, f"every first response went to one key: {stored_under}"
        stream = rounds % 2 == 1
        rounds += 1
        mark = sim.mark()
        first_id, headers = _first_response(oai, stream)
        seen = sim.one_since(mark)
        assert seen["path_and_query"] == "/v1/responses", seen
        key = seen["authorization"]
        stored_under.add(key)
        first = row_of(gw, headers)
        assert first["endpoint"] == "generation" and first["outcome"] == "completed", first
        assert first["stream"] is stream
        expected_key = {"oa-a": f"Bearer {KEY_A}"}.get(first["channel"]) or f"Bearer {KEYS_B[first['key_index']]}"
        assert key == expected_key, (key, first)
        assert (first["key_index"] is None) == (first["channel"] == "oa-a"), first

        mark = sim.mark()
        raw = oai.responses.with_raw_response.create(
            model="sim-fast", input="and then?", previous_response_id=first_id
        )
        follow = raw.parse()
        assert follow.status == "completed" and follow.output_text, follow
        assert follow.previous_response_id == first_id
        seen = sim.one_since(mark)
        assert seen["authorization"] == key, f"the continuation of {first_id} went to another key"
        row = row_of(gw, raw.headers)
        assert (row["channel"], row["key_index"]) == (first["channel"], first["key_index"]), row
        assert row["endpoint"] == "generation" and row["outcome"] == "completed", row
        assert row["failover_count"] == 0, row

        # Retrieving it and listing its input items go there too.
        mark = sim.mark()
        raw = oai.responses.with_raw_response.retrieve(first_id)
        assert raw.parse().id == first_id
        seen = sim.one_since(mark)
        assert (seen["method"], seen["path_and_query"], seen["authorization"]) == (
            "GET",
            f"/v1/responses/{first_id}",
            key,
        ), seen
        row = row_of(gw, raw.headers)
        assert row["endpoint"] == "stored_responses", row
        assert (row["channel"], row["key_index"]) == (first["channel"], first["key_index"]), row
        # Reading a stored response records no tokens: the generation was counted once.
        assert (row["input_tokens"], row["output_tokens"]) == (None, None), row
        mark = sim.mark()
        items = oai.responses.input_items.list(first_id)
        texts = [c.text for item in items.data for c in (getattr(item, "content", None) or [])]
        assert "hi" in texts, items
        assert sim.one_since(mark)["authorization"] == key
    assert stored_under <= {f"Bearer {KEY_A}", *(f"Bearer {k}" for k in KEYS_B)}, stored_under

    # Deleted through its channel, then gone.
    deleted = oai.responses.delete(first_id)
    assert deleted is None
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(first_id)


# --- Key rotation ---------------------------------------------------------------------------------


def test_a_two_key_channel_takes_its_keys_in_turn_and_the_record_names_each(gw, sim, oai):
    indexes = []
    for _ in range(6):
        mark = sim.mark()
        raw = oai.moderations.with_raw_response.create(model="omni-moderation-latest", input="a fine sentence")
        result = raw.parse()
        assert len(result.results) == 1 and result.results[0].flagged is False, result
        seen = sim.one_since(mark)
        assert seen["path_and_query"] == "/v1/moderations", seen
        row = row_of(gw, raw.headers)
        assert row["endpoint"] == "moderations" and row["channel"] == "oa-b", row
        index = row["key_index"]
        assert index in (0, 1), row
        openai_credentials_only(seen, KEYS_B[index])
        indexes.append(index)
    assert indexes in ([0, 1] * 3, [1, 0] * 3), f"keys not taken in turn: {indexes}"


# --- Audio -----------------------------------------------------------------------------------------

SPEECH_INPUT = "A sentence long enough for several frames of audio, streamed as it is spoken. " * 4


def test_speech_audio_streams_through_in_chunks_and_the_record_counts_its_bytes(gw, sim, oai):
    # The sim speaks ⌈input bytes / 16⌉ frames of 1 KiB, one every 20 ms, as audio/mpeg.
    frames = math.ceil(len(SPEECH_INPUT.encode()) / 16)
    mark = sim.mark()
    with oai.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=SPEECH_INPUT
    ) as response:
        assert response.headers["content-type"] == "audio/mpeg"
        assert "content-length" not in response.headers, "relayed as it streams"
        chunks = [chunk for chunk in response.iter_bytes() if chunk]
        headers = response.headers
    audio = b"".join(chunks)
    assert len(audio) == frames * 1024
    assert len(chunks) >= 2, f"{len(chunks)} chunk(s): the audio came in one piece"
    assert audio[:4] == b"\xff\xf3\x44\xc4", "an MPEG frame sync"
    seen = sim.one_since(mark)
    assert (seen["method"], seen["path_and_query"]) == ("POST", "/v1/audio/speech"), seen
    openai_credentials_only(seen, KEY_A)
    row = row_of(gw, headers)
    assert_served(row, endpoint="audio_speech", channel="oa-a", provider="openai")
    assert row["model"] == "tts-1"
    assert row["bytes_out"] == len(audio), row
    assert row["bytes_in"] == seen["body_bytes"], row
    assert (row["input_tokens"], row["output_tokens"]) == (None, None), row
    # The frames are 20 ms apart: the last byte came after the first.
    assert row["upstream_ms"] > row["ttft_ms"], row
    assert_no_generation_marks(row)


def test_a_transcription_upload_is_routed_by_its_model_field(gw, sim, oai):
    audio = bytes(range(256)) * 125  # 32 000 bytes: two seconds, as the sim pretends
    mark = sim.mark()
    raw = oai.audio.transcriptions.with_raw_response.create(file=("speech.wav", audio), model="whisper-1")
    transcript = raw.parse()
    assert transcript.text == "The sim heard 32000 bytes of speech.wav."
    seen = sim.one_since(mark)
    assert (seen["method"], seen["path_and_query"]) == ("POST", "/v1/audio/transcriptions"), seen
    assert seen["content_type"].startswith("multipart/form-data; boundary="), seen
    assert seen["model"] == "whisper-1", seen
    row = row_of(gw, raw.headers)
    assert row["key_index"] in (0, 1), row
    openai_credentials_only(seen, KEYS_B[row["key_index"]])  # whisper-1 is oa-b's
    assert_served(row, endpoint="audio_transcriptions", channel="oa-b", provider="openai", key_index=row["key_index"])
    assert row["model"] == "whisper-1"
    assert row["bytes_in"] == seen["body_bytes"] > len(audio), row
    assert row["bytes_out"] == len(raw.content), row
    assert row["output_tokens"] is None, row
    assert_no_generation_marks(row)


def test_a_transcription_for_a_mapped_model_is_routed_to_the_channel_that_maps_it(gw, sim, oai):
    """`compat-stt` is compat's public name for `whisper-1`."""
    mark = sim.mark()
    raw = oai.audio.transcriptions.with_raw_response.create(file=("mapped.wav", b"\x02" * 8_000), model="compat-stt")
    transcript = raw.parse()
    assert transcript.text == "The sim heard 8000 bytes of mapped.wav."
    seen = sim.one_since(mark)
    assert seen["path_and_query"] == "/v1/audio/transcriptions", seen
    openai_credentials_only(seen, KEY_C)
    row = row_of(gw, raw.headers)
    assert_served(row, endpoint="audio_transcriptions", channel="compat", provider="openai-compatible")
    assert row["model"] == "compat-stt"
    assert row["bytes_in"] - len("compat-stt") == seen["body_bytes"] - len("whisper-1"), row
    # The form's model field reached the provider as the channel's name for it.
    assert seen["model"] == "whisper-1", seen
    assert transcript.usage.type == "duration", transcript.usage


# --- 404s ------------------------------------------------------------------------------------------


def test_an_unknown_object_id_is_a_404_in_each_sdk_s_shape_and_recorded_as_unknown_object(gw, sim, oai):
    mark = sim.mark()
    with pytest.raises(openai.NotFoundError) as caught:
        oai.files.retrieve("file-nope")
    err = caught.value
    assert err.status_code == 404
    assert err.message.startswith("Error code: 404") and "No such File object: file-nope" in err.message, err.message
    assert err.body["type"] == "invalid_request_error", err.body
    row = row_of(gw, err.response.headers)
    assert row["status"] == 404 and row["error_class"] == "unknown_object", row
    assert row["endpoint"] == "files", row
    assert row["channel"] is None and row["provider"] is None and row["key_index"] is None, row
    assert row["attempts"] == [], row

    with pytest.raises(openai.NotFoundError) as caught:
        oai.batches.retrieve("batch_nope")
    assert "batch_nope" in caught.value.message
    assert row_of(gw, caught.value.response.headers)["error_class"] == "unknown_object"

    with pytest.raises(openai.NotFoundError) as caught:
        oai.responses.create(model="sim-fast", input="x", previous_response_id="resp_nope")
    assert caught.value.body["message"] == "Previous response with id 'resp_nope' not found.", caught.value.body
    row = row_of(gw, caught.value.response.headers)
    assert row["error_class"] == "unknown_object" and row["channel"] is None, row
    assert sim.since(mark, expect=0) == [], "an unknown id never reaches a provider"


def test_an_unknown_path_is_a_404_in_the_dialect_of_the_api_it_is_under(gw, sim, oai, claude):
    mark = sim.mark()
    with pytest.raises(openai.NotFoundError) as caught:
        oai.get("/nope", cast_to=httpx2.Response)
    body = caught.value.body
    assert body["code"] == "unknown_url", body
    assert body["type"] == "invalid_request_error", body
    assert body["message"] == "Invalid URL (GET /v1/nope)", body

    # Without the SDK: the whole body, and no token needed to be told so.
    r = httpx2.post(f"{gw.openai_base_url}/nope/deeper", json={})
    assert r.status_code == 404
    assert r.json() == {
        "error": {
            "message": "Invalid URL (POST /v1/nope/deeper)",
            "type": "invalid_request_error",
            "param": None,
            "code": "unknown_url",
        }
    }

    r = httpx2.get(f"{gw.base_url}/v1beta/nope")
    assert r.status_code == 404
    assert r.json() == {"error": {"code": 404, "message": "Invalid URL (GET /v1beta/nope)", "status": "NOT_FOUND"}}

    with pytest.raises(anthropic.NotFoundError) as caught:
        claude.get("/v1/messages/nope", cast_to=httpx2.Response)
    assert caught.value.body["type"] == "error", caught.value.body
    assert caught.value.body["error"]["type"] == "not_found_error", caught.value.body
    assert sim.since(mark, expect=0) == []
