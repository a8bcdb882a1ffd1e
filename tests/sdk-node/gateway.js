// Starting the real gateway binary for the Node SDK tests, and reading a request's stored row.
'use strict';

const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const REPO = path.resolve(__dirname, '..', '..');
const BIN = process.env.LAPTIME_BIN || path.join(REPO, 'target', 'debug', 'laptime');

/// `laptime serve --config` on 127.0.0.1:0 with a temp data dir and a fresh bootstrap token;
/// `extraEnv` is added to its environment (the channels' provider keys).
async function startGateway(configText, extraEnv = {}) {
  if (!fs.existsSync(BIN)) throw new Error(`no gateway binary at ${BIN}: build it (cargo build -p laptime) or set LAPTIME_BIN`);
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'laptime-sdk-node-'));
  const configPath = path.join(dataDir, 'config.toml');
  fs.writeFileSync(configPath, configText);
  const token = 'lt_' + crypto.randomBytes(32).toString('hex');
  const child = spawn(BIN, ['serve', '--config', configPath, '--listen', '127.0.0.1:0', '--data-dir', path.join(dataDir, 'data')], {
    env: Object.assign({}, process.env, extraEnv, { LAPTIME_BOOTSTRAP_TOKEN: token, RUST_LOG: process.env.RUST_LOG || 'warn' }),
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

/// `laptime sim --listen 127.0.0.1:0`: the simulated providers as their own process. `requests()`
/// is its `GET /sim/requests` (the last 100 it received, oldest first).
async function startSim() {
  if (!fs.existsSync(BIN)) throw new Error(`no gateway binary at ${BIN}: build it (cargo build -p laptime) or set LAPTIME_BIN`);
  const child = spawn(BIN, ['sim', '--listen', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'ignore'] });
  let out = '';
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the sim did not start in 20 s:\n' + out)), 20000);
    child.stdout.on('data', d => {
      out += d;
      const m = /laptime sim listening on (http:\/\/[0-9.:]+)/.exec(out);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    child.on('exit', code => { clearTimeout(timer); reject(new Error(`the sim exited (${code}) before listening:\n${out}`)); });
  });
  child.removeAllListeners('exit');
  child.stdout.resume();
  return {
    url,
    async requests() {
      const res = await fetch(`${url}/sim/requests`);
      assert.equal(res.status, 200);
      return res.json();
    },
    async stop() {
      if (child.exitCode != null) return;
      const done = new Promise(r => child.once('exit', r));
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 10000);
      await done;
      clearTimeout(t);
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

module.exports = { startGateway, startSim, storedRequest };
