#!/usr/bin/env python3
"""Reads its flags as vLLM does; 1 GiB of KV at 128 KiB a token in 16-token blocks: 8,192 tokens, one block held
back; boots a request that fits, else refuses with vLLM's estimate; serves /health and one completion. For
tests/reliability/test_flag_spellings_read.py's spellings."""
import argparse
import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def human(text):
    m = re.fullmatch(r"(\d+)([kmgKMG]?)", text)
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)]
    return int(m.group(1)) * scale

argv = []
for a in sys.argv[1:]:
    key, eq, value = a.partition("=")
    argv.append("--" + key[2:].replace("_", "-") + eq + value if a.startswith("--") else a)
p = argparse.ArgumentParser(allow_abbrev=True)
for name in ("--model", "--host", "--dtype"):
    p.add_argument(name)
p.add_argument("--port", type=int)
p.add_argument("--max-model-len", type=human, required=True)
p.add_argument("--max-num-seqs", type=int)
p.add_argument("--kv-cache-memory-bytes", type=human, required=True)
a = p.parse_args(argv)
per_token, length = 128 * 1024, a.max_model_len
tokens = a.kv_cache_memory_bytes // per_token
usable = tokens - 16
def out(s):
    return (sys.stdout.write(s + "\n"), sys.stdout.flush())
out("(APIServer pid=1) INFO 11-29 10:00:00 [api_utils.py:347] vLLM server version 0.32.0, serving model m")
if usable < length:
    out(f"(EngineCore pid=3) ERROR 11-29 10:00:02 [core.py:1510] ValueError: To serve at least one request with "
        f"the model's max seq len ({length}), ({length * per_token / 2**30:.2f} GiB KV cache is needed, which is "
        f"larger than the available KV cache memory ({a.kv_cache_memory_bytes / 2**30:.2f} GiB). Based on the "
        f"available memory, the estimated maximum model length is {usable}. Try increasing "
        "`gpu_memory_utilization`.")
    sys.exit(1)
out(f"(EngineCore pid=3) INFO 11-29 10:00:02 [kv_cache_utils.py:2327] GPU KV cache size: {tokens:,} tokens, "
    f"Maximum concurrency for {length:,} tokens per request: {tokens / length:.2f}x")

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

server = ThreadingHTTPServer((a.host, a.port), H)
out(f"(APIServer pid=1) INFO 11-29 10:00:03 [entry.py:140] Starting vLLM server on http://{a.host}:{a.port}")
out("INFO:     Application startup complete.")
server.serve_forever()
