// The official Node SDKs (`openai` Chat Completions and Responses, `@anthropic-ai/sdk`) against
// the real gateway binary, as clients of every dialect they speak against a sim channel pinned
// to every dialect (chat, responses, messages, gemini: the same one as a control, the others
// translated), streamed and whole, over the same scenarios as tests/sdk/test_translation.py:
// plain text, reasoning then text, one tool call, parallel tool calls, text after tool results
// and image input (both read back from sim-echo's summary of what reached the upstream), the
// max-tokens cut, an upstream 429 and an in-band overload. The expected values are the Python
// test's (tests/sdk/expectations.json, shared), which come from the sim presets' definitions (crates/laptime-sim/src/script.rs,
// `scenario`), never from what the gateway answered; a streamed cell's stored marks are checked
// against the preset's scripted instants.
'use strict';

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const OpenAI = require('openai');
const Anthropic = require('@anthropic-ai/sdk');
const { startGateway, storedRequest } = require('./gateway');

const REPO = path.resolve(__dirname, '..', '..');
const CLIENTS = ['chat', 'responses', 'messages'];
const UPSTREAMS = ['chat', 'responses', 'messages', 'gemini'];
const REQUEST_ID = 'x-laptime-request-id';
const via = (upstream, preset) => `via-${upstream}.${preset}`;
const PRESET_NAMES = ['sim-fast', 'sim-reasoning', 'sim-tool-call', 'sim-parallel-tools', 'sim-max-tokens',
  'sim-rate-limited', 'sim-overloaded-in-band', 'sim-echo'];

const MAX_TOKENS = 64;
const TEMPERATURE = 0.5;
const SYSTEM = 'Answer briefly.';
const PROMPT = 'What is the weather in Paris?';
// A 1×1 transparent PNG.
const PNG_BASE64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=';
const IMAGE_URL = 'https://example.com/cat.png';
const TOOLS = {
  get_weather: { description: 'The weather forecast for a place.', key: 'query' },
  get_time: { description: 'The local time of a place.', key: 'location' },
};
const schema = name => ({ type: 'object', properties: { [TOOLS[name].key]: { type: 'string' } }, required: [TOOLS[name].key] });

// What each preset sends, shared with the Python matrix: tests/sdk/expectations.json (its
// comment says where each value comes from in the sim). Usage is in the sim's terms (`input`
// excludes cached tokens); stop is end | tool | max_tokens; marks are the scripted instants in
// ms from the sim's receipt of the request.
const EXPECTATIONS = JSON.parse(fs.readFileSync(path.join(REPO, 'tests', 'sdk', 'expectations.json'), 'utf8'));
const PRESETS = Object.fromEntries(Object.entries(EXPECTATIONS.presets).filter(([, p]) => p.usage).map(([name, p]) => [name, {
  text: p.text || '', reasoning: p.reasoning, calls: p.calls, stop: p.stop,
  usage: { input: p.usage.input, cacheRead: p.usage.cache_read, cacheWrite: p.usage.cache_write, output: p.usage.output, reasoning: p.usage.reasoning },
}]));
const OVERLOAD_TEXT = EXPECTATIONS.presets['sim-overloaded-in-band'].text; // 5 words, then the error
const OVERLOAD_MESSAGE = EXPECTATIONS.overload_message;
const RATE_LIMIT_MESSAGE = EXPECTATIONS.rate_limit_message;
const SCRIPT_MARKS = Object.fromEntries(Object.entries(EXPECTATIONS.presets).map(([name, p]) => [name, p.marks]));
// A Gemini upstream sends each functionCall whole, at the instant of its last fragment.
const GEMINI_FIRST_CALL_MS = Object.fromEntries(Object.entries(EXPECTATIONS.presets)
  .filter(([, p]) => p.gemini_first_call_ms != null).map(([name, p]) => [name, p.gemini_first_call_ms]));
// Real sockets and real time: a mark may be late by scheduling (by how much depends on the
// machine's load, so it is not asserted; the paused-time Rust test proves exact marks), but
// never earlier than the sim sent it.
const MARK_EARLY_MS = EXPECTATIONS.mark_early_ms;

const STOP = {
  chat: { end: 'stop', tool: 'tool_calls', max_tokens: 'length' },
  responses: { end: 'completed', tool: 'completed', max_tokens: 'incomplete:max_output_tokens' },
  messages: { end: 'end_turn', tool: 'tool_use', max_tokens: 'max_tokens' },
};

/// The usage fields the client's SDK shows for preset usage `u` from an `upstream` sim: OpenAI
/// counts cached tokens in the input, Anthropic does not; Anthropic reports no reasoning tokens;
/// Gemini reports no cache writes (its prompt count holds them).
function expectedUsage(client, upstream, u) {
  const reasoning = upstream === 'messages' ? 0 : u.reasoning;
  if (upstream === 'gemini') u = { ...u, input: u.input + u.cacheWrite, cacheWrite: 0 };
  const total = u.input + u.cacheRead + u.cacheWrite;
  if (client === 'chat') {
    return { prompt_tokens: total, completion_tokens: u.output, cached_tokens: u.cacheRead,
      cache_write_tokens: u.cacheWrite, reasoning_tokens: reasoning };
  }
  if (client === 'responses') {
    return { input_tokens: total, output_tokens: u.output, cached_tokens: u.cacheRead,
      cache_write_tokens: u.cacheWrite, reasoning_tokens: reasoning };
  }
  return { input_tokens: u.input, output_tokens: u.output,
    cache_read_input_tokens: u.cacheRead, cache_creation_input_tokens: u.cacheWrite };
}

function assertUsage(got, expected, at) {
  for (const [key, value] of Object.entries(expected)) {
    // A zero count may be absent in one dialect and 0 in another; a non-zero one must be exact.
    if (value === 0) assert.ok(got[key] == null || got[key] === 0, `${at}: usage ${key} = ${got[key]}, ${JSON.stringify(got)}`);
    else assert.equal(got[key], value, `${at}: usage ${key}, ${JSON.stringify(got)}`);
  }
}

function config() {
  const lines = [];
  for (const d of UPSTREAMS) {
    const models = PRESET_NAMES.map(p => `"${via(d, p)}" = "${p}"`).join(', ');
    lines.push('[[channels]]', `name = "sim-${d}"`, 'provider = "sim"', `dialect = "${d}"`, `models = { ${models} }`,
      // The same failing model is asked many times in a row on purpose.
      'circuit = { consecutive_failures = 100000, min_requests = 100000 }', '',
      // A 429 is relayed at once instead of waiting out its Retry-After on the only channel.
      '[[routes]]', `model = "${via(d, 'sim-rate-limited')}"`, 'failover = { max_attempts = 1 }', '');
  }
  return lines.join('\n');
}

/// A preset whose script pins no input (`sim-fast`, `input: null`) reports the body the sim was
/// sent, a token per four bytes rounded up. Untranslated, that is the client's body with the
/// mapped model name spliced in (its size is the row's `bytes_in`); translated, the test cannot
/// see it, so the count the sim answered (the row's) stands, and the SDK must get the same.
async function withCountedInput(gw, usage, id, { model, name, relayed }) {
  if (usage.input != null) return usage;
  const row = await storedRequest(gw, id);
  assert.ok(row.input_tokens >= 1, JSON.stringify(row));
  if (relayed) {
    const sent = row.bytes_in - model.length + name.length;
    assert.equal(row.input_tokens, Math.ceil(sent / 4), JSON.stringify(row));
  }
  return { ...usage, input: row.input_tokens };
}

async function assertRow(gw, id, { client, upstream, stream, model, status, outcome, usage, hasText = true }) {
  assert.match(id || '', /^req_/, 'a request id header');
  const row = await storedRequest(gw, id);
  const at = `row ${id}`;
  assert.equal(row.model, model, at);
  assert.equal(row.dialect, client, at);
  assert.equal(row.client_dialect, client, at);
  assert.equal(row.upstream_dialect, upstream, at);
  assert.equal(row.translated, client !== upstream, at);
  assert.equal(row.stream, stream, at);
  assert.equal(row.status, status, at);
  assert.equal(row.outcome, outcome, at);
  if (usage) {
    // Recorded in the upstream's terms: Gemini reports no cache writes.
    assert.equal(row.input_tokens, usage.input + usage.cacheRead + usage.cacheWrite, at);
    assert.equal(row.output_tokens, usage.output, at);
    assert.equal(row.cache_read_tokens || 0, usage.cacheRead, at);
    assert.equal(row.cache_write_tokens || 0, upstream === 'gemini' ? 0 : usage.cacheWrite, at);
  }
  const timing = row.other.timing;
  if (stream && status === 200) {
    assert.equal(typeof timing.first_response_ms, 'number', `${at}: first_response_ms`);
    assert.equal(typeof timing.first_text_delta_ms, hasText ? 'number' : 'object', `${at}: first_text_delta_ms`);
    assertMarks(row, model.split('.').slice(1).join('.'), upstream, at);
  }
  return row;
}

/// The row's marks (offsets from t0, the request's arrival: views.rs `TimingView`) taken from
/// the attempt's dispatch t1 = upstream_done_ms − upstream_ms are the preset's scripted
/// instants or later, never early by more than 1 ms (rounding), and in order.
function assertMarks(row, preset, upstream, at) {
  const timing = row.other.timing;
  assert.equal(typeof timing.upstream_done_ms, 'number', `${at}: upstream_done_ms`);
  assert.equal(typeof row.upstream_ms, 'number', `${at}: upstream_ms`);
  const dispatch = timing.upstream_done_ms - row.upstream_ms;
  assert.ok(dispatch >= -0.01, `${at}: dispatch before arrival`);
  const expected = { ...SCRIPT_MARKS[preset] };
  if (upstream === 'gemini' && GEMINI_FIRST_CALL_MS[preset] != null) expected.first_response_ms = GEMINI_FIRST_CALL_MS[preset];
  const got = {};
  for (const k of Object.keys(expected)) got[k] = timing[k] == null ? null : Math.round((timing[k] - dispatch) * 1000) / 1000;
  const say = `${at}: marks from dispatch ${JSON.stringify(got)}, scripted ${JSON.stringify(expected)}`;
  const seen = Object.keys(expected).map(k => got[k]).filter(v => v != null);
  assert.deepEqual(seen, [...seen].sort((a, b) => a - b), `${say}: out of order`);
  for (const [k, want] of Object.entries(expected)) {
    if (want == null) { assert.equal(got[k], null, `${say}: ${k}`); continue; }
    assert.ok(got[k] != null, `${say}: ${k} missing`);
    assert.ok(got[k] >= want - MARK_EARLY_MS, `${say}: ${k} early`);
  }
}

// Conversations, in the dialect-neutral form each runner turns into its SDK's shapes (as in
// the Python test): ['user', [parts]] with parts 'text:<s>', 'image_url', 'image_base64';
// ['assistant_calls', [[id, name, arguments]]]; ['tool_results', [[id, text, isError]]].
const PLAIN = [['user', [`text:${PROMPT}`]]];

function chatMessages(conversation) {
  const out = [{ role: 'system', content: SYSTEM }];
  for (const [kind, items] of conversation) {
    if (kind === 'user') {
      out.push({ role: 'user', content: items.map(p => {
        if (p.startsWith('text:')) return { type: 'text', text: p.slice(5) };
        if (p === 'image_url') return { type: 'image_url', image_url: { url: IMAGE_URL } };
        return { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG_BASE64}` } };
      }) });
    } else if (kind === 'assistant_calls') {
      out.push({ role: 'assistant', content: null, tool_calls: items.map(([id, name, args]) =>
        ({ id, type: 'function', function: { name, arguments: JSON.stringify(args) } })) });
    } else {
      for (const [id, text, isError] of items) out.push({ role: 'tool', tool_call_id: id, content: isError ? `Error: ${text}` : text });
    }
  }
  return out;
}

function responsesInput(conversation) {
  const out = [];
  for (const [kind, items] of conversation) {
    if (kind === 'user') {
      out.push({ role: 'user', content: items.map(p => {
        if (p.startsWith('text:')) return { type: 'input_text', text: p.slice(5) };
        if (p === 'image_url') return { type: 'input_image', image_url: IMAGE_URL, detail: 'auto' };
        return { type: 'input_image', image_url: `data:image/png;base64,${PNG_BASE64}`, detail: 'auto' };
      }) });
    } else if (kind === 'assistant_calls') {
      for (const [id, name, args] of items) out.push({ type: 'function_call', call_id: id, name, arguments: JSON.stringify(args) });
    } else {
      for (const [id, text, isError] of items) out.push({ type: 'function_call_output', call_id: id, output: isError ? `Error: ${text}` : text });
    }
  }
  return out;
}

function messagesMessages(conversation) {
  const out = [];
  for (const [kind, items] of conversation) {
    if (kind === 'user') {
      out.push({ role: 'user', content: items.map(p => {
        if (p.startsWith('text:')) return { type: 'text', text: p.slice(5) };
        if (p === 'image_url') return { type: 'image', source: { type: 'url', url: IMAGE_URL } };
        return { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG_BASE64 } };
      }) });
    } else if (kind === 'assistant_calls') {
      out.push({ role: 'assistant', content: items.map(([id, name, input]) => ({ type: 'tool_use', id, name, input })) });
    } else {
      out.push({ role: 'user', content: items.map(([id, text, isError]) =>
        ({ type: 'tool_result', tool_use_id: id, content: text, is_error: isError })) });
    }
  }
  return out;
}

/// One conversation in the client's dialect; resolves with what the SDK reconstructed.
async function run(sdks, client, { model, stream, conversation = PLAIN, tools = [] }) {
  const got = { text: '', reasoning: '', calls: [], callIds: [], stop: null, usage: {}, requestId: null };
  if (client === 'chat') {
    const params = { model, messages: chatMessages(conversation), max_completion_tokens: MAX_TOKENS, temperature: TEMPERATURE };
    if (tools.length) params.tools = tools.map(t => ({ type: 'function', function: { name: t, description: TOOLS[t].description, parameters: schema(t) } }));
    if (stream) {
      const { data, response } = await sdks.openai.chat.completions
        .create({ ...params, stream: true, stream_options: { include_usage: true } }).withResponse();
      got.requestId = response.headers.get(REQUEST_ID);
      const calls = new Map();
      let usage = null;
      for await (const chunk of data) {
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices) {
          got.text += c.delta.content || '';
          got.reasoning += c.delta.reasoning_content || '';
          for (const tc of c.delta.tool_calls || []) {
            const call = calls.get(tc.index) || { id: null, name: null, args: '' };
            if (tc.id) call.id = tc.id;
            if (tc.function && tc.function.name) call.name = tc.function.name;
            if (tc.function && tc.function.arguments) call.args += tc.function.arguments;
            calls.set(tc.index, call);
          }
          if (c.finish_reason) got.stop = c.finish_reason;
        }
      }
      const order = [...calls.keys()].sort((a, b) => a - b).map(k => calls.get(k));
      got.calls = order.map(c => [c.name, JSON.parse(c.args)]);
      got.callIds = order.map(c => c.id);
      got.usage = chatUsage(usage);
    } else {
      const { data, response } = await sdks.openai.chat.completions.create(params).withResponse();
      got.requestId = response.headers.get(REQUEST_ID);
      const m = data.choices[0].message;
      got.text = m.content || '';
      got.reasoning = m.reasoning_content || '';
      got.calls = (m.tool_calls || []).map(tc => [tc.function.name, JSON.parse(tc.function.arguments)]);
      got.callIds = (m.tool_calls || []).map(tc => tc.id);
      got.stop = data.choices[0].finish_reason;
      got.usage = chatUsage(data.usage);
    }
  } else if (client === 'responses') {
    const params = { model, instructions: SYSTEM, input: responsesInput(conversation), max_output_tokens: MAX_TOKENS, temperature: TEMPERATURE };
    if (tools.length) params.tools = tools.map(t => ({ type: 'function', name: t, description: TOOLS[t].description, parameters: schema(t), strict: false }));
    let final;
    if (stream) {
      const { data, response } = await sdks.openai.responses.create({ ...params, stream: true }).withResponse();
      got.requestId = response.headers.get(REQUEST_ID);
      let deltas = '';
      let reasoning = '';
      const types = [];
      const terminals = [];
      for await (const ev of data) {
        types.push(ev.type);
        if (ev.type === 'response.output_text.delta') deltas += ev.delta;
        if (ev.type === 'response.reasoning_summary_text.delta') reasoning += ev.delta;
        if (ev.type === 'response.completed' || ev.type === 'response.incomplete') terminals.push(ev.response);
      }
      assert.equal(terminals.length, 1, `one terminal event: ${types}`);
      assert.equal(types[0], 'response.created', `${types}`);
      final = terminals[0];
      assert.equal(deltas, outputText(final), 'the text deltas add up to the output');
      assert.equal(reasoning, reasoningText(final), 'the reasoning deltas add up to the summary');
    } else {
      const { data, response } = await sdks.openai.responses.create(params).withResponse();
      got.requestId = response.headers.get(REQUEST_ID);
      final = data;
    }
    got.text = outputText(final);
    got.reasoning = reasoningText(final);
    const fcs = final.output.filter(i => i.type === 'function_call');
    got.calls = fcs.map(i => [i.name, JSON.parse(i.arguments)]);
    got.callIds = fcs.map(i => i.call_id);
    got.stop = final.status === 'incomplete' && final.incomplete_details
      ? `incomplete:${final.incomplete_details.reason}` : final.status;
    const u = final.usage || {};
    got.usage = { input_tokens: u.input_tokens, output_tokens: u.output_tokens,
      cached_tokens: u.input_tokens_details && u.input_tokens_details.cached_tokens,
      cache_write_tokens: u.input_tokens_details && u.input_tokens_details.cache_write_tokens,
      reasoning_tokens: u.output_tokens_details && u.output_tokens_details.reasoning_tokens };
  } else {
    const params = { model, system: SYSTEM, max_tokens: MAX_TOKENS, temperature: TEMPERATURE, messages: messagesMessages(conversation) };
    if (tools.length) params.tools = tools.map(t => ({ name: t, description: TOOLS[t].description, input_schema: schema(t) }));
    let message;
    let streamed = null;
    if (stream) {
      const s = sdks.anthropic.messages.stream(params);
      const { response } = await s.withResponse();
      got.requestId = response.headers.get(REQUEST_ID);
      streamed = '';
      s.on('text', t => { streamed += t; });
      message = await s.finalMessage();
    } else {
      const { data, response } = await sdks.anthropic.messages.create(params).withResponse();
      got.requestId = response.headers.get(REQUEST_ID);
      message = data;
    }
    for (const b of message.content) {
      if (b.type === 'text') got.text += b.text;
      if (b.type === 'thinking') got.reasoning += b.thinking;
      if (b.type === 'tool_use') { got.calls.push([b.name, b.input]); got.callIds.push(b.id); }
    }
    if (streamed != null) assert.equal(streamed, got.text, 'the text events add up to the final message');
    got.stop = message.stop_reason;
    got.usage = message.usage;
  }
  return got;
}

function chatUsage(u) {
  if (!u) return {};
  const p = u.prompt_tokens_details || {};
  const c = u.completion_tokens_details || {};
  return { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens,
    cached_tokens: p.cached_tokens, cache_write_tokens: p.cache_write_tokens, reasoning_tokens: c.reasoning_tokens };
}

function outputText(response) {
  return response.output.filter(i => i.type === 'message')
    .flatMap(i => i.content).filter(c => c.type === 'output_text').map(c => c.text).join('');
}

function reasoningText(response) {
  return response.output.filter(i => i.type === 'reasoning').flatMap(i => i.summary || []).map(s => s.text).join('');
}

/// The error body is in the client's dialect: Anthropic's `{type: error, error: {type,
/// message}}`, or OpenAI's `{error: {message, type, code}}` with no top-level `type`.
function assertErrorBody(client, caught, anthropicType) {
  if (client === 'messages') {
    assert.equal(caught.error.type, 'error', JSON.stringify(caught.error));
    assert.equal(caught.error.error.type, anthropicType, JSON.stringify(caught.error));
  } else {
    // openai-node keeps the body's `error` object as `.error`.
    assert.ok(caught.error && 'message' in caught.error && 'type' in caught.error && 'code' in caught.error, JSON.stringify(caught.error));
  }
}

function bare(sdks, client, model, stream) {
  if (client === 'chat') {
    return sdks.openai.chat.completions.create({ model, messages: chatMessages(PLAIN), max_completion_tokens: MAX_TOKENS, stream });
  }
  if (client === 'responses') return sdks.openai.responses.create({ model, input: responsesInput(PLAIN), max_output_tokens: MAX_TOKENS, stream });
  return sdks.anthropic.messages.create({ model, max_tokens: MAX_TOKENS, messages: messagesMessages(PLAIN), stream });
}

async function caught(promise, stream) {
  try {
    const s = await promise;
    if (stream) for await (const _ of s) { /* drain */ }
  } catch (e) {
    return e;
  }
  return null;
}

/// Runs `conversation` against sim-echo; checks the answer like any other and returns the
/// summary of what the upstream received, in its own dialect.
async function runEcho(sdks, client, upstream, stream, conversation, tools = []) {
  const model = via(upstream, 'sim-echo');
  const got = await run(sdks, client, { model, stream, conversation, tools });
  const at = `${client} via ${upstream}, stream=${stream}`;
  assert.equal(got.stop, STOP[client].end, at);
  assertUsage(got.usage, expectedUsage(client, upstream, PRESETS['sim-echo'].usage), at);
  await assertRow(gw, got.requestId, { client, upstream, stream, model, status: 200, outcome: 'completed', usage: PRESETS['sim-echo'].usage });
  const summary = JSON.parse(got.text);
  const say = `${at}: ${got.text}`;
  assert.equal(summary.dialect, upstream, say);
  // A Gemini upstream's model and stream are in its URL: null and false in its summary.
  assert.equal(summary.model, upstream === 'gemini' ? null : 'sim-echo', say);
  assert.equal(summary.stream, stream && upstream !== 'gemini', say);
  assert.equal(summary.system, SYSTEM, say);
  assert.equal(summary.max_tokens, MAX_TOKENS, say);
  assert.equal(summary.temperature, TEMPERATURE, say);
  if (upstream === 'chat' && stream) assert.equal(summary.include_usage, true, say);
  return summary;
}

const TOOL_TURNS = [
  ['user', [`text:${PROMPT} And what time is it in Tokyo?`]],
  ['assistant_calls', [['call_1', 'get_weather', { query: 'Paris' }], ['call_2', 'get_time', { location: 'Tokyo' }]]],
  ['tool_results', [['call_1', '22 C and sunny', false], ['call_2', 'no such city', true]]],
];

/// What the upstream received for TOOL_TURNS, in its summary's words (as the Python test).
function expectedToolTurns(client, upstream) {
  const calls = ['tool_call:get_weather:call_1', 'tool_call:get_time:call_2'];
  // Anthropic's is_error reaches an OpenAI upstream as an `Error: ` text, which passes between
  // the OpenAI dialects as it is; an OpenAI client has no flag, so its `Error: ` text reaches
  // Anthropic and Gemini as plain text.
  const flagged = client === 'messages' || upstream === 'chat' || upstream === 'responses';
  const error = flagged ? ':error' : '';
  const results = ['tool_result:call_1', `tool_result:call_2${error}`];
  const user = { role: 'user', parts: ['text'] };
  return {
    chat: [user, { role: 'assistant', parts: calls }, { role: 'tool', parts: results.slice(0, 1) }, { role: 'tool', parts: results.slice(1) }],
    responses: [user, { item: 'function_call', parts: calls.slice(0, 1) }, { item: 'function_call', parts: calls.slice(1) },
      { item: 'function_call_output', parts: results.slice(0, 1) }, { item: 'function_call_output', parts: results.slice(1) }],
    messages: [user, { role: 'assistant', parts: calls }, { role: 'user', parts: results }],
    gemini: [user, { role: 'model', parts: calls },
      { role: 'user', parts: ['tool_result:get_weather:call_1', `tool_result:get_time:call_2${error}`] }],
  }[upstream];
}

// Where each client wrote the URL of the first user message's second part (Chat's
// messages[0] is the system message).
const IMAGE_URL_FIELD = {
  chat: 'messages[1].content[1].image_url.url',
  responses: 'input[0].content[1].image_url',
  messages: 'messages[0].content[1].source',
};

let gw;
let sdks;

before(async () => {
  gw = await startGateway(config());
  sdks = {
    openai: new OpenAI({ apiKey: gw.token, baseURL: gw.base + '/v1', maxRetries: 0, timeout: 10000 }),
    anthropic: new Anthropic({ apiKey: gw.token, baseURL: gw.base, maxRetries: 0, timeout: 10000 }),
  };
});

after(async () => {
  if (gw) await gw.stop();
});

const ANSWERS = [
  ['sim-fast', []],
  ['sim-reasoning', []],
  ['sim-tool-call', ['get_weather']],
  ['sim-parallel-tools', ['get_weather', 'get_time']],
  ['sim-max-tokens', []],
];

for (const client of CLIENTS) {
  for (const upstream of UPSTREAMS) {
    for (const stream of [true, false]) {
      const cell = `${client} via ${upstream}, ${stream ? 'streamed' : 'whole'}`;
      describe(cell, () => {
        for (const [name, tools] of ANSWERS) {
          it(`${name}: the SDK rebuilds the preset's answer and the row says how it went`, async () => {
            const preset = PRESETS[name];
            const model = via(upstream, name);
            const got = await run(sdks, client, { model, stream, tools });
            assert.equal(got.text, preset.text, cell);
            // The Anthropic SDK and Responses surface reasoning; Chat as `reasoning_content`.
            assert.equal(got.reasoning, preset.reasoning, cell);
            assert.deepEqual(got.calls, preset.calls, cell);
            assert.ok(got.callIds.every(Boolean) && new Set(got.callIds).size === got.callIds.length, `${cell}: call ids ${got.callIds}`);
            assert.equal(got.stop, STOP[client][preset.stop], cell);
            const usage = await withCountedInput(gw, preset.usage, got.requestId, { model, name, relayed: client === upstream && upstream !== 'gemini' });
            assertUsage(got.usage, expectedUsage(client, upstream, usage), cell);
            await assertRow(gw, got.requestId, { client, upstream, stream, model, status: 200,
              outcome: preset.stop === 'max_tokens' ? 'incomplete' : 'completed', usage, hasText: Boolean(preset.text) });
          });
        }

        it('sim-echo: text after tool results reaches the upstream in its own shape', async () => {
          const summary = await runEcho(sdks, client, upstream, stream, TOOL_TURNS, ['get_weather', 'get_time']);
          assert.deepEqual(summary.turns, expectedToolTurns(client, upstream), JSON.stringify(summary));
          assert.deepEqual(summary.tools, ['get_weather', 'get_time'], JSON.stringify(summary));
        });

        it('sim-echo: image input by URL and base64 reaches the upstream', async () => {
          // An image URL cannot be carried to Gemini (the next test); its base64 image can.
          const toGemini = upstream === 'gemini';
          const conversation = [['user', toGemini ? ['text:What is in this picture?', 'image_base64']
            : ['text:What is in these two pictures?', 'image_url', 'image_base64']]];
          const summary = await runEcho(sdks, client, upstream, stream, conversation);
          assert.deepEqual(summary.turns, [{ role: 'user', parts: toGemini ? ['text', 'image:base64'] : ['text', 'image:url', 'image:base64'] }],
            JSON.stringify(summary));
          assert.ok(summary.tools == null || summary.tools.length === 0, JSON.stringify(summary));
        });

        if (upstream === 'gemini') {
          it('an image URL to a Gemini upstream: a 400 in the client\'s dialect naming the field', async () => {
            const conversation = [['user', ['text:What is in these two pictures?', 'image_url', 'image_base64']]];
            let err = null;
            try {
              await run(sdks, client, { model: via(upstream, 'sim-echo'), stream, conversation });
            } catch (e) {
              err = e;
            }
            const expected = client === 'messages' ? Anthropic.BadRequestError : OpenAI.BadRequestError;
            assert.ok(err instanceof expected, `expected a BadRequestError, got ${err}`);
            assert.equal(err.status, 400);
            assertErrorBody(client, err, 'invalid_request_error');
            const message = client === 'messages' ? err.error.error.message : err.error.message;
            assert.ok(message.includes(`\`${IMAGE_URL_FIELD[client]}\` cannot be carried`), message);
          });
        }

        it('sim-rate-limited: the SDK raises its RateLimitError', async () => {
          const model = via(upstream, 'sim-rate-limited');
          const expected = client === 'messages' ? Anthropic.RateLimitError : OpenAI.RateLimitError;
          const e = await caught(bare(sdks, client, model, stream), stream);
          assert.ok(e instanceof expected, `expected a RateLimitError, got ${e}`);
          assert.equal(e.status, 429);
          assert.ok(String(e.message).includes(RATE_LIMIT_MESSAGE), e.message);
          assertErrorBody(client, e, 'rate_limit_error');
          assert.equal(e.headers.get('retry-after'), '1');
          await assertRow(gw, e.headers.get(REQUEST_ID), { client, upstream, stream, model, status: 429, outcome: 'upstream_error' });
        });

        it('sim-overloaded-in-band: the text, then the SDK\'s error', async () => {
          const model = via(upstream, 'sim-overloaded-in-band');
          if (!stream) {
            // Not streamed, the sim answers HTTP 529; translated for an OpenAI client it is
            // OpenAI's overload status, 503; untranslated it is the sim's own.
            const status = client === 'messages' || client === upstream ? 529 : 503;
            const expected = client === 'messages' ? Anthropic.InternalServerError : OpenAI.InternalServerError;
            const e = await caught(bare(sdks, client, model, stream), false);
            assert.ok(e instanceof expected, `expected an InternalServerError, got ${e}`);
            assert.equal(e.status, status);
            assert.ok(String(e.message).includes(OVERLOAD_MESSAGE), e.message);
            assertErrorBody(client, e, 'overloaded_error');
            await assertRow(gw, e.headers.get(REQUEST_ID), { client, upstream, stream, model, status, outcome: 'upstream_error' });
            return;
          }
          let text = '';
          let requestId;
          if (client === 'messages') {
            // @anthropic-ai/sdk throws an APIError on `event: error`, after the text it yielded.
            const s = sdks.anthropic.messages.stream({ model, max_tokens: MAX_TOKENS, messages: messagesMessages(PLAIN) });
            s.on('text', t => { text += t; });
            requestId = (await s.withResponse()).response.headers.get(REQUEST_ID);
            const e = await s.finalMessage().then(() => null, err => err);
            assert.ok(e instanceof Anthropic.APIError, `expected an APIError, got ${e}`);
            assert.equal(e.error.error.type, 'overloaded_error', JSON.stringify(e.error));
            assert.ok(String(e.message).includes(OVERLOAD_MESSAGE), e.message);
          } else if (client === 'chat') {
            // openai-node throws an APIError on a chunk carrying `error`.
            const { data, response } = await sdks.openai.chat.completions.create({ model, messages: chatMessages(PLAIN),
              max_completion_tokens: MAX_TOKENS, stream: true, stream_options: { include_usage: true } }).withResponse();
            requestId = response.headers.get(REQUEST_ID);
            const finish = [];
            let e = null;
            try {
              for await (const chunk of data) {
                for (const c of chunk.choices) { text += c.delta.content || ''; if (c.finish_reason) finish.push(c.finish_reason); }
              }
            } catch (err) { e = err; }
            assert.ok(e instanceof OpenAI.APIError, `expected an APIError, got ${e}`);
            assert.ok(String(e.message).includes(OVERLOAD_MESSAGE), e.message);
            assert.deepEqual(finish, [], 'no finish reason before the error');
          } else {
            // openai-node throws on an event whose data has an `error` object (response.failed's
            // is nested in `response`), and yields an `error` event that carries code and message
            // flat: either way, no completed response.
            const { data, response } = await sdks.openai.responses.create({ model, input: responsesInput(PLAIN),
              max_output_tokens: MAX_TOKENS, stream: true }).withResponse();
            requestId = response.headers.get(REQUEST_ID);
            const events = [];
            let e = null;
            try { for await (const ev of data) events.push(ev); } catch (err) { e = err; }
            const types = events.map(ev => ev.type);
            text = events.filter(ev => ev.type === 'response.output_text.delta').map(ev => ev.delta).join('');
            assert.ok(!types.includes('response.completed') && !types.includes('response.incomplete'), `${types}`);
            if (e) {
              assert.ok(String(e.message).includes(OVERLOAD_MESSAGE), e.message);
            } else {
              const errors = events.filter(ev => ev.type === 'error' || ev.type === 'response.failed');
              assert.ok(errors.length, `neither raised nor yielded an error: ${types}`);
              const message = errors[0].type === 'error' ? errors[0].message : errors[0].response.error.message;
              assert.ok(message.includes(OVERLOAD_MESSAGE), message);
            }
          }
          assert.equal(text, OVERLOAD_TEXT);
          await assertRow(gw, requestId, { client, upstream, stream, model, status: 200, outcome: 'upstream_error' });
        });
      });
    }
  }
}
