// The gateway's own rate-limit refusal (issue 14), judged by the official Node SDKs (`openai`,
// `@anthropic-ai/sdk`, `@google/genai`), unmodified, against the real gateway binary: the
// scenarios of tests/sdk/test_rate_limits.py.
//
// Each case makes a workspace of its own through GraphQL (admin), limited to one request a
// minute (and a generous tokens-per-minute, so that both kinds of headers are sent), and calls
// `sim-fast` twice with a proxy token of it: the second call is refused before any upstream is
// asked. The SDK raises its rate-limit error (429, retries disabled) with the dialect's body, and
// the refusal's headers are readable from it; the stored row says `rate_limited` by
// `workspace_rpm`.
'use strict';

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const OpenAI = require('openai');
const Anthropic = require('@anthropic-ai/sdk');
const { GoogleGenAI } = require('@google/genai');
const { startGateway } = require('./gateway');

const REQUEST_ID = 'x-laptime-request-id';
const MODEL = 'sim-fast';
const PROMPT = 'Why was my request refused?';
// High enough never to refuse: it only makes the gateway send the tokens headers too.
const TPM = 1000000;

const CONFIG = `
[[channels]]
name = "sim"
provider = "sim"
models = ["${MODEL}"]
`;

async function gql(gw, query, variables = {}) {
  const res = await fetch(`${gw.base}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer ' + gw.token },
    body: JSON.stringify({ query, variables }),
  });
  assert.equal(res.status, 200);
  const out = await res.json();
  assert.ok(!out.errors, JSON.stringify(out.errors));
  return out.data;
}

/// A new workspace limited to one request a minute, and a proxy token of it.
async function limited(gw) {
  const name = 'sdk-node-limited-' + crypto.randomBytes(4).toString('hex');
  const ws = (await gql(gw, 'mutation($n: String!) { createWorkspace(name: $n) { id } }', { n: name })).createWorkspace.id;
  const set = (await gql(gw, 'mutation($ws: ID!, $tpm: Int) { setLimits(workspaceId: $ws, rpm: 1, tpm: $tpm) { rpm tpm } }', { ws, tpm: TPM })).setLimits;
  assert.deepEqual(set, { rpm: 1, tpm: TPM });
  const token = (await gql(gw, 'mutation($ws: ID!) { createToken(workspaceId: $ws, scope: PROXY) { token } }', { ws })).createToken.token;
  return { ws, token };
}

/// The SDK's error from `call`, which must fail.
async function refusal(call) {
  try {
    await call();
  } catch (e) {
    return e;
  }
  assert.fail('the second call in the minute was admitted');
}

function assertRetryAfterWithinAMinute(headers) {
  // One request a minute, just spent: the next fits within a minute (less the first call's
  // time, seconds on a busy machine with a debug build).
  const after = Number(headers.get('retry-after'));
  assert.ok(Number.isInteger(after) && after >= 1 && after <= 60, `retry-after ${headers.get('retry-after')}`);
}

/// The stored row, read through GraphQL (admin; REST reads the caller's own workspace).
async function assertRefusedByWorkspaceRpm(gw, ws, id, dialect) {
  const query = 'query($ws: ID!, $id: ID!) { request(workspaceId: $ws, requestId: $id) { outcome status dialect refusedBy } }';
  const deadline = Date.now() + 3000;
  let row = null;
  while (row == null && Date.now() < deadline) {
    row = (await gql(gw, query, { ws, id })).request;
    if (row == null) await new Promise(r => setTimeout(r, 50)); // written asynchronously
  }
  assert.deepEqual(row, { outcome: 'rate_limited', status: 429, dialect, refusedBy: 'workspace_rpm' });
}

describe('the gateway\'s rate-limit refusal through the official Node SDKs', () => {
  let gw;
  before(async () => { gw = await startGateway(CONFIG); });
  after(async () => { await gw.stop(); });

  for (const stream of [false, true]) {
    it(`openai chat (${stream ? 'streamed' : 'whole'}): RateLimitError with the OpenAI body and x-ratelimit-* headers`, async () => {
      const lim = await limited(gw);
      const client = new OpenAI({ apiKey: lim.token, baseURL: `${gw.base}/v1`, maxRetries: 0, timeout: 10000 });
      const call = async () => {
        const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: PROMPT }], stream });
        if (!stream) return r.choices[0].message.content;
        let text = '';
        for await (const chunk of r) text += chunk.choices[0]?.delta?.content ?? '';
        return text;
      };
      assert.ok(await call());
      const e = await refusal(call);
      assert.ok(e instanceof OpenAI.RateLimitError, `expected a RateLimitError, got ${e}`);
      assert.equal(e.status, 429);
      // openai-node keeps the body's `error` object as `.error`, and its type and code.
      assert.equal(e.type, 'rate_limit_error', JSON.stringify(e.error));
      assert.equal(e.code, 'rate_limit_exceeded', JSON.stringify(e.error));
      assert.ok(e.error.message.includes('workspace_rpm'), e.error.message);
      assertRetryAfterWithinAMinute(e.headers);
      assert.equal(e.headers.get('x-ratelimit-limit-requests'), '1');
      assert.equal(e.headers.get('x-ratelimit-remaining-requests'), '0');
      assert.match(e.headers.get('x-ratelimit-reset-requests'), /s$/);
      assert.equal(e.headers.get('x-ratelimit-limit-tokens'), String(TPM));
      // The first request's tokens were settled and refilled within moments: a count, not a refusal.
      const tokensLeft = Number(e.headers.get('x-ratelimit-remaining-tokens'));
      assert.ok(Number.isInteger(tokensLeft) && tokensLeft >= 0 && tokensLeft <= TPM, String(tokensLeft));
      await assertRefusedByWorkspaceRpm(gw, lim.ws, e.headers.get(REQUEST_ID), 'chat');
    });

    it(`anthropic messages (${stream ? 'streamed' : 'whole'}): RateLimitError with the Anthropic body and anthropic-ratelimit-* headers`, async () => {
      const lim = await limited(gw);
      const client = new Anthropic({ apiKey: lim.token, baseURL: gw.base, maxRetries: 0, timeout: 10000 });
      const params = { model: MODEL, max_tokens: 64, messages: [{ role: 'user', content: PROMPT }] };
      const call = async () => {
        const m = stream ? await client.messages.stream(params).finalMessage() : await client.messages.create(params);
        return m.content[0].text;
      };
      assert.ok(await call());
      const e = await refusal(call);
      assert.ok(e instanceof Anthropic.RateLimitError, `expected a RateLimitError, got ${e}`);
      assert.equal(e.status, 429);
      assert.equal(e.error.type, 'error', JSON.stringify(e.error));
      assert.equal(e.error.error.type, 'rate_limit_error', JSON.stringify(e.error));
      assert.ok(e.error.error.message.includes('workspace_rpm'), e.error.error.message);
      assertRetryAfterWithinAMinute(e.headers);
      assert.equal(e.headers.get('anthropic-ratelimit-requests-limit'), '1');
      assert.equal(e.headers.get('anthropic-ratelimit-requests-remaining'), '0');
      assert.match(e.headers.get('anthropic-ratelimit-requests-reset'), /T.*Z$/);
      assert.equal(e.headers.get('anthropic-ratelimit-tokens-limit'), String(TPM));
      await assertRefusedByWorkspaceRpm(gw, lim.ws, e.headers.get(REQUEST_ID), 'messages');
    });
  }

  it('gemini: the SDK\'s ApiError says 429 RESOURCE_EXHAUSTED', async () => {
    const lim = await limited(gw);
    const client = new GoogleGenAI({ apiKey: lim.token, httpOptions: { baseUrl: gw.base, timeout: 10000 } });
    const call = () => client.models.generateContent({ model: MODEL, contents: PROMPT });
    assert.ok((await call()).text);
    const e = await refusal(call);
    assert.equal(e.status, 429, String(e));
    // @google/genai puts the error body's JSON in its message.
    const body = JSON.parse(e.message.slice(e.message.indexOf('{')));
    assert.equal(body.error.code, 429, e.message);
    assert.equal(body.error.status, 'RESOURCE_EXHAUSTED', e.message);
    assert.ok(body.error.message.includes('workspace_rpm'), e.message);
  });
});
