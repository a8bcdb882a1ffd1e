"""Session fixtures: run the real `laptime` binary for the official-SDK tests.

`gateway` is started once per test session with no config file, so it uses
its embedded default (SQLite in a temp data dir plus the in-process simulated
upstream), on 127.0.0.1 with an ephemeral port and a freshly generated
bootstrap admin token.

`translation_gateway` is a second one started the same way but with a config
file (which replaces the embedded default): one in-process sim channel pinned
to each dialect, for the translation matrix (test_translation.py).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO_ROOT / "target" / "debug" / "laptime"
LISTEN_PREFIX = "laptime listening on "
STARTUP_TIMEOUT_S = 20.0
SHUTDOWN_TIMEOUT_S = 10.0
ROW_POLL_TIMEOUT_S = 3.0


@dataclass
class Gateway:
    base_url: str  # http://127.0.0.1:PORT
    token: str
    proc: subprocess.Popen
    data_dir: Path
    stderr_path: Path
    stdout_lines: list[str] = field(default_factory=list)

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.base_url

    def stored_request(self, request_id: str, timeout_s: float = ROW_POLL_TIMEOUT_S) -> dict:
        """GET /api/requests/{id}; the row is written asynchronously, so poll."""
        url = f"{self.base_url}/api/requests/{request_id}"
        deadline = time.monotonic() + timeout_s
        last = "no attempt made"
        while True:
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
            try:
                with urllib.request.urlopen(req, timeout=2) as resp:
                    body = resp.read()
                    row = json.loads(body)
                    if row.get("outcome") is not None:
                        return row
                    last = f"200 without outcome: {body[:500]!r}"
            except urllib.error.HTTPError as err:
                last = f"HTTP {err.code}: {err.read()[:500]!r}"
            except (urllib.error.URLError, OSError) as err:
                last = f"{type(err).__name__}: {err}"
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"request row {request_id} not readable within {timeout_s}s; last: {last}"
                )
            time.sleep(0.05)


def _stderr_tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return "<no stderr>"


def laptime_binary() -> Path:
    """The gateway binary under test (LAPTIME_BIN, else this checkout's debug build)."""
    binary = Path(os.environ.get("LAPTIME_BIN", str(DEFAULT_BIN)))
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.fail(
            f"laptime binary not found or not executable at {binary}; "
            "build it with `cargo build -p laptime --locked` or set LAPTIME_BIN",
            pytrace=False,
        )
    return binary


def _run_gateway(
    tmp_path_factory: pytest.TempPathFactory,
    config: str | None = None,
    extra_env: dict[str, str] | None = None,
):
    """Starts the binary (with `config` as its --config file when given, and `extra_env` added
    to its environment: the channels' provider keys), yields a Gateway, then stops it with
    SIGTERM and checks it exited cleanly."""
    binary = laptime_binary()

    data_dir = tmp_path_factory.mktemp("laptime-data")
    args = [str(binary), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir)]
    if config is not None:
        config_path = data_dir.parent / f"{data_dir.name}-config.toml"
        config_path.write_text(config)
        args += ["--config", str(config_path)]
    stderr_path = data_dir.parent / f"{data_dir.name}-stderr.log"
    token = "lt_" + secrets.token_hex(32)
    env = dict(os.environ)
    env.update(extra_env or {})
    env["LAPTIME_BOOTSTRAP_TOKEN"] = token
    env.setdefault("NO_COLOR", "1")

    stderr_file = open(stderr_path, "wb")
    proc = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr_file,
        env=env,
        text=True,
        bufsize=1,
    )

    lines: list[str] = []
    found: dict[str, str] = {}
    ready = threading.Event()

    def pump_stdout() -> None:
        # Keep draining stdout for the whole session so the gateway never blocks on it.
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            if not ready.is_set() and line.startswith(LISTEN_PREFIX):
                found["url"] = line[len(LISTEN_PREFIX):].strip().rstrip("/")
                ready.set()
        ready.set()  # EOF: wake the waiter so it can report the failure

    pump = threading.Thread(target=pump_stdout, name="laptime-stdout", daemon=True)
    pump.start()

    def abort(reason: str) -> None:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        stderr_file.close()
        pytest.fail(
            f"{reason}\nexit code: {proc.returncode}\nstdout: {lines!r}\n"
            f"stderr tail:\n{_stderr_tail(stderr_path)}",
            pytrace=False,
        )

    ready.wait(timeout=STARTUP_TIMEOUT_S)
    if "url" not in found:
        abort(f"laptime did not print '{LISTEN_PREFIX}http://ADDR' within {STARTUP_TIMEOUT_S}s")

    gw = Gateway(
        base_url=found["url"],
        token=token,
        proc=proc,
        data_dir=data_dir,
        stderr_path=stderr_path,
        stdout_lines=lines,
    )
    try:
        yield gw
    finally:
        still_running = proc.poll() is None
        if still_running:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
            stderr_file.close()
            pytest.fail(
                f"laptime did not exit within {SHUTDOWN_TIMEOUT_S}s of SIGTERM\n"
                f"stderr tail:\n{_stderr_tail(stderr_path)}",
                pytrace=False,
            )
        pump.join(timeout=2)
        stderr_file.close()
        assert still_running, (
            f"laptime exited on its own during the tests (code {code})\n"
            f"stderr tail:\n{_stderr_tail(stderr_path)}"
        )
        assert code == 0, (
            f"laptime exited with {code} after SIGTERM, expected 0\n"
            f"stderr tail:\n{_stderr_tail(stderr_path)}"
        )


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory):
    yield from _run_gateway(tmp_path_factory)


# --- The translation matrix's gateway ---------------------------------------

# Each upstream dialect gets an in-process sim channel pinned to it; the public model
# `via-<dialect>/<preset>` reaches `<preset>` through that channel, so a client of any dialect
# can be sent to an upstream of any dialect (translated when they differ).
DIALECTS = ("chat", "responses", "messages", "gemini")
TRANSLATION_PRESETS = (
    "sim-fast",
    "sim-reasoning",
    "sim-tool-call",
    "sim-parallel-tools",
    "sim-max-tokens",
    "sim-rate-limited",
    "sim-overloaded-in-band",
    "sim-echo",
)


def via(upstream: str, preset: str) -> str:
    """The public model name that reaches `preset` through the channel pinned to `upstream`
    (one path segment, as a Gemini client puts it in the URL)."""
    return f"via-{upstream}.{preset}"


def translation_config() -> str:
    lines = []
    for dialect in DIALECTS:
        models = ", ".join(f'"{via(dialect, p)}" = "{p}"' for p in TRANSLATION_PRESETS)
        lines += [
            "[[channels]]",
            f'name = "sim-{dialect}"',
            'provider = "sim"',
            f'dialect = "{dialect}"',
            f"models = {{ {models} }}",
            # The matrix asks for the same failing model (429, overload) many times in a row on
            # purpose; the breaker (tested on its own elsewhere) would eject it after 5.
            "circuit = { consecutive_failures = 100000, min_requests = 100000 }",
            "",
        ]
        # A 429 is relayed at once: with retries the gateway would wait out the Retry-After
        # (1 s) on the only channel before answering, twice per request.
        lines += [
            "[[routes]]",
            f'model = "{via(dialect, "sim-rate-limited")}"',
            "failover = { max_attempts = 1 }",
            "",
        ]
    return "\n".join(lines)


@pytest.fixture(scope="session")
def translation_gateway(tmp_path_factory: pytest.TempPathFactory):
    """A second gateway, on its own config file: four sim channels, one pinned to each
    dialect, serving every translation preset (see `via`)."""
    yield from _run_gateway(tmp_path_factory, translation_config())


# --- The continuation gateway -----------------------------------------------------------------

def continuation_config() -> str:
    """Channel `first` cuts (`m-cut`: after 40 of 60 tokens; `m-refused` the same) or stalls
    (`m-stall`: after 20, the idle deadline 1 s); channel `second`, called in Messages, continues
    with the same 60-token answer (`sim-long`), or refuses the prefill (`m-refused`). `m-long`
    is that whole answer from `second` alone: the canonical text."""
    return "\n".join([
        "[[channels]]",
        'name = "first"',
        'provider = "sim"',
        'models = { "m-cut" = "sim-cut-after-40", "m-stall" = "sim-stall-after-20", '
        '"m-refused" = "sim-cut-after-40" }',
        "",
        "[[channels]]",
        'name = "second"',
        'provider = "sim"',
        'dialect = "messages"',
        "priority = 1",
        'models = { "m-cut" = "sim-long", "m-stall" = "sim-long", '
        '"m-refused" = "sim-prefill-refused", "m-long" = "sim-long" }',
        "",
        "[[routes]]",
        'model = "m-stall"',
        "timeouts = { idle_ms = 1000 }",
        "",
    ])


@pytest.fixture(scope="session")
def continuation_gateway(tmp_path_factory: pytest.TempPathFactory):
    yield from _run_gateway(tmp_path_factory, continuation_config())
