// The query page: sends the query with the token as a bearer header to this origin's
// POST /graphql and shows the answer. No framework, nothing fetched from another origin.
'use strict';

(function () {
  const $ = id => document.getElementById(id);
  const KEY = 'laptime.queryToken';

  function start() {
    const token = $('token');
    token.value = sessionStorage.getItem(KEY) || '';
    token.addEventListener('change', () => sessionStorage.setItem(KEY, token.value.trim()));
    $('run').addEventListener('click', () => run($('query').value));
    $('schema').addEventListener('click', () =>
      run('{ __schema { queryType { name } mutationType { name } types { name kind description } } }'));
    document.addEventListener('keydown', e => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        run($('query').value);
      }
    });
  }

  async function run(query) {
    const status = $('status');
    const result = $('result');
    let variables = {};
    const raw = $('variables').value.trim();
    if (raw) {
      try {
        variables = JSON.parse(raw);
      } catch (e) {
        status.textContent = 'Variables are not JSON: ' + e.message;
        return;
      }
    }
    const token = $('token').value.trim();
    sessionStorage.setItem(KEY, token);
    const headers = { 'content-type': 'application/json' };
    if (token) headers.authorization = 'Bearer ' + token;
    status.textContent = 'Running…';
    const t = performance.now();
    try {
      const res = await fetch('/graphql', {
        method: 'POST',
        headers,
        body: JSON.stringify({ query, variables }),
        credentials: 'omit',
        cache: 'no-store',
      });
      const text = await res.text();
      let shown = text;
      try {
        shown = JSON.stringify(JSON.parse(text), null, 2);
      } catch (_) {
        // Not JSON: shown as it came.
      }
      result.textContent = shown;
      status.textContent = 'HTTP ' + res.status + ' in ' + Math.round(performance.now() - t) + ' ms' +
        (res.status === 401 ? ' (missing, invalid or revoked token)' : '');
    } catch (e) {
      status.textContent = 'Request failed: ' + e.message;
    }
  }

  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', start);
  } else {
    start();
  }
})();
