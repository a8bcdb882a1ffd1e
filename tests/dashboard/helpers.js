// Shared by the dashboard browser tests: run the real `laptime` binary, call it, drive Debian's
// Chromium through playwright-core (never a downloaded browser), and derive a request's
// timeline from the usage API independently of the page's own code.
'use strict';

const { spawn } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const REPO = path.resolve(__dirname, '..', '..');
const BIN = process.env.LAPTIME_BIN || path.join(REPO, 'target', 'debug', 'laptime');
const CHROMIUM = process.env.LAPTIME_CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = path.join(REPO, 'artifacts', 'dashboard');
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

/// Starts `laptime serve` on 127.0.0.1:0 with a temp data dir and a fresh bootstrap token (or
/// `bootstrapToken`, for gateways sharing a store); with `configToml`, from that config file
/// instead of the embedded default.
async function startGateway(configToml, bootstrapToken) {
  if (!fs.existsSync(BIN)) throw new Error(`no gateway binary at ${BIN}: build it (cargo build -p laptime) or set LAPTIME_BIN`);
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'laptime-dash-'));
  const token = bootstrapToken || 'lt_' + crypto.randomBytes(32).toString('hex');
  const args = ['serve', '--listen', '127.0.0.1:0', '--data-dir', dataDir];
  if (configToml) {
    const file = path.join(dataDir, 'laptime.toml');
    fs.writeFileSync(file, configToml);
    args.push('--config', file);
  }
  const child = spawn(BIN, args, {
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
  const gw = {
    base, token, dataDir, child,
    async stop() {
      if (child.exitCode != null) return;
      const done = new Promise(r => child.once('exit', r));
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 10000);
      await done;
      clearTimeout(t);
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
    stderr: () => err,
  };
  const me = await gql(gw, token, '{ me { workspaceId } }');
  gw.workspaceId = me.me.workspaceId;
  return gw;
}

/// A PostgreSQL schema of its own on the test server (`LAPTIME_TEST_POSTGRES_URL`, else the local
/// one `scripts/test` starts), for gateways that share a store; `drop()` removes it.
function pgSchema() {
  const { execFileSync } = require('node:child_process');
  const base = process.env.LAPTIME_TEST_POSTGRES_URL || 'postgres://postgres@127.0.0.1:5432/test';
  const name = 'lt_dash_' + process.pid + '_' + crypto.randomBytes(4).toString('hex');
  const psql = sql => execFileSync('psql', [base, '-v', 'ON_ERROR_STOP=1', '-qc', sql], { stdio: ['ignore', 'ignore', 'pipe'] });
  psql(`CREATE SCHEMA ${name}`);
  const sep = base.includes('?') ? '&' : '?';
  return {
    name,
    url: `${base}${sep}options=-c%20search_path%3D${name}&application_name=${name}`,
    drop() {
      psql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '${name}' AND pid <> pg_backend_pid()`);
      psql(`DROP SCHEMA IF EXISTS ${name} CASCADE`);
    },
  };
}

async function gql(gw, token, query, variables) {
  const res = await fetch(gw.base + '/graphql', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer ' + token },
    body: JSON.stringify({ query, variables: variables || {} }),
  });
  const body = await res.json();
  if (!res.ok || body.errors) throw new Error(`GraphQL ${res.status}: ${JSON.stringify(body.errors)}`);
  return body.data;
}

async function createToken(gw, scope) {
  const d = await gql(gw, gw.token, 'mutation($ws: ID!, $s: Scope!) { createToken(workspaceId: $ws, scope: $s) { token } }',
    { ws: gw.workspaceId, s: scope });
  return d.createToken.token;
}

/// One proxied call; resolves when the whole answer has been read, with its request id.
async function proxy(gw, dialectPath, body) {
  const res = await fetch(gw.base + dialectPath, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer ' + gw.token, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify(body),
  });
  await res.arrayBuffer();
  const id = res.headers.get('x-laptime-request-id');
  if (!id) throw new Error('no x-laptime-request-id on ' + dialectPath);
  return { id, status: res.status, finishedAt: Date.now() };
}

const FIELDS = `requestId model channel dialect stream status outcome timeoutKind classification flags ts latencyMs ttftMs
  upstreamMs cacheReadTokens cacheWriteTokens hedge outputTokens
  inBand { carrier line note }
  timing { authMs distributionMs bodyReadMs upstreamHeadersMs firstSseEventMs firstResponseMs
    firstTextDeltaMs lastEffectiveMs upstreamDoneMs totalHandlerMs visibleOutputTps }
  attempts { channel role won status errorClass startMs headersMs firstByteMs endMs }`;

/// The stored request as the usage API returns it (the recorder writes asynchronously: poll).
async function apiRequest(gw, id) {
  const deadline = Date.now() + 5000;
  for (;;) {
    const d = await gql(gw, gw.token, `query($ws: ID!, $id: ID!) { request(workspaceId: $ws, requestId: $id) { ${FIELDS} } }`,
      { ws: gw.workspaceId, id });
    if (d.request) return d.request;
    if (Date.now() > deadline) throw new Error('request ' + id + ' was not recorded');
    await new Promise(r => setTimeout(r, 50));
  }
}

/// The marks of DESIGN §1 from the usage API's fields, derived here without the page's code:
/// t1 = upstreamDoneMs − upstreamMs (upstreamMs is t6 − t1), t2 = t1 + upstreamHeadersMs
/// (t2 − t1), t3..t7 and tl (the last effective output) are offsets from t0; the local phases
/// are durations.
function expectedMarks(ev) {
  const t = ev.timing;
  const t1 = ev.upstreamMs != null && t.upstreamDoneMs != null ? t.upstreamDoneMs - ev.upstreamMs : null;
  const phases = [t.authMs, t.bodyReadMs, t.distributionMs].filter(v => v != null);
  return {
    local: phases.length ? phases.reduce((a, b) => a + b, 0) : null,
    t1,
    t2: t1 != null && t.upstreamHeadersMs != null ? t1 + t.upstreamHeadersMs : null,
    t3: t.firstSseEventMs, t4: t.firstResponseMs, t5: t.firstTextDeltaMs, tl: t.lastEffectiveMs,
    t6: t.upstreamDoneMs, t7: t.totalHandlerMs,
  };
}

/// The waterfall the issue asks for, as [key, from, to] with absent spans as 'absent':
/// generation ends at the last effective output, and the idle gap after it runs to upstream done.
function expectedSegments(ev) {
  const m = expectedMarks(ev);
  const names = { t2: 'headers', t3: 'event', t4: 'effective', t5: 'visible', tl: 'generation', t6: 'idle', t7: 'tail' };
  const segs = [];
  if (m.local != null) segs.push(['local', 0, m.local]);
  let prev = null;
  let prevAt = m.local || 0;
  let missing = [];
  for (const k of ['t1', 't2', 't3', 't4', 't5', 'tl', 't6', 't7']) {
    if (m[k] == null) { missing.push(k); continue; }
    if (missing.length) segs.push(['absent', prevAt, m[k], missing.join(' ')]);
    else if (prev) segs.push([names[k], prevAt, m[k]]);
    prev = k; prevAt = m[k]; missing = [];
  }
  return segs;
}

/// The dashboard's millisecond format, as its legend states it: 3 decimals under 1 ms, else 1,
/// with thousands separators.
function fmtMs(v) {
  const d = Math.abs(v) < 1 ? 3 : 1;
  return v.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d }) + ' ms';
}

async function launch() {
  const { chromium } = require('playwright-core');
  if (!fs.existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: apt-get install chromium (or set LAPTIME_CHROMIUM)`);
  return chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true });
}

async function screenshot(page, name) {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const file = path.join(ARTIFACTS, name + '.png');
  await page.screenshot({ path: file, fullPage: true });
  return file;
}

function writeArtifact(name, value) {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  fs.writeFileSync(path.join(ARTIFACTS, name), JSON.stringify(value, null, 2) + '\n');
}

/// A page in a browser context of its own (1280×900 unless `options` say otherwise), with the
/// page's errors and console errors collected in `page.errors`.
async function newPage(browser, options) {
  const ctx = await browser.newContext(Object.assign({ viewport: { width: 1280, height: 900 } }, options || {}));
  const page = await ctx.newPage();
  const errors = [];
  page.on('pageerror', e => errors.push(e.message));
  page.on('console', m => { if (m.type() === 'error') errors.push(m.text()); });
  page.errors = errors;
  return page;
}

async function signIn(page, gw, token) {
  await page.goto(gw.base + '/');
  await page.fill('#token', token);
  await page.press('#token', 'Enter');
}

module.exports = {
  ARTIFACTS, startGateway, pgSchema, gql, createToken, proxy, apiRequest, expectedMarks, expectedSegments,
  fmtMs, launch, newPage, screenshot, writeArtifact, signIn,
};
