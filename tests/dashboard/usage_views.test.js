// The overview's usage controls, cost and fleet views (issues 17, 14 and 13), in real headless
// Chromium against two real gateway processes sharing one PostgreSQL store (a schema of their
// own), named `gw-a` and `gw-b`. One model is priced, the other is not. Requests of two shapes
// (streamed without tools, not streamed with tools) go through both; the page's counts,
// percentiles, populations, costs and per-instance counts are checked against what the usage
// API answers for the same window and filter, asked by the test itself.
'use strict';

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const H = require('./helpers');

const CHAT = '/v1/chat/completions';
const user = [{ role: 'user', content: 'hi' }];
const config = (instance, storeUrl) => `
[server]
instance = "${instance}"

[store]
url = ${JSON.stringify(storeUrl)}

[[channels]]
name = "sim"
provider = "sim"
models = ["sim-fast", "sim-free"]

[[prices]]
model = "sim-fast"
input_per_mtok = 3.0
output_per_mtok = 15.0
`;
const TOOLS = [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } }];
const sim = extra => Object.assign({ headers_ms: 20, first_text_ms: 40, text_tokens: 4, tokens_per_s: 200 }, extra || {});
// Streamed, no tools, max 100 output tokens.
const STREAMED = { model: 'sim-fast', stream: true, max_tokens: 100, messages: user, laptime_sim: sim() };
// Not streamed, one tool declared.
const WITH_TOOLS = { model: 'sim-fast', messages: user, tools: TOOLS, laptime_sim: sim({ headers_ms: 60 }) };
// A model no price covers.
const UNPRICED = { model: 'sim-free', stream: true, messages: user, laptime_sim: sim() };
// Cut after two text deltas, before the usage frame: billed on estimated tokens, and an error.
const CUT = { model: 'sim-fast', stream: true, messages: user,
  laptime_sim: { first_text_ms: 30, text_tokens: 6, tokens_per_s: 100, cut_after: 2, end: 'close' } };

let schema;
let a;
let b;
let browser;

before(async () => {
  schema = H.pgSchema();
  const token = 'lt_' + crypto.randomBytes(32).toString('hex');
  a = await H.startGateway(config('gw-a', schema.url), token);
  b = await H.startGateway(config('gw-b', schema.url), token);
  browser = await H.launch();
  const sends = [];
  for (let i = 0; i < 3; i++) sends.push(H.proxy(a, CHAT, STREAMED));
  for (let i = 0; i < 2; i++) sends.push(H.proxy(a, CHAT, WITH_TOOLS));
  for (let i = 0; i < 2; i++) sends.push(H.proxy(a, CHAT, UNPRICED));
  for (let i = 0; i < 2; i++) sends.push(H.proxy(b, CHAT, WITH_TOOLS));
  sends.push(H.proxy(b, CHAT, CUT));
  const ids = (await Promise.all(sends)).map(s => s.id);
  // Every record is in the shared store before a page reads it.
  for (const id of ids) await H.apiRequest(a, id);
});

after(async () => {
  if (browser) await browser.close();
  if (a) await a.stop();
  if (b) await b.stop();
  if (schema) schema.drop();
});

async function signedIn(hash) {
  const page = await H.newPage(browser);
  await H.signIn(page, a, a.token);
  await page.waitForSelector('#nav:not([hidden])');
  if (hash) await page.evaluate(x => { location.hash = x; }, hash);
  return page;
}

/// The overview drawn for `want` (a population line), and the window it used.
async function overviewFor(page, want) {
  await page.waitForFunction(w => {
    const p = document.querySelector('#population');
    return p && p.textContent.startsWith('Population: ' + w + ' (');
  }, want, { timeout: 10000 });
  const o = await page.evaluate(() => window.__laptimeOverview);
  return { from: o.from, to: o.to };
}

const STATS = 'p50 p95 p99 count';
async function apiUsage(win, filter, groupBy) {
  const d = await H.gql(a, a.token, `query($ws: ID!, $w: WindowInput, $f: UsageFilterInput, $g: [GroupDimension!]) {
    usage(workspaceId: $ws, window: $w, filter: $f, groupBy: $g) {
      population { description requestCount }
      rollup { requestCount errorCount costUsd costUnpricedCount costEstimatedCount latencyMs { ${STATS} } firstTextDeltaMs { ${STATS} } }
      groups { key { value } population { description requestCount } rollup { requestCount costUsd costUnpricedCount latencyMs { ${STATS} } } }
      recent(limit: 500) { requestId instance outcome costUsd costEstimated } } }`,
  { ws: a.workspaceId, w: { from: win.from, to: win.to }, f: filter || null, g: groupBy || null });
  return d.usage;
}

/// The dashboard's USD format, as its column title states it: six decimals under a cent.
const usd = v => '$' + v.toFixed(v !== 0 && Math.abs(v) < 0.01 ? 6 : 4);

describe('usage controls, cost and fleet views', () => {
  it('filters the overview by a chosen dimension, keeps it in the URL, and shows what the API answers', async () => {
    const page = await signedIn('#/overview?range=15m');
    await overviewFor(page, 'all requests');
    await page.selectOption('#o-stream', 'false');
    const win = await overviewFor(page, 'stream=false');
    assert.match(await page.evaluate(() => location.hash), /[?&]stream=false(&|$)/);
    const api = await apiUsage(win, { stream: false });
    // Four requests were not streamed (two through each gateway): the API and the page say so.
    assert.equal(api.rollup.requestCount, 4);
    assert.equal(api.population.description, 'stream=false');
    assert.equal(await page.locator('#population').textContent(), 'Population: stream=false (4 requests)');
    assert.match(await page.locator('#summary').textContent(), /^4\s*requests/);
    assert.equal(await page.locator('#summary [data-p95="latencyMs"]').textContent(), H.fmtMs(api.rollup.latencyMs.p95));
    // Every percentile of the total's legend is the API's, with the population beside it.
    for (const p of ['p50', 'p95', 'p99']) {
      const text = await page.locator(`section[data-metric="latencyMs"] li[data-pct="${p}"]`).textContent();
      assert.equal(text, `${p} ${H.fmtMs(api.rollup.latencyMs[p])} · n = 4 · errors 0.0 % · stream=false`);
    }
    // Not streamed: no first visible text to rank, and the page says absent, not 0.
    assert.equal(api.rollup.firstTextDeltaMs.count, 0);
    assert.equal(await page.locator('#summary [data-p95="firstTextDeltaMs"]').textContent(), '—');

    // A shared link opens the same view in another tab.
    const hash = await page.evaluate(() => location.hash);
    const other = await signedIn(hash);
    await overviewFor(other, 'stream=false');
    assert.equal(await other.locator('#o-stream').inputValue(), 'false');
    assert.equal(await other.locator('#population').textContent(), 'Population: stream=false (4 requests)');
    await other.context().close();

    // The streamed ones: the other shape.
    await page.selectOption('#o-stream', 'true');
    const win2 = await overviewFor(page, 'stream=true');
    const streamed = await apiUsage(win2, { stream: true });
    assert.equal(streamed.rollup.requestCount, 6);
    assert.equal(await page.locator('#summary [data-p95="firstTextDeltaMs"]').textContent(), H.fmtMs(streamed.rollup.firstTextDeltaMs.p95));
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  it('groups by tools present, each row with its population, counts and percentiles as the API answers', async () => {
    const page = await signedIn('#/overview?range=15m');
    await overviewFor(page, 'all requests');
    await page.selectOption('#o-group', 'tools');
    await page.waitForSelector('table.groups[data-dim="tools_present"]');
    const win = await overviewFor(page, 'all requests');
    assert.match(await page.evaluate(() => location.hash), /[?&]group=tools(&|$)/);
    const api = await apiUsage(win, null, ['TOOLS_PRESENT']);
    const byValue = Object.fromEntries(api.groups.map(g => [g.key[0].value, g]));
    assert.deepEqual(Object.keys(byValue).sort(), ['false', 'true']);
    assert.equal(byValue.true.rollup.requestCount, 4);
    assert.equal(byValue.false.rollup.requestCount, 6);
    for (const v of ['true', 'false']) {
      const row = page.locator(`table.groups[data-dim="tools_present"] tr[data-value="${v}"]`);
      const g = byValue[v];
      assert.equal(await row.locator('th').textContent(), v === 'true' ? 'with tools' : 'without tools');
      assert.equal(await row.locator('td.pop').textContent(), g.population.description);
      assert.equal(g.population.description, 'tools_present=' + v);
      assert.equal(await row.locator('td').nth(1).textContent(), String(g.rollup.requestCount));
      for (const p of ['p50', 'p95', 'p99']) {
        assert.equal(await row.locator(`td[data-pct="${p}"]`).textContent(), H.fmtMs(g.rollup.latencyMs[p]));
      }
    }
    // A group's name is a link that adds its value to the filter.
    await page.locator('table.groups tr[data-value="true"] th a').click();
    await overviewFor(page, 'tools_present=true');
    assert.equal(await page.locator('#o-tools').inputValue(), 'true');
    assert.match(await page.locator('#summary').textContent(), /^4\s*requests/);
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  it('carries the overview\'s filter into the request list its bars open', async () => {
    const page = await signedIn('#/overview?range=15m&tools=true');
    await overviewFor(page, 'tools_present=true');
    const bar = page.locator('#class-chart a[data-class]').first();
    const cls = await bar.getAttribute('data-class');
    await bar.press('Enter');
    await page.waitForSelector('#usage-chip');
    assert.equal((await page.locator('#usage-chip').textContent()).replace('✕', ''), 'Also tools_present=true');
    await page.waitForFunction(() => document.querySelector('#live-status').textContent.includes('updated'));
    const q = Object.fromEntries(new URLSearchParams((await page.evaluate(() => location.hash)).split('?')[1]));
    const api = await H.gql(a, a.token, `query($ws: ID!, $f: UsageFilterInput, $w: WindowInput) { usage(workspaceId: $ws, filter: $f, window: $w) { recent(limit: 100) { requestId } } }`,
      { ws: a.workspaceId, f: { toolsPresent: true, classification: cls }, w: { from: q.from, to: q.to } });
    const want = api.usage.recent.map(r => r.requestId).sort();
    assert.ok(want.length > 0 && want.length <= 4, `${want.length} requests with tools classified ${cls}`);
    const shown = (await page.$$eval('table.reqs tbody tr[data-id]', trs => trs.map(tr => tr.dataset.id))).sort();
    assert.deepEqual(shown, want);
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  it('fits the controls and tables on a phone screen', async () => {
    const page = await H.newPage(browser, { viewport: { width: 390, height: 844 } });
    await H.signIn(page, a, a.token);
    await page.waitForSelector('table.reqs tbody tr[data-id]');
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth) <= 0, 'the list');
    await page.evaluate(() => { location.hash = '#/overview?range=15m&group=tools'; });
    await overviewFor(page, 'all requests');
    await page.waitForSelector('table.instances');
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth) <= 0, 'the overview');
    await H.screenshot(page, '16-overview-phone');
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  it('says which filter emptied an empty view', async () => {
    const page = await signedIn('#/overview?range=15m&stream=true');
    await overviewFor(page, 'stream=true');
    await page.selectOption('#o-effort', 'high');
    const win = await overviewFor(page, 'stream=true, reasoning_effort=high');
    const msg = page.locator('#empty-state');
    await msg.waitFor();
    const none = await apiUsage(win, { stream: true, reasoningEffort: 'high' });
    const withoutEffort = await apiUsage(win, { stream: true });
    const withoutStream = await apiUsage(win, { reasoningEffort: 'high' });
    const everything = await apiUsage(win, null);
    assert.equal(none.rollup.requestCount, 0);
    assert.equal(withoutStream.rollup.requestCount, 0, 'no request asked for an effort');
    assert.equal(await msg.textContent(),
      `No requests in this window match stream=true, reasoning_effort=high (${everything.rollup.requestCount} without any filter). ` +
      `reasoning_effort=high emptied it: without it, ${withoutEffort.rollup.requestCount} requests match.`);
    assert.equal(await page.locator('#pct-charts').count(), 0, 'no empty chart drawn as if it were data');
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  it('shows each request’s cost in the list: a price, "—" for no price, ≈ for estimated tokens', async () => {
    const page = await signedIn();
    await page.waitForSelector('table.reqs tbody tr[data-id]');
    const rows = (await H.gql(a, a.token, 'query($ws: ID!) { recentRequests(workspaceId: $ws, limit: 100) { requestId model costUsd costEstimated instance } }',
      { ws: a.workspaceId })).recentRequests;
    assert.equal(rows.length, 10);
    await page.waitForFunction(n => document.querySelectorAll('table.reqs tbody tr[data-id]').length === n, rows.length);
    const kinds = new Set();
    for (const r of rows) {
      const cell = page.locator(`tr[data-id="${r.requestId}"] td.c-cost`);
      if (r.costUsd == null) {
        kinds.add('unpriced');
        assert.equal(r.model, 'sim-free');
        assert.equal(await cell.textContent(), '—');
        assert.match(await cell.getAttribute('title'), /no price for this model/);
      } else if (r.costEstimated) {
        kinds.add('estimated');
        assert.equal(await cell.textContent(), '≈ ' + usd(r.costUsd));
        assert.match(await cell.getAttribute('title'), /estimated/);
      } else {
        kinds.add('priced');
        assert.ok(r.costUsd > 0, 'sim-fast is priced');
        assert.equal(await cell.textContent(), usd(r.costUsd));
      }
    }
    assert.deepEqual([...kinds].sort(), ['estimated', 'priced', 'unpriced']);
    await H.screenshot(page, '14-requests-cost-instance');
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  it('says which limit refused a request, and that it cost nothing', async () => {
    // A workspace of its own, limited to one request a minute: its second request is refused.
    const ws = (await H.gql(a, a.token, 'mutation { createWorkspace(name: "limited") { id } }')).createWorkspace.id;
    await H.gql(a, a.token, 'mutation($ws: ID!) { setLimits(workspaceId: $ws, rpm: 1) { rpm } }', { ws });
    const token = (await H.gql(a, a.token, 'mutation($ws: ID!) { createToken(workspaceId: $ws, scope: PROXY) { token } }', { ws })).createToken.token;
    const call = async () => {
      const res = await fetch(a.base + CHAT, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer ' + token },
        body: JSON.stringify(WITH_TOOLS) });
      await res.arrayBuffer();
      return { id: res.headers.get('x-laptime-request-id'), status: res.status };
    };
    assert.equal((await call()).status, 200);
    const refused = await call();
    assert.equal(refused.status, 429);
    const ev = await (async () => {
      for (let i = 0; i < 100; i++) {
        const d = await H.gql(a, a.token, 'query($ws: ID!, $id: ID!) { request(workspaceId: $ws, requestId: $id) { outcome refusedBy costUsd costEstimated } }', { ws, id: refused.id });
        if (d.request) return d.request;
        await new Promise(r => setTimeout(r, 50));
      }
      throw new Error('the refused request was not recorded');
    })();
    assert.equal(ev.outcome, 'rate_limited');
    assert.equal(ev.refusedBy, 'workspace_rpm');
    const page = await signedIn();
    await page.waitForSelector('#ws');
    await page.selectOption('#ws', ws);
    const row = page.locator(`tr[data-id="${refused.id}"]`);
    await row.waitFor({ timeout: 5000 });
    assert.equal(await row.locator('td.c-outcome').textContent(), '✕ rate_limited by workspace_rpm');
    // Refused before any upstream call: billed nothing, a known $0 (not "no price").
    assert.equal(ev.costUsd, 0);
    assert.equal(await row.locator('td.c-cost').textContent(), usd(0));
    assert.deepEqual(page.errors.filter(e => !/status of 429/.test(e)), []);
    await page.context().close();
  });

  it('sums the known cost with the unpriced count in the overview and per model', async () => {
    const page = await signedIn('#/overview?range=15m');
    const win = await overviewFor(page, 'all requests');
    const api = await apiUsage(win, null, ['MODEL']);
    assert.equal(api.rollup.costUnpricedCount, 2);
    assert.ok(api.rollup.costUsd > 0);
    const sum = page.locator('#cost-summary');
    assert.equal(Number(await sum.getAttribute('data-cost-usd')), api.rollup.costUsd);
    assert.equal(await sum.locator('b').textContent(), usd(api.rollup.costUsd));
    assert.equal(Number(await sum.getAttribute('data-unpriced')), 2);
    assert.match(await sum.textContent(), /2 unpriced: no price for the model, cost unknown and not counted/);
    assert.match(await sum.textContent(), new RegExp(api.rollup.costEstimatedCount + ' with estimated tokens'));
    // Grouped by model (the default): the unpriced model's cost is unknown, not $0.
    const free = page.locator('table.groups[data-dim="model"] tr[data-value="sim-free"]');
    const fast = page.locator('table.groups[data-dim="model"] tr[data-value="sim-fast"]');
    const g = Object.fromEntries(api.groups.map(x => [x.key[0].value, x.rollup]));
    assert.equal(g['sim-free'].costUsd, null);
    assert.equal(await free.locator('td[data-cost]').textContent(), '—');
    assert.equal(await free.locator('td[data-unpriced]').textContent(), String(g['sim-free'].costUnpricedCount));
    assert.match(await fast.locator('td[data-cost]').textContent(), new RegExp('^' + usd(g['sim-fast'].costUsd).replace('$', '\\$')));
    assert.equal(await fast.locator('td[data-unpriced]').textContent(), '0');
    await H.screenshot(page, '15-overview-cost-instances');
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  it('names the instance that served each request, and breaks the overview down per instance', async () => {
    const page = await signedIn();
    await page.waitForSelector('table.reqs tbody tr[data-id]');
    const rows = (await H.gql(a, a.token, 'query($ws: ID!) { recentRequests(workspaceId: $ws, limit: 100) { requestId instance outcome } }',
      { ws: a.workspaceId })).recentRequests;
    for (const r of rows) {
      assert.equal(await page.locator(`tr[data-id="${r.requestId}"] td.c-inst`).textContent(), r.instance);
    }
    assert.deepEqual([...new Set(rows.map(r => r.instance))].sort(), ['gw-a', 'gw-b'], 'both gateways served, one store');
    // Nothing in the list is cut short: every cell shows its whole text.
    const cut = await page.$$eval('table.reqs tbody td:not(.c-wf)', tds => tds.filter(td => td.scrollWidth > td.clientWidth + 1).map(td => td.className + ': ' + td.textContent));
    assert.deepEqual(cut, []);

    await page.evaluate(() => { location.hash = '#/overview?range=15m'; });
    const win = await overviewFor(page, 'all requests');
    const api = await apiUsage(win, null);
    const want = {};
    for (const r of api.recent) {
      const w = want[r.instance] || (want[r.instance] = { n: 0, errors: 0 });
      w.n++;
      if (!['completed', 'incomplete', 'cache_hit'].includes(r.outcome)) w.errors++;
    }
    assert.deepEqual(want, { 'gw-a': { n: 7, errors: 0 }, 'gw-b': { n: 3, errors: 1 } });
    const shown = await page.$$eval('table.instances tbody tr[data-instance]', trs => Object.fromEntries(trs.map(tr => [tr.dataset.instance,
      { n: Number(tr.querySelector('[data-n]').dataset.n), errors: Number(tr.querySelector('[data-errors]').dataset.errors) }])));
    assert.deepEqual(shown, want);
    // In flight now: each live instance's heartbeat, as the API gives it.
    const fleet = (await H.gql(a, a.token, '{ instances { instance inFlight } }', {})).instances;
    assert.deepEqual(fleet.map(i => i.instance).sort(), ['gw-a', 'gw-b']);
    const inflight = await page.$$eval('table.instances tbody tr[data-instance] [data-inflight]', tds => Object.fromEntries(tds.map(td => [td.closest('tr').dataset.instance, Number(td.dataset.inflight)])));
    assert.deepEqual(inflight, Object.fromEntries(fleet.map(i => [i.instance, i.inFlight])));
    assert.equal(await page.locator('table.instances tr[data-instance="gw-b"] td').last().textContent(), '33.3 %');
    assert.match(await page.locator('#instances-note').textContent(), /^All 10 requests of the window \(all requests\)/);
    const cutGroups = await page.$$eval('table.groups td, table.groups th', tds => tds.filter(td => td.scrollWidth > td.clientWidth + 1).map(td => td.textContent));
    assert.deepEqual(cutGroups, []);
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });
});
