#!/usr/bin/env python3
"""A stand-in for `vllm serve` with scripted behaviour, for fast tests of the watch loop and the process runtime.

It takes vLLM's `--host/--port/--model` and ignores other flags. FAKE_VLLM_SCENARIO picks the shape:
boot, refuse, refuse_hang, crash, exit0, hang, ignore_term, probe_fail, die_after_ready, garbage, never_bind,
and for the reliability suite (tests/reliability):
  dead_after_health  answers /health 200 once, then 503 (and completions 500), and exits 1 a second later
  exit_after_health  answers /health 200 once and exits 1 at once, before the harness can look at the listener
  flood              writes FAKE_VLLM_FLOOD_MB megabytes of log (ordinary lines, 100 KiB lines, binary junk,
                     a 1 MiB line) before it boots, or, with FAKE_VLLM_FLOOD_WHEN=ready, right after it is ready;
                     FAKE_VLLM_FLOOD_LINE_KB=N makes every line N KiB
  eat                logs its KV size, then allocates (and touches) 16 MiB every 0.1 s until it is killed: a server
                     OOM-killed by its container's memory limit
  refuse_after_ready says it is ready, then prints a refusal line (as a request's error or an echo may), and serves
  partial            a refusal written in pieces (split mid-line, `\\r` redraws, junk bytes), the last line without
                     its newline, then exit 1
FAKE_VLLM_DELAY (seconds, default 0.3) is how long "loading" takes. Knobs that combine with any scenario:
  FAKE_VLLM_IGNORE_TERM=1   ignore SIGTERM (vLLM does mid-start-up)
  FAKE_VLLM_CHILD=1         start an "engine core" child in the same process group (prints `engine core pid=N`);
                            it ignores SIGTERM when the parent does, and outlives a SIGKILLed parent
  FAKE_VLLM_PROBE_DELAY=S   a completion takes S seconds (a harness is "after ready, in the probe" meanwhile)
  FAKE_VLLM_LOG_REQUESTS=1  log every request served, with this server's pid and port
  FAKE_VLLM_ECHO_ENV=1      print the whole environment into the log (vLLM echoes its args; this is worse)
  FAKE_VLLM_ERROR_TEXT=T    `crash` prints `ValueError: T` as its last error line (it becomes the cell's detail)
  FAKE_VLLM_VERSION=V       the vLLM version it logs (default 0.0.0-fake), so a cell's KV prediction is made
  FAKE_VLLM_WEIGHTS_S=S     a boot loads its weights for S more seconds and logs "Loading weights took S seconds"
                            (none by default): a slower weight load, as a night of history shows it
  FAKE_VLLM_KV_GIB=G        the available KV cache memory it logs (default 0.5)
  FAKE_VLLM_KV_TOKENS=N     the KV cache size in tokens it logs (default 10720)
  FAKE_VLLM_MARKS=DIR       touch DIR/<phase>.<pid> at each phase: started, child, bound, probe (a completion
                            arrived): how a test outside the harness knows where the boot is; and DIR/term.<pid>
                            when a SIGTERM arrives (then dies of it, or ignores it if deaf): what a test proves a
                            teardown from (a deaf server gone after its `term` mark was SIGKILLed), not from its time
Real vLLM is tested elsewhere; these are faults it cannot be made to show on demand.
"""

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REFUSAL = (
    "ERROR 11-29 10:00:01 [kv_cache_utils.py:700] To serve at least one request with the model's max seq len (4096), "
    "(0.02 GiB KV cache is needed, which is larger than the available KV cache memory (0.01 GiB). Based on the "
    "available memory, the estimated maximum model length is 3072. Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine. See https://docs.vllm.ai/ for more details."
)


def arg(name: str, default: str | None = None) -> str | None:
    argv = sys.argv[1:]
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else default


def log(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def raw(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


def flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def mark(phase: str, pid: int | None = None) -> None:
    marks = os.environ.get("FAKE_VLLM_MARKS")
    if marks:
        with open(os.path.join(marks, f"{phase}.{pid or os.getpid()}"), "w"):
            pass


class Handler(BaseHTTPRequestHandler):
    healthy = True
    probe_ok = True
    health_answers = None  # how many /health 200s before the engine "dies" (None: forever)
    exit_after_health = False
    probe_delay = 0.0
    log_requests = False

    def log_message(self, *a):  # quiet
        pass

    def _send(self, code: int, body: dict) -> None:
        if Handler.log_requests:  # before the answer: once the client has it, this server may be stopped at once
            log(f"fake: served {self.command} {self.path} {code} pid={os.getpid()} port={self.server.server_port}")
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def do_GET(self):
        if self.path == "/health":
            code = 200 if Handler.healthy else 503
            if code == 200 and Handler.health_answers is not None:
                Handler.health_answers -= 1
                if Handler.health_answers <= 0:
                    Handler.healthy = False
                    Handler.probe_ok = False
            self._send(code, {})
            if code == 200 and Handler.exit_after_health:
                os._exit(1)
        elif self.path == "/v1/models":
            self._send(200, {"data": [{"id": arg("--model", "fake")}]})
        else:
            self._send(404, {})

    def do_POST(self):
        mark("probe")
        if Handler.probe_delay:
            time.sleep(Handler.probe_delay)
        if self.path == "/v1/completions" and Handler.probe_ok:
            self._send(200, {"choices": [{"text": "x"}]})
        else:
            self._send(500, {"error": "engine dead"})


def on_term(ignore_term: bool) -> None:
    """With FAKE_VLLM_MARKS, note each SIGTERM this process gets (a `term` mark), then do what it would have done
    anyway: ignore it (deaf) or die of it (the default action again, so the exit status is still -15)."""
    if not os.environ.get("FAKE_VLLM_MARKS"):
        if ignore_term:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return

    def noted(signum, frame):
        mark("term")
        if not ignore_term:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, noted)


def start_child(ignore_term: bool) -> None:
    """An engine-core stand-in: same process group, no PDEATHSIG of its own, so it survives a SIGKILLed parent."""
    pid = os.fork()
    if pid == 0:
        on_term(ignore_term)
        os.closerange(3, 1024)
        while True:
            time.sleep(3600)
    log(f"INFO 11-29 10:00:00 [core.py:1] engine core pid={pid}")
    mark("child", pid)


def flood(megabytes: float) -> None:
    """Megabytes of log as fast as a pipe takes it: what a server stuck in a warning loop prints. With
    FAKE_VLLM_FLOOD_LINE_KB=N every line is N KiB long instead of the mix."""
    line_kb = float(os.environ.get("FAKE_VLLM_FLOOD_LINE_KB", "0") or 0)
    if line_kb:
        line = b"WARNING 11-29 10:00:00 [flood.py:3] " + b"w" * int(line_kb * 1024) + b"\n"
        for _ in range(int(megabytes * 1024 / line_kb)):
            raw(line)
        return
    ordinary = (b"WARNING 11-29 10:00:00 [flood.py:1] the same warning again, and again, and again: "
                + b"x" * 60 + b"\n")
    long_line = b"INFO 11-29 10:00:00 [flood.py:2] " + b"y" * (100 * 1024) + b"\n"
    junk = bytes(range(256)).replace(b"\n", b"") * 4 + b"\n"
    block = ordinary * 200 + long_line + junk * 10 + b"no newline " * 20
    budget = int(megabytes * 1024 * 1024)
    written = 0
    endless_done = False
    while written < budget:
        if not endless_done and written > budget // 2:
            raw(b"z" * (1024 * 1024) + b"\n")  # one 1 MiB line
            written += 1024 * 1024
            endless_done = True
            continue
        raw(block)
        written += len(block)
    raw(b"\n")


def partial(delay: float) -> None:
    raw(b"INFO 11-29 10:00:00 [loader.py:1] Loading weights: 10%\r")
    time.sleep(delay / 3)
    raw(b"Loading weights: 55%\rLoading weights: 100%\n")
    raw(b"\xff\xfe\x00 half a multibyte char \xe2\x82")
    time.sleep(delay / 3)
    raw(b"\xac and the rest\n")
    head, tail = REFUSAL[:70].encode(), REFUSAL[70:].encode()
    raw(head)
    time.sleep(delay / 3)
    raw(tail)  # the refusal's last line never gets its newline: the process exits first
    os._exit(1)


def main() -> None:
    scenario = os.environ.get("FAKE_VLLM_SCENARIO", "boot")
    delay = float(os.environ.get("FAKE_VLLM_DELAY", "0.3"))
    host, port = arg("--host", "127.0.0.1"), int(arg("--port", "8000"))
    ignore_term = scenario == "ignore_term" or flag("FAKE_VLLM_IGNORE_TERM")
    on_term(ignore_term)
    log(f"INFO 11-29 10:00:00 [api_server.py:1] vLLM API server version "
        f"{os.environ.get('FAKE_VLLM_VERSION', '0.0.0-fake')}")
    mark("started")
    log(f"INFO 11-29 10:00:00 [api_server.py:2] args: {' '.join(sys.argv[1:])}")
    if flag("FAKE_VLLM_ECHO_ENV"):
        log("INFO 11-29 10:00:00 [api_server.py:2] environment: "
            + " ".join(f"{k}={v}" for k, v in sorted(os.environ.items())))
    if flag("FAKE_VLLM_CHILD"):
        start_child(ignore_term)
    if scenario == "partial":
        partial(delay)
    time.sleep(delay)
    if scenario in ("refuse", "refuse_hang"):
        log(REFUSAL)
        if scenario == "refuse_hang":
            time.sleep(3600)
        time.sleep(0.5)
        log("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
        sys.exit(1)
    if scenario == "crash":
        log("Traceback (most recent call last):")
        text = os.environ.get("FAKE_VLLM_ERROR_TEXT")
        log(f"ValueError: {text}" if text else "SomethingError: boom")
        sys.exit(3)
    if scenario == "exit0":
        sys.exit(0)
    if scenario == "eat":
        log("INFO 11-29 10:00:01 [cpu_worker.py:260] Explicitly set (4.0/15.09) GiB for KV cache on node 0.")
        held = []
        while True:
            block = bytearray(16 << 20)
            for i in range(0, len(block), 4096):
                block[i] = 1
            held.append(block)
            time.sleep(0.1)
    if scenario in ("hang", "ignore_term", "never_bind"):
        while True:
            time.sleep(3600)
    if scenario == "garbage":
        sys.stdout.buffer.write(b"\x00\xff\xfe garbage \x1b[31m partial")
        sys.stdout.flush()
    flood_mb = float(os.environ.get("FAKE_VLLM_FLOOD_MB", "200"))
    flood_after_ready = os.environ.get("FAKE_VLLM_FLOOD_WHEN", "boot") == "ready"
    if scenario == "flood" and not flood_after_ready:
        flood(flood_mb)
    weights_s = os.environ.get("FAKE_VLLM_WEIGHTS_S")
    if weights_s:
        log("INFO 11-29 10:00:01 [gpu_model_runner.py:1] Starting to load model fake...")
        time.sleep(float(weights_s))
        log(f"INFO 11-29 10:00:01 [default_loader.py:1] Loading weights took {float(weights_s):.2f} seconds")
    log(f"INFO 11-29 10:00:01 [gpu_worker.py:1] Available KV cache memory: "
        f"{os.environ.get('FAKE_VLLM_KV_GIB', '0.5')} GiB")
    log(f"INFO 11-29 10:00:01 [kv_cache_utils.py:1] GPU KV cache size: "
        f"{int(os.environ.get('FAKE_VLLM_KV_TOKENS', '10720')):,} tokens")
    Handler.probe_ok = scenario != "probe_fail"
    Handler.probe_delay = float(os.environ.get("FAKE_VLLM_PROBE_DELAY", "0") or 0)
    Handler.log_requests = flag("FAKE_VLLM_LOG_REQUESTS")
    if scenario == "dead_after_health":
        Handler.health_answers = 1
    Handler.exit_after_health = scenario == "exit_after_health"
    server = ThreadingHTTPServer((host, port), Handler)
    mark("bound")
    log(f"INFO 11-29 10:00:02 [api_server.py:3] Starting vLLM API server 0 on http://{host}:{port}")
    log("INFO:     Application startup complete.")
    if scenario == "refuse_after_ready":
        log(REFUSAL)
    if scenario == "flood" and flood_after_ready:
        threading.Thread(target=flood, args=(flood_mb,), daemon=True).start()
    if scenario == "die_after_ready":
        def die():
            time.sleep(0.2)
            Handler.healthy = False
            Handler.probe_ok = False
        threading.Thread(target=die, daemon=True).start()
    if scenario == "dead_after_health":
        def shut_down():
            while Handler.healthy:
                time.sleep(0.05)
            time.sleep(1.0)
            log("ERROR 11-29 10:00:03 [core.py:9] EngineCore died unexpectedly")
            os._exit(1)
        threading.Thread(target=shut_down, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
