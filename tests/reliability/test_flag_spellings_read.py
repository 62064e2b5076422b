"""A length spelt any way vLLM reads it is read alike by the harness (issue 31), end to end: `boot-harness run`,
`analyze` and `frontier` as a user runs them, against a server process that reads its argv the way vLLM's
FlexibleArgumentParser does (underscores to dashes, unique prefixes, `8k` = 8000) and does vLLM's KV admission
arithmetic. A spelt matrix must give what the canonical one gives: the same KV need on each cell's line, the same fit,
the same frontier. Before the fix, `--max_model_len` gave "no max_model_len axis" and "KV needed —"."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import pytest

from tests.builders import write_matrix
from tests.reliability.conftest import cli, only_run

SERVER = textwrap.dedent('''
    """Reads its flags as vLLM does; 1 GiB of KV at 128 KiB a token in 16-token blocks: 8,192 tokens, one block held
    back; boots a request that fits, else refuses with vLLM's estimate; serves /health and one completion."""
    import argparse, json, re, sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    def human(text):
        m = re.fullmatch(r"(\\d+)([kmgKMG]?)", text)
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
    out = lambda s: (sys.stdout.write(s + "\\n"), sys.stdout.flush())
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
''')

CANONICAL = ({"length": {"label": "mml", "flag": "--max-model-len", "values": [8000, 16000]}},
             ["--kv-cache-memory-bytes", str(1 << 30)])


def _named(flag: str) -> dict:
    return {"length": {"label": "mml", "values": {v: {"args": [f"{flag}={v}"]} for v in ("8k", "16k")}}}


def readings(root: Path, axes: dict, args: list[str]) -> dict[str, object]:
    """What run, analyze and frontier say of the matrix, cell ids `mml8k` written `mml8000`, run ids left out."""
    root.mkdir(parents=True, exist_ok=True)
    server = root / "server.py"
    server.write_text(SERVER)
    matrix = write_matrix(root / "m.yaml", {"name": "spell", "command": [sys.executable, str(server)], "model": "m",
                                            "timeout_s": 20, "linger_s": 0, "args": args, "axes": axes})

    def run(*argv: object) -> str:
        done = cli(*argv, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return re.sub(r"mml(8|16)k\b", lambda m: f"mml{m.group(1)}000", done.stdout)

    out: dict[str, object] = {}
    ran = run("run", "--matrix", matrix, "--results-dir", root / "r")
    out["KV lines"] = re.findall(r"KV needed \S+ GiB, KV pool \S+ GiB|KV needed —", ran)
    analysis = json.loads(run("analyze", only_run(root / "r"), "--json"))
    out["analyze"] = {k: v for k, v in analysis.items() if k != "run_id"}
    found = json.loads(run("frontier", "--matrix", matrix, "--axis", "length", "--results-dir", root / "f", "--json"))
    out["frontier"] = [{k: found["groups"][0][k] for k in ("frontier", "refused_at", "boots")}]
    out["probes"] = [p["length"] for p in found["groups"][0]["probes"]]
    return out


@pytest.fixture(scope="module")
def canonical(tmp_path_factory) -> dict[str, object]:
    return readings(tmp_path_factory.mktemp("canonical"), *CANONICAL)


@pytest.mark.parametrize("axes,args", [
    pytest.param({"length": {**CANONICAL[0]["length"], "flag": "--max_model_len"}}, ["--kv_cache_memory_bytes=1G"],
                 id="axis---max_model_len"),
    pytest.param(_named("--max-model-len"), ["--kv-cache-memory=1G"], id="args---max-model-len=8k"),
])
def test_a_spelt_length_reads_as_the_canonical_one(canonical, tmp_path, axes, args):
    assert canonical["KV lines"] == ["KV needed ≈0.98 GiB, KV pool 1.00 GiB", "KV needed 1.95 GiB, KV pool 1.00 GiB"]
    assert canonical["frontier"] == [{"frontier": 8176, "refused_at": 8192, "boots": 3}]
    spelt = readings(tmp_path / "spelt", axes, args)
    for what in canonical:
        assert spelt[what] == canonical[what], what
