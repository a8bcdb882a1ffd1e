// The provider endpoints besides the model calls, judged by the official Node SDKs (`openai`,
// `@anthropic-ai/sdk`, `@google/genai`), unmodified, against the real gateway binary: the scenarios of
// tests/sdk/test_endpoints.py.
//
// One `laptime sim` process stands in for every provider; the gateway has a channel of each
// provider kind on it, told apart by their keys (the sim keeps files, batches and stored
// responses per key, so two keys on one sim are two providers): oa-a (openai, one key,
// `objects = true`), oa-b (openai, two keys taken in turn), az (azure-openai with
// `api_version`), compat (openai-compatible), claude (anthropic), gem (gemini).
//
// Every test checks what the SDK made of the answer, what the sim received (GET /sim/requests:
// path and query, which credential header with which key, the body's size) and what the gateway
// recorded (GET /api/requests/{id}). Expected values come from the sim's definitions
// (crates/laptime-sim/src/endpoints/*.rs; a token is ⌈bytes / 4⌉ of every string).
'use strict';

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const OpenAI = require('openai');
const { toFile } = require('openai');
const Anthropic = require('@anthropic-ai/sdk');
const { GoogleGenAI } = require('@google/genai');
const { startGateway, startSim, storedRequest } = require('./gateway');

const REQUEST_ID = 'x-laptime-request-id';
const KEYS = {
  LT_EP_KEY_A: 'sk-sim-oa-a',
  LT_EP_KEY_B0: 'sk-sim-oa-b0',
  LT_EP_KEY_B1: 'sk-sim-oa-b1',
  LT_EP_KEY_AZ: 'sim-azure-key',
  LT_EP_KEY_C: 'sk-sim-compat',
  LT_EP_KEY_AN: 'sk-ant-sim',
  LT_EP_KEY_G: 'sim-gemini-key',
};
const KEY_A = KEYS.LT_EP_KEY_A;
const KEYS_B = [KEYS.LT_EP_KEY_B0, KEYS.LT_EP_KEY_B1];
const AZURE_API_VERSION = '2024-10-21';

function config(sim) {
  return `
[[channels]]
name = "oa-a"
provider = "openai"
base_url = "${sim}/v1"
api_key_env = "LT_EP_KEY_A"
objects = true
models = ["text-embedding-3-small", "sim-fast", "tts-1"]

[[channels]]
name = "oa-b"
provider = "openai"
base_url = "${sim}/v1"
api_key_envs = ["LT_EP_KEY_B0", "LT_EP_KEY_B1"]
models = ["sim-fast", "whisper-1", "omni-moderation-latest"]

[[channels]]
name = "az"
provider = "azure-openai"
base_url = "${sim}"
api_key_env = "LT_EP_KEY_AZ"
api_version = "${AZURE_API_VERSION}"
models = { "az-emb" = "emb-deploy", "az-chat" = "sim-fast", "az-whisper" = "whisper-deploy" }

[[channels]]
name = "compat"
provider = "openai-compatible"
base_url = "${sim}/v1"
api_key_env = "LT_EP_KEY_C"
models = { "compat-emb" = "text-embedding-3-large", "compat-stt" = "whisper-1" }

[[channels]]
name = "claude"
provider = "anthropic"
base_url = "${sim}"
api_key_env = "LT_EP_KEY_AN"
models = ["claude-count"]

[[channels]]
name = "gem"
provider = "gemini"
base_url = "${sim}"
api_key_env = "LT_EP_KEY_G"
models = ["text-embedding-004"]
`;
}

/// The sim's token rule: ⌈UTF-8 bytes / 4⌉ per string.
const tokensOf = (...texts) => texts.reduce((n, t) => n + Math.ceil(Buffer.byteLength(t) / 4), 0);
/// Values as the float32s they stand for.
const f32 = values => Array.from(Float32Array.from(values));
const fromBase64 = s => { const b = Buffer.from(s, 'base64'); return Array.from(new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4)); };
const isNumber = v => typeof v === 'number' && Number.isFinite(v);

let sim;
let gw;
let exchanges; // what the openai client sent and got, newest last
let oai;
let claude;

/// A fetch that keeps each exchange: the request body as sent, and the length of the answer's
/// body (read from a clone, except audio, which is left to stream).
function recordingFetch(log) {
  return async (url, init) => {
    const res = await fetch(url, init);
    const entry = { url: String(url), method: init?.method, body: init?.body, res };
    if (!(res.headers.get('content-type') || '').startsWith('audio/')) {
      entry.bytesOut = res.clone().arrayBuffer().then(b => b.byteLength);
    }
    log.push(entry);
    return res;
  };
}

/// The id of the newest request the sim has seen ('' for none); ids count up (`simreq_` and 16
/// hex digits), so later ones sort after it.
async function simMark() {
  const log = await sim.requests();
  return log.length ? log[log.length - 1].request_id : '';
}

/// The requests the sim received after `mark`, waiting briefly for `expect` of them.
async function simSince(mark, expect = 1) {
  const deadline = Date.now() + 3000;
  for (;;) {
    const seen = (await sim.requests()).filter(r => r.request_id > mark);
    if (seen.length >= expect || Date.now() > deadline) return seen;
    await new Promise(r => setTimeout(r, 20));
  }
}

async function simOne(mark) {
  const seen = await simSince(mark);
  assert.equal(seen.length, 1, `one upstream request expected, the sim saw ${JSON.stringify(seen)}`);
  return seen[0];
}

async function rowOf(headers) {
  const id = headers.get(REQUEST_ID) || '';
  assert.match(id, /^req_/, `a ${REQUEST_ID} header`);
  const row = await storedRequest(gw, id);
  assert.equal(row.request_id, id);
  return row;
}

function assertServerTiming(headers) {
  const timing = headers.get('server-timing') || '';
  assert.match(timing, /^upstream;dur=[0-9.]+/, `Server-Timing ${timing}`);
}

function assertNoGenerationMarks(row) {
  const t = row.other.timing;
  for (const mark of ['first_text_delta_ms', 'first_sse_event_ms', 'first_response_ms']) {
    assert.equal(t[mark], null, `${mark} in ${JSON.stringify(t)}`);
  }
  assert.equal(row.text_delta_count, 0);
}

function assertServed(row, { endpoint, channel, provider, keyIndex = null }) {
  const at = JSON.stringify(row);
  assert.equal(row.outcome, 'completed', at);
  assert.equal(row.status, 200, at);
  assert.equal(row.endpoint, endpoint, at);
  assert.equal(row.channel, channel, at);
  assert.equal(row.provider, provider, at);
  assert.equal(row.key_index, keyIndex, at);
  assert.equal(row.error_class, null, at);
  assert.equal(row.fault, null, at);
  assert.equal(row.failover_count, 0, at);
  assert.ok(isNumber(row.ttft_ms) && row.ttft_ms > 0, at);
  assert.ok(isNumber(row.upstream_ms) && row.upstream_ms >= row.ttft_ms, at);
}

/// The sim saw `Authorization: Bearer <key>` and no other credential header.
function openaiCredentialsOnly(seen, key) {
  assert.equal(seen.authorization, `Bearer ${key}`, JSON.stringify(seen));
  assert.deepEqual([seen.api_key, seen.x_api_key, seen.x_goog_api_key], [null, null, null], JSON.stringify(seen));
}

const lastExchange = () => exchanges[exchanges.length - 1];

describe('provider endpoints through the official Node SDKs', () => {
  before(async () => {
    sim = await startSim();
    gw = await startGateway(config(sim.url), KEYS);
    exchanges = [];
    oai = new OpenAI({ apiKey: gw.token, baseURL: `${gw.base}/v1`, maxRetries: 0, timeout: 15000, fetch: recordingFetch(exchanges) });
    claude = new Anthropic({ apiKey: gw.token, baseURL: gw.base, maxRetries: 0, timeout: 15000 });
  });

  after(async () => {
    if (gw) await gw.stop();
    if (sim) await sim.stop();
  });

  it('embeddings: float, the SDK default (base64 on the wire, decoded) and base64 are one vector; the record counts tokens', async () => {
    const input = ['one two', 'three'];
    const expectedTokens = tokensOf(...input); // 2 + 2
    const vectors = {};
    for (const fmt of ['float', undefined, 'base64']) {
      const mark = await simMark();
      const body = { model: 'text-embedding-3-small', input, dimensions: 8 };
      if (fmt) body.encoding_format = fmt;
      const { data: answer, response } = await oai.embeddings.create(body).withResponse();
      const sent = lastExchange().body;
      assert.equal(JSON.parse(sent).encoding_format, fmt || 'base64', sent);
      assert.equal(answer.model, 'text-embedding-3-small');
      assert.deepEqual(answer.data.map(d => d.index), [0, 1]);
      assert.equal(answer.usage.prompt_tokens, expectedTokens);
      let got;
      if (fmt === 'base64') {
        assert.ok(answer.data.every(d => typeof d.embedding === 'string'), 'asked base64, kept base64');
        got = answer.data.map(d => fromBase64(d.embedding));
      } else {
        assert.ok(answer.data.every(d => Array.isArray(d.embedding)));
        got = answer.data.map(d => f32(d.embedding));
      }
      assert.deepEqual(got.map(v => v.length), [8, 8]);
      for (const v of got) assert.ok(Math.abs(v.reduce((s, x) => s + x * x, 0) - 1) < 1e-4, 'unit vectors');
      vectors[String(fmt)] = got;

      const seen = await simOne(mark);
      assert.deepEqual([seen.method, seen.path_and_query], ['POST', '/v1/embeddings']);
      openaiCredentialsOnly(seen, KEY_A);
      assert.equal(seen.body_bytes, Buffer.byteLength(sent));

      assertServerTiming(response.headers);
      const row = await rowOf(response.headers);
      assertServed(row, { endpoint: 'embeddings', channel: 'oa-a', provider: 'openai' });
      assert.equal(row.model, 'text-embedding-3-small');
      assert.equal(row.stream, false);
      assert.equal(row.input_tokens, expectedTokens);
      assert.equal(row.output_tokens, null, 'embeddings output nothing countable');
      assert.equal(row.bytes_in, Buffer.byteLength(sent));
      assert.equal(row.bytes_out, await lastExchange().bytesOut);
      assertNoGenerationMarks(row);
    }
    assert.deepEqual(vectors.float, vectors.undefined);
    assert.deepEqual(vectors.float, vectors.base64);
  });

  it('embeddings on an openai-compatible channel go out under the mapped model', async () => {
    const mark = await simMark();
    const { data, response } = await oai.embeddings.create({ model: 'compat-emb', input: 'compatible', dimensions: 4, encoding_format: 'float' }).withResponse();
    assert.equal(data.data[0].embedding.length, 4);
    const seen = await simOne(mark);
    assert.equal(seen.path_and_query, '/v1/embeddings');
    openaiCredentialsOnly(seen, KEYS.LT_EP_KEY_C);
    assert.equal(seen.model, 'text-embedding-3-large');
    const row = await rowOf(response.headers);
    assertServed(row, { endpoint: 'embeddings', channel: 'compat', provider: 'openai-compatible' });
    assert.equal(row.model, 'compat-emb');
    assert.equal(row.input_tokens, tokensOf('compatible'));
    assert.equal(row.output_tokens, null);
  });

  it('azure: the deployment URL with the api-version, the key in api-key and no Authorization', async () => {
    let mark = await simMark();
    let { data, response } = await oai.embeddings.create({ model: 'az-emb', input: 'hello', encoding_format: 'float' }).withResponse();
    assert.equal(data.data[0].embedding.length, 1536);
    let seen = await simOne(mark);
    assert.equal(seen.method, 'POST');
    assert.equal(seen.path_and_query, `/openai/deployments/emb-deploy/embeddings?api-version=${AZURE_API_VERSION}`);
    assert.equal(seen.api_key, KEYS.LT_EP_KEY_AZ);
    assert.deepEqual([seen.authorization, seen.x_api_key, seen.x_goog_api_key], [null, null, null]);
    let row = await rowOf(response.headers);
    assertServed(row, { endpoint: 'embeddings', channel: 'az', provider: 'azure-openai' });
    assert.equal(row.model, 'az-emb');
    assert.equal(row.input_tokens, tokensOf('hello'));

    mark = await simMark();
    ({ data, response } = await oai.chat.completions.create({ model: 'az-chat', messages: [{ role: 'user', content: 'hi' }] }).withResponse());
    assert.ok(data.choices[0].message.content);
    seen = await simOne(mark);
    // sim-fast: the body it was sent, a token per four bytes rounded up; 16 out.
    const sentTokens = Math.ceil(seen.body_bytes / 4);
    assert.deepEqual([data.usage.prompt_tokens, data.usage.completion_tokens], [sentTokens, 16]);
    assert.equal(seen.path_and_query, `/openai/deployments/sim-fast/chat/completions?api-version=${AZURE_API_VERSION}`);
    assert.equal(seen.api_key, KEYS.LT_EP_KEY_AZ);
    assert.equal(seen.authorization, null);
    row = await rowOf(response.headers);
    assertServed(row, { endpoint: 'generation', channel: 'az', provider: 'azure-openai' });
    assert.deepEqual([row.input_tokens, row.output_tokens], [sentTokens, 16]);

    // A transcription upload, routed by its form's model field: the deployment's audio URL.
    mark = await simMark();
    ({ data, response } = await oai.audio.transcriptions.create({ file: await toFile(Buffer.alloc(16000, 1), 'az.wav'), model: 'az-whisper' }).withResponse());
    assert.equal(data.text, 'The sim heard 16000 bytes of az.wav.');
    seen = await simOne(mark);
    assert.equal(seen.path_and_query, `/openai/deployments/whisper-deploy/audio/transcriptions?api-version=${AZURE_API_VERSION}`);
    assert.equal(seen.api_key, KEYS.LT_EP_KEY_AZ);
    assert.equal(seen.authorization, null);
    assert.match(seen.content_type, /^multipart\/form-data; boundary=/);
    row = await rowOf(response.headers);
    assertServed(row, { endpoint: 'audio_transcriptions', channel: 'az', provider: 'azure-openai' });
    assert.equal(row.model, 'az-whisper');
    // The form's model field names the deployment upstream: the bytes differ by the names alone.
    assert.equal(row.bytes_in - 'az-whisper'.length, seen.body_bytes - 'whisper-deploy'.length);
  });

  it('anthropic countTokens is answered by the anthropic channel and recorded', async () => {
    const system = 'abcdefgh';
    const text = 'count these words please';
    const mark = await simMark();
    const { data, response } = await claude.messages.countTokens({ model: 'claude-count', system, messages: [{ role: 'user', content: text }] }).withResponse();
    const expected = tokensOf(system, 'user', text); // 2 + 1 + 6
    assert.equal(data.input_tokens, expected);
    const seen = await simOne(mark);
    assert.deepEqual([seen.method, seen.path_and_query], ['POST', '/v1/messages/count_tokens']);
    assert.equal(seen.x_api_key, KEYS.LT_EP_KEY_AN);
    assert.equal(seen.authorization, null);
    assert.equal(seen.api_key, null);
    assert.ok(seen.anthropic_version);
    assertServerTiming(response.headers);
    const row = await rowOf(response.headers);
    assertServed(row, { endpoint: 'count_tokens', channel: 'claude', provider: 'anthropic' });
    assert.equal(row.dialect, 'messages');
    assert.equal(row.input_tokens, expected);
    assert.equal(row.output_tokens, null);
    assertNoGenerationMarks(row);
  });

  for (const apiVersion of ['v1beta', 'v1']) {
    it(`gemini embedContent and countTokens through @google/genai (${apiVersion})`, async () => {
      const gemini = new GoogleGenAI({ apiKey: gw.token, httpOptions: { baseUrl: gw.base, apiVersion, timeout: 15000 } });
      let mark = await simMark();
      const embedded = await gemini.models.embedContent({ model: 'text-embedding-004', contents: ['embed me', 'and me too'], config: { outputDimensionality: 16 } });
      assert.deepEqual(embedded.embeddings.map(e => e.values.length), [16, 16]);
      for (const e of embedded.embeddings) assert.ok(Math.abs(e.values.reduce((s, x) => s + x * x, 0) - 1) < 1e-4, 'unit vectors');
      assert.notDeepEqual(embedded.embeddings[0].values, embedded.embeddings[1].values);
      let seen = await simOne(mark);
      // The Gemini API's embedContent is one :batchEmbedContents call for both texts (the gateway
      // calls the provider under /v1beta/ whichever version the client used).
      assert.equal(seen.method, 'POST');
      assert.match(seen.path_and_query, /\/models\/text-embedding-004:batchEmbedContents$/);
      assert.equal(seen.x_goog_api_key, KEYS.LT_EP_KEY_G);
      assert.deepEqual([seen.authorization, seen.api_key, seen.x_api_key], [null, null, null]);
      const headers = new Headers(embedded.sdkHttpResponse.headers);
      let row = await rowOf(headers);
      assertServed(row, { endpoint: 'embeddings', channel: 'gem', provider: 'gemini' });
      assert.equal(row.dialect, 'gemini');
      assert.equal(row.model, 'text-embedding-004');
      // Gemini's embedding answers report no usage: nothing to record.
      assert.deepEqual([row.input_tokens, row.output_tokens], [null, null]);
      assertNoGenerationMarks(row);

      mark = await simMark();
      const text = 'how many tokens';
      const counted = await gemini.models.countTokens({ model: 'text-embedding-004', contents: text });
      const expected = tokensOf('user', text); // the SDK sends the text as a user turn
      assert.equal(counted.totalTokens, expected);
      seen = await simOne(mark);
      assert.match(seen.path_and_query, /\/models\/text-embedding-004:countTokens$/);
      assert.equal(seen.x_goog_api_key, KEYS.LT_EP_KEY_G);
      row = await rowOf(new Headers(counted.sdkHttpResponse.headers));
      assertServed(row, { endpoint: 'count_tokens', channel: 'gem', provider: 'gemini' });
      assert.equal(row.input_tokens, expected);
      assert.equal(row.output_tokens, null);
    });
  }

  it('a file upload, the batch that names it and its output file, all on the objects channel', async () => {
    const lines = [0, 1, 2].map(i => JSON.stringify({ custom_id: `line-${i}`, method: 'POST', url: '/v1/chat/completions',
      body: { model: 'sim-fast', messages: [{ role: 'user', content: `question ${i}` }] } }) + '\n').join('');
    const content = Buffer.from(lines);
    let mark = await simMark();
    let { data: uploaded, response } = await oai.files.create({ file: await toFile(content, 'questions.jsonl'), purpose: 'batch' }).withResponse();
    assert.match(uploaded.id, /^file-/);
    assert.deepEqual([uploaded.bytes, uploaded.filename, uploaded.purpose], [content.length, 'questions.jsonl', 'batch']);
    let seen = await simOne(mark);
    assert.deepEqual([seen.method, seen.path_and_query], ['POST', '/v1/files']);
    openaiCredentialsOnly(seen, KEY_A);
    assert.match(seen.content_type, /^multipart\/form-data; boundary=/);
    let row = await rowOf(response.headers);
    assertServed(row, { endpoint: 'files', channel: 'oa-a', provider: 'openai' });
    assert.equal(row.bytes_in, seen.body_bytes, 'the whole upload went through');
    assert.ok(row.bytes_in > content.length);
    assert.deepEqual([row.input_tokens, row.output_tokens], [null, null]);

    mark = await simMark();
    let batch;
    ({ data: batch, response } = await oai.batches.create({ input_file_id: uploaded.id, endpoint: '/v1/chat/completions', completion_window: '24h' }).withResponse());
    assert.match(batch.id, /^batch_/);
    assert.equal(batch.status, 'validating');
    assert.equal(batch.input_file_id, uploaded.id);
    seen = await simOne(mark);
    assert.deepEqual([seen.method, seen.path_and_query], ['POST', '/v1/batches']);
    openaiCredentialsOnly(seen, KEY_A);
    assertServed(await rowOf(response.headers), { endpoint: 'batches', channel: 'oa-a', provider: 'openai' });

    mark = await simMark();
    const done = await oai.batches.retrieve(batch.id);
    assert.equal(done.status, 'completed');
    assert.equal(done.request_counts.completed, 3);
    // sim-fast's: each line's body (answered unstreamed: `"stream": false` added) a token per
    // four bytes rounded up, and 16 out.
    const lineTokens = content.toString().trim().split('\n')
      .map(l => Math.ceil(JSON.stringify({ ...JSON.parse(l).body, stream: false }).length / 4))
      .reduce((a, b) => a + b, 0);
    assert.deepEqual([done.usage.input_tokens, done.usage.output_tokens], [lineTokens, 3 * 16]);
    assert.match(done.output_file_id, /^file-/);
    seen = await simOne(mark);
    assert.deepEqual([seen.method, seen.path_and_query], ['GET', `/v1/batches/${batch.id}`]);
    openaiCredentialsOnly(seen, KEY_A);

    mark = await simMark();
    const output = await oai.files.content(done.output_file_id);
    const text = await output.text();
    const got = text.trim().split('\n').map(l => JSON.parse(l));
    assert.deepEqual(got.map(l => l.custom_id), ['line-0', 'line-1', 'line-2']);
    assert.ok(got.every(l => l.response.status_code === 200 && l.response.body.choices[0].message.content));
    seen = await simOne(mark);
    assert.equal(seen.path_and_query, `/v1/files/${done.output_file_id}/content`);
    openaiCredentialsOnly(seen, KEY_A);
    row = await rowOf(output.headers);
    assertServed(row, { endpoint: 'files', channel: 'oa-a', provider: 'openai' });
    assert.equal(row.bytes_out, Buffer.byteLength(text));

    // A file put on the provider directly with the same key is not this workspace's.
    const direct = new OpenAI({ apiKey: KEY_A, baseURL: `${sim.url}/v1`, maxRetries: 0 });
    const stranger = await direct.files.create({ file: await toFile(Buffer.from('{}\n'), 'stranger.jsonl'), purpose: 'batch' });
    const listed = [];
    for await (const f of oai.files.list()) listed.push(f.id);
    assert.ok(listed.includes(uploaded.id) && listed.includes(done.output_file_id), JSON.stringify(listed));
    assert.ok(!listed.includes(stranger.id), JSON.stringify(listed));
    await assert.rejects(oai.files.retrieve(stranger.id), OpenAI.NotFoundError);

    const deleted = await oai.files.delete(uploaded.id);
    assert.deepEqual([deleted.id, deleted.deleted], [uploaded.id, true]);
    await assert.rejects(oai.files.retrieve(uploaded.id), OpenAI.NotFoundError);
  });

  it('a response continued with previous_response_id reaches the channel and key that stored it', async () => {
    const storedUnder = new Set();
    let firstId;
    for (let round = 0; round < 4 || storedUnder.size < 2; round++) {
      assert.ok(round < 40, `every first response went to one key: ${[...storedUnder]}`);
      const stream = round % 2 === 1;
      let mark = await simMark();
      let headers;
      if (stream) {
        const { data: events, response } = await oai.responses.create({ model: 'sim-fast', input: 'hi', stream: true }).withResponse();
        const seenEvents = [];
        for await (const ev of events) seenEvents.push(ev);
        const created = seenEvents.filter(e => e.type === 'response.created');
        const completed = seenEvents.filter(e => e.type === 'response.completed');
        assert.equal(created.length, 1);
        assert.equal(completed.length, 1);
        firstId = created[0].response.id;
        assert.equal(completed[0].response.id, firstId);
        headers = response.headers;
      } else {
        const { data, response } = await oai.responses.create({ model: 'sim-fast', input: 'hi' }).withResponse();
        firstId = data.id;
        headers = response.headers;
      }
      let seen = await simOne(mark);
      assert.equal(seen.path_and_query, '/v1/responses');
      const key = seen.authorization;
      storedUnder.add(key);
      const first = await rowOf(headers);
      assert.equal(first.endpoint, 'generation');
      assert.equal(first.stream, stream);
      const expectedKey = first.channel === 'oa-a' ? `Bearer ${KEY_A}` : `Bearer ${KEYS_B[first.key_index]}`;
      assert.equal(key, expectedKey, JSON.stringify(first));
      assert.equal(first.key_index === null, first.channel === 'oa-a', JSON.stringify(first));

      mark = await simMark();
      const { data: follow, response } = await oai.responses.create({ model: 'sim-fast', input: 'and then?', previous_response_id: firstId }).withResponse();
      assert.equal(follow.status, 'completed');
      assert.ok(follow.output_text);
      assert.equal(follow.previous_response_id, firstId);
      seen = await simOne(mark);
      assert.equal(seen.authorization, key, `the continuation of ${firstId} went to another key`);
      const row = await rowOf(response.headers);
      assert.deepEqual([row.channel, row.key_index], [first.channel, first.key_index]);
      assert.equal(row.outcome, 'completed');
      assert.equal(row.failover_count, 0);

      mark = await simMark();
      const got = await oai.responses.retrieve(firstId).withResponse();
      assert.equal(got.data.id, firstId);
      seen = await simOne(mark);
      assert.deepEqual([seen.method, seen.path_and_query, seen.authorization], ['GET', `/v1/responses/${firstId}`, key]);
      const stored = await rowOf(got.response.headers);
      assert.equal(stored.endpoint, 'stored_responses');
      assert.deepEqual([stored.channel, stored.key_index], [first.channel, first.key_index]);
      // Reading a stored response records no tokens: the generation was counted once.
      assert.deepEqual([stored.input_tokens, stored.output_tokens], [null, null]);

      mark = await simMark();
      const items = await oai.responses.inputItems.list(firstId);
      const texts = items.data.flatMap(item => (item.content || []).map(c => c.text));
      assert.ok(texts.includes('hi'), JSON.stringify(items.data));
      assert.equal((await simOne(mark)).authorization, key);
    }
    await oai.responses.delete(firstId);
    await assert.rejects(oai.responses.retrieve(firstId), OpenAI.NotFoundError);
  });

  it('a two-key channel takes its keys in turn and the record names each', async () => {
    const indexes = [];
    for (let i = 0; i < 6; i++) {
      const mark = await simMark();
      const { data, response } = await oai.moderations.create({ model: 'omni-moderation-latest', input: 'a fine sentence' }).withResponse();
      assert.equal(data.results.length, 1);
      assert.equal(data.results[0].flagged, false);
      const seen = await simOne(mark);
      assert.equal(seen.path_and_query, '/v1/moderations');
      const row = await rowOf(response.headers);
      assert.equal(row.endpoint, 'moderations');
      assert.equal(row.channel, 'oa-b');
      assert.ok(row.key_index === 0 || row.key_index === 1, JSON.stringify(row));
      openaiCredentialsOnly(seen, KEYS_B[row.key_index]);
      indexes.push(row.key_index);
    }
    assert.ok(JSON.stringify(indexes) === '[0,1,0,1,0,1]' || JSON.stringify(indexes) === '[1,0,1,0,1,0]', `keys not taken in turn: ${indexes}`);
  });

  it('speech audio streams through in chunks and the record counts its bytes', async () => {
    const input = 'A sentence long enough for several frames of audio, streamed as it is spoken. '.repeat(4);
    const frames = Math.ceil(Buffer.byteLength(input) / 16);
    const mark = await simMark();
    const { data: res, response } = await oai.audio.speech.create({ model: 'tts-1', voice: 'alloy', input }).withResponse();
    assert.equal(response.headers.get('content-type'), 'audio/mpeg');
    assert.equal(response.headers.get('content-length'), null, 'relayed as it streams');
    const chunks = [];
    for await (const chunk of res.body) if (chunk.length) chunks.push(Buffer.from(chunk));
    const audio = Buffer.concat(chunks);
    assert.equal(audio.length, frames * 1024);
    assert.ok(chunks.length >= 2, `${chunks.length} chunk(s): the audio came in one piece`);
    assert.deepEqual([...audio.subarray(0, 4)], [0xff, 0xf3, 0x44, 0xc4]);
    const seen = await simOne(mark);
    assert.deepEqual([seen.method, seen.path_and_query], ['POST', '/v1/audio/speech']);
    openaiCredentialsOnly(seen, KEY_A);
    const row = await rowOf(response.headers);
    assertServed(row, { endpoint: 'audio_speech', channel: 'oa-a', provider: 'openai' });
    assert.equal(row.bytes_out, audio.length);
    assert.equal(row.bytes_in, seen.body_bytes);
    assert.deepEqual([row.input_tokens, row.output_tokens], [null, null]);
    assert.ok(row.upstream_ms > row.ttft_ms, 'frames 20 ms apart: the last byte after the first');
    assertNoGenerationMarks(row);
  });

  it('a transcription upload is routed by its model field', async () => {
    const audio = Buffer.alloc(32000, 7);
    const mark = await simMark();
    const { data, response } = await oai.audio.transcriptions.create({ file: await toFile(audio, 'speech.wav'), model: 'whisper-1' }).withResponse();
    assert.equal(data.text, 'The sim heard 32000 bytes of speech.wav.');
    const seen = await simOne(mark);
    assert.deepEqual([seen.method, seen.path_and_query], ['POST', '/v1/audio/transcriptions']);
    assert.match(seen.content_type, /^multipart\/form-data; boundary=/);
    assert.equal(seen.model, 'whisper-1');
    const row = await rowOf(response.headers);
    assert.ok(row.key_index === 0 || row.key_index === 1, JSON.stringify(row));
    openaiCredentialsOnly(seen, KEYS_B[row.key_index]);
    assertServed(row, { endpoint: 'audio_transcriptions', channel: 'oa-b', provider: 'openai', keyIndex: row.key_index });
    assert.equal(row.model, 'whisper-1');
    assert.equal(row.bytes_in, seen.body_bytes);
    assert.ok(row.bytes_in > audio.length);
    assert.equal(row.output_tokens, null);
    assertNoGenerationMarks(row);
  });

  it('a transcription for a mapped model is routed to the channel that maps it', async () => {
    // `compat-stt` is compat's public name for `whisper-1`.
    const mark = await simMark();
    const { data, response } = await oai.audio.transcriptions.create({ file: await toFile(Buffer.alloc(8000, 2), 'mapped.wav'), model: 'compat-stt' }).withResponse();
    assert.equal(data.text, 'The sim heard 8000 bytes of mapped.wav.');
    const seen = await simOne(mark);
    assert.equal(seen.path_and_query, '/v1/audio/transcriptions');
    openaiCredentialsOnly(seen, KEYS.LT_EP_KEY_C);
    const row = await rowOf(response.headers);
    assertServed(row, { endpoint: 'audio_transcriptions', channel: 'compat', provider: 'openai-compatible' });
    assert.equal(row.model, 'compat-stt');
    assert.equal(row.bytes_in - 'compat-stt'.length, seen.body_bytes - 'whisper-1'.length);
    // The form's model field reached the provider as the channel's name for it.
    assert.equal(seen.model, 'whisper-1');
    assert.equal(data.usage.type, 'duration');
  });

  it('an unknown object id is a 404 in the SDK\'s shape, recorded as unknown_object, never sent upstream', async () => {
    const mark = await simMark();
    let err = await oai.files.retrieve('file-nope').then(() => null, e => e);
    assert.ok(err instanceof OpenAI.NotFoundError, String(err));
    assert.equal(err.status, 404);
    assert.match(err.error.message, /^No such File object: file-nope/);
    assert.equal(err.type, 'invalid_request_error');
    let row = await rowOf(err.headers);
    assert.equal(row.status, 404);
    assert.equal(row.error_class, 'unknown_object');
    assert.equal(row.endpoint, 'files');
    assert.deepEqual([row.channel, row.provider, row.key_index], [null, null, null]);

    err = await oai.batches.retrieve('batch_nope').then(() => null, e => e);
    assert.ok(err instanceof OpenAI.NotFoundError, String(err));
    assert.equal((await rowOf(err.headers)).error_class, 'unknown_object');

    err = await oai.responses.create({ model: 'sim-fast', input: 'x', previous_response_id: 'resp_nope' }).then(() => null, e => e);
    assert.ok(err instanceof OpenAI.NotFoundError, String(err));
    assert.equal(err.error.message, "Previous response with id 'resp_nope' not found.");
    row = await rowOf(err.headers);
    assert.equal(row.error_class, 'unknown_object');
    assert.equal(row.channel, null);
    assert.deepEqual(await simSince(mark, 0), [], 'an unknown id never reaches a provider');
  });

  it('an unknown path is a 404 in the shape of the API it is under', async () => {
    const mark = await simMark();
    let err = await oai.get('/nope').then(() => null, e => e);
    assert.ok(err instanceof OpenAI.NotFoundError, String(err));
    assert.equal(err.code, 'unknown_url');
    assert.equal(err.type, 'invalid_request_error');
    assert.equal(err.error.message, 'Invalid URL (GET /v1/nope)');

    const res = await fetch(`${gw.base}/v1/nope/deeper`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
    assert.equal(res.status, 404);
    assert.deepEqual(await res.json(), { error: { message: 'Invalid URL (POST /v1/nope/deeper)', type: 'invalid_request_error', param: null, code: 'unknown_url' } });

    const gemini = await fetch(`${gw.base}/v1beta/nope`);
    assert.equal(gemini.status, 404);
    assert.deepEqual(await gemini.json(), { error: { code: 404, message: 'Invalid URL (GET /v1beta/nope)', status: 'NOT_FOUND' } });

    err = await claude.get('/v1/messages/nope').then(() => null, e => e);
    assert.ok(err instanceof Anthropic.NotFoundError, String(err));
    assert.equal(err.error.type, 'error');
    assert.equal(err.error.error.type, 'not_found_error');
    assert.deepEqual(await simSince(mark, 0), []);
  });
});
