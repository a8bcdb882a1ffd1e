"""Shared plumbing for the benchmark scripts: start the sim, the gateway and nginx on free
loopback ports, run `laptime bench` and `wrk`, read CPU and memory from /proc, check that
nothing failed, and write one raw result file per run.

Every process started here is stopped on exit, on an exception and on SIGINT/SIGTERM/SIGHUP
(the Python equivalent of a shell `trap`), by its own pid: nothing else on the machine is
touched. Every load is bounded in time (subprocess timeouts) and in count (bench --requests or
--duration with a rate). Python 3.11 standard library only.
"""

from __future__ import annotations

import argparse
import atexit
import datetime as dt
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import quote
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
TARGET_DIR = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
BIN = Path(os.environ.get("LAPTIME_BIN", TARGET_DIR / "release" / "laptime"))
# Known, so the harness can read the request log back; only ever used on 127.0.0.1.
TOKEN = "lt_" + "b3" * 32
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024

# The two upstream workloads of the issue. Fast: everything at 0 ms (sim-fast's default script,
# 16 text deltas at once). Paced: 20 text chunks 50 ms apart (the last at 950 ms, the
# terminal at 1000 ms), each its own write from the sim.
FAST_STREAM_20 = {"laptime_sim": {"text_tokens": 20}}
PACED = {"laptime_sim": {"headers_ms": 0, "first_event_ms": 0, "first_text_ms": 0,
                         "text_tokens": 20, "tokens_per_s": 20}}


class BenchError(Exception):
    """A run that must not be reported: a failure, an incomplete stream, a process that died."""


# === processes ===

_started: list[subprocess.Popen] = []
_tmpdirs: list[str] = []


def _cleanup() -> None:
    # Newest first: load generators, then gateways and nginx, then the sim they talk to.
    for p in reversed(_started):
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5
    for p in reversed(_started):
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
    _started.clear()
    if not os.environ.get("BENCH_KEEP_TMP"):
        for d in _tmpdirs:
            shutil.rmtree(d, ignore_errors=True)
    _tmpdirs.clear()


def _on_signal(signum, _frame):
    raise SystemExit(128 + signum)


atexit.register(_cleanup)
for _s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(_s, _on_signal)


def raise_nofile(want: int = 65536) -> None:
    """1,000 streams need ~4,000 descriptors across bench, gateway and sim: raise the limit
    for this process and everything it starts."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
            return
        except (ValueError, OSError):
            want = hard
    if soft == resource.RLIM_INFINITY or soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


raise_nofile()


def tmpdir(prefix: str) -> Path:
    d = tempfile.mkdtemp(prefix=f"laptime-bench-{prefix}-")
    _tmpdirs.append(d)
    return Path(d)


def spawn(args: list[str], log: Path, env: dict | None = None, stdout=None) -> subprocess.Popen:
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                         stdout=stdout if stdout is not None else open(log, "ab"),
                         stderr=open(log, "ab"), env=full_env)
    _started.append(p)
    return p


def stop(p: subprocess.Popen) -> None:
    """Stops one process started here (SIGTERM, then SIGKILL after 5 s)."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
    if p in _started:
        _started.remove(p)


def _read_announce(p: subprocess.Popen, pattern: str, what: str, timeout: float = 20) -> str:
    """Reads the child's stdout until a line matches; returns the first group."""
    deadline = time.monotonic() + timeout
    buf = b""
    fd = p.stdout.fileno()
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise BenchError(f"{what} exited with {p.returncode} before it listened")
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            chunk = os.read(fd, 4096)
            buf += chunk
            m = re.search(pattern.encode(), buf)
            if m:
                return m.group(1).decode()
    raise BenchError(f"{what} did not announce its address within {timeout} s")


def _drain(p: subprocess.Popen, log: Path) -> None:
    # Keep reading the child's stdout so a full pipe can never block it.
    def run():
        with open(log, "ab") as f:
            for line in p.stdout:
                f.write(line)
    threading.Thread(target=run, daemon=True).start()


class Sim:
    def __init__(self, env: dict | None = None):
        d = tmpdir("sim")
        self.log = d / "sim.log"
        self.proc = spawn([str(BIN), "sim", "--listen", "127.0.0.1:0"], self.log, env,
                          stdout=subprocess.PIPE)
        self.addr = _read_announce(self.proc, r"listening on http://(\S+)", "laptime sim")
        _drain(self.proc, self.log)
        self.url = f"http://{self.addr}"
        self.pid = self.proc.pid

    def timing(self) -> dict:
        return get_json(f"{self.url}/sim/timing")

    def stats(self) -> dict:
        return get_json(f"{self.url}/sim/stats")


class Gateway:
    def __init__(self, upstream: str, observe: bool | None = None, name: str = "gateway",
                 pin: str | None = None, extra: str = ""):
        d = tmpdir(name)
        self.data = d / "data"
        self.log = d / "gateway.log"
        self.config = d / "laptime.toml"
        # drain_s: a stopped gateway may hold streams in flight this long; the harness only
        # stops it after its loads ended, so keep shutdown (and a failed run's cleanup) short.
        server = f'data_dir = "{self.data}"\ndrain_s = 2\n'
        if observe is not None:
            server += f"observe = {'true' if observe else 'false'}\n"
        # BENCH_UPSTREAM_IDLE=N: each serving thread keeps N idle upstream connections
        # (`server.upstream_idle_per_thread`; default 128).
        idle = os.environ.get("BENCH_UPSTREAM_IDLE")
        if idle:
            server += f"upstream_idle_per_thread = {int(idle)}\n"
        # The strict format: one sim channel serving every model name, default routes. Pinned
        # to a dialect (`pin`), it serves `sim-fast` only (a `*` channel is never translated),
        # and every other client dialect is translated to it.
        models = '["sim-fast"]\ndialect = "' + pin + '"' if pin else '["*"]'
        channels = ("\n[[channels]]\nname = \"sim\"\nprovider = \"sim\"\n"
                    f"base_url = \"{upstream}\"\nmodels = {models}\n")
        # BENCH_UPSTREAM_HTTP=http2: the channel speaks HTTP/2 to the sim (h2c, every answer
        # of a serving thread over one connection); http1 / auto (the default) as configured.
        http = os.environ.get("BENCH_UPSTREAM_HTTP")
        if http:
            channels += f'http_version = "{http}"\n'
        # BENCH_SECOND_CHANNEL=1: a second, lower-tier channel on the same sim, so every
        # request has a failover candidate (and a stream one that could continue it).
        if os.environ.get("BENCH_SECOND_CHANNEL") == "1":
            channels += channels.replace('name = "sim"', 'name = "sim-2"') + "priority = 1\n"
        # BENCH_STORE_URL=postgres://…: the gateway's store is that PostgreSQL database (each
        # gateway of a run shares it) instead of its own SQLite file.
        store_url = os.environ.get("BENCH_STORE_URL")
        if store_url and "[store]" not in extra:
            extra = f'[store]\nurl = "{store_url}"\n' + extra
        # `extra`: further sections (TOML), e.g. `[store]` or `[shared]`.
        self.config.write_text("[server]\n" + server + channels + ("\n" + extra if extra else ""))
        self.proc = spawn([str(BIN), "serve", "--config", str(self.config), "--listen",
                           "127.0.0.1:0", "--data-dir", str(self.data)], self.log,
                          {"LAPTIME_BOOTSTRAP_TOKEN": TOKEN}, stdout=subprocess.PIPE)
        try:
            self.addr = _read_announce(self.proc, r"laptime listening on http://(\S+)", name)
        except BenchError as e:
            raise BenchError(f"{e}; its log:\n{self.log.read_text()[-2000:]}") from None
        _drain(self.proc, self.log)
        self.url = f"http://{self.addr}"
        self.pid = self.proc.pid
        wait_http(f"{self.url}/readyz", name)

    def requests(self, since: str) -> list[dict]:
        """Every logged request since `since` (RFC 3339), newest first: GET /api/requests
        with the admin token, paging back 500 at a time with the window's `to`."""
        rows, seen, to = [], set(), None
        for _ in range(1000):  # bounded: 500,000 rows at most
            q = f"limit=500&from={quote(since)}" + (f"&to={quote(to)}" if to else "")
            items = get_json(f"{self.url}/api/requests?{q}", token=TOKEN)["requests"]
            new = [r for r in items if r["request_id"] not in seen]
            if not new:
                break
            seen.update(r["request_id"] for r in new)
            rows.extend(new)
            to = min(r["created_at"] for r in new)
        return rows


class Nginx:
    """Debian's nginx as a plain reverse proxy (benchmarks/nginx.conf) in front of `upstream`."""

    def __init__(self, upstream_addr: str):
        d = tmpdir("nginx")
        os.chmod(d, 0o755)
        self.port = free_port()
        conf = (HERE / "nginx.conf").read_text()
        for k, v in {"@LISTEN@": f"127.0.0.1:{self.port}", "@UPSTREAM@": upstream_addr,
                     "@PREFIX@": str(d)}.items():
            conf = conf.replace(k, v)
        self.config = d / "nginx.conf"
        self.config.write_text(conf)
        self.log = d / "nginx.out"
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.path.exists(nginx):
            raise BenchError("nginx is not installed: apt-get install -y nginx")
        self.proc = spawn([nginx, "-p", str(d), "-c", str(self.config), "-g", "daemon off;"],
                          self.log)
        self.pid = self.proc.pid
        self.url = f"http://127.0.0.1:{self.port}"
        wait_port(self.port, "nginx", self.proc)

    def pids(self) -> list[int]:
        return [self.pid] + children(self.pid)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, what: str, proc: subprocess.Popen, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise BenchError(f"{what} is not listening on {port} after {timeout} s")


def wait_http(url: str, what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.05)
    raise BenchError(f"{what}: {url} not ready after {timeout} s")


def get_json(url: str, token: str | None = None):
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


# === /proc ===

def cpu_s(pids) -> float:
    """utime + stime of these processes (all their threads, dead ones included), seconds."""
    total = 0
    for pid in ([pids] if isinstance(pids, int) else pids):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # fields 14 and 15 of stat(5)
    return total / CLK_TCK


def minor_faults(pids) -> int:
    """Minor page faults of these processes (all their threads, dead ones included): each is a
    page the process touched for the first time since it was mapped or last given back."""
    total = 0
    for pid in ([pids] if isinstance(pids, int) else pids):
        total += int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])
    return total


def thread_ticks(pid: int) -> dict:
    """CPU ticks (utime + stime) of each live thread of `pid`, by (tid, name)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
        except FileNotFoundError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[(tid, name)] = int(fields[11]) + int(fields[12])
    return out


def thread_cpu_ms(before: dict, after: dict, n: int) -> dict:
    """CPU ms per request of each kind of thread between two `thread_ticks` readings: the
    serving threads (`laptime-serve-N`) summed as `serving`, the others by name."""
    out = {}
    for (tid, name), t in after.items():
        kind = "serving" if name.startswith("laptime-serve") else name
        out[kind] = out.get(kind, 0) + t - before.get((tid, name), 0)
    return {k: v / CLK_TCK * 1000 / n for k, v in out.items() if v}


def counters(pids) -> dict:
    """CPU seconds, read and write syscalls (/proc/PID/io syscr, syscw: every thread, dead
    ones included), context switches (live threads only) and minor page faults of these
    processes."""
    c = {"cpu_s": cpu_s(pids), "syscr": 0, "syscw": 0, "ctxsw": 0, "minflt": minor_faults(pids)}
    for pid in ([pids] if isinstance(pids, int) else pids):
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            k, v = line.split(":")
            if k in ("syscr", "syscw"):
                c[k] += int(v)
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                for line in Path(f"/proc/{pid}/task/{t}/status").read_text().splitlines():
                    if line.endswith("ctxt_switches:") or "ctxt_switches:" in line:
                        c["ctxsw"] += int(line.split()[1])
            except OSError:
                pass
    return c


def per(before: dict, after: dict, n: int) -> dict:
    """Counter differences per request (CPU in ms)."""
    d = {k: (after[k] - before[k]) / n for k in before}
    d["cpu_ms"] = d.pop("cpu_s") * 1000
    return d


def listen_overflows() -> int:
    """The machine's count of connections dropped because an accept queue was full."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            return int(dict(zip(names.split(), values.split()))["ListenOverflows"])
    return 0


def rss_mb(pid: int, key: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise BenchError(f"no {key} for pid {pid}")


class RssSampler:
    """Samples VmRSS every `period` seconds in a thread while a load runs."""

    def __init__(self, pid: int, period: float = 0.1):
        self.pid, self.period, self.samples = pid, period, []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic(), rss_mb(self.pid)))
            except (OSError, BenchError):
                return
            self._stop.wait(self.period)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(timeout=2)


def now_rfc3339() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")


class MachineCpu:
    """How busy all CPUs were (from /proc/stat) while a block ran: near 100 % means the
    figures measured there include waiting for a core, whatever the gateway does."""

    @staticmethod
    def _read():
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(f), f[3] + f[4]  # total, idle + iowait

    def __enter__(self):
        self._t0, self._i0 = self._read()
        return self

    def __exit__(self, *exc):
        t1, i1 = self._read()
        total = max(1, t1 - self._t0)
        self.busy_pct = 100 * (1 - (i1 - self._i0) / total)


def machine_state() -> dict:
    load = os.getloadavg()
    return {"when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "cpus": os.cpu_count(), "loadavg_1m": round(load[0], 2),
            "loadavg_5m": round(load[1], 2)}


# === laptime bench and wrk ===

def bench(out: Path, target: str, *, compare: tuple[str, ...] = (), dialect: str = "chat",
          model: str = "sim-fast", stream: bool = False, extra: dict | None = None,
          requests: int | None = None, duration: float | None = None,
          concurrency: int | None = None, rate: float | None = None, warmup: int = 5,
          max_inflight: int | None = None, timeout_s: float = 60,
          token: str | None = TOKEN) -> dict:
    """Runs `laptime bench` once and returns report.json. Fails unless every measured and
    warm-up request of every target succeeded with a complete answer."""
    args = [str(BIN), "bench", "--target", target, "--dialect", dialect, "--model", model,
            "--input-tokens", "16", "--warmup", str(warmup), "--timeout-s", str(timeout_s),
            "--out", str(out), "--no-progress", "--stream" if stream else "--no-stream"]
    for c in compare:
        args += ["--compare", c]
    if extra:
        args += ["--extra-body", json.dumps(extra)]
    if requests:
        args += ["--requests", str(requests)]
    if duration:
        args += ["--duration", str(duration)]
    if concurrency:
        args += ["--concurrency", str(concurrency)]
    if rate:
        args += ["--rate", str(rate)]
    if max_inflight:
        args += ["--max-inflight", str(max_inflight)]
    env = dict(os.environ)
    env.pop("LAPTIME_BENCH_TOKEN", None)
    if token:
        env["LAPTIME_BENCH_TOKEN"] = token
    # Bounded: the phases' own limits plus the request timeout, and a hard stop above that.
    limit = 120 + (duration or 0) * 2 + (requests or 0) * 2 + timeout_s
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                         text=True)
    _started.append(p)
    try:
        stdout, stderr = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        p.kill()
        raise BenchError(f"laptime bench ran over {limit:.0f} s: {' '.join(args)}") from None
    finally:
        if p in _started:
            _started.remove(p)
    (out / "stdout.txt").write_text(stdout + stderr)
    if p.returncode != 0:
        raise BenchError(f"laptime bench failed ({p.returncode}): {stderr.strip()[-2000:]}")
    report = json.loads((out / "report.json").read_text())
    check_report(report, out)
    return report


def check_report(report: dict, out: Path) -> None:
    s = report["summary"]
    problems = []
    if s["warmup"]["failed"]:
        problems.append(f"warm-up failures {s['warmup']['failures']}")
    for t in s["targets"]:
        if t["failed"] or set(t["outcomes"]) - {"completed"}:
            problems.append(f"{t['label']} {t['url']}: failures {t['failures']}, "
                            f"outcomes {t['outcomes']}")
        if t["succeeded"] == 0:
            problems.append(f"{t['label']}: no request succeeded")
    if problems:
        raise BenchError("errors or incomplete answers (target: 0) in "
                         f"{out}/report.json: " + "; ".join(problems))


def target(report: dict, label: str) -> dict:
    for t in report["summary"]["targets"]:
        if t["label"] == label:
            return t
    raise BenchError(f"no target {label} in report")


def stat(report: dict, label: str, metric: str, p: str) -> float:
    v = target(report, label)["metrics"][metric][p]
    if v is None:
        raise BenchError(f"{label} has no {metric} {p}")
    return v


def added(report: dict, metric: str, p: str, label: str = "B", base: str = "A") -> float:
    """label's statistic minus the direct target's, in the same interleaved run."""
    return stat(report, label, metric, p) - stat(report, base, metric, p)


def wrk(url_path: str, body: dict, *, duration: float, connections: int = 32,
        threads: int = 2, token: str | None = None, timeout_s: int = 10) -> dict:
    """One wrk run (POST `body`); returns its summary. Fails on any error or non-2xx."""
    exe = shutil.which("wrk")
    if not exe:
        raise BenchError("wrk is not installed: apt-get install -y wrk")
    env = dict(os.environ, WRK_BODY=json.dumps(body), WRK_TOKEN=token or "")
    duration = max(1, round(duration))  # wrk takes whole seconds
    args = [exe, "-t", str(threads), "-c", str(connections), "-d", f"{duration}s",
            "--timeout", f"{timeout_s}s", "-s", str(HERE / "wrk-post.lua"), url_path]
    r = subprocess.run(args, capture_output=True, text=True, env=env,
                       timeout=duration + timeout_s + 30)
    line = next((l for l in r.stdout.splitlines() if l.startswith("WRK_JSON ")), None)
    if r.returncode != 0 or line is None:
        raise BenchError(f"wrk failed ({r.returncode}): {r.stdout[-1000:]} {r.stderr[-1000:]}")
    s = json.loads(line[len("WRK_JSON "):])
    errors = {k: s[k] for k in ("connect", "read", "write", "status", "timeout") if s[k]}
    if errors or s["requests"] == 0:
        raise BenchError(f"wrk against {url_path}: errors {errors} over {s['requests']} "
                         "requests (target: 0)")
    s["rps"] = s["requests"] / (s["duration_us"] / 1e6)
    return s


# === results ===

def parse_args(doc: str, duration: float | None, needs_bin: bool = True,
               **extra) -> argparse.Namespace:
    """The group's flags (`extra`: name=(type, default, help)). `needs_bin=False` for a script
    that names its builds by flags (compare-builds) and checks them itself."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    if duration is not None:
        ap.add_argument("--duration", type=float, default=duration,
                        help=f"seconds per measured load phase (default {duration})")
    ap.add_argument("--rep", type=int, default=1, help="repetition number (run-all sets it)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    for name, (kind, default, help_) in extra.items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=kind, default=default,
                        help=f"{help_} (default {default})")
    a = ap.parse_args()
    if needs_bin and not BIN.exists():
        raise SystemExit(f"{BIN} is missing: run benchmarks/build (or set LAPTIME_BIN)")
    return a


def work_dir(args, group: str) -> Path:
    """Scratch space for bench reports, logs and perf data: a temp dir, removed on exit
    unless BENCH_KEEP_TMP=1 (then its path is printed)."""
    d = tmpdir(f"{group}-r{args.rep}")
    if os.environ.get("BENCH_KEEP_TMP"):
        print(f"  keeping {d}", file=sys.stderr)
    return d


def write_result(args, group: str, figures: dict, notes: list[str] | None = None,
                 extra: dict | None = None, state: dict | None = None) -> Path:
    doc = {"group": group, "rep": args.rep, "machine": state or machine_state(),
           "upstream_http": os.environ.get("BENCH_UPSTREAM_HTTP", "auto"),
           "store": "postgres" if os.environ.get("BENCH_STORE_URL") else "sqlite",
           "machine_after": machine_state(), "figures": figures, "notes": notes or []}
    if extra:
        doc.update(extra)
    path = args.out / "raw" / f"{group}-r{args.rep}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"== {group} (rep {args.rep}) ==")
    width = max((len(k) for k in figures), default=10)
    for k, v in figures.items():
        tgt = TARGETS.get(f"{group}.{k}")
        print(f"  {k:<{width}}  {fmt(v):>10}  {target_text(tgt) if tgt else ''}")
    for n in notes or []:
        print(f"  note: {n}")
    print(f"  wrote {path}")
    return path


def fmt(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def median(values: list[float]) -> float:
    return statistics.median(values)


def run_main(fn) -> None:
    """Runs a script's main: a BenchError or any exception is a loud, non-zero exit."""
    try:
        fn()
    except BenchError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)


# The targets, keyed by "group.figure": (comparison, bound).
TARGETS: dict[str, tuple[str, float]] = {
    "latency.nonstream.added_p50_ms": ("<=", 0.15),
    "latency.nonstream.added_p99_ms": ("<=", 0.5),
    "latency.stream.ttft_added_p99_ms": ("<=", 0.5),
    "latency.nonstream.added_p50_vs_nginx": ("<=", 1.5),
    "latency.stream.ttft_added_p50_vs_nginx": ("<=", 1.5),
    "rate.nonstream.added_p50_ms": ("<=", 0.15),
    "rate.nonstream.added_p99_ms": ("<=", 0.5),
    "rate.stream.ttft_added_p99_ms": ("<=", 0.5),
    "throughput.wrk.nonstream.gateway_vs_direct": (">=", 0.25),
    "throughput.wrk.stream.gateway_vs_direct": (">=", 0.25),
    "throughput.wrk.nonstream.gateway_vs_nginx": (">=", 0.8),
    "throughput.wrk.stream.gateway_vs_nginx": (">=", 0.8),
    "throughput.wrk.nonstream.gateway_cpu_ms_per_request": ("<=", 0.1),
    "throughput.wrk.stream.gateway_cpu_ms_per_stream": ("<=", 0.25),
    "throughput.bench.nonstream.gateway_vs_direct": (">=", 0.25),
    "throughput.bench.stream.gateway_vs_direct": (">=", 0.25),
    "streams.s100.gap_added_p99_ms": ("<=", 1.0),
    "streams.s100.ttft_added_p99_ms": ("<=", 2.0),
    "streams.s1000.gap_added_p99_ms": ("<=", 5.0),
    "streams.s100.gateway_cpu_ms_per_stream": ("<=", 0.25),
    # Issue 16: 1,000 streams opened at once.
    "streams.burst.ttft_added_p99_ms": ("<=", 20.0),
    "streams.burst.gap_added_p99_ms": ("<=", 2.0),
    "memory.idle_rss_mb": ("<=", 30),
    "memory.rss_per_1000_streams_mb": ("<=", 40),
    "observe.cpu_per_stream_on_vs_off": ("<=", 1.05),
    "accuracy.upstream_headers.abs_err_p99_ms": ("<=", 2.0),
    "accuracy.first_sse_event.abs_err_p99_ms": ("<=", 2.0),
    "accuracy.first_text_delta.abs_err_p99_ms": ("<=", 2.0),
    "accuracy.upstream_done.abs_err_p99_ms": ("<=", 2.0),
    # Issue 14: admission cost at c=1 (added p50, limits on vs off) and the admitted rate.
    "limits.nonstream.local_added_p50_ms": ("<=", 0.02),
    "limits.nonstream.redis_added_p50_ms": ("<=", 0.3),
    "limits.stream.local_added_p50_ms": ("<=", 0.02),
    "limits.stream.redis_added_p50_ms": ("<=", 0.3),
    "limits.rate.one_instance.error_pct": ("abs<=", 2.0),
    "limits.rate.two_instances.error_pct": ("abs<=", 2.0),
}


def target_text(t: tuple[str, float]) -> str:
    if t[0] == "abs<=":
        return f"target within ±{t[1]:g}"
    return f"target {t[0]} {t[1]:g}"


def meets(t: tuple[str, float], v) -> bool | None:
    if not isinstance(v, (int, float)):
        return None
    if t[0] == "abs<=":
        return abs(v) <= t[1]
    return v <= t[1] if t[0] == "<=" else v >= t[1]
