// The official Node SDKs (`openai` Chat Completions and Responses, `@anthropic-ai/sdk`) against
// the real gateway binary, as clients of every dialect against a sim channel pinned to every
// dialect (the same one as a control, the other two translated), streamed and whole: plain
// text, one tool call, and an upstream 429. The smaller sibling of tests/sdk/test_translation.py;
// the expected values are the sim presets' definitions (crates/laptime-sim/src/script.rs,
// `scenario`), never what the gateway answered.
'use strict';

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const OpenAI = require('openai');
const Anthropic = require('@anthropic-ai/sdk');

const REPO = path.resolve(__dirname, '..', '..');
const BIN = process.env.LAPTIME_BIN || path.join(REPO, 'target', 'debug', 'laptime');
const DIALECTS = ['chat', 'responses', 'messages'];
const REQUEST_ID = 'x-laptime-request-id';
const via = (upstream, preset) => `via-${upstream}/${preset}`;

// What each preset sends, in the sim's terms (`input` excludes cached tokens).
const PRESETS = {
  'sim-fast': {
    text: 'Sure, here is the short answer: the request waited in a queue, the',
    calls: [], stop: 'end', usage: { input: 10, cacheRead: 0, cacheWrite: 0, output: 16 },
  },
  'sim-tool-call': {
    text: '', calls: [['get_weather', { query: 'weather in Paris tomorrow' }]], stop: 'tool',
    usage: { input: 30, cacheRead: 16, cacheWrite: 0, output: 4 },
  },
};
const RATE_LIMIT_MESSAGE = 'Rate limit reached for requests';

const STOP = {
  chat: { end: 'stop', tool: 'tool_calls' },
  responses: { end: 'completed', tool: 'completed' },
  messages: { end: 'end_turn', tool: 'tool_use' },
};

/// The usage fields the client's SDK shows: OpenAI counts cached tokens in the input,
/// Anthropic does not.
function expectedUsage(client, u) {
  const total = u.input + u.cacheRead + u.cacheWrite;
  if (client === 'chat') return { prompt_tokens: total, completion_tokens: u.output, cached_tokens: u.cacheRead };
  if (client === 'responses') return { input_tokens: total, output_tokens: u.output, cached_tokens: u.cacheRead };
  return {
    input_tokens: u.input, output_tokens: u.output,
    cache_read_input_tokens: u.cacheRead, cache_creation_input_tokens: u.cacheWrite,
  };
}

function assertUsage(got, expected, at) {
  for (const [key, value] of Object.entries(expected)) {
    // A zero count may be absent in one dialect and 0 in another; a non-zero one must be exact.
    if (value === 0) assert.ok(got[key] == null || got[key] === 0, `${at}: usage ${key} = ${got[key]}`);
    else assert.equal(got[key], value, `${at}: usage ${key}`);
  }
}

function config() {
  const lines = [];
  for (const d of DIALECTS) {
    const models = ['sim-fast', 'sim-tool-call', 'sim-rate-limited'].map(p => `"${via(d, p)}" = "${p}"`).join(', ');
    lines.push('[[channels]]', `name = "sim-${d}"`, 'provider = "sim"', `dialect = "${d}"`, `models = { ${models} }`,
      // The same failing model is asked many times in a row on purpose.
      'circuit = { consecutive_failures = 100000, min_requests = 100000 }', '',
      // A 429 is relayed at once instead of waiting out its Retry-After on the only channel.
      '[[routes]]', `model = "${via(d, 'sim-rate-limited')}"`, 'failover = { max_attempts = 1 }', '');
  }
  return lines.join('\n');
}

/// `laptime serve --config` on 127.0.0.1:0 with a temp data dir and a fresh bootstrap token.
async function startGateway() {
  if (!fs.existsSync(BIN)) throw new Error(`no gateway binary at ${BIN}: build it (cargo build -p laptime) or set LAPTIME_BIN`);
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'laptime-sdk-node-'));
  const configPath = path.join(dataDir, 'config.toml');
  fs.writeFileSync(configPath, config());
  const token = 'lt_' + crypto.randomBytes(32).toString('hex');
  const child = spawn(BIN, ['serve', '--config', configPath, '--listen', '127.0.0.1:0', '--data-dir', path.join(dataDir, 'data')], {
    env: Object.assign({}, process.env, { LAPTIME_BOOTSTRAP_TOKEN: token, RUST_LOG: process.env.RUST_LOG || 'warn' }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr.on('data', d => { err += d; if (err.length > 200000) err = err.slice(-100000); });
  const base = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the gateway did not start in 20 s:\n' + out + err)), 20000);
    child.stdout.on('data', d => {
      out += d;
      const m = /laptime listening on (http:\/\/[0-9.:]+)/.exec(out);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    child.on('exit', code => { clearTimeout(timer); reject(new Error(`the gateway exited (${code}) before listening:\n${out}${err}`)); });
  });
  child.removeAllListeners('exit');
  return {
    base, token,
    async stop() {
      if (child.exitCode != null) throw new Error(`the gateway exited on its own (${child.exitCode}):\n${err}`);
      const done = new Promise(r => child.once('exit', (code, signal) => r({ code, signal })));
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 10000);
      const { code } = await done;
      clearTimeout(t);
      fs.rmSync(dataDir, { recursive: true, force: true });
      assert.equal(code, 0, 'the gateway exits cleanly on SIGTERM:\n' + err.slice(-4000));
    },
  };
}

/// GET /api/requests/{id}; the row is written asynchronously, so poll.
async function storedRequest(gw, id) {
  const deadline = Date.now() + 3000;
  let last = 'no attempt';
  for (;;) {
    const res = await fetch(`${gw.base}/api/requests/${id}`, { headers: { authorization: 'Bearer ' + gw.token } });
    if (res.ok) {
      const row = await res.json();
      if (row.outcome != null) return row;
      last = 'no outcome yet';
    } else {
      last = `HTTP ${res.status}`;
    }
    if (Date.now() > deadline) throw new Error(`request ${id} not stored within 3 s (${last})`);
    await new Promise(r => setTimeout(r, 50));
  }
}

async function assertRow(gw, id, { client, upstream, stream, model, status, outcome, usage }) {
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
    assert.equal(row.input_tokens, usage.input + usage.cacheRead + usage.cacheWrite, at);
    assert.equal(row.output_tokens, usage.output, at);
    assert.equal(row.cache_read_tokens || 0, usage.cacheRead, at);
    assert.equal(row.cache_write_tokens || 0, usage.cacheWrite, at);
  }
  if (stream && status === 200) {
    assert.equal(typeof row.other.timing.first_response_ms, 'number', `${at}: first_response_ms`);
  }
}

const PROMPT = 'What is the weather in Paris?';
const TOOL = { name: 'get_weather', description: 'The weather forecast for a place.',
  schema: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] } };

/// One conversation in the client's dialect; resolves with what the SDK reconstructed.
async function run(sdks, client, model, stream, tools) {
  const got = { text: '', calls: [], stop: null, usage: {}, requestId: null };
  if (client === 'chat') {
    const params = { model, messages: [{ role: 'user', content: PROMPT }], max_completion_tokens: 64 };
    if (tools) params.tools = [{ type: 'function', function: { name: TOOL.name, description: TOOL.description, parameters: TOOL.schema } }];
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
          for (const tc of c.delta.tool_calls || []) {
            const call = calls.get(tc.index) || { name: null, args: '' };
            if (tc.function && tc.function.name) call.name = tc.function.name;
            if (tc.function && tc.function.arguments) call.args += tc.function.arguments;
            calls.set(tc.index, call);
          }
          if (c.finish_reason) got.stop = c.finish_reason;
        }
      }
      got.calls = [...calls.keys()].sort().map(k => [calls.get(k).name, JSON.parse(calls.get(k).args)]);
      got.usage = chatUsage(usage);
    } else {
      const { data, response } = await sdks.openai.chat.completions.create(params).withResponse();
      got.requestId = response.headers.get(REQUEST_ID);
      const m = data.choices[0].message;
      got.text = m.content || '';
      got.calls = (m.tool_calls || []).map(tc => [tc.function.name, JSON.parse(tc.function.arguments)]);
      got.stop = data.choices[0].finish_reason;
      got.usage = chatUsage(data.usage);
    }
  } else if (client === 'responses') {
    const params = { model, input: PROMPT, max_output_tokens: 64 };
    if (tools) params.tools = [{ type: 'function', name: TOOL.name, description: TOOL.description, parameters: TOOL.schema, strict: false }];
    let final;
    if (stream) {
      const { data, response } = await sdks.openai.responses.create({ ...params, stream: true }).withResponse();
      got.requestId = response.headers.get(REQUEST_ID);
      let deltas = '';
      const terminals = [];
      for await (const ev of data) {
        if (ev.type === 'response.output_text.delta') deltas += ev.delta;
        if (ev.type === 'response.completed' || ev.type === 'response.incomplete') terminals.push(ev.response);
      }
      assert.equal(terminals.length, 1, 'one terminal event');
      final = terminals[0];
      assert.equal(deltas, final.output_text || outputText(final), 'the deltas add up to the output');
    } else {
      const { data, response } = await sdks.openai.responses.create(params).withResponse();
      got.requestId = response.headers.get(REQUEST_ID);
      final = data;
    }
    got.text = outputText(final);
    got.calls = final.output.filter(i => i.type === 'function_call').map(i => [i.name, JSON.parse(i.arguments)]);
    got.stop = final.status;
    const u = final.usage || {};
    got.usage = { input_tokens: u.input_tokens, output_tokens: u.output_tokens,
      cached_tokens: u.input_tokens_details && u.input_tokens_details.cached_tokens };
  } else {
    const params = { model, max_tokens: 64, messages: [{ role: 'user', content: PROMPT }] };
    if (tools) params.tools = [{ name: TOOL.name, description: TOOL.description, input_schema: TOOL.schema }];
    let message;
    if (stream) {
      const s = sdks.anthropic.messages.stream(params);
      const { response } = await s.withResponse();
      got.requestId = response.headers.get(REQUEST_ID);
      let streamed = '';
      s.on('text', t => { streamed += t; });
      message = await s.finalMessage();
      got.streamed = streamed;
    } else {
      const { data, response } = await sdks.anthropic.messages.create(params).withResponse();
      got.requestId = response.headers.get(REQUEST_ID);
      message = data;
    }
    for (const b of message.content) {
      if (b.type === 'text') got.text += b.text;
      if (b.type === 'tool_use') got.calls.push([b.name, b.input]);
    }
    if (stream) assert.equal(got.streamed, got.text, 'the text events add up to the final message');
    got.stop = message.stop_reason;
    got.usage = message.usage;
  }
  return got;
}

function chatUsage(u) {
  if (!u) return {};
  return { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens,
    cached_tokens: u.prompt_tokens_details && u.prompt_tokens_details.cached_tokens };
}

function outputText(response) {
  return response.output.filter(i => i.type === 'message')
    .flatMap(i => i.content).filter(c => c.type === 'output_text').map(c => c.text).join('');
}

async function rateLimited(sdks, client, model, stream) {
  if (client === 'chat') {
    return sdks.openai.chat.completions.create({ model, messages: [{ role: 'user', content: PROMPT }], stream });
  }
  if (client === 'responses') return sdks.openai.responses.create({ model, input: PROMPT, stream });
  return sdks.anthropic.messages.create({ model, max_tokens: 64, messages: [{ role: 'user', content: PROMPT }], stream });
}

let gw;
let sdks;

before(async () => {
  gw = await startGateway();
  sdks = {
    openai: new OpenAI({ apiKey: gw.token, baseURL: gw.base + '/v1', maxRetries: 0, timeout: 10000 }),
    anthropic: new Anthropic({ apiKey: gw.token, baseURL: gw.base, maxRetries: 0, timeout: 10000 }),
  };
});

after(async () => {
  if (gw) await gw.stop();
});

for (const client of DIALECTS) {
  for (const upstream of DIALECTS) {
    for (const stream of [true, false]) {
      const cell = `${client} via ${upstream}, ${stream ? 'streamed' : 'whole'}`;
      describe(cell, () => {
        for (const [name, preset, tools] of [['sim-fast', PRESETS['sim-fast'], false], ['sim-tool-call', PRESETS['sim-tool-call'], true]]) {
          it(`${name}: the SDK rebuilds the preset's answer and the row says how it went`, async () => {
            const model = via(upstream, name);
            const got = await run(sdks, client, model, stream, tools);
            assert.equal(got.text, preset.text);
            assert.deepEqual(got.calls, preset.calls);
            assert.equal(got.stop, STOP[client][preset.stop]);
            assertUsage(got.usage, expectedUsage(client, preset.usage), cell);
            await assertRow(gw, got.requestId, { client, upstream, stream, model, status: 200, outcome: 'completed', usage: preset.usage });
          });
        }

        it('sim-rate-limited: the SDK raises its RateLimitError', async () => {
          const model = via(upstream, 'sim-rate-limited');
          const expected = client === 'messages' ? Anthropic.RateLimitError : OpenAI.RateLimitError;
          let caught;
          try {
            const s = await rateLimited(sdks, client, model, stream);
            if (stream) for await (const _ of s) { /* drain */ }
          } catch (e) {
            caught = e;
          }
          assert.ok(caught instanceof expected, `expected a RateLimitError, got ${caught}`);
          assert.equal(caught.status, 429);
          assert.ok(String(caught.message).includes(RATE_LIMIT_MESSAGE), caught.message);
          if (client === 'messages') assert.equal(caught.error.type, 'error');
          else assert.equal(caught.error.type === 'error', false, 'an OpenAI-shaped error');
          assert.equal(caught.headers.get('retry-after'), '1');
          await assertRow(gw, caught.headers.get(REQUEST_ID), { client, upstream, stream, model, status: 429, outcome: 'upstream_error' });
        });
      });
    }
  }
}
