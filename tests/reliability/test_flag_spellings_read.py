"""A length spelt any way vLLM reads it is read alike by the harness (issue 31), end to end: `boot-harness run`,
`analyze` and `frontier` as a user runs them, against a server process that reads its argv the way vLLM's
FlexibleArgumentParser does (underscores to dashes, unique prefixes, `8k` = 8000) and does vLLM's KV admission
arithmetic. A spelt matrix must give what the canonical one gives: the same KV need on each cell's line, the same fit,
the same frontier. Before the fix, `--max_model_len` gave "no max_model_len axis" and "KV needed —"."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests.builders import FAKES, write_matrix
from tests.helpers.reliability import cli, only_run

CANONICAL = ({"length": {"label": "mml", "flag": "--max-model-len", "values": [8000, 16000]}},
             ["--kv-cache-memory-bytes", str(1 << 30)])


def _named(flag: str) -> dict:
    return {"length": {"label": "mml", "values": {v: {"args": [f"{flag}={v}"]} for v in ("8k", "16k")}}}


def readings(root: Path, axes: dict, args: list[str]) -> dict[str, object]:
    """What run, analyze and frontier say of the matrix, cell ids `mml8k` written `mml8000`, run ids left out."""
    root.mkdir(parents=True, exist_ok=True)
    server = FAKES / "kv_flags_server.py"
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
