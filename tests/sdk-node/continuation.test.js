// Continuation after a cut through the official Node SDKs (`openai` Chat Completions and
// Responses, `@anthropic-ai/sdk`), as tests/sdk/test_continuation.py does in Python: a stream
// the upstream cuts after 40 of 60 tokens, or stalls after 20, is continued by the second
// channel and each SDK gets the whole canonical answer; a second channel that refuses the
// prefill leaves the SDK the cut's own in-band error.
'use strict';

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const OpenAI = require('openai');
const Anthropic = require('@anthropic-ai/sdk');
const { startGateway, storedRequest } = require('./gateway');

const REQUEST_ID = 'x-laptime-request-id';
const CUT_MESSAGE = 'closed the stream before it was complete';
const MESSAGES = [{ role: 'user', content: 'Tell me something.' }];

// The same channels as tests/sdk/conftest.py `continuation_config`.
const CONFIG = [
  '[[channels]]', 'name = "first"', 'provider = "sim"',
  'models = { "m-cut" = "sim-cut-after-40", "m-stall" = "sim-stall-after-20", "m-refused" = "sim-cut-after-40" }', '',
  '[[channels]]', 'name = "second"', 'provider = "sim"', 'dialect = "messages"', 'priority = 1',
  'models = { "m-cut" = "sim-long", "m-stall" = "sim-long", "m-refused" = "sim-prefill-refused", "m-long" = "sim-long" }', '',
  '[[routes]]', 'model = "m-stall"', 'timeouts = { idle_ms = 1000 }', '',
].join('\n');

/// Streams `model` in `client`'s SDK: { text, id, error } (the error the SDK raised or yielded).
async function stream(sdk, client, model) {
  let text = '';
  let error = null;
  let id = null;
  try {
    if (client === 'chat') {
      const { data, response } = await sdk.openai.chat.completions
        .create({ model, messages: MESSAGES, stream: true }).withResponse();
      id = response.headers.get(REQUEST_ID);
      for await (const chunk of data) for (const c of chunk.choices) text += c.delta.content || '';
    } else if (client === 'responses') {
      const { data, response } = await sdk.openai.responses
        .create({ model, input: 'Tell me something.', stream: true }).withResponse();
      id = response.headers.get(REQUEST_ID);
      for await (const e of data) {
        if (e.type === 'response.output_text.delta') text += e.delta;
        if (e.type === 'error') error = e.message;
      }
    } else {
      const s = sdk.anthropic.messages.stream({ model, messages: MESSAGES, max_tokens: 64 });
      const { response } = await s.withResponse();
      id = response.headers.get(REQUEST_ID);
      for await (const e of s) {
        if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') text += e.delta.text;
      }
    }
  } catch (e) {
    error = String(e && e.message || e);
  }
  return { text, id, error };
}

describe('continuation after a cut, through the official Node SDKs', () => {
  let gw;
  let sdk;
  let canonical;
  before(async () => {
    gw = await startGateway(CONFIG);
    sdk = {
      openai: new OpenAI({ apiKey: gw.token, baseURL: `${gw.base}/v1`, maxRetries: 0, timeout: 10000 }),
      anthropic: new Anthropic({ apiKey: gw.token, baseURL: gw.base, maxRetries: 0, timeout: 10000 }),
    };
    canonical = (await stream(sdk, 'messages', 'm-long')).text;
    assert.ok(canonical.split(' ').length >= 50, canonical);
  });
  after(async () => { if (gw) await gw.stop(); });

  for (const client of ['chat', 'responses', 'messages']) {
    for (const model of ['m-cut', 'm-stall']) {
      it(`${client} ${model}: the whole canonical answer, continued`, async () => {
        const got = await stream(sdk, client, model);
        assert.equal(got.error, null, `${client} ${model}: ${got.error}`);
        assert.equal(got.text, canonical, `${client} ${model}`);
        const row = await storedRequest(gw, got.id);
        assert.equal(row.outcome, 'completed');
        assert.ok(row.flags.includes('continued'), JSON.stringify(row.flags));
        assert.deepEqual(row.attempts.map(a => [a.channel, a.role]), [['first', 'primary'], ['second', 'continuation']]);
      });
    }
    it(`${client}: a refused prefill leaves the cut's own error`, async () => {
      const got = await stream(sdk, client, 'm-refused');
      assert.ok(got.error && got.error.includes(CUT_MESSAGE), `${client}: ${got.error}`);
      assert.ok(!got.error.includes('prefill'), got.error);
      assert.ok(got.text.length > 0 && canonical.startsWith(got.text), got.text);
      assert.ok(got.text.length < canonical.length);
      const row = await storedRequest(gw, got.id);
      assert.equal(row.outcome, 'upstream_closed_early');
      assert.deepEqual(row.attempts.filter(a => a.channel === 'second').map(a => [a.role, a.status]), [['continuation', 400]]);
    });
  }
});
