// The dashboard must not mislead (issue 17), in real headless Chromium against the real gateway:
// a running request's page follows it live until it ends; the in-band panel shows exactly the
// line the client read, and none for a cut stream; a stall is drawn as an idle gap labelled with
// the deadline that fired; one long request does not squash the other rows; labels are never
// cut short; times carry their zone; and a new gateway's overview spans the minutes it has data
// for, not an hour. The gateway runs from a config whose idle deadline is short (800 ms), so a
// stall ends quickly. Screenshots go to artifacts/dashboard/.
'use strict';

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const H = require('./helpers');

const CHAT = '/v1/chat/completions';
const user = [{ role: 'user', content: 'hi' }];
const CONFIG = `
[[channels]]
name = "sim"
provider = "sim"
models = ["sim-fast"]

[[routes]]
model = "*"
timeouts = { idle_ms = 800 }
`;
// Headers at 300 ms, text from 1,200 ms, 20 tokens at 10/s: ends about 3.1 s in.
const PACED = { model: 'sim-fast', stream: true, messages: user,
  laptime_sim: { headers_ms: 300, first_event_ms: 400, first_text_ms: 1200, text_tokens: 20, tokens_per_s: 10 } };
// Five text deltas from 100 ms at 50/s (the last at 180 ms), then nothing: the idle deadline.
const STALL = { model: 'sim-fast', stream: true, messages: user,
  laptime_sim: { first_text_ms: 100, text_tokens: 20, tokens_per_s: 50, cut_after: 5, end: 'stall' } };
// Two text deltas, then the upstream closes the connection.
const CUT = { model: 'sim-fast', stream: true, messages: user,
  laptime_sim: { first_text_ms: 50, text_tokens: 6, tokens_per_s: 100, cut_after: 2, end: 'close' } };
const QUICK = { model: 'sim-fast', stream: true, messages: user,
  laptime_sim: { headers_ms: 20, first_text_ms: 40, text_tokens: 3, tokens_per_s: 200 } };

let gw;
let browser;

before(async () => {
  gw = await H.startGateway(CONFIG);
  browser = await H.launch();
});

after(async () => {
  if (browser) await browser.close();
  if (gw) await gw.stop();
});

async function signedIn(options) {
  const page = await H.newPage(browser, options);
  await H.signIn(page, gw, gw.token);
  await page.waitForSelector('#nav:not([hidden])');
  return page;
}

/// One streamed call read to its end: its request id and the bytes the client got.
async function streamed(body) {
  const res = await fetch(gw.base + CHAT, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer ' + gw.token },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { id: res.headers.get('x-laptime-request-id'), text };
}

// Waits for this request's own page: a page that already shows another request keeps its
// timeline until the new one is read, so the timeline alone is no sign the new page is drawn.
async function openDetail(page, id) {
  await page.evaluate(i => { location.hash = '#/request/' + i; }, id);
  await page.waitForFunction(i => {
    const title = document.querySelector('h1 code');
    return title && title.textContent === i && document.querySelector('#timeline svg');
  }, id);
}

describe('the dashboard does not mislead', () => {
  it('shows a running request at once and follows its page live until it ends', async () => {
    const page = await signedIn();
    await page.waitForSelector('#live-status');
    const started = Date.now();
    const call = streamed(PACED);
    const row = page.locator('tr.inflight');
    await row.first().waitFor({ timeout: 2000 });
    assert.ok(Date.now() - started <= 2000, 'the in-flight row appeared within 2 s');
    const id = await row.first().getAttribute('data-id');
    await openDetail(page, id);
    const live = page.locator('#live-detail');
    assert.match(await live.textContent(), /In flight/);
    assert.match(await page.locator('.lead').textContent(), /in flight/);
    assert.match(await page.locator('#timeline [data-attempt="0"]').textContent(), /primary · sim/);
    // The first visible text (1.2 s in) is not reached yet when the page opens, then it is.
    const visible = page.locator('#timeline [data-mark="first_visible"]');
    await visible.waitFor({ timeout: 3000 });
    const at = Number(await visible.getAttribute('data-ms'));
    assert.ok(at >= 1200, `first visible text at ${at} ms`);
    // The last effective output moves on as the text streams.
    const last = async () => Number(await page.locator('#timeline [data-mark="last_effective"]').getAttribute('data-ms'));
    const first = await last();
    await page.waitForFunction(v => {
      const el = document.querySelector('#timeline [data-mark="last_effective"]');
      return el && Number(el.dataset.ms) > v;
    }, first, { timeout: 3000 });
    await H.screenshot(page, '9-detail-in-flight');
    const done = await call;
    assert.equal(done.id, id);
    // It ends: the live line goes, the stored record is drawn, the polling stops.
    await live.waitFor({ state: 'detached', timeout: 5000 });
    assert.match(await page.locator('.lead').textContent(), /completed/);
    assert.equal(await page.locator('#inband').getAttribute('data-carrier'), 'sse_comment');
    let reads = 0;
    page.on('request', r => { if (r.url().endsWith('/graphql')) reads++; });
    await page.waitForTimeout(2500);
    assert.equal(reads, 0, 'a finished request is not read again');
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  it('shows the line a completed stream sent, and none for a stream cut before its end', async () => {
    const page = await signedIn();
    const ok = await streamed(QUICK);
    const line = ok.text.split('\n').find(l => l.startsWith(': x-laptime-timing'));
    assert.ok(line, 'the completed stream carried the comment');
    await H.apiRequest(gw, ok.id);
    await openDetail(page, ok.id);
    assert.equal(await page.locator('#inband pre.inband').textContent(), line, 'the page shows the line the client read');
    // The client sent no TE: trailers, and the gateway noted that it sent none: the page says
    // the comment alone, and that the carrier was noted as sent, not read back from the record.
    assert.match(await page.locator('#inband p.small').textContent(), /^SSE comment before the terminal frame:$/);
    assert.equal(await page.locator('#inband-derived').count(), 0);

    const cut = await streamed(CUT);
    assert.ok(!cut.text.includes('x-laptime-timing'), 'the cut stream carried no timing line');
    const ev = await H.apiRequest(gw, cut.id);
    assert.equal(ev.outcome, 'upstream_closed_early');
    await openDetail(page, cut.id);
    const panel = page.locator('#inband');
    assert.equal(await panel.getAttribute('data-carrier'), 'none');
    assert.equal(await panel.locator('pre').count(), 0, 'no line drawn');
    const text = await panel.textContent();
    assert.ok(!text.includes('x-laptime-timing'), text);
    assert.match(text, /No timing line was sent/);
    assert.match(await page.locator('#inband-note').textContent(), /cut before its terminal frame/);
    await H.screenshot(page, '10-detail-cut');
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  it('draws a stall as an idle gap from the last output, labelled with the deadline that fired', async () => {
    const page = await signedIn();
    const call = await streamed(STALL);
    assert.ok(!call.text.includes('x-laptime-timing'));
    const ev = await H.apiRequest(gw, call.id);
    assert.equal(ev.outcome, 'timeout');
    assert.equal(ev.timeoutKind, 'idle');
    const t = ev.timing;
    assert.ok(t.lastEffectiveMs != null && t.upstreamDoneMs - t.lastEffectiveMs >= 700,
      `idle from ${t.lastEffectiveMs} to ${t.upstreamDoneMs}`);
    await openDetail(page, call.id);
    const idle = page.locator('#timeline g[data-seg="idle"]');
    assert.equal(await idle.getAttribute('data-deadline'), 'idle');
    assert.match(await idle.locator('text').textContent(), /^idle .* ms · idle deadline$/);
    assert.ok((await idle.locator('text').textContent()).includes(H.fmtMs(t.upstreamDoneMs - t.lastEffectiveMs)));
    // Generation ends at the last output: the stall is not drawn as generation.
    const gen = page.locator('#timeline g[data-seg="generation"] rect');
    const idleRect = idle.locator('rect');
    const gx = Number(await gen.getAttribute('x')) + Number(await gen.getAttribute('width'));
    assert.ok(Math.abs(gx - Number(await idleRect.getAttribute('x'))) < 0.5, 'idle starts where generation ends');
    assert.ok(Number(await idleRect.getAttribute('width')) > 4 * Number(await gen.getAttribute('width')));
    assert.match(await page.locator('.seglist li[data-seg="idle"]').textContent(), /until the idle deadline fired/);
    assert.equal(await page.locator('[data-kv="timeoutKind"]').textContent(), 'idle');
    assert.equal(await page.locator('#inband').getAttribute('data-carrier'), 'none');
    await H.screenshot(page, '11-detail-stall');
    // The list row draws the same gap with the same label.
    await page.evaluate(() => { location.hash = '#/requests'; });
    const span = page.locator(`tr[data-id="${call.id}"] .wf span[data-seg="idle"]`);
    await span.waitFor({ state: 'attached' });
    assert.equal(await span.getAttribute('data-deadline'), 'idle');
    assert.match(await span.getAttribute('title'), /until the idle deadline fired/);
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  it('scales rows so one long request does not squash the others, and never cuts a label short', async () => {
    const quick = await streamed(QUICK);
    await H.apiRequest(gw, quick.id);
    const page = await signedIn();
    const end = async () => page.evaluate(id => {
      const wf = document.querySelector(`tr[data-id="${id}"] .wf`);
      const box = wf.getBoundingClientRect();
      return Math.max(...[...wf.children].map(s => s.getBoundingClientRect().right - box.left)) / box.width;
    }, quick.id);
    await page.waitForSelector(`tr[data-id="${quick.id}"]`);
    // The paced and stalled requests (seconds) set the shared scale: the quick one is a sliver.
    const shared = await end();
    assert.ok(shared < 0.1, `on the shared scale the quick row ends at ${shared}`);
    await page.selectOption('#f-scale', 'row');
    await page.waitForSelector('table.reqs[data-scale="row"]');
    const own = await end();
    assert.ok(own > 0.99, `on its own scale the quick row fills its width (${own})`);
    await H.screenshot(page, '12-requests-per-row-scale');
    await page.selectOption('#f-scale', 'log');
    await page.waitForSelector('table.reqs[data-scale="log"]');
    const log = await end();
    assert.ok(log > 0.3 && log < 1, `on the log scale the quick row reaches ${log}`);
    // Outcome, classification and dialect labels are whole: nothing overflows its cell.
    const cut = await page.$$eval('table.reqs tbody td.c-outcome, table.reqs tbody td.c-class, table.reqs tbody td.c-route',
      tds => tds.filter(td => td.scrollWidth > td.clientWidth + 1).map(td => td.textContent));
    assert.deepEqual(cut, []);
    const labels = await page.$$eval('table.reqs tbody td.c-outcome', tds => tds.map(td => td.textContent));
    assert.ok(labels.some(l => l.includes('upstream_closed_early')), labels.join(', '));
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  it('writes every time with its zone', async () => {
    const page = await signedIn({ timezoneId: 'Asia/Kolkata' });
    await page.waitForSelector('table.reqs tbody tr[data-id]');
    assert.equal(await page.locator('table.reqs thead th.c-time').textContent(), 'Received (UTC+05:30)');
    assert.match(await page.locator('#live-status').textContent(), /updated \d\d:\d\d:\d\d UTC\+05:30/);
    const id = await page.locator('table.reqs tbody tr[data-id]').first().getAttribute('data-id');
    await openDetail(page, id);
    const ev = await H.apiRequest(gw, id);
    const received = await page.locator('.kv dd').first().textContent();
    // The record's instant, in the page's zone: UTC + 5 h 30 min.
    const local = new Date(Date.parse(ev.ts) + 330 * 60000).toISOString().replace('T', ' ').slice(0, 23);
    assert.equal(received, local + ' UTC+05:30');
    await page.evaluate(() => { location.hash = '#/overview?range=1h'; });
    await page.waitForSelector('#overview-window');
    assert.match(await page.locator('#overview-window').textContent(), /UTC\+05:30 – .* UTC\+05:30/);
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  it('spans the overview axis over the minutes with data, not the whole hour', async () => {
    const page = await signedIn();
    await page.evaluate(() => { location.hash = '#/overview?range=1h'; });
    await page.waitForSelector('#pct-charts section[data-metric]');
    const o = await page.evaluate(() => window.__laptimeOverview);
    const rows = await H.gql(gw, gw.token, 'query($ws: ID!) { recentRequests(workspaceId: $ws, limit: 500) { ts } }', { ws: gw.workspaceId });
    const times = rows.recentRequests.map(r => Date.parse(r.ts));
    assert.equal(o.requests, times.length);
    assert.equal(o.fitted, true);
    assert.ok(o.toMs - o.fromMs <= 10 * 60000, `the axis spans ${(o.toMs - o.fromMs) / 60000} min, not 60`);
    assert.ok(o.fromMs <= Math.min(...times) && o.toMs >= Math.max(...times), 'every request is on the axis');
    // Its points are spread over the chart, not piled at the right edge.
    const xs = await page.$$eval('section[data-metric="latencyMs"] svg circle', cs => cs.map(c => Number(c.getAttribute('cx'))));
    const width = await page.$eval('section[data-metric="latencyMs"] svg', s => Number(s.getAttribute('width')));
    assert.ok(xs.length > 0);
    assert.ok(Math.min(...xs) < width * 0.6, `the first point is at ${Math.min(...xs)} of ${width} px`);
    assert.match(await page.locator('#overview-window').textContent(), /the axis spans the minutes with data/);
    await H.screenshot(page, '13-overview-fitted');
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });
});
