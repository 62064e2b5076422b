#!/usr/bin/env python3
"""Reads its flags as vLLM does; 1 GiB of KV at 128 KiB a token in 16-token blocks: 8,192 tokens, one block held
back; boots a request that fits, else refuses with vLLM's estimate; serves /health and one completion. For
tests/reliability/test_flag_spellings_read.py's spellings."""
import argparse
import re
import sys

from kv_serve import out, refuse, serve


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
out("(APIServer pid=1) INFO 11-29 10:00:00 [api_utils.py:347] vLLM server version 0.32.0, serving model m")
if usable < length:
    refuse(length, per_token, a.kv_cache_memory_bytes, usable)
    sys.exit(1)
out(f"(EngineCore pid=3) INFO 11-29 10:00:02 [kv_cache_utils.py:2327] GPU KV cache size: {tokens:,} tokens, "
    f"Maximum concurrency for {length:,} tokens per request: {tokens / length:.2f}x")

serve(a.host, a.port)
