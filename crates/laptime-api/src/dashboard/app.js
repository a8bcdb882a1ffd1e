// laptime dashboard: hand-written, no dependencies, no build step. It reads the usage API
// (`POST /graphql`) with the signed-in token, exactly as any other client would.
//
// Pages (hash routes): #/requests (live list with waterfalls), #/request/ID (detail, live while
// the request runs), #/overview (percentiles over time, distribution, classifications),
// #/channels.
//
// Conventions: milliseconds are formatted by fmtMs everywhere, clock times by fmtClock/fmtHM in
// the browser's zone, which every time on the page names (zoneName); an absent mark is never
// drawn as zero (it is hatched, or written "absent"); colours are Okabe–Ito and always paired
// with a texture, a line style, a marker shape or a text label.
'use strict';
(function () {
  // ===== constants =====
  const TOKEN_KEY = 'laptime.token';
  const WS_KEY = 'laptime.workspace';
  const POLL_MS = 1500;
  // A running request's page is read again this often, for at most DETAIL_POLLS reads.
  const DETAIL_POLL_MS = 1000;
  const DETAIL_POLLS = 900;
  const SUCCESS = new Set(['completed', 'incomplete', 'cache_hit']);
  const DIALECTS = ['chat', 'responses', 'messages'];
  const OUTCOMES = ['completed', 'incomplete', 'upstream_error', 'upstream_closed_early',
    'client_cancelled', 'timeout', 'rejected', 'cache_hit', 'rate_limited', 'gateway_shutdown', 'gateway_crashed'];
  const CLASSES = ['ok', 'upstream_headers_slow', 'first_event_slow', 'effective_output_slow',
    'visible_text_late', 'generation_slow_tps', 'local_overhead_slow', 'failed'];
  const LIMITS = [50, 100, 200, 500];
  // Waterfall segments, in time order: key, name, the marks they span.
  const SEGS = [
    ['local', 'local phases: auth + body read + distribution', 'from t0'],
    ['headers', 'upstream wait to headers', 't1 → t2'],
    ['event', 'to first SSE event', 't2 → t3'],
    ['effective', 'to first effective output', 't3 → t4'],
    ['visible', 'to first visible text', 't4 → t5'],
    ['generation', 'generation to the last output', 't5 → last output'],
    ['idle', 'idle: no output from the last output to upstream done (a stall, when long)', 'last output → t6'],
    ['tail', 'tail to handler end', 't6 → t7'],
    ['absent', 'marks absent (no mark: not drawn as zero)', ''],
  ];
  const SEG_NAME = Object.fromEntries(SEGS.map(s => [s[0], s[1]]));
  // The chain of marks after the local phases; the segment named here ends at that mark.
  const CHAIN = [['t1', null], ['t2', 'headers'], ['t3', 'event'], ['t4', 'effective'],
    ['t5', 'visible'], ['tl', 'generation'], ['t6', 'idle'], ['t7', 'tail']];
  const MARK_NAME = {
    t1: 't1 upstream start', t2: 't2 upstream headers', t3: 't3 first SSE event',
    t4: 't4 first effective output', t5: 't5 first visible text', tl: 'last effective output',
    t6: 't6 upstream done', t7: 't7 handler done',
  };
  // How the list's waterfalls are scaled: one scale for all rows, each row to its own total, or
  // a shared logarithmic scale (so one long request does not squash the others).
  const SCALES = [['shared', 'shared, linear'], ['row', 'each row to its own total'], ['log', 'shared, logarithmic']];
  // Okabe–Ito, and a marker shape for each series so colour is never the only cue.
  const OI = ['#0072B2', '#E69F00', '#009E73', '#CC79A7', '#56B4E9', '#D55E00', '#F0E442', '#000000'];
  const CLASS_STYLE = {
    ok: ['#009E73', 'none'], upstream_headers_slow: ['#E69F00', 'diag'],
    first_event_slow: ['#56B4E9', 'dots'], effective_output_slow: ['#CC79A7', 'vert'],
    visible_text_late: ['#F0E442', 'cross'], generation_slow_tps: ['#0072B2', 'horiz'],
    local_overhead_slow: ['#8a8a8a', 'diag2'], failed: ['#D55E00', 'xhatch'],
  };
  const PCTS = [['p50', '', 'circle'], ['p95', '6 4', 'square'], ['p99', '2 3', 'triangle']];
  const NS = 'http://www.w3.org/2000/svg';

  // ===== state =====
  const state = {
    token: sessionStorage.getItem(TOKEN_KEY),
    me: null,
    workspaceId: sessionStorage.getItem(WS_KEY),
    workspaces: [],
    channels: null,
    timer: null,
    page: null,
    gen: 0,
    resize: null,
  };

  // ===== small helpers =====
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    append(el, kids);
    return el;
  }
  function s(tag, attrs, ...kids) {
    const el = document.createElementNS(NS, tag);
    setAttrs(el, attrs);
    append(el, kids);
    return el;
  }
  function setAttrs(el, attrs) {
    if (!attrs) return;
    for (const k in attrs) {
      const v = attrs[k];
      if (v == null || v === false) continue;
      if (k === 'class') el.setAttribute('class', v);
      else if (k === 'text') el.textContent = v;
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'style') for (const p in v) el.style[p] = v[p];
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  function append(el, kids) {
    for (const k of kids) {
      if (k == null || k === false) continue;
      if (Array.isArray(k)) append(el, k);
      else el.appendChild(typeof k === 'object' ? k : document.createTextNode(String(k)));
    }
  }
  const $ = (sel, root) => (root || document).querySelector(sel);
  const main = () => $('#main');

  // Milliseconds, the same way everywhere: 3 decimals under 1 ms (the store keeps
  // microseconds, so a small value never reads as 0), else 1 decimal; thousands separated.
  const NF = [0, 1, 2, 3].map(d => new Intl.NumberFormat('en-US', { minimumFractionDigits: d, maximumFractionDigits: d }));
  function fmtMs(v) {
    if (v == null || !Number.isFinite(v)) return '—';
    return NF[Math.abs(v) < 1 ? 3 : 1].format(v) + ' ms';
  }
  // The client's dialect, and the channel's when the exchange was translated ("chat → messages").
  function dialectPair(r) {
    return r.translated && r.upstreamDialect ? r.dialect + ' → ' + r.upstreamDialect : r.dialect;
  }
  function fmtInt(v) { return v == null ? '—' : NF[0].format(v); }
  function fmtPct(v) { return v == null ? '—' : NF[1].format(v * 100) + ' %'; }
  function fmtTps(v) { return v == null ? '—' : NF[1].format(v) + ' tok/s'; }
  function fmtTick(v, step) {
    const d = step >= 1 ? 0 : Math.min(3, Math.ceil(-Math.log10(step)));
    return NF[d].format(v);
  }
  const pad = (n, w) => String(n).padStart(w || 2, '0');
  // The browser's zone as an offset ("UTC", "UTC+01:00"): every clock time on the page is in it.
  function zoneName(d) {
    const off = -(d || new Date()).getTimezoneOffset();
    if (off === 0) return 'UTC';
    const a = Math.abs(off);
    return 'UTC' + (off > 0 ? '+' : '−') + pad(Math.floor(a / 60)) + ':' + pad(a % 60);
  }
  function fmtClock(iso, withMs) {
    const d = new Date(iso);
    if (isNaN(d)) return iso;
    const t = pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
    return withMs ? t + '.' + pad(d.getMilliseconds(), 3) : t;
  }
  function fmtHM(d) { return pad(d.getHours()) + ':' + pad(d.getMinutes()); }
  // A date and time with its zone, the one long format of the page: 2026-12-02 06:23:01.123 UTC.
  function fmtWhen(iso, withMs) {
    const d = new Date(iso);
    if (isNaN(d)) return iso;
    const day = d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate());
    return day + ' ' + fmtClock(d, withMs) + ' ' + zoneName(d);
  }
  function niceStep(raw) {
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    const f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
  }
  // Ticks from 0 to a round maximum at or above max.
  function niceTicks(max, count, integer) {
    if (!(max > 0)) max = 1;
    let step = niceStep(max / (count || 5));
    if (integer && step < 1) step = 1;
    const top = Math.ceil(max / step - 1e-9) * step;
    const ticks = [];
    for (let v = 0; v <= top + step / 2; v += step) ticks.push(Math.round(v / step) * step);
    return { ticks, max: top, step };
  }
  function announce(msg) { const a = $('#announce'); if (a) a.textContent = msg; }

  // ===== the API =====
  class AuthError extends Error {}
  async function gqlWith(token, query, variables) {
    let res;
    try {
      res = await fetch('/graphql', {
        method: 'POST',
        cache: 'no-store',
        headers: { 'content-type': 'application/json', authorization: 'Bearer ' + token },
        body: JSON.stringify({ query, variables: variables || {} }),
      });
    } catch (e) {
      throw new Error('The gateway could not be reached (' + e.message + ').');
    }
    let body = null;
    try { body = await res.json(); } catch (e) { body = null; }
    const msg = body && body.errors ? body.errors.map(e => e.message).join('; ') : '';
    if (res.status === 401) throw new AuthError(msg || 'missing or invalid token');
    if (!res.ok) throw new Error('HTTP ' + res.status + (msg ? ': ' + msg : ''));
    if (!body) throw new Error('The gateway answered with something that is not JSON.');
    if (body.errors && body.errors.length) throw new Error(msg);
    return body.data;
  }
  async function gql(query, variables) {
    try {
      return await gqlWith(state.token, query, variables);
    } catch (e) {
      if (e instanceof AuthError) {
        signOut('Your token was refused by the gateway (HTTP 401: ' + e.message + '). It may have been revoked; sign in again.');
      }
      throw e;
    }
  }
  // Hash routes' query strings.
  function parseHash() {
    const raw = location.hash.replace(/^#\/?/, '');
    const [path, qs] = raw.split('?');
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    const q = Object.fromEntries(new URLSearchParams(qs || ''));
    return { parts, q };
  }
  function hashFor(page, q) {
    const p = new URLSearchParams();
    for (const k in q) if (q[k] != null && q[k] !== '') p.set(k, q[k]);
    const qs = p.toString();
    return '#/' + page + (qs ? '?' + qs : '');
  }

  // ===== the timeline of one request, from the API's fields =====
  // t0 = 0. t1 (dispatch of the winning attempt; hedged: the primary's) is derived from the
  // API: upstreamDoneMs − upstreamMs, or first byte − ttftMs, or the attempt's start.
  function r3(v) { return Math.round(v * 1000) / 1000; }
  function winner(ev) { return (ev.attempts || []).find(a => a.won) || null; }
  function marksOf(ev) {
    const t = ev.timing || {};
    const w = winner(ev);
    let t1 = null;
    if (ev.upstreamMs != null && t.upstreamDoneMs != null) t1 = r3(t.upstreamDoneMs - ev.upstreamMs);
    else if (ev.ttftMs != null && w && w.firstByteMs != null) t1 = r3(w.firstByteMs - ev.ttftMs);
    else if (w && w.startMs != null) {
      const primary = (ev.attempts || []).find(a => a.role === 'primary');
      t1 = ev.hedge !== 'none' && primary && primary.startMs != null ? primary.startMs : w.startMs;
    }
    const phases = [t.authMs, t.bodyReadMs, t.distributionMs].filter(v => v != null);
    return {
      auth: t.authMs, body: t.bodyReadMs, dist: t.distributionMs,
      local: phases.length ? r3(phases.reduce((a, b) => a + b, 0)) : null,
      t1,
      t2: t1 != null && t.upstreamHeadersMs != null ? r3(t1 + t.upstreamHeadersMs) : null,
      firstByte: w ? w.firstByteMs : null,
      t3: t.firstSseEventMs, t4: t.firstResponseMs, t5: t.firstTextDeltaMs,
      tl: t.lastEffectiveMs,
      t6: t.upstreamDoneMs,
      t7: t.totalHandlerMs != null ? t.totalHandlerMs : ev.latencyMs,
      deadline: ev.timeoutKind || null,
    };
  }
  // Segments between consecutive marks; a span whose marks are absent is one 'absent' segment
  // from the last present mark to the next one (never a zero-width segment).
  function segmentsOf(m) {
    const out = [];
    if (m.local != null) out.push({ key: 'local', from: 0, to: m.local });
    let prev = null;
    let prevAt = m.local != null ? m.local : 0;
    let missing = [];
    for (const [k, seg] of CHAIN) {
      const at = m[k];
      if (at == null) { missing.push(k); continue; }
      if (missing.length) out.push({ key: 'absent', from: prevAt, to: at, missing });
      else if (prev && seg === 'idle') out.push({ key: seg, from: prevAt, to: at, deadline: m.deadline });
      else if (prev && seg) out.push({ key: seg, from: prevAt, to: at });
      prev = k; prevAt = at; missing = [];
    }
    if (missing.length) out.push({ key: 'absent', from: prevAt, to: prevAt, missing });
    return out;
  }
  function segLabel(sg) {
    if (sg.key === 'absent') {
      return 'no mark for ' + sg.missing.map(k => MARK_NAME[k]).join(', ') + ' (' + fmtMs(sg.to - sg.from) + ' unattributed)';
    }
    if (sg.key === 'idle' && sg.deadline) {
      return 'idle: no output for ' + fmtMs(sg.to - sg.from) + ', until the ' + sg.deadline + ' deadline fired';
    }
    return SEG_NAME[sg.key] + ': ' + fmtMs(sg.to - sg.from);
  }
  function outcomeBadge(outcome) {
    if (outcome === 'in_flight') return h('span', { class: 'badge live', text: '● in flight' });
    if (SUCCESS.has(outcome)) return h('span', { class: 'badge ok', text: '✓ ' + outcome });
    if (outcome === 'client_cancelled') return h('span', { class: 'badge cancel', text: '⊘ cancelled' , title: 'client_cancelled' });
    return h('span', { class: 'badge bad', text: '✕ ' + outcome });
  }
  function classSpan(c) {
    if (c == null) return h('span', { class: 'muted', text: '—' });
    const cls = c === 'ok' ? 'cls-ok' : c === 'failed' ? 'cls-failed' : 'cls-slow';
    return h('span', { class: cls, text: c === 'ok' ? 'ok' : c === 'failed' ? '✕ failed' : '▲ ' + c });
  }

  // ===== shell: sign-in, header, routing =====
  function setPage(name) {
    for (const a of document.querySelectorAll('#nav a')) {
      if (a.dataset.page === name) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
  }
  function stopTimers() {
    if (state.timer) clearTimeout(state.timer);
    state.timer = null;
    state.resize = null;
    state.gen++;
  }
  function signOut(message) {
    stopTimers();
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(WS_KEY);
    state.token = null; state.me = null; state.workspaceId = null; state.channels = null; state.page = null;
    renderSignIn(message);
  }
  function renderHeader() {
    const nav = $('#nav');
    const who = $('#who');
    who.textContent = '';
    if (!state.me) { nav.hidden = true; return; }
    nav.hidden = false;
    const me = state.me;
    if (me.scope === 'ADMIN' && state.workspaces.length > 1) {
      const sel = h('select', { id: 'ws', 'aria-label': 'Workspace', onchange: e => {
        state.workspaceId = e.target.value;
        sessionStorage.setItem(WS_KEY, state.workspaceId);
        route();
      } }, state.workspaces.map(w => h('option', { value: w.id, selected: w.id === state.workspaceId, text: w.name })));
      who.append(h('label', { for: 'ws', class: 'muted', text: 'Workspace' }), sel);
    } else {
      who.append(h('span', { class: 'muted', text: 'Workspace ' }), h('b', { text: me.workspaceName }));
    }
    who.append(h('span', { class: 'badge', text: me.scope.toLowerCase() + ' token' }),
      h('button', { type: 'button', onclick: () => signOut('Signed out. The token was removed from this tab.'), text: 'Sign out' }));
  }
  function renderSignIn(message) {
    stopTimers();
    renderHeader();
    setPage(null);
    const m = main();
    m.textContent = '';
    const err = h('div', { id: 'signin-msg', role: 'alert' });
    const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', spellcheck: 'false',
      placeholder: 'lt_…', required: true, 'aria-describedby': 'token-help signin-msg' });
    const form = h('form', { class: 'signin', 'aria-labelledby': 'signin-title', onsubmit: async e => {
      e.preventDefault();
      const btn = form.querySelector('button');
      btn.disabled = true;
      err.textContent = '';
      const msg = await signIn(input.value);
      btn.disabled = false;
      if (msg) {
        err.append(h('p', { class: 'msg error', text: msg }));
        input.focus();
        input.select();
      }
    } },
      h('h1', { id: 'signin-title', text: 'Sign in to the laptime dashboard' }),
      h('label', { for: 'token', text: 'Token (read or admin)' }),
      input,
      h('p', { id: 'token-help', class: 'muted small', text: 'The token stays in this tab only (sessionStorage) and is sent as a bearer header to this gateway’s GraphQL API. No cookies.' }),
      h('button', { class: 'primary', type: 'submit', text: 'Sign in' }),
      err);
    m.append(form);
    if (message) err.append(h('p', { class: message.startsWith('Signed out') ? 'msg' : 'msg error', text: message }));
    input.focus();
  }
  // Checks a token with `me`; returns an error message, or null when signed in.
  async function signIn(raw) {
    const token = (raw || '').trim();
    if (!token) return 'Paste a token first: a read or admin token starts with lt_.';
    let data;
    try {
      data = await gqlWith(token, '{ me { workspaceId workspaceName keyId scope } }');
    } catch (e) {
      if (e instanceof AuthError) {
        return 'The gateway refused this token (HTTP 401: ' + e.message + '). Check that you pasted the whole token (it starts with lt_) and that it has not been revoked.';
      }
      return 'Could not sign in: ' + e.message;
    }
    if (data.me.scope === 'PROXY') {
      return 'This is a proxy token: it can call models but cannot read usage. Sign in with a read or admin token.';
    }
    state.token = token;
    state.me = data.me;
    sessionStorage.setItem(TOKEN_KEY, token);
    state.page = 'signin';
    await loadWorkspaces();
    if (!location.hash || location.hash === '#' || location.hash === '#/') location.hash = '#/requests';
    else route();
    return null;
  }
  async function loadWorkspaces() {
    state.workspaces = [];
    if (state.me.scope === 'ADMIN') {
      try { state.workspaces = (await gql('{ workspaces { id name } }')).workspaces; } catch (e) { state.workspaces = []; }
    }
    const ok = state.workspaces.some(w => w.id === state.workspaceId);
    if (!ok) state.workspaceId = state.me.workspaceId;
    sessionStorage.setItem(WS_KEY, state.workspaceId);
    renderHeader();
  }
  async function loadChannels() {
    if (state.channels) return state.channels;
    try { state.channels = (await gql('{ channels { name provider group models inflight circuit } }')).channels; } catch (e) { state.channels = []; }
    return state.channels;
  }
  function pageError(e) {
    if (e instanceof AuthError) return;
    const m = main();
    m.textContent = '';
    m.append(h('p', { class: 'msg error', role: 'alert', text: 'Could not load this page: ' + e.message }));
  }
  // Renders the page the hash names. Keyboard focus stays on the same control when the page
  // only changed its settings (a filter, a range), and moves to the new page's heading otherwise.
  function route() {
    if (!state.me) return;
    stopTimers();
    const { parts, q } = parseHash();
    const page = parts[0] || 'requests';
    const view = page === 'request' ? 'request/' + parts[1] : page;
    const moved = state.page !== null && state.page !== view;
    const fk = focusKey();
    state.page = view;
    const gen = state.gen;
    const run = page === 'request' && parts[1] ? renderDetail(parts[1], gen)
      : page === 'overview' ? renderOverview(q, gen)
        : page === 'channels' ? renderChannels(gen)
          : renderRequests(q, gen);
    setPage(page === 'request' ? 'requests' : page);
    Promise.resolve(run).then(() => {
      if (gen !== state.gen) return;
      if (!moved && restoreFocus(fk)) return;
      if (moved) {
        const h1 = $('main h1');
        if (h1) { h1.setAttribute('tabindex', '-1'); h1.focus(); }
      }
    }).catch(pageError);
  }
  // Re-renders charts sized to their container when the window width changes. Only a real width
  // change redraws: a redraw replaces the chart's links, and a keyboard user's focus with them.
  let resizeTimer = null;
  let drawnWidth = window.innerWidth;
  window.addEventListener('resize', () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      if (window.innerWidth === drawnWidth) return;
      drawnWidth = window.innerWidth;
      if (state.resize) state.resize();
    }, 150);
  });
  function focusKey() {
    const a = document.activeElement;
    return a && a.dataset ? a.dataset.fk || null : null;
  }
  function restoreFocus(key) {
    if (!key) return false;
    const el = document.querySelector('[data-fk="' + CSS.escape(key) + '"]');
    if (el) el.focus({ preventScroll: true });
    return !!el;
  }

  // ===== requests page =====
  const TIMING_FIELDS = `timing { authMs bodyReadMs distributionMs upstreamHeadersMs firstSseEventMs firstResponseMs
      firstTextDeltaMs lastEffectiveMs upstreamDoneMs totalHandlerMs }`;
  const REQ_FIELDS = `requestId model channel dialect upstreamDialect translated stream status outcome timeoutKind classification flags ts
    latencyMs ttftMs upstreamMs hedge costUsd costEstimated refusedBy instance
    ${TIMING_FIELDS}
    attempts { role won startMs firstByteMs }`;
  // The list reads the overview's usage filter (the same URL keys) and a classification.
  function listFilter(q) {
    const f = usageFilter(q);
    if (q.classification) f.classification = q.classification;
    return f;
  }
  // The usage dimensions the list has no select for: they come from an overview link.
  const SHAPE_KEYS = ['stream', 'effort', 'tools', 'maxOut', 'input', 'region'];
  async function fetchList(q) {
    const limit = LIMITS.includes(Number(q.limit)) ? Number(q.limit) : 100;
    const filter = listFilter(q);
    if (q.from && q.to) {
      const d = await gql(`query($ws: ID!, $f: UsageFilterInput, $w: WindowInput, $n: Int!) {
        usage(workspaceId: $ws, window: $w, filter: $f) { recent(limit: $n) { ${REQ_FIELDS} } } }`,
      { ws: state.workspaceId, f: filter, w: { from: q.from, to: q.to }, n: limit });
      return d.usage.recent;
    }
    // Without a time window the live list also shows the requests still in flight (this
    // instance's registry), newest first above the finished ones, with their marks so far.
    const d = await gql(`query($ws: ID!, $f: UsageFilterInput, $n: Int!) {
      recentRequests(workspaceId: $ws, limit: $n, filter: $f) { ${REQ_FIELDS} }
      inflightRequests(workspaceId: $ws, limit: 100) { ${INFLIGHT_FIELDS} } }`,
    { ws: state.workspaceId, f: filter, n: limit });
    const done = new Set(d.recentRequests.map(r => r.requestId));
    const running = d.inflightRequests
      .filter(r => !done.has(r.requestId) && matches(r, filter))
      .map(inflightRow)
      .reverse();
    return running.concat(d.recentRequests);
  }
  const INFLIGHT_FIELDS = `requestId model provider channel group dialect upstreamDialect stream state status outcome ageMs createdAt
    ${TIMING_FIELDS}
    attempts { channel role won status errorClass startMs headersMs firstByteMs endMs }`;
  // An in-flight entry as a row of the list: while running, no outcome, classification or
  // total yet; once finished (its record waiting for the store), its outcome and total, so the
  // row stays until the stored one replaces it.
  function inflightRow(r) {
    const finished = r.state === 'finished' && r.outcome != null;
    return Object.assign({}, r, {
      inflight: !finished, ts: r.createdAt, outcome: finished ? r.outcome : 'in_flight', classification: null, flags: [],
      translated: !!r.upstreamDialect && r.upstreamDialect !== r.dialect,
      latencyMs: finished ? r.timing.totalHandlerMs : null, ttftMs: null, upstreamMs: null, hedge: 'none',
    });
  }
  // The list's filter, for the in-flight rows (the server filters the finished ones): an
  // outcome or classification filter shows no request that has neither yet.
  function matches(r, f) {
    if (f.outcome || f.classification) return false;
    // The request's shape and region are known once it is recorded.
    if (['reasoningEffort', 'toolsPresent', 'maxOutputBucket', 'inputBucket', 'region'].some(k => k in f)) return false;
    if ('stream' in f && r.stream !== f.stream) return false;
    return ['model', 'channel', 'dialect'].every(k => f[k] == null || (f[k] === '' ? r[k] == null : r[k] === f[k]));
  }
  function selectFilter(id, label, values, current, onchange, allLabel) {
    const opts = [h('option', { value: '', text: allLabel || 'all' })];
    const vals = values.slice();
    if (current && !vals.includes(current)) vals.push(current);
    for (const v of vals) opts.push(h('option', { value: v, selected: v === current, text: v }));
    return h('label', { for: id }, label, h('select', { id, name: id, onchange, 'data-fk': id }, opts));
  }
  async function renderRequests(q, gen) {
    const channels = await loadChannels();
    if (gen !== state.gen) return;
    const models = [...new Set(channels.flatMap(c => c.models))].filter(x => x !== '*').sort();
    const m = main();
    m.textContent = '';
    const limit = LIMITS.includes(Number(q.limit)) ? Number(q.limit) : 100;
    const scale = SCALES.some(([k]) => k === q.scale) ? q.scale : 'shared';
    const set = (k, v) => { const n = Object.assign({}, q); n[k] = v; location.hash = hashFor('requests', n); };
    const onsel = k => e => set(k, e.target.value);
    const status = h('span', { id: 'live-status', role: 'status', text: 'Loading…' });
    let paused = false;
    const pauseBtn = h('button', { type: 'button', 'aria-pressed': 'false', onclick: () => {
      paused = !paused;
      pauseBtn.setAttribute('aria-pressed', String(paused));
      pauseBtn.textContent = paused ? 'Resume live updates' : 'Pause live updates';
      if (!paused) tick();
    }, text: 'Pause live updates' });
    const windowChip = q.from && q.to ? h('span', { class: 'chip' },
      'Window ' + fmtHM(new Date(q.from)) + '–' + fmtHM(new Date(q.to)) + ' ' + zoneName(),
      h('button', { type: 'button', 'aria-label': 'Remove the time window', onclick: () => {
        const n = Object.assign({}, q); delete n.from; delete n.to; location.hash = hashFor('requests', n);
      }, text: '✕' })) : null;
    const shape = SHAPE_KEYS.filter(k => q[k]).map(k => DIMS.find(d => d.key === k));
    const shapeChip = shape.length ? h('span', { class: 'chip', id: 'usage-chip' },
      'Also ' + shape.map(d => filterText(d, q[d.key] === NOT_SET ? null : q[d.key])).join(', '),
      h('button', { type: 'button', 'aria-label': 'Remove these filters', onclick: () => {
        const n = Object.assign({}, q); for (const k of SHAPE_KEYS) delete n[k]; location.hash = hashFor('requests', n);
      }, text: '✕' })) : null;
    const filters = h('form', { class: 'toolbar', 'aria-label': 'Filter requests', onsubmit: e => e.preventDefault() },
      selectFilter('f-model', 'Model', models, q.model, onsel('model')),
      selectFilter('f-channel', 'Channel', channels.map(c => c.name), q.channel, onsel('channel')),
      selectFilter('f-dialect', 'Dialect', DIALECTS, q.dialect, onsel('dialect')),
      selectFilter('f-outcome', 'Outcome', OUTCOMES, q.outcome, onsel('outcome')),
      selectFilter('f-class', 'Classification', CLASSES, q.classification, onsel('classification')),
      h('label', { for: 'f-limit' }, 'Rows', h('select', { id: 'f-limit', 'data-fk': 'f-limit', onchange: onsel('limit') },
        LIMITS.map(n => h('option', { value: n, selected: n === limit, text: 'newest ' + n })))),
      h('label', { for: 'f-scale' }, 'Waterfall scale', h('select', { id: 'f-scale', 'data-fk': 'f-scale', onchange: onsel('scale') },
        SCALES.map(([k, name]) => h('option', { value: k, selected: k === scale, text: name })))),
      windowChip, shapeChip,
      h('button', { type: 'button', 'data-fk': 'f-clear', onclick: () => { location.hash = '#/requests'; }, text: 'Clear filters' }));
    // The legend folds away on a phone, where it would fill the screen.
    const legend = h('details', { class: 'legendbox', open: window.innerWidth > 720 },
      h('summary', { text: 'Waterfall legend' }),
      h('ul', { class: 'legend', 'aria-label': 'Waterfall segments' },
        SEGS.map(([k, name, span]) => h('li', {}, h('span', { class: 'sw seg-' + k, 'aria-hidden': 'true' }), name + (span ? ' (' + span + ')' : '')))));
    const wrap = h('div', { class: 'tablewrap' });
    m.append(h('h1', { text: 'Requests' }), filters,
      h('div', { class: 'status' }, status, pauseBtn),
      legend, wrap);
    let sig = null;
    let seen = null;
    const tick = async () => {
      if (gen !== state.gen) return;
      const t0 = performance.now();
      let rows;
      try {
        rows = await fetchList(q);
      } catch (e) {
        if (gen !== state.gen || e instanceof AuthError) return;
        status.textContent = 'Update failed: ' + e.message + ' (retrying)';
      }
      if (gen !== state.gen) return;
      if (rows) {
        // An in-flight row is drawn again whenever its marks or age move on, a finished one
        // when its stored record (with its classification) replaces it.
        const nsig = rows.map(r => r.requestId + ':' + (r.inflight ? r.ageMs : r.classification)).join(',');
        if (nsig !== sig) {
          if (!sig) addOptions(filters, rows);
          const fk = focusKey();
          const t1 = performance.now();
          const fresh = seen ? rows.filter(r => !seen.has(r.requestId)).length : 0;
          wrap.textContent = '';
          wrap.append(requestsTable(rows, seen, scale));
          restoreFocus(fk);
          const t2 = performance.now();
          const stat = { rows: rows.length, fetchMs: t1 - t0, renderMs: t2 - t1, at: t2, paintedAt: null };
          window.__laptimeRender = stat;
          // after the next frame is painted (rAF runs before paint, the timeout after it)
          requestAnimationFrame(() => setTimeout(() => { stat.paintedAt = performance.now(); }, 0));
          if (fresh) announce(fresh + ' new request' + (fresh > 1 ? 's' : ''));
          sig = nsig;
          seen = new Set(rows.map(r => r.requestId));
        }
        status.textContent = (paused ? 'Paused' : 'Live (every ' + POLL_MS / 1000 + ' s)') + ' · ' + rows.length + ' request' + (rows.length === 1 ? '' : 's') + ' · updated ' + fmtClock(new Date().toISOString()) + ' ' + zoneName();
      }
      if (!paused && gen === state.gen) state.timer = setTimeout(tick, POLL_MS);
    };
    await tick();
  }
  // Models and channels seen in the list but not configured (say, served by a wildcard channel)
  // join the filter choices.
  function addOptions(form, rows) {
    for (const [id, key] of [['f-model', 'model'], ['f-channel', 'channel']]) {
      const sel = form.querySelector('#' + id);
      const have = new Set([...sel.options].map(o => o.value));
      for (const v of [...new Set(rows.map(r => r[key]).filter(Boolean))].sort()) {
        if (!have.has(v)) sel.append(h('option', { value: v, text: v }));
      }
    }
  }
  // Where a time lands on a row's waterfall, in % of its width, for the chosen scale: shared
  // (0 to the slowest row), each row to its own end, or log10(1 + ms) to the slowest row's.
  function scaler(scale, max) {
    if (scale === 'log') {
      const top = Math.log10(1 + max);
      return { pos: v => Math.log10(1 + Math.max(0, v)) / top * 100 };
    }
    return { pos: v => v / max * 100 };
  }
  function rowEnd(r) {
    const m = marksOf(r);
    return m.t7 || (r.inflight ? r.ageMs : 0) || 0;
  }
  function requestsTable(rows, seen, scale) {
    const maxT = rows.reduce((a, r) => Math.max(a, rowEnd(r)), 0);
    const { ticks, max } = niceTicks(maxT, 5);
    const sc = scaler(scale, max);
    const logTicks = [];
    for (let v = 1; v <= max; v *= 10) logTicks.push(v);
    const shown = scale === 'row' ? [] : scale === 'log' ? [0].concat(logTicks) : ticks;
    const axis = h('div', { class: 'axis', 'aria-hidden': 'true' }, shown.map((t, i) => h('span', {
      class: i === 0 ? 'first' : i === shown.length - 1 && scale !== 'log' ? 'last' : null,
      style: { left: sc.pos(t) + '%' }, text: scale === 'log' ? fmtTick(t, Math.max(1, t)) : fmtTick(t, ticks[1] - ticks[0]),
    })));
    const scaleText = scale === 'row' ? 'each row scaled to its own total (compare shapes, not lengths)'
      : scale === 'log' ? 'one logarithmic scale, 0 to ' + fmtMs(max) : 'one shared scale from 0 to ' + fmtMs(max);
    const axisTitle = scale === 'row' ? 'Waterfall, each row to its own total'
      : scale === 'log' ? 'Waterfall, ms since received (shared log scale)' : 'Waterfall, ms since received (shared scale)';
    const table = h('table', { class: 'reqs', 'data-scale': scale, 'data-scale-ms': scale === 'row' ? null : max, 'aria-describedby': 'reqs-cap' },
      h('caption', { id: 'reqs-cap', class: 'sr-only', text: 'Requests, newest first. The waterfall column uses ' + scaleText + ', since each request was received.' }),
      h('colgroup', {}, h('col', { class: 'c-time' }), h('col', { class: 'c-model' }), h('col', { class: 'c-route' }),
        h('col', { class: 'c-outcome' }), h('col', { class: 'c-class' }), h('col', { class: 'c-total' }),
        h('col', { class: 'c-cost' }), h('col', { class: 'c-inst' }), h('col', { class: 'c-wf' })),
      h('thead', {}, h('tr', {},
        h('th', { scope: 'col', class: 'c-time', text: 'Received (' + zoneName() + ')' }),
        h('th', { scope: 'col', class: 'c-model', text: 'Model' }),
        h('th', { scope: 'col', class: 'c-route', text: 'Channel · dialect' }),
        h('th', { scope: 'col', class: 'c-outcome', text: 'Outcome' }),
        h('th', { scope: 'col', class: 'c-class', text: 'Classification' }),
        h('th', { scope: 'col', class: 'c-total num', text: 'Total' }),
        h('th', { scope: 'col', class: 'c-cost num', title: 'USD; — when no price covers the model (cost unknown, not $0); ≈ when some tokens were estimated', text: 'Cost (USD)' }),
        h('th', { scope: 'col', class: 'c-inst', title: 'The gateway instance that served the request', text: 'Instance' }),
        h('th', { scope: 'col', class: 'c-wf' }, h('div', { class: 'axis-title', text: axisTitle }), axis))));
    const body = h('tbody', {});
    const frag = document.createDocumentFragment();
    for (const r of rows) {
      const own = scale === 'row' ? scaler('shared', rowEnd(r) || 1) : sc;
      frag.appendChild(requestRow(r, own, seen));
    }
    body.appendChild(frag);
    table.appendChild(body);
    if (!rows.length) body.append(h('tr', {}, h('td', { colspan: 9, class: 'muted', text: 'No requests match yet. Requests appear here as soon as they start.' })));
    return table;
  }
  function requestRow(r, sc, seen) {
    const m = marksOf(r);
    const segs = segmentsOf(m);
    const failed = !SUCCESS.has(r.outcome) && !r.inflight;
    const href = '#/request/' + encodeURIComponent(r.requestId);
    const wf = h('div', { class: 'wf', role: 'img', 'aria-label': 'Waterfall: ' + segs.map(segLabel).join('; ') + '; total ' + fmtMs(m.t7) });
    for (const sg of segs) {
      const left = sc.pos(sg.from);
      wf.appendChild(h('span', {
        class: 'seg-' + sg.key, 'data-seg': sg.key, 'data-from': sg.from, 'data-to': sg.to,
        'data-missing': sg.missing ? sg.missing.join(' ') : null,
        'data-deadline': sg.deadline || null,
        title: segLabel(sg),
        style: { left: left + '%', width: (sc.pos(sg.to) - left) + '%' },
      }));
    }
    const tr = h('tr', {
      'data-id': r.requestId, class: (failed ? 'failed' : '') + (seen && !seen.has(r.requestId) ? ' new' : ''),
      onclick: e => { if (!e.target.closest('a')) location.hash = href; },
    },
    h('td', { class: 'c-time mono' }, h('a', { href, 'data-fk': 'req-' + r.requestId, title: fmtWhen(r.ts, true) + ' · ' + r.requestId, 'aria-label': 'Request at ' + fmtClock(r.ts, true) + ' ' + zoneName() + ', ' + (r.model || 'no model') + ', ' + r.outcome + ', ' + fmtMs(r.latencyMs) + ': open detail', text: fmtClock(r.ts, true) })),
    h('td', { class: 'c-model', title: r.model || '', text: r.model || '—' }),
    h('td', { class: 'c-route', text: (r.channel || '—') + ' · ' + dialectPair(r) + (r.stream ? ' · stream' : '') }),
    h('td', { class: 'c-outcome' }, outcomeBadge(r.outcome),
      r.refusedBy ? h('span', { class: 'refused small', 'data-refused-by': r.refusedBy, text: ' by ' + r.refusedBy }) : null),
    h('td', { class: 'c-class', title: r.flags.join(', ') }, classSpan(r.classification)),
    h('td', { class: 'c-total num', text: r.inflight ? 'running ' + fmtMs(r.ageMs) : fmtMs(r.latencyMs) }),
    costCell(r),
    h('td', { class: 'c-inst', 'data-instance': r.instance || null, text: r.instance || '—', title: r.instance ? null : r.inflight ? 'in flight on this instance' : 'recorded before instances were named' }),
    h('td', { class: 'c-wf' }, wf));
    if (r.inflight) tr.classList.add('inflight');
    return tr;
  }

  // USD: six decimals under a cent (a request costs fractions of one), else four.
  function fmtUsd(usd) {
    const digits = usd !== 0 && Math.abs(usd) < 0.01 ? 6 : 4;
    return '$' + usd.toFixed(digits);
  }
  // A cost the gateway does not know is said so, never shown as $0.
  function fmtCost(usd, estimated) {
    if (usd == null) return 'unknown (no price for this model)';
    return fmtUsd(usd) + (estimated ? ' (estimated tokens)' : '');
  }
  // The list's cost cell: "—" (titled) when no price covers the model or the request is still
  // running, "≈" before a cost that rests on estimated tokens.
  function costCell(r) {
    if (r.inflight || r.costUsd === undefined) {
      return h('td', { class: 'c-cost num', 'data-cost': 'pending', text: '—',
        title: r.inflight ? 'in flight: its cost is known when it ends' : 'finished: its cost is known once its record is stored' });
    }
    if (r.costUsd == null) {
      return h('td', { class: 'c-cost num', 'data-cost': 'unpriced', title: 'no price for this model: billed, cost unknown (not $0)', text: '—' });
    }
    return h('td', { class: 'c-cost num', 'data-cost': r.costUsd, 'data-estimated': r.costEstimated ? 'true' : null,
      title: r.costEstimated ? 'estimated: the provider reported no usage for some tokens, the gateway counted them' : null,
      text: (r.costEstimated ? '≈ ' : '') + fmtUsd(r.costUsd) });
  }

  // ===== request detail =====
  // The detail page. A request still running (this instance's in-flight registry) is drawn with
  // its marks so far and read again every DETAIL_POLL_MS until its record is stored, at most
  // DETAIL_POLLS times; then the stored record replaces it.
  async function renderDetail(id, gen, polls) {
    const n = polls || 0;
    const d = await gql(`query($ws: ID!, $id: ID!) { request(workspaceId: $ws, requestId: $id) {
      requestId model provider channel group dialect upstreamDialect translated stream status outcome timeoutKind errorClass classification flags ts
      latencyMs ttftMs upstreamMs cacheReadTokens cacheWriteTokens failoverCount cached hedge
      inputTokens outputTokens reasoningTokens eventCount textDeltaCount channelInflight instance
      costUsd costEstimated refusedBy traceId region
      shape { maxOutputTokens reasoningEffort toolCount toolChoice responseFormat temperature topP }
      judgements { stage unit measured threshold pastThreshold slow configKey }
      inBand { carrier line note trailers derived }
      timing { authMs admissionMs distributionMs bodyReadMs upstreamHeadersMs firstSseEventMs firstResponseMs
        firstTextDeltaMs lastEffectiveMs upstreamDoneMs totalHandlerMs visibleOutputTps }
      attempts { channel role won status errorClass startMs headersMs firstByteMs endMs } }
      inflightRequests(workspaceId: $ws) { ${INFLIGHT_FIELDS} } }`,
    { ws: state.workspaceId, id });
    if (gen !== state.gen) return;
    const running = d.request ? null : d.inflightRequests.find(x => x.requestId === id);
    const m = main();
    const fk = focusKey();
    m.textContent = '';
    const back = h('p', {}, h('a', { href: '#/requests', text: '← Requests' }));
    if (!d.request && !running) {
      m.append(back, h('h1', { text: 'Request not found' }), h('p', { class: 'msg', text: 'No request ' + id + ' in this workspace.' }));
      return;
    }
    const r = d.request || inflightRow(running);
    const mk = marksOf(r);
    const tl = h('div', { class: 'chart', id: 'timeline' });
    const draw = () => { tl.textContent = ''; tl.append(detailTimeline(r, mk, Math.max(320, tl.clientWidth || m.clientWidth - 40))); };
    const segs = segmentsOf(mk);
    let live = null;
    if (running) {
      const more = n < DETAIL_POLLS;
      const now = running.state === 'finished'
        ? '● Finished (' + (running.outcome || 'outcome pending') + '); its record is being written: the marks it reached, read again every '
        : '● In flight for ' + fmtMs(r.ageMs) + ': the marks so far, read again every ';
      live = h('p', { id: 'live-detail', class: 'status', role: 'status', text: more
        ? now + DETAIL_POLL_MS / 1000 + ' s until the stored record replaces them.'
        : '● Still in flight after ' + DETAIL_POLLS + ' reads; live updates stopped. Reload the page to follow it again.' });
      if (more) state.timer = setTimeout(() => renderDetail(id, gen, n + 1).catch(pageError), DETAIL_POLL_MS);
    }
    m.append(back,
      h('h1', {}, 'Request ', h('code', { text: r.requestId })),
      live,
      h('p', { class: 'lead' }, (r.model || 'no model') + ' · ' + (r.channel || 'no channel') + ' · ' + dialectPair(r) + (r.stream ? ' stream' : '') + ' · ', outcomeBadge(r.outcome), ' · ', classSpan(r.classification), ' · total ' + (r.inflight ? 'running ' + fmtMs(r.ageMs) : fmtMs(r.latencyMs))),
      h('h2', { id: 'tl-title', text: 'Timeline (to scale)' }),
      h('p', { class: 'note', text: 'Every mark is an offset from t0, when the gateway had the request head. t1 is the dispatch of the winning attempt (hedged: the primary’s), derived as upstream done − upstreamMs; t2 = t1 + upstreamHeadersMs. Local phases are durations, drawn back to back from t0 in the order the gateway runs them. After the last effective output nothing was generated: the gap from it to upstream done is drawn as idle, with the deadline that fired when one did. A mark the API does not have is written “absent”, never drawn at 0.' }),
      tl,
      h('p', { class: 'note', text: 'Attempts: one lane each, from dispatch to end; the two thin bars inside a lane mark its response headers, then its first byte. ★ marks the attempt that won; a red outline, an attempt that failed.' }),
      h('ul', { class: 'seglist', 'aria-label': 'Segments' }, segs.map(sg => h('li', { 'data-seg': sg.key }, h('span', { class: 'sw seg-' + sg.key, 'aria-hidden': 'true' }), segLabel(sg)))),
      running ? h('div', { class: 'cards' }, requestCard(r, true)) : h('div', { class: 'cards' },
        requestCard(r, false),
        classificationCard(r),
        tokensCard(r),
        shapeCard(r),
        inBandCard(r)));
    draw();
    restoreFocus(fk);
    state.resize = draw;
  }
  function requestCard(r, running) {
    const t = r.timing;
    return h('div', { class: 'card' }, h('h2', { text: 'Request' }), h('dl', { class: 'kv' },
      kv('Received', h('span', { title: r.ts, text: fmtWhen(r.ts, true) })),
      kv('Model', r.model || '—'), kv('Channel', (r.channel || '—') + ' (' + (r.provider || '—') + ', group ' + (r.group || '—') + ')'),
      kv('Dialect', dialectPair(r) + (r.translated ? ' (translated)' : '') + (r.stream ? ', streamed' : ', not streamed')),
      running ? null : [kv('Status', String(r.status)), kv('Outcome', outcomeBadge(r.outcome))],
      r.timeoutKind ? kv('Deadline that fired', r.timeoutKind, 'timeoutKind') : null,
      r.errorClass ? kv('Error class', r.errorClass) : null,
      running ? kv(r.inflight ? 'Running for' : 'Total (latencyMs)', r.inflight ? fmtMs(r.ageMs) : fmtMs(r.latencyMs)) : [
        kv('Total (latencyMs)', fmtMs(r.latencyMs)),
        kv('Cost', fmtCost(r.costUsd, r.costEstimated)),
        r.refusedBy ? kv('Refused by', r.refusedBy) : null,
        t.admissionMs != null ? kv('Admission (limits)', fmtMs(t.admissionMs)) : null,
        kv('Failovers', fmtInt(r.failoverCount)), kv('Response cache', r.cached ? 'hit' : 'no'),
        kv('In flight at dispatch', fmtInt(r.channelInflight)),
        kv('Served by', r.instance || '—'),
        kv('Region', r.region || '— (no region configured)', 'region'),
        kv('Trace id', r.traceId ? h('code', { text: r.traceId }) : '—', 'traceId')]));
  }
  // The classification, and each stage the classifier judged: its figure, the threshold in force
  // (with the config key that sets it), and by how much it crossed it.
  function classificationCard(r) {
    const failed = !SUCCESS.has(r.outcome);
    const judged = r.judgements || [];
    const fmtIn = (v, unit) => unit === 'ms' ? fmtMs(v) : fmtTps(v);
    const past = j => j.unit === 'ms'
      ? (j.slow ? fmtMs(j.pastThreshold) + ' over' : fmtMs(-j.pastThreshold) + ' under')
      : (j.slow ? fmtTps(j.pastThreshold) + ' below the floor' : fmtTps(-j.pastThreshold) + ' above the floor');
    return h('div', { class: 'card' }, h('h2', { text: 'Classification' }),
      h('p', { id: 'classification' }, classSpan(r.classification)),
      h('p', { class: 'small muted', text: failed ? 'The outcome was not a success; slow stages are still flagged.' : 'The first slow stage, checked from the upstream boundary toward local phases.' }),
      h('h3', { text: 'Flags' }),
      r.flags.length ? h('ul', { class: 'flags', id: 'flags' }, r.flags.map(f => h('li', { text: f }))) : h('p', { id: 'flags', class: 'muted', text: 'none: no stage over its threshold' }),
      h('h3', { text: 'Stages judged (thresholds in force now)' }),
      judged.length ? h('ul', { class: 'judged', id: 'judgements' }, judged.map(j => h('li', { 'data-stage': j.stage, 'data-slow': String(j.slow) },
        h('b', { text: (j.slow ? '▲ ' : '') + j.stage }), ': ' + fmtIn(j.measured, j.unit) + ' against ' + fmtIn(j.threshold, j.unit) + ' (',
        h('code', { text: j.configKey }), '), ' + past(j))))
        : h('p', { id: 'judgements', class: 'muted', text: 'no stage could be judged: their marks are absent' }));
  }
  function tokensCard(r) {
    const t = r.timing;
    return h('div', { class: 'card' }, h('h2', { text: 'Tokens and speed' }), h('dl', { class: 'kv' },
      kv('Input', tok(r.inputTokens)), kv('Output', tok(r.outputTokens)),
      kv('Reasoning', tok(r.reasoningTokens)), kv('Cache read', tok(r.cacheReadTokens)),
      kv('Cache write', tok(r.cacheWriteTokens)),
      kv('Output speed', t.visibleOutputTps != null ? fmtTps(t.visibleOutputTps) : '— (needs first visible text, upstream done and output tokens)'),
      kv('SSE events', fmtInt(r.eventCount)), kv('Text deltas', fmtInt(r.textDeltaCount))));
  }
  // What the client asked for, so that like can be compared with like.
  function shapeCard(r) {
    const sh = r.shape || {};
    const asked = v => v == null ? '— not in the request' : String(v);
    return h('div', { class: 'card', id: 'shape' }, h('h2', { text: 'Request shape' }), h('dl', { class: 'kv' },
      kv('Max output tokens', sh.maxOutputTokens != null ? fmtInt(sh.maxOutputTokens) : asked(null), 'maxOutputTokens'),
      kv('Reasoning effort', asked(sh.reasoningEffort), 'reasoningEffort'),
      kv('Tools', sh.toolCount != null ? fmtInt(sh.toolCount) : asked(null), 'toolCount'),
      kv('Tool choice', asked(sh.toolChoice), 'toolChoice'),
      kv('Response format', asked(sh.responseFormat), 'responseFormat'),
      kv('Temperature', asked(sh.temperature), 'temperature'),
      kv('top_p', asked(sh.topP), 'topP')));
  }
  // Exactly what the client received in-band, as the API derives it from the record: no line
  // for a stream cut, stalled or broken before its terminal frame.
  function inBandCard(r) {
    const b = r.inBand || { carrier: 'unknown', line: null, note: null };
    // `trailers` is what the gateway noted as sent; null on a record older than that note, whose
    // carrier is read from the record instead (`derived`).
    const alsoTrailers = b.trailers === true ? ', and the same values as HTTP trailers (the client sent TE: trailers)'
      : b.trailers == null ? ' (and the same values as trailers if the client sent TE: trailers)' : '';
    const how = b.carrier === 'sse_comment' ? 'SSE comment before the terminal frame' + alsoTrailers + ':'
      : b.carrier === 'trailers' ? 'HTTP trailers only (the client sent TE: trailers):'
        : b.carrier === 'server_timing' ? 'Non-streamed answer: the Server-Timing header.'
          : b.carrier === 'unknown' ? 'The record cannot tell whether a timing line was sent.' : 'No timing line was sent.';
    const derivedNote = b.derived && b.carrier !== 'unknown'
      ? h('p', { class: 'note', id: 'inband-derived', text: 'Read from the record: it was stored before the gateway noted what it sent.' }) : null;
    const sent = b.line != null;
    return h('div', { class: 'card', id: 'inband', 'data-carrier': b.carrier }, h('h2', { text: 'What the client got in-band' }),
      h('p', { class: 'small muted', text: how }),
      sent ? h('pre', { class: 'inband', text: b.line }) : null,
      b.note ? h('p', { class: 'note', id: 'inband-note', text: b.note }) : null,
      derivedNote,
      b.carrier === 'sse_comment' ? h('dl', { class: 'kv' },
        kv('upstream_ms', r.upstreamMs != null ? fmtMs(r.upstreamMs) : 'absent (not sent)', 'upstreamMs'),
        kv('ttft_ms', r.ttftMs != null ? fmtMs(r.ttftMs) : 'absent (not sent)', 'ttftMs'),
        kv('cached_tokens', r.cacheReadTokens != null ? fmtInt(r.cacheReadTokens) : 'absent (not sent)', 'cacheReadTokens'),
        kv('cache_write_tokens', r.cacheWriteTokens != null ? fmtInt(r.cacheWriteTokens) : 'absent (not sent)', 'cacheWriteTokens'),
        kv('hedge', r.hedge, 'hedge')) : null);
  }
  function tok(v) { return v == null ? '— not reported by upstream' : fmtInt(v); }
  function kv(k, v, id) {
    return [h('dt', { text: k }), h('dd', { 'data-kv': id || null }, v)];
  }
  // The detail timeline: one row per mark (present or absent), the waterfall, and a lane per
  // attempt, all on one x scale.
  function detailTimeline(r, mk, width) {
    const t = r.timing;
    const narrow = width < 640;
    const LW = narrow ? 104 : 210;
    const R = narrow ? 12 : 24;
    const x0 = LW, x1 = width - R;
    const ends = [mk.t7 || 0, r.inflight ? r.ageMs : 0].concat((r.attempts || []).map(a => a.endMs || 0));
    const { ticks, max, step } = niceTicks(Math.max.apply(null, ends), narrow ? 4 : 8);
    const X = v => x0 + (v / max) * (x1 - x0);
    const rows = [];
    // phases back to back from t0
    let at = 0;
    const phase = (key, name, v) => {
      if (v == null) { rows.push({ key, name, absent: true, api: v }); return; }
      rows.push({ key, name, from: at, to: at + v, api: v, dur: true });
      at += v;
    };
    rows.push({ key: 'received', name: 't0 received', at: 0, api: 0, extra: 'origin' });
    phase('auth', narrow ? 'auth' : 'auth (duration)', t.authMs);
    phase('body_read', narrow ? 'body read' : 'body read (duration)', t.bodyReadMs);
    phase('distribution', narrow ? 'distribution' : 'distribution (duration)', t.distributionMs);
    const mark = (key, name, v, api, extra) => rows.push(v == null ? { key, name, absent: true } : { key, name, at: v, api: api != null ? api : v, extra });
    mark('upstream_start', narrow ? 't1 dispatch' : 't1 upstream start', mk.t1, null, 'derived');
    mark('upstream_headers', narrow ? 't2 headers' : 't2 upstream headers', mk.t2, t.upstreamHeadersMs, 't1 + ');
    mark('first_byte', narrow ? 'first byte' : 'first byte (winner)', mk.firstByte);
    mark('first_event', narrow ? 't3 first event' : 't3 first SSE event', t.firstSseEventMs);
    mark('first_effective', narrow ? 't4 effective' : 't4 first effective', t.firstResponseMs);
    mark('first_visible', narrow ? 't5 visible text' : 't5 first visible text', t.firstTextDeltaMs);
    mark('last_effective', narrow ? 'last output' : 'last effective output', t.lastEffectiveMs);
    mark('upstream_done', narrow ? 't6 upstream end' : 't6 upstream done', t.upstreamDoneMs);
    mark('handler_done', narrow ? 't7 handler end' : 't7 handler done', t.totalHandlerMs);
    const RH = 22;
    const top = 34;
    const wfY = top + 6;
    const marksY = wfY + 30;
    const attemptsY = marksY + rows.length * RH + 30;
    const height = attemptsY + Math.max(1, r.attempts.length) * (RH + 6) + 6;
    const svg = s('svg', { width, height, viewBox: '0 0 ' + width + ' ' + height, role: 'img', 'aria-labelledby': 'tl-title tl-desc', 'data-scale-ms': max });
    svg.append(s('desc', { id: 'tl-desc', text: rows.map(rw => rw.name + ': ' + (rw.absent ? 'absent' : fmtMs(rw.dur ? rw.api : rw.at))).join('; ') }));
    // axis
    const ax = s('g', { class: 'tick' });
    for (const v of ticks) {
      ax.append(s('line', { class: 'grid', x1: X(v), x2: X(v), y1: top - 4, y2: height - 6 }),
        s('text', { x: X(v), y: top - 8, 'text-anchor': v === 0 ? 'start' : v === max ? 'end' : 'middle', text: fmtTick(v, step) }));
    }
    ax.append(s('text', { x: 4, y: top - 8, class: 'tick', text: 'ms since t0 →' }));
    svg.append(ax, s('line', { class: 'axisline', x1: x0, x2: x1, y1: top - 4, y2: top - 4 }));
    // waterfall
    svg.append(s('text', { x: 4, y: wfY + 13, class: 'lbl', text: 'waterfall' }));
    for (const sg of segmentsOf(mk)) {
      const w = Math.max(0, X(sg.to) - X(sg.from));
      const g = s('g', { 'data-seg': sg.key, 'data-deadline': sg.deadline || null });
      g.append(s('title', { text: segLabel(sg) }));
      if (sg.key === 'absent') {
        g.append(s('rect', { x: X(sg.from), y: wfY, width: w, height: 18, fill: 'url(#pat-absent)', stroke: '#666', 'stroke-dasharray': '3 2' }));
      } else {
        g.append(s('rect', { x: X(sg.from), y: wfY, width: w, height: 18, fill: 'url(#pat-seg-' + sg.key + ')' }));
      }
      // A stall is labelled on the bar itself: how long nothing came, and the deadline that fired.
      if (sg.key === 'idle' && sg.deadline) {
        const lab = 'idle ' + fmtMs(sg.to - sg.from) + ' · ' + sg.deadline + ' deadline';
        const inside = w > lab.length * 6.5 + 8;
        g.append(s('text', { class: 'seg-label', x: inside ? X(sg.from) + 4 : X(sg.from) - 4, y: wfY + 13, 'text-anchor': inside ? 'start' : 'end', text: lab }));
      }
      svg.append(g);
    }
    // one row per mark
    rows.forEach((rw, i) => {
      const y = marksY + i * RH;
      const g = s('g', rw.absent ? { 'data-absent': rw.key } : { 'data-mark': rw.key, 'data-ms': rw.dur ? rw.api : rw.at, 'data-api-ms': rw.api });
      if (i % 2 === 0) g.append(s('rect', { x: 0, y: y - 15, width, height: RH, fill: '#f7f7f7' }));
      g.append(s('text', { x: 4, y, class: 'lbl', text: rw.name }));
      if (rw.absent) {
        g.append(s('line', { x1: x0, x2: x1, y1: y - 4, y2: y - 4, stroke: '#999', 'stroke-dasharray': '2 4' }),
          s('text', { x: x0 + 6, y, class: 'absent', text: 'absent: no mark (not zero)' }));
      } else if (rw.dur) {
        const w = Math.max(0.5, X(rw.to) - X(rw.from));
        const lab = fmtMs(rw.api);
        g.append(s('rect', { x: X(rw.from), y: y - 11, width: w, height: 9, fill: '#8a8a8a' }),
          s('text', { x: X(rw.to) + 6, y, text: lab }));
      } else {
        const x = X(rw.at);
        const lab = rw.extra === 't1 + ' ? fmtMs(rw.at) + ' (t1 + ' + fmtMs(rw.api) + ')'
          : rw.extra === 'derived' ? fmtMs(rw.at) + ' (derived)'
            : rw.extra === 'origin' ? fmtMs(0) + ' (origin, ' + fmtClock(r.ts, true) + ' ' + zoneName() + ')' : fmtMs(rw.at);
        const right = x < x1 - (lab.length * 7 + 10);
        g.append(s('line', { x1: x, x2: x, y1: wfY + 20, y2: y - 4, stroke: '#444', 'stroke-dasharray': '1 2' }),
          s('path', { d: 'M' + x + ' ' + (y - 10) + 'l5 5l-5 5l-5 -5z', fill: '#000' }),
          s('text', { x: right ? x + 8 : x - 8, y, 'text-anchor': right ? 'start' : 'end', text: lab }));
      }
      svg.append(g);
    });
    // attempts as lanes
    svg.append(s('text', { x: 4, y: attemptsY - 10, class: 'lbl', text: 'attempts (lanes)' }));
    (r.attempts.length ? r.attempts : [null]).forEach((a, i) => {
      const y = attemptsY + i * (RH + 6);
      if (!a) { svg.append(s('text', { x: 4, y: y + 12, class: 'absent', text: 'no upstream attempt (rejected before dispatch)' })); return; }
      const g = s('g', { 'data-attempt': i, 'data-won': a.won ? 'true' : 'false' });
      const lab = (i + 1) + '. ' + a.role + (narrow ? '' : ' · ' + a.channel) + (a.won ? ' ★ won' : '');
      g.append(s('text', { x: 4, y: y + 12, class: a.won ? 'lbl' : null, text: lab }));
      const st = a.startMs != null ? a.startMs : 0;
      const en = a.endMs != null ? a.endMs : mk.t7;
      const w = Math.max(1, X(en) - X(st));
      g.append(s('title', { text: lab + ': start ' + fmtMs(a.startMs) + ', headers ' + fmtMs(a.headersMs) + ', first byte ' + fmtMs(a.firstByteMs) + ', end ' + fmtMs(a.endMs) + (a.status != null ? ', status ' + a.status : '') + (a.errorClass ? ', ' + a.errorClass : '') }));
      g.append(s('rect', { x: X(st), y, width: w, height: 16, fill: a.won ? '#0072B2' : '#fff', stroke: a.won ? '#0072B2' : (a.errorClass ? '#D55E00' : '#555'), 'stroke-width': 1.5, 'stroke-dasharray': a.endMs == null ? '4 2' : null }));
      for (const [v, letter] of [[a.headersMs, 'H'], [a.firstByteMs, 'B']]) {
        if (v == null) continue;
        g.append(s('line', { x1: X(v), x2: X(v), y1: y - 2, y2: y + 18, stroke: a.won ? '#fff' : '#000', 'stroke-width': 2 }));
      }
      const info = (a.status != null ? String(a.status) : 'no status') + (a.errorClass ? ' ✕ ' + a.errorClass : '') + ' · ' + fmtMs(en - st);
      const tx = X(en) + 6;
      const fits = tx + info.length * 6.5 < width;
      g.append(s('text', { x: fits ? tx : X(st) + 4, y: y + 12, class: !fits && a.won ? 'onbar' : null, text: info }));
      svg.append(g);
    });
    return svg;
  }

  // ===== SVG patterns (defined once, shared by every chart) =====
  function initDefs() {
    const defs = $('#defs defs');
    if (!defs || defs.childNodes.length) return;
    const pat = (id, bg, draw) => {
      const p = s('pattern', { id, width: 6, height: 6, patternUnits: 'userSpaceOnUse' });
      p.append(s('rect', { width: 6, height: 6, fill: bg }));
      if (draw) p.append(s('path', { d: draw[0], stroke: draw[1], 'stroke-width': draw[2] || 1.2, fill: draw[3] || 'none' }));
      defs.append(p);
    };
    const tex = {
      none: null, diag: ['M-1 7L7 -1M-1 1L1 -1M5 7L7 5', 'rgba(0,0,0,.45)'],
      diag2: ['M-1 -1L7 7M5 -1L7 1M-1 5L1 7', 'rgba(0,0,0,.45)'],
      dots: ['M3 2.2a0.8 0.8 0 1 0 0.01 0', 'rgba(0,0,0,.55)', 1.4],
      vert: ['M3 0V6', 'rgba(255,255,255,.7)', 1.4], horiz: ['M0 3H6', 'rgba(255,255,255,.6)', 1.4],
      cross: ['M3 0V6M0 3H6', 'rgba(0,0,0,.35)', 1], xhatch: ['M0 0L6 6M6 0L0 6', 'rgba(255,255,255,.7)', 1.2],
    };
    for (const c in CLASS_STYLE) pat('pat-cls-' + c, CLASS_STYLE[c][0], tex[CLASS_STYLE[c][1]]);
    const seg = { local: ['#8a8a8a', null], headers: ['#E69F00', tex.diag], event: ['#56B4E9', null],
      effective: ['#009E73', tex.vert], visible: ['#F0E442', null], generation: ['#0072B2', tex.dots.slice(0, 1).concat(['rgba(255,255,255,.7)', 1.4])],
      tail: ['#CC79A7', tex.horiz.slice(0, 1).concat(['rgba(0,0,0,.35)', 1])],
      idle: ['#e8e8e8', ['M0 3H2M4 3H6', '#777', 1.2]] };
    for (const k in seg) pat('pat-seg-' + k, seg[k][0], seg[k][1]);
    pat('pat-absent', '#fff', ['M-1 7L7 -1M-1 1L1 -1M5 7L7 5', '#999', 1]);
  }

  // ===== charts =====
  function marker(shape, x, y, fill) {
    if (shape === 'square') return s('rect', { x: x - 3.5, y: y - 3.5, width: 7, height: 7, fill, stroke: '#fff', 'stroke-width': 1 });
    if (shape === 'triangle') return s('path', { d: 'M' + x + ' ' + (y - 4.5) + 'l4.5 8h-9z', fill, stroke: '#fff', 'stroke-width': 1 });
    return s('circle', { cx: x, cy: y, r: 3.8, fill, stroke: '#fff', 'stroke-width': 1 });
  }
  function legendSwatch(colour, dash, shape) {
    const sv = s('svg', { width: 34, height: 12, 'aria-hidden': 'true' });
    sv.append(s('line', { x1: 1, x2: 33, y1: 6, y2: 6, stroke: colour, 'stroke-width': 2.5, 'stroke-dasharray': dash || null }), marker(shape, 17, 6, colour));
    return sv;
  }
  // A line chart over time buckets. series: [{label, colour, dash, shape, values: [v|null], tips}]
  function lineChart(opts) {
    const { width, buckets, series, yTitle, title } = opts;
    const H = 210, L = 58, R = 14, T = 14, B = 40;
    const all = series.flatMap(sr => sr.values.filter(v => v != null));
    const { ticks, max, step } = niceTicks(all.length ? Math.max.apply(null, all) : 1, 4);
    const n = buckets.length;
    const X = i => L + (n === 1 ? 0.5 : i / (n - 1)) * (width - L - R);
    const Y = v => T + (1 - v / max) * (H - T - B);
    const svg = s('svg', { width, height: H, viewBox: '0 0 ' + width + ' ' + H, role: 'img', 'aria-label': title + ': ' + series.map(sr => sr.label + ' ' + sr.values.map(v => v == null ? 'no data' : fmtMs(v)).join(', ')).join('; ') });
    for (const v of ticks) {
      svg.append(s('line', { class: 'grid', x1: L, x2: width - R, y1: Y(v), y2: Y(v) }),
        s('text', { class: 'tick', x: L - 6, y: Y(v) + 4, 'text-anchor': 'end', text: fmtTick(v, step) }));
    }
    svg.append(s('text', { class: 'tick', x: 12, y: T + (H - T - B) / 2, transform: 'rotate(-90 12 ' + (T + (H - T - B) / 2) + ')', 'text-anchor': 'middle', text: yTitle }));
    const every = Math.max(1, Math.ceil(n / Math.max(2, Math.floor((width - L - R) / 60))));
    buckets.forEach((b, i) => {
      if (i % every) return;
      svg.append(s('line', { class: 'axisline', x1: X(i), x2: X(i), y1: H - B, y2: H - B + 4 }),
        s('text', { class: 'tick', x: X(i), y: H - B + 16, 'text-anchor': i === n - 1 ? 'end' : 'middle', text: fmtHM(b.mid) }));
    });
    svg.append(s('line', { class: 'axisline', x1: L, x2: width - R, y1: H - B, y2: H - B }),
      s('line', { class: 'axisline', x1: L, x2: L, y1: T, y2: H - B }),
      s('text', { class: 'tick', x: (L + width - R) / 2, y: H - 6, 'text-anchor': 'middle', text: 'time (bucket middle, ' + zoneName() + ')' }));
    for (const sr of series) {
      // a gap where a bucket has no value: no line through it, never a zero
      let d = '';
      let pen = false;
      sr.values.forEach((v, i) => {
        if (v == null) { pen = false; return; }
        d += (pen ? 'L' : 'M') + X(i).toFixed(1) + ' ' + Y(v).toFixed(1);
        pen = true;
      });
      svg.append(s('path', { d, fill: 'none', stroke: sr.colour, 'stroke-width': 2, 'stroke-dasharray': sr.dash || null }));
      sr.values.forEach((v, i) => {
        if (v == null) return;
        const mk = marker(sr.shape, X(i), Y(v), sr.colour);
        mk.append(s('title', { text: sr.tips[i] }));
        svg.append(mk);
      });
    }
    return svg;
  }
  function histogram(values, width, pcts) {
    const H = 200, L = 50, R = 14, T = 14, B = 42;
    const svg = s('svg', { width, height: H, viewBox: '0 0 ' + width + ' ' + H, role: 'img', 'aria-label': 'Histogram of time to first visible text' });
    if (!values.length) {
      svg.append(s('text', { x: width / 2, y: H / 2, 'text-anchor': 'middle', class: 'absent', text: 'no request with a first visible text in this window' }));
      return svg;
    }
    // log-spaced bins, 5 per decade, from the decade below the minimum to the one above the maximum
    const lo = Math.floor(Math.log10(Math.max(1e-3, Math.min.apply(null, values))));
    const hi = Math.ceil(Math.log10(Math.max.apply(null, values) * 1.0001));
    const per = 5;
    const nb = Math.max(1, (hi - lo) * per);
    const counts = new Array(nb).fill(0);
    for (const v of values) {
      const b = Math.min(nb - 1, Math.max(0, Math.floor((Math.log10(Math.max(1e-3, v)) - lo) * per)));
      counts[b]++;
    }
    const { ticks, max } = niceTicks(Math.max.apply(null, counts), 4, true);
    const X = lv => L + (lv - lo) / (hi - lo) * (width - L - R);
    const Y = c => T + (1 - c / max) * (H - T - B);
    for (const c of ticks) {
      svg.append(s('line', { class: 'grid', x1: L, x2: width - R, y1: Y(c), y2: Y(c) }),
        s('text', { class: 'tick', x: L - 6, y: Y(c) + 4, 'text-anchor': 'end', text: fmtTick(c, 1) }));
    }
    counts.forEach((c, i) => {
      if (!c) return;
      const a = lo + i / per, b = lo + (i + 1) / per;
      const rect = s('rect', { x: X(a) + 0.5, y: Y(c), width: Math.max(1, X(b) - X(a) - 1), height: Y(0) - Y(c), fill: 'url(#pat-seg-visible)', stroke: '#6b6400' });
      rect.append(s('title', { text: fmtMs(Math.pow(10, a)) + ' – ' + fmtMs(Math.pow(10, b)) + ': ' + c + ' request' + (c > 1 ? 's' : '') }));
      svg.append(rect);
    });
    for (let dcd = lo; dcd <= hi; dcd++) {
      svg.append(s('line', { class: 'axisline', x1: X(dcd), x2: X(dcd), y1: H - B, y2: H - B + 5 }),
        s('text', { class: 'tick', x: X(dcd), y: H - B + 17, 'text-anchor': dcd === hi ? 'end' : dcd === lo ? 'start' : 'middle', text: fmtTick(Math.pow(10, dcd), Math.pow(10, dcd)) }));
    }
    (pcts || []).forEach(([name, v, dash], j) => {
      if (v == null || v <= 0) return;
      const x = X(Math.log10(v));
      const right = x < width - R - 90;
      svg.append(s('line', { x1: x, x2: x, y1: T, y2: H - B, stroke: '#000', 'stroke-dasharray': dash || null, 'stroke-width': 1.5 }),
        s('text', { x: right ? x + 3 : x - 3, y: T + 10 + j * 12, 'text-anchor': right ? 'start' : 'end', text: name + ' ' + fmtMs(v) }));
    });
    svg.append(s('line', { class: 'axisline', x1: L, x2: width - R, y1: H - B, y2: H - B }),
      s('line', { class: 'axisline', x1: L, x2: L, y1: T, y2: H - B }),
      s('text', { class: 'tick', x: (L + width - R) / 2, y: H - 6, 'text-anchor': 'middle', text: 'time to first visible text (ms, log scale)' }),
      s('text', { class: 'tick', x: 12, y: T + (H - T - B) / 2, transform: 'rotate(-90 12 ' + (T + (H - T - B) / 2) + ')', 'text-anchor': 'middle', text: 'requests' }));
    return svg;
  }
  function classChart(buckets, width, linkFor) {
    const H = 220, L = 50, R = 14, T = 14, B = 40;
    const totals = buckets.map(b => b.classes.reduce((a, c) => a + c.count, 0));
    const { ticks, max } = niceTicks(Math.max(1, Math.max.apply(null, totals)), 4, true);
    const n = buckets.length;
    const bw = (width - L - R) / n;
    const Y = c => T + (1 - c / max) * (H - T - B);
    const svg = s('svg', { width, height: H, viewBox: '0 0 ' + width + ' ' + H, role: 'group', 'aria-label': 'Classification breakdown over time; each bar opens the request list filtered by that classification and time' });
    for (const c of ticks) {
      svg.append(s('line', { class: 'grid', x1: L, x2: width - R, y1: Y(c), y2: Y(c) }),
        s('text', { class: 'tick', x: L - 6, y: Y(c) + 4, 'text-anchor': 'end', text: fmtTick(c, 1) }));
    }
    const every = Math.max(1, Math.ceil(n / Math.max(2, Math.floor((width - L - R) / 60))));
    buckets.forEach((b, i) => {
      let acc = 0;
      const x = L + i * bw + Math.max(1, bw * 0.12);
      const w = Math.max(2, bw * 0.76);
      for (const cls of CLASSES) {
        const c = (b.classes.find(k => k.classification === cls) || {}).count || 0;
        if (!c) continue;
        const y = Y(acc + c);
        const label = fmtHM(b.from) + '–' + fmtHM(b.to) + ': ' + c + ' ' + cls + ' request' + (c > 1 ? 's' : '') + '. Open the list.';
        const a = s('a', { href: linkFor(cls, b), 'aria-label': label, 'data-class': cls });
        a.append(s('title', { text: label }), s('rect', { x, y, width: w, height: Math.max(1, Y(acc) - y), fill: 'url(#pat-cls-' + cls + ')', stroke: '#fff', 'stroke-width': 0.8 }));
        svg.append(a);
        acc += c;
      }
      if (i % every === 0 || i === n - 1) svg.append(s('text', { class: 'tick', x: x + w / 2, y: H - B + 16, 'text-anchor': 'middle', text: fmtHM(b.from) }));
    });
    svg.append(s('line', { class: 'axisline', x1: L, x2: width - R, y1: H - B, y2: H - B }),
      s('line', { class: 'axisline', x1: L, x2: L, y1: T, y2: H - B }),
      s('text', { class: 'tick', x: (L + width - R) / 2, y: H - 6, 'text-anchor': 'middle', text: 'bucket start (' + zoneName() + ')' }),
      s('text', { class: 'tick', x: 12, y: T + (H - T - B) / 2, transform: 'rotate(-90 12 ' + (T + (H - T - B) / 2) + ')', 'text-anchor': 'middle', text: 'requests' }));
    return svg;
  }

  // ===== overview =====
  const RANGES = { '15m': [15, 15], '1h': [60, 12], '6h': [360, 12], '24h': [1440, 24] };
  const METRICS = [
    ['upstreamHeadersMs', 'Upstream headers', 't2 − t1, from the dispatch of the winning attempt'],
    ['firstSseEventMs', 'First SSE event', 't3, from t0'],
    ['firstResponseMs', 'First effective output', 't4, from t0'],
    ['firstTextDeltaMs', 'First visible text', 't5, from t0'],
    ['latencyMs', 'Total', 't7 − t0'],
  ];
  const STATS = 'p50 p95 p99 count nullCount';
  // The range's buckets, ending at the next whole minute. With `since` (the first request's
  // time, when it is later than the range's start) they span only the minutes that have data:
  // at most the range's count of buckets, each a whole number of minutes (the usage API's grain).
  function bucketsFor(range, since) {
    const [minutes, count] = RANGES[range] || RANGES['1h'];
    const end = Math.ceil(Date.now() / 60000) * 60000;
    let n = count;
    let stepMs = minutes / count * 60000;
    if (since != null && since > end - minutes * 60000) {
      const spanMin = Math.max(1, Math.ceil((end - Math.floor(since / 60000) * 60000) / 60000));
      const stepMin = Math.max(1, Math.ceil(spanMin / count));
      n = Math.ceil(spanMin / stepMin);
      stepMs = stepMin * 60000;
    }
    const out = [];
    for (let i = 0; i < n; i++) {
      const from = new Date(end - (n - i) * stepMs);
      const to = new Date(end - (n - i - 1) * stepMs);
      out.push({ from, to, mid: new Date((from.getTime() + to.getTime()) / 2) });
    }
    return out;
  }
  // The usage API's filter and group-by dimensions the overview offers: the URL key, the
  // filter's field, the label, the groupBy value (whose lower case is the API's dimension
  // name), the choices (closed sets; null: the values seen in the window) and how a request
  // without a value is named. NOT_SET in the URL asks for requests without a value (the API's "").
  const TOKEN_BUCKETS = ['<256', '256-1k', '1k-4k', '4k-16k', '16k-64k', '64k+'];
  const EFFORTS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max', 'budget', 'other'];
  const NOT_SET = '-';
  const DIMS = [
    { key: 'model', field: 'model', label: 'Model', group: 'MODEL', values: null, none: 'no model' },
    { key: 'channel', field: 'channel', label: 'Channel', group: 'CHANNEL', values: null, none: 'no channel' },
    { key: 'dialect', field: 'dialect', label: 'Dialect', group: 'DIALECT', values: DIALECTS },
    { key: 'outcome', field: 'outcome', label: 'Outcome', group: 'OUTCOME', values: OUTCOMES },
    { key: 'stream', field: 'stream', label: 'Stream', group: 'STREAM', bool: ['streamed', 'not streamed'] },
    { key: 'effort', field: 'reasoningEffort', label: 'Reasoning effort', group: 'REASONING_EFFORT', values: EFFORTS, none: 'none asked' },
    { key: 'tools', field: 'toolsPresent', label: 'Tools', group: 'TOOLS_PRESENT', bool: ['with tools', 'without tools'] },
    { key: 'maxOut', field: 'maxOutputBucket', label: 'Max output tokens', group: 'MAX_OUTPUT_BUCKET', values: TOKEN_BUCKETS, none: 'not asked' },
    { key: 'input', field: 'inputBucket', label: 'Input tokens', group: 'INPUT_BUCKET', values: TOKEN_BUCKETS, none: 'no count' },
    { key: 'region', field: 'region', label: 'Region', group: 'REGION', values: null, none: 'no region' },
  ];
  const dimName = d => d.group.toLowerCase();
  // Request records the overview reads for what the rollups cannot answer (the distribution,
  // the per-instance counts): the usage API's most.
  const RECENT_MAX = 500;
  // The usage filter a page's query string asks for, in the API's vocabulary.
  function usageFilter(q) {
    const f = {};
    for (const d of DIMS) {
      const v = q[d.key];
      if (v == null || v === '') continue;
      if (d.bool) { if (v === 'true' || v === 'false') f[d.field] = v === 'true'; continue; }
      f[d.field] = v === NOT_SET ? '' : v;
    }
    return f;
  }
  // A value as the API's population line writes it ("stream=false", "region=(none)").
  function filterText(d, v) { return dimName(d) + '=' + (v == null || v === '' ? '(none)' : String(v)); }
  function valueLabel(d, v) {
    if (d.bool) return v === 'true' ? d.bool[0] : v === 'false' ? d.bool[1] : '(none)';
    return v == null || v === '' ? '(' + (d.none || 'none') + ')' : v;
  }
  function dimSelect(d, q, seen, onchange) {
    const cur = q[d.key] || '';
    const opts = [h('option', { value: '', text: 'any' })];
    const vals = d.bool ? ['true', 'false'] : (d.values || [...new Set(seen)].filter(v => v != null && v !== '').sort());
    for (const v of vals) opts.push(h('option', { value: v, selected: v === cur, text: d.bool ? valueLabel(d, v) : v }));
    if (d.none) opts.push(h('option', { value: NOT_SET, selected: cur === NOT_SET, text: '(' + d.none + ')' }));
    if (cur && !opts.some(o => o.value === cur)) opts.push(h('option', { value: cur, selected: true, text: cur }));
    const id = 'o-' + d.key;
    return h('label', { for: id }, d.label, h('select', { id, name: d.key, 'data-fk': id, onchange }, opts));
  }
  async function renderOverview(raw, gen) {
    const q = withoutSlice(raw);
    const range = RANGES[q.range] ? q.range : '1h';
    const filter = usageFilter(q);
    const groupDim = DIMS.find(d => d.key === q.group) || DIMS[0];
    // The axis spans the data when there is less of it than the range: a new user's first ten
    // minutes fill the chart instead of sitting at the right edge of an hour.
    const [rangeMin] = RANGES[range];
    const probe = await gql(`query($ws: ID!, $f: UsageFilterInput) { usage(workspaceId: $ws, filter: $f, window: { last: "${rangeMin}m" }) {
      rollup { requestCount } recent(limit: ${RECENT_MAX}) { ts } } }`, { ws: state.workspaceId, f: filter });
    if (gen !== state.gen) return;
    const seen = probe.usage.recent.map(r => Date.parse(r.ts));
    const since = seen.length && probe.usage.rollup.requestCount <= seen.length ? Math.min.apply(null, seen) : null;
    const buckets = bucketsFor(range, since);
    const fitted = buckets.length && buckets[0].from.getTime() > Date.now() - rangeMin * 60000;
    const win = `window: { from: "${buckets[0].from.toISOString()}", to: "${buckets[buckets.length - 1].to.toISOString()}" }`;
    const metricSel = METRICS.map(([k]) => k + ' { ' + STATS + ' }').join(' ');
    const costSel = 'costUsd costUnpricedCount costEstimatedCount';
    const popSel = 'population { description requestCount filters { dimension value } }';
    const groupSel = `groups { key { dimension value } ${popSel} rollup { requestCount errorCount errorRate ${costSel}
      latencyMs { p50 p95 p99 } upstreamHeadersMs { p95 } firstTextDeltaMs { p95 } } }`;
    const bq = buckets.map((b, i) => `b${i}: usage(workspaceId: $ws, filter: $f, window: { from: "${b.from.toISOString()}", to: "${b.to.toISOString()}" }) {
      rollup { requestCount errorCount errorRate classifications { classification count } ${metricSel} } }`).join('\n');
    // The choices of the open-ended dimensions: the values in the window, whatever the filter.
    const choices = DIMS.filter(d => !d.values && !d.bool).map(d => `${d.key}s: usage(workspaceId: $ws, ${win}, groupBy: [${d.group}]) { groups { key { value } } }`).join('\n');
    const query = `query($ws: ID!, $f: UsageFilterInput) {
      all: usage(workspaceId: $ws, filter: $f, ${win}) { window { from to } percentileMethod ${popSel}
        rollup { requestCount errorCount errorRate cacheHitCount failoverTotal ${costSel} classifications { classification count } ${metricSel} }
        recent(limit: ${RECENT_MAX}) { instance outcome timing { firstTextDeltaMs } } }
      grouped: usage(workspaceId: $ws, filter: $f, ${win}, groupBy: [${groupDim.group}]) { ${groupSel} }
      fleet: instances { instance inFlight ageMs }
      ${choices}
      ${bq} }`;
    const d = await gql(query, { ws: state.workspaceId, f: filter });
    if (gen !== state.gen) return;
    const all = d.all.rollup;
    const population = d.all.population;
    const emptied = all.requestCount === 0 ? await whatEmptied(filter, population, win) : null;
    if (gen !== state.gen) return;
    const data = buckets.map((b, i) => Object.assign({}, b, { r: d['b' + i].rollup, classes: d['b' + i].rollup.classifications }));
    const m = main();
    const fk = focusKey();
    m.textContent = '';
    const set = (k, v) => { const n = Object.assign({}, q); n[k] = v; location.hash = hashFor('overview', n); };
    // The population every percentile below describes, printed beside each one.
    const pop = ' · ' + population.description;
    const linkFor = (cls, b) => hashFor('requests', Object.assign({ classification: cls, from: b.from.toISOString(), to: b.to.toISOString() }, listQuery(q)));
    const controls = h('form', { class: 'toolbar', id: 'usage-controls', 'aria-label': 'Overview settings: range, filters, grouping', onsubmit: e => e.preventDefault() },
      h('label', { for: 'o-range' }, 'Range', h('select', { id: 'o-range', 'data-fk': 'o-range', onchange: e => set('range', e.target.value) },
        Object.keys(RANGES).map(k => h('option', { value: k, selected: k === range, text: 'last ' + k + ' (' + RANGES[k][1] + ' buckets)' })))),
      DIMS.map(dm => dimSelect(dm, q, d[dm.key + 's'] ? d[dm.key + 's'].groups.map(g => g.key[0].value) : [], e => set(dm.key, e.target.value))),
      h('label', { for: 'o-group' }, 'Group by', h('select', { id: 'o-group', 'data-fk': 'o-group', onchange: e => set('group', e.target.value) },
        DIMS.map(dm => h('option', { value: dm.key, selected: dm === groupDim, text: dm.label.toLowerCase() })))),
      h('button', { type: 'button', 'data-fk': 'o-clear', onclick: () => { location.hash = hashFor('overview', { range: q.range, group: q.group }); }, text: 'Clear filters' }),
      h('button', { type: 'button', 'data-fk': 'o-refresh', onclick: () => route(), text: 'Refresh' }));
    const windowNote = h('p', { class: 'note', id: 'overview-window', 'data-from': d.all.window.from, 'data-to': d.all.window.to,
      text: 'Window ' + fmtWhen(d.all.window.from) + ' – ' + fmtWhen(d.all.window.to) + ' (whole minutes' + (fitted ? '; the axis spans the minutes with data, the first request being later than the start of the last ' + range : '') + '). ' + d.all.percentileMethod + '.' });
    const popLine = h('p', { class: 'population', id: 'population', 'data-count': population.requestCount },
      h('b', { text: 'Population: ' }), population.description + ' (' + fmtInt(population.requestCount) + ' request' + (population.requestCount === 1 ? '' : 's') + ')');
    const summary = h('div', { class: 'summary', id: 'summary' },
      h('div', {}, h('b', { text: fmtInt(all.requestCount) }), h('span', { text: 'requests' })),
      h('div', {}, h('b', { text: fmtPct(all.errorRate) }), h('span', { text: 'error rate (' + fmtInt(all.errorCount) + ' not successful)' })),
      h('div', {}, h('b', { 'data-p95': 'latencyMs', text: fmtMs(all.latencyMs.p95) }), h('span', { text: 'p95 total' + pop })),
      h('div', {}, h('b', { 'data-p95': 'firstTextDeltaMs', text: fmtMs(all.firstTextDeltaMs.p95) }), h('span', { text: 'p95 first visible text' + pop })),
      h('div', {}, h('b', { text: fmtInt(all.failoverTotal) }), h('span', { text: 'failovers' })),
      h('div', { id: 'cost-summary', 'data-cost-usd': all.costUsd, 'data-unpriced': all.costUnpricedCount, 'data-estimated': all.costEstimatedCount },
        h('b', { text: all.costUsd == null ? '—' : fmtUsd(all.costUsd) }),
        h('span', { text: costNote(all) })));
    m.append(h('h1', { text: 'Latency overview' }), controls, popLine, summary, windowNote);
    if (emptied) {
      m.append(h('p', { class: 'msg', id: 'empty-state', role: 'status', text: emptied }));
      restoreFocus(fk);
      window.__laptimeOverview = { requests: 0, buckets: data.length, fitted, filter, group: groupDim.key,
        from: d.all.window.from, to: d.all.window.to, fromMs: buckets[0].from.getTime(), toMs: buckets[buckets.length - 1].to.getTime() };
      return;
    }
    const chartsBox = h('div', { class: 'grid2', id: 'pct-charts' });
    const histBox = h('div', { class: 'chart' });
    const classBox = h('div', { class: 'chart', id: 'class-chart' });
    const ftd = d.all.recent.map(r => r.timing.firstTextDeltaMs).filter(v => v != null);
    m.append(
      h('h2', { text: 'Percentiles over time — ' + population.description }),
      chartsBox,
      h('div', { class: 'grid2' },
        h('section', { class: 'chartcard', 'aria-labelledby': 'hist-title' },
          h('h2', { id: 'hist-title', text: 'Time to first visible text: distribution' }),
          h('p', { class: 'sub', text: 'The newest ' + d.all.recent.length + ' requests of the window' + pop + '; n = ' + ftd.length + ' with a first visible text, ' + (d.all.recent.length - ftd.length) + ' without (left out, not counted as 0). Lines: p50 (solid), p95 (dashed), p99 (dotted) of the whole window.' }),
          histBox),
        h('section', { class: 'chartcard', 'aria-labelledby': 'class-title' },
          h('h2', { id: 'class-title', text: 'Classification over time' }),
          h('p', { class: 'sub', text: 'Bars are links: each opens the request list filtered by that classification and bucket.' }),
          classBox,
          h('ul', { class: 'clegend', 'aria-label': 'Classification legend' }, CLASSES.map(c => {
            const sv = s('svg', { width: 16, height: 12, 'aria-hidden': 'true' });
            sv.append(s('rect', { width: 16, height: 12, fill: 'url(#pat-cls-' + c + ')', stroke: '#555' }));
            const n = (all.classifications || []).find(k => k.classification === c);
            return h('li', {}, sv, c + ' (' + fmtInt(n ? n.count : 0) + ')');
          })))),
      h('h2', { id: 'groups-title', text: 'By ' + groupDim.label.toLowerCase() + ' (whole window)' }),
      groupTable(groupDim, d.grouped.groups, q),
      h('h2', { id: 'instances-title', text: 'By instance (the gateway that served each request)' }),
      ...instanceTable(d.all.recent, all.requestCount, population.description, d.fleet));
    const draw = () => {
      chartsBox.textContent = '';
      const cw = Math.max(280, (chartsBox.clientWidth >= 1140 ? chartsBox.clientWidth / 2 - 7 : chartsBox.clientWidth) - 26);
      for (const [key, name, desc] of METRICS) {
        const series = PCTS.map(([p, dash, shape], j) => ({
          label: p, colour: OI[j === 0 ? 0 : j === 1 ? 1 : 3], dash, shape,
          values: data.map(b => b.r[key][p]),
          tips: data.map(b => fmtHM(b.from) + '–' + fmtHM(b.to) + ' ' + p + ' ' + fmtMs(b.r[key][p]) + ' (n = ' + b.r[key].count + ', ' + b.r[key].nullCount + ' without, errors ' + fmtPct(b.r.errorRate) + ')' + pop),
        }));
        const st = all[key];
        const card = h('section', { class: 'chartcard', 'data-metric': key, 'aria-labelledby': 'mt-' + key },
          h('h3', { id: 'mt-' + key, text: name + ' (ms)' }), h('p', { class: 'sub', text: desc }),
          lineChart({ width: cw, buckets: data, series, yTitle: 'ms', title: name }),
          h('ul', { class: 'clegend', 'aria-label': name + ' legend' }, series.map(sr => h('li', { 'data-pct': sr.label }, legendSwatch(sr.colour, sr.dash, sr.shape),
            h('span', { text: sr.label + ' ' + fmtMs(st[sr.label]) + ' · n = ' + fmtInt(st.count) + (st.nullCount ? ' (' + fmtInt(st.nullCount) + ' without)' : '') + ' · errors ' + fmtPct(all.errorRate) + pop })))));
        chartsBox.append(card);
      }
      const hw = Math.max(280, histBox.clientWidth || 500);
      histBox.textContent = '';
      histBox.append(histogram(ftd, hw, [['p50', all.firstTextDeltaMs.p50, ''], ['p95', all.firstTextDeltaMs.p95, '6 4'], ['p99', all.firstTextDeltaMs.p99, '2 3']]));
      classBox.textContent = '';
      classBox.append(classChart(data, Math.max(280, classBox.clientWidth || 500), linkFor));
    };
    draw();
    restoreFocus(fk);
    state.resize = draw;
    window.__laptimeOverview = { requests: all.requestCount, buckets: data.length, fitted, filter, group: groupDim.key,
      from: d.all.window.from, to: d.all.window.to, fromMs: buckets[0].from.getTime(), toMs: buckets[buckets.length - 1].to.getTime() };
  }
  // Links made before the per-dimension filters say slice=model:NAME or slice=channel:NAME.
  function withoutSlice(q) {
    const n = Object.assign({}, q);
    delete n.slice;
    const [dm, ...v] = (q.slice || '').split(':');
    if ((dm === 'model' || dm === 'channel') && v.join(':') && !q[dm]) n[dm] = v.join(':');
    return n;
  }
  // The request list's query for the overview's filter (the list reads the same filter).
  function listQuery(q) {
    const out = {};
    for (const d of DIMS) if (q[d.key]) out[d.key] = q[d.key];
    return out;
  }
  function costNote(r) {
    const parts = [];
    if (r.costUnpricedCount) parts.push(fmtInt(r.costUnpricedCount) + ' unpriced: no price for the model, cost unknown and not counted');
    else parts.push('0 unpriced');
    if (r.costEstimatedCount) parts.push(fmtInt(r.costEstimatedCount) + ' with estimated tokens');
    return 'cost, USD, of the requests with a known cost (' + parts.join('; ') + ')';
  }
  // Why a filtered overview has no request: which filter in force, left out alone, brings
  // requests back (the API's population names each filter), or that the window has none at all.
  async function whatEmptied(filter, population, win) {
    const inForce = population.filters.map(f => ({ f, dim: DIMS.find(d => dimName(d) === f.dimension) })).filter(x => x.dim);
    const vars = { ws: state.workspaceId };
    const parts = inForce.map((x, i) => {
      const rest = Object.assign({}, filter);
      delete rest[x.dim.field];
      vars['f' + i] = rest;
      return `w${i}: usage(workspaceId: $ws, filter: $f${i}, ${win}) { rollup { requestCount } }`;
    });
    const decl = inForce.map((x, i) => ', $f' + i + ': UsageFilterInput').join('');
    const r = await gql(`query($ws: ID!${decl}) { any: usage(workspaceId: $ws, ${win}) { rollup { requestCount } } ${parts.join('\n')} }`, vars);
    const any = r.any.rollup.requestCount;
    if (!inForce.length || any === 0) return 'No requests in this window' + (inForce.length ? ' at all: no filter emptied it.' : ' yet.');
    const named = inForce.map((x, i) => ({ text: filterText(x.dim, x.f.value), n: r['w' + i].rollup.requestCount }));
    const culprits = named.filter(x => x.n > 0);
    const head = 'No requests in this window match ' + population.description + ' (' + fmtInt(any) + ' without any filter). ';
    if (!culprits.length) return head + 'No single filter emptied it: each left out alone still matches none; together they leave nothing.';
    return head + culprits.map(x => x.text + ' emptied it: without it, ' + fmtInt(x.n) + ' request' + (x.n === 1 ? '' : 's') + ' match.').join(' ');
  }
  function groupTable(dim, groups, q) {
    const rows = groups.slice().sort((a, b) => b.rollup.requestCount - a.rollup.requestCount);
    const cols = [dim.label, 'Population (what each figure describes)', 'Requests (n)', 'Error rate (errors)', 'p50 total', 'p95 total', 'p99 total', 'p95 headers', 'p95 first visible', 'Cost (USD, known)', 'Unpriced (no price)'];
    return h('div', { class: 'scroll', tabindex: 0, role: 'region', 'aria-label': 'Per ' + dim.label.toLowerCase() + ' table' },
      h('table', { class: 'groups', 'data-dim': dimName(dim) },
        h('thead', {}, h('tr', {}, cols.map((c, i) => h('th', { scope: 'col', class: i > 1 ? 'num' : null, text: c })))),
        h('tbody', {}, rows.length ? rows.map(g => {
          const v = g.key[0].value;
          const r = g.rollup;
          const n = Object.assign({}, q, { [dim.key]: v == null ? NOT_SET : v });
          return h('tr', { 'data-value': v == null ? '' : v },
            h('th', { scope: 'row' }, h('a', { href: hashFor('overview', n), title: 'Filter the overview by ' + filterText(dim, v), text: valueLabel(dim, v) })),
            h('td', { class: 'pop', text: g.population.description }),
            h('td', { class: 'num', text: fmtInt(r.requestCount) }), h('td', { class: 'num', text: fmtPct(r.errorRate) + ' (' + fmtInt(r.errorCount) + ')' }),
            h('td', { class: 'num', 'data-pct': 'p50', text: fmtMs(r.latencyMs.p50) }), h('td', { class: 'num', 'data-pct': 'p95', text: fmtMs(r.latencyMs.p95) }),
            h('td', { class: 'num', 'data-pct': 'p99', text: fmtMs(r.latencyMs.p99) }), h('td', { class: 'num', text: fmtMs(r.upstreamHeadersMs.p95) }),
            h('td', { class: 'num', text: fmtMs(r.firstTextDeltaMs.p95) }),
            h('td', { class: 'num', 'data-cost': r.costUsd == null ? 'none' : r.costUsd, title: r.costUsd == null ? 'no request of this group has a known cost' : null, text: r.costUsd == null ? '—' : fmtUsd(r.costUsd) + (r.costEstimatedCount ? ' (≈ ' + fmtInt(r.costEstimatedCount) + ' estimated)' : '') }),
            h('td', { class: 'num', 'data-unpriced': r.costUnpricedCount, text: fmtInt(r.costUnpricedCount) }));
        }) : h('tr', {}, h('td', { colspan: cols.length, class: 'muted', text: 'No requests in this window.' })))));
  }
  // Requests and errors per serving instance, counted from the window's request records: the
  // usage API does not group by instance (it is not a dimension of its per-minute rollups), so
  // past RECENT_MAX records the table says how many it covers.
  // Beside them, each live instance's requests in flight now (its heartbeat, at most a few
  // seconds old), so an instance that is running but served nothing in the window is listed too.
  function instanceTable(recent, total, description, fleet) {
    const by = new Map();
    const live = new Map((fleet || []).map(i => [i.instance, i]));
    for (const name of live.keys()) if (!by.has(name)) by.set(name, { n: 0, errors: 0 });
    for (const r of recent) {
      const e = by.get(r.instance || '') || { n: 0, errors: 0 };
      e.n++;
      if (!SUCCESS.has(r.outcome)) e.errors++;
      by.set(r.instance || '', e);
    }
    const rows = [...by.entries()].sort((a, b) => b[1].n - a[1].n || (a[0] < b[0] ? -1 : 1));
    const covered = recent.length < total
      ? 'The newest ' + fmtInt(recent.length) + ' of the ' + fmtInt(total) + ' requests of the window (' + description + '): the usage API does not group by instance, so this counts request records, at most ' + RECENT_MAX + '.'
      : 'All ' + fmtInt(total) + ' requests of the window (' + description + '), counted from their records (the usage API does not group by instance).';
    return [h('p', { class: 'note', id: 'instances-note', 'data-covered': recent.length, 'data-total': total, text: covered }),
      h('div', { class: 'scroll', tabindex: 0, role: 'region', 'aria-label': 'Per instance table' },
        h('table', { class: 'groups instances' },
          h('thead', {}, h('tr', {}, ['Instance', 'In flight now', 'Requests (n)', 'Errors (not successful)', 'Error rate'].map((c, i) => h('th', { scope: 'col', class: i ? 'num' : null, text: c })))),
          h('tbody', {}, rows.length ? rows.map(([name, e]) => h('tr', { 'data-instance': name },
            h('th', { scope: 'row', text: name || '(not named: recorded before instances were)' }),
            live.has(name)
              ? h('td', { class: 'num', 'data-inflight': live.get(name).inFlight, title: 'heartbeat ' + fmtMs(live.get(name).ageMs) + ' ago', text: fmtInt(live.get(name).inFlight) })
              : h('td', { class: 'num muted', title: 'no heartbeat in the last seconds: not running now', text: '—' }),
            h('td', { class: 'num', 'data-n': e.n, text: fmtInt(e.n) }),
            h('td', { class: 'num', 'data-errors': e.errors, text: fmtInt(e.errors) }),
            h('td', { class: 'num', text: fmtPct(e.errors / e.n) })))
            : h('tr', {}, h('td', { colspan: 5, class: 'muted', text: 'No requests in this window.' })))))];
  }

  // ===== channels =====
  async function renderChannels(gen) {
    const m = main();
    m.textContent = '';
    const box = h('div', {});
    const status = h('p', { class: 'status', role: 'status', text: 'Loading…' });
    m.append(h('h1', { text: 'Channels' }), status, box,
      h('p', { class: 'note', text: 'In flight is live (refreshed every 5 s). Error rate and p95s: the last 15 minutes, from usage(groupBy: [CHANNEL]). The trend is p95 total per 5-minute bucket over the last hour. Circuit: closed, open (ejected after consecutive failures or a high error rate) or half-open (one probe allowed).' }));
    const buckets = bucketsFor('1h');
    const bq = buckets.map((b, i) => `h${i}: usage(workspaceId: $ws, groupBy: [CHANNEL], window: { from: "${b.from.toISOString()}", to: "${b.to.toISOString()}" }) { groups { key { value } rollup { requestCount latencyMs { p95 } } } }`).join('\n');
    let sig = null;
    const tick = async () => {
      if (gen !== state.gen) return;
      let d;
      try {
        d = await gql(`query($ws: ID!) { channels { name provider group models inflight circuit }
          recent: usage(workspaceId: $ws, window: { last: "15m" }, groupBy: [CHANNEL]) { groups { key { value } rollup {
            requestCount errorCount errorRate failoverTotal upstreamHeadersMs { p95 } firstSseEventMs { p95 }
            firstTextDeltaMs { p95 } latencyMs { p95 } } } }
          ${bq} }`, { ws: state.workspaceId });
      } catch (e) {
        if (!(e instanceof AuthError) && gen === state.gen) status.textContent = 'Update failed: ' + e.message;
      }
      if (gen !== state.gen) return;
      if (d) {
        const nsig = JSON.stringify(d);
        if (nsig !== sig) {
          const fk = focusKey();
          box.textContent = '';
          box.append(channelsTable(d, buckets));
          restoreFocus(fk);
          sig = nsig;
        }
        status.textContent = 'Updated ' + fmtClock(new Date().toISOString()) + ' ' + zoneName();
      }
      state.timer = setTimeout(tick, 5000);
    };
    await tick();
  }
  function sparkline(values, width) {
    const H = 52;
    const sv = s('svg', { width, height: H, viewBox: '0 0 ' + width + ' ' + H, role: 'img' });
    const got = values.filter(v => v != null);
    if (!got.length) {
      sv.setAttribute('aria-label', 'no requests in the last hour');
      sv.append(s('text', { x: 2, y: 20, class: 'absent', text: 'no requests' }));
      return sv;
    }
    const max = Math.max.apply(null, got) || 1;
    const X = i => 6 + i / Math.max(1, values.length - 1) * (width - 12);
    const Y = v => 16 + (1 - v / max) * (H - 30);
    let d = '';
    let pen = false;
    values.forEach((v, i) => { if (v == null) { pen = false; return; } d += (pen ? 'L' : 'M') + X(i).toFixed(1) + ' ' + Y(v).toFixed(1); pen = true; });
    sv.setAttribute('aria-label', 'p95 total per 5 minutes, last hour: ' + values.map(v => v == null ? 'none' : fmtMs(v)).join(', '));
    sv.append(s('line', { x1: 6, x2: width - 6, y1: Y(0), y2: Y(0), class: 'axisline' }),
      s('path', { d, fill: 'none', stroke: '#0072B2', 'stroke-width': 1.8 }));
    values.forEach((v, i) => { if (v != null) sv.append(marker('circle', X(i), Y(v), '#0072B2')); });
    sv.append(s('text', { x: 6, y: 10, class: 'tick', text: 'max ' + fmtMs(max) }),
      s('text', { x: 6, y: H - 1, class: 'tick', text: '−60 min' }),
      s('text', { x: width - 6, y: H - 1, 'text-anchor': 'end', class: 'tick', text: 'now' }));
    return sv;
  }
  function channelsTable(d, buckets) {
    const recent = {};
    for (const g of d.recent.groups) recent[g.key[0].value || ''] = g.rollup;
    const names = d.channels.map(c => c.name);
    for (const k in recent) if (!names.includes(k)) names.push(k);
    const cfg = Object.fromEntries(d.channels.map(c => [c.name, c]));
    const trend = name => buckets.map((b, i) => {
      const g = d['h' + i].groups.find(x => (x.key[0].value || '') === name);
      return g ? g.rollup.latencyMs.p95 : null;
    });
    const cols = ['Channel', 'Provider, group', 'Models', 'In flight now', 'Circuit', 'Requests, 15 min', 'Error rate (errors)', 'p95 headers', 'p95 first event', 'p95 first visible', 'p95 total', 'p95 total per 5 min, last hour'];
    return h('div', { class: 'scroll', tabindex: 0, role: 'region', 'aria-label': 'Channels table' },
      h('table', { class: 'channels' },
        h('thead', {}, h('tr', {}, cols.map((c, i) => h('th', { scope: 'col', class: i >= 3 && i <= 10 && i !== 4 ? 'num' : null, text: c })))),
        h('tbody', {}, names.map(name => {
          const c = cfg[name];
          const r = recent[name];
          return h('tr', { 'data-channel': name },
            h('th', { scope: 'row' }, h('a', { href: hashFor('requests', { channel: name }), 'data-fk': 'ch-' + name, text: name || '(none)' })),
            h('td', {}, c ? [c.provider, h('br'), h('span', { class: 'muted small', text: 'group ' + c.group })] : 'not configured now'),
            h('td', { class: 'models' }, c ? c.models.map((md, i) => [i ? ', ' : '', h('span', { class: 'nowrap', text: md })]) : '—'),
            h('td', { class: 'num', 'data-inflight': c ? c.inflight : null, text: c ? fmtInt(c.inflight) : '—' }),
            h('td', { 'data-circuit': c ? c.circuit : null, text: c ? c.circuit.replace('_', '-') : '—' }),
            h('td', { class: 'num', text: r ? fmtInt(r.requestCount) : '0' }),
            h('td', { class: 'num', text: r ? fmtPct(r.errorRate) + ' (' + fmtInt(r.errorCount) + ')' : '—' }),
            h('td', { class: 'num', text: r ? fmtMs(r.upstreamHeadersMs.p95) : '—' }),
            h('td', { class: 'num', text: r ? fmtMs(r.firstSseEventMs.p95) : '—' }),
            h('td', { class: 'num', text: r ? fmtMs(r.firstTextDeltaMs.p95) : '—' }),
            h('td', { class: 'num', text: r ? fmtMs(r.latencyMs.p95) : '—' }),
            h('td', {}, sparkline(trend(name), 180)));
        }))));
  }

  // ===== start =====
  async function boot() {
    initDefs();
    window.addEventListener('hashchange', () => { if (state.me) route(); });
    if (!state.token) { renderSignIn(); return; }
    try {
      const d = await gqlWith(state.token, '{ me { workspaceId workspaceName keyId scope } }');
      if (d.me.scope === 'PROXY') { signOut('This is a proxy token: it cannot read usage. Sign in with a read or admin token.'); return; }
      state.me = d.me;
      await loadWorkspaces();
      route();
    } catch (e) {
      if (e instanceof AuthError) signOut('Your saved token was refused by the gateway (HTTP 401: ' + e.message + '). Sign in again.');
      else { renderSignIn('Could not reach the usage API: ' + e.message); }
    }
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', boot);
  else boot();
})();
