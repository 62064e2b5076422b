#!/usr/bin/env python3
"""A stand-in for `vllm serve` with scripted behaviour, for fast tests of the watch loop and the process runtime.

It takes vLLM's `--host/--port/--model` and ignores other flags. FAKE_VLLM_SCENARIO picks the shape:
boot, refuse, refuse_hang, crash, exit0, hang, ignore_term, probe_fail, die_after_ready, garbage, never_bind.
FAKE_VLLM_DELAY (seconds, default 0.3) is how long "loading" takes. Real vLLM is tested elsewhere; these are faults it
cannot be made to show on demand.
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


class Handler(BaseHTTPRequestHandler):
    healthy = True
    probe_ok = True

    def log_message(self, *a):  # quiet
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._send(200 if Handler.healthy else 503, {})
        elif self.path == "/v1/models":
            self._send(200, {"data": [{"id": arg("--model", "fake")}]})
        else:
            self._send(404, {})

    def do_POST(self):
        if self.path == "/v1/completions" and Handler.probe_ok:
            self._send(200, {"choices": [{"text": "x"}]})
        else:
            self._send(500, {"error": "engine dead"})


def main() -> None:
    scenario = os.environ.get("FAKE_VLLM_SCENARIO", "boot")
    delay = float(os.environ.get("FAKE_VLLM_DELAY", "0.3"))
    host, port = arg("--host", "127.0.0.1"), int(arg("--port", "8000"))
    if scenario == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log("INFO 11-29 10:00:00 [api_server.py:1] vLLM API server version 0.0.0-fake")
    log(f"INFO 11-29 10:00:00 [api_server.py:2] args: {' '.join(sys.argv[1:])}")
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
        log("SomethingError: boom")
        sys.exit(3)
    if scenario == "exit0":
        sys.exit(0)
    if scenario in ("hang", "ignore_term", "never_bind"):
        while True:
            time.sleep(3600)
    if scenario == "garbage":
        sys.stdout.buffer.write(b"\x00\xff\xfe garbage \x1b[31m partial")
        sys.stdout.flush()
    log("INFO 11-29 10:00:01 [gpu_worker.py:1] Available KV cache memory: 0.5 GiB")
    log("INFO 11-29 10:00:01 [kv_cache_utils.py:1] GPU KV cache size: 10,720 tokens")
    Handler.probe_ok = scenario != "probe_fail"
    server = ThreadingHTTPServer((host, port), Handler)
    log(f"INFO 11-29 10:00:02 [api_server.py:3] Starting vLLM API server 0 on http://{host}:{port}")
    log("INFO:     Application startup complete.")
    if scenario == "die_after_ready":
        def die():
            time.sleep(0.2)
            Handler.healthy = False
            Handler.probe_ok = False
        threading.Thread(target=die, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
