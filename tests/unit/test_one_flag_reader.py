"""One reader of vLLM's flags (issue 31): every spelling `vllm serve` reads alike (`--max_model_len`, `--max-model=8k`,
a unique prefix) is read alike by the harness — by serve_flags.flag_value, which analysis, report, frontier and plan
read a cell's argv through. The oracle is not the harness: vllm_reads is stdlib argparse set up the way vLLM's
FlexibleArgumentParser is (underscores to dashes, unique prefixes, `k` = 1000 and `K` = 1024)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import UsageError
from harness.matrix.cells import Cell
from harness.predict.serve_flags import flag_dest, flag_value, option_name, parse_serve_flags, spelling_of
from harness.runtime.fake import FakeRuntime, Script
from tests.builders import write_matrix
from tests.helpers.env import ROOT

MODEL = ROOT / "tests" / "data" / "kv" / "models" / "tiny-llama"
GIB = 1 << 30


def _human(text: str) -> int:
    """vLLM's human_readable_int, written out again: k/m/g powers of 1000, K/M/G powers of 1024."""
    m = re.fullmatch(r"(\d+)([kmgKMG]?)", text)
    if not m:
        raise argparse.ArgumentTypeError(text)
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
    return int(m.group(1)) * scale


def vllm_reads(argv: list[str]) -> argparse.Namespace:
    """What a vLLM-like parser reads: `--a_b` becomes `--a-b` (key only), then argparse with abbreviations on and the
    options that share the prefixes the harness must get right (`--max-model` is unique, `--max` is not)."""
    rewritten = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        rewritten.append("--" + key[2:].replace("_", "-") + eq + value if arg.startswith("--") else arg)
    p = argparse.ArgumentParser(allow_abbrev=True, exit_on_error=False)
    p.add_argument("--model")
    p.add_argument("--max-model-len", type=_human)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-batched-tokens", type=_human)
    p.add_argument("--block-size", type=int)
    p.add_argument("--kv-cache-memory-bytes", type=_human)
    p.add_argument("--dtype")
    p.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    return p.parse_known_args(rewritten)[0]


# ---------------------------------------------------------------- the reader, spelling by spelling

SPELLINGS = [
    pytest.param(["--max-model-len", "8000"], "max_model_len", id="dashes"),
    pytest.param(["--max-model-len=8k"], "max_model_len", id="equals-8k"),
    pytest.param(["--max_model_len", "8000"], "max_model_len", id="underscores"),
    pytest.param(["--max_model_len=8k"], "max_model_len", id="underscores-equals-8k"),
    pytest.param(["--max-model", "8000"], "max_model_len", id="unique-prefix"),
    pytest.param(["--max-model-len", "8K"], "max_model_len", id="binary-8K-is-8192"),
    pytest.param(["--max-model-len", "8000", "--max_model_len=9000"], "max_model_len", id="last-spelling-wins"),
    pytest.param(["--block_size=32"], "block_size", id="block-underscores"),
    pytest.param(["--block-s", "32"], "block_size", id="block-prefix"),
    pytest.param(["--kv_cache_memory_bytes=1G"], "kv_cache_memory_bytes", id="kv-bytes-1G-binary"),
    pytest.param(["--kv-cache-memory-bytes", "1g"], "kv_cache_memory_bytes", id="kv-bytes-1g-decimal"),
    pytest.param(["--dtype", "float32", "--model", "m"], "max_model_len", id="not-given"),
]


@pytest.mark.parametrize("argv,dest", SPELLINGS)
def test_the_reader_reads_what_a_vllm_parser_reads(argv, dest):
    assert flag_value(argv, dest) == getattr(vllm_reads(argv), dest)


EAGER = [
    pytest.param(["--enforce-eager"], True, id="dashes"),
    pytest.param(["--enforce_eager"], True, id="underscores"),
    pytest.param(["--enf"], True, id="unique-prefix"),
    pytest.param(["--enforce-eager", "--no-enforce-eager"], False, id="no-form-last-wins"),
    pytest.param(["--no-enforce_eager", "--enforce-eager"], True, id="switch-last-wins"),
    pytest.param(["--model", "m"], None, id="not-given"),
]


@pytest.mark.parametrize("argv,expected", EAGER)
def test_eager_mode_is_read_as_vllm_reads_it_and_skips_the_compile_and_graph_phases(argv, expected):
    from harness.logfacts import LogFacts
    from harness.logfacts.timeline import Milestone
    from harness.predict.serve_flags import eager

    assert flag_value(argv, "enforce_eager") == vllm_reads(argv).enforce_eager == expected
    skipped = LogFacts().skipped(eager(argv))
    assert (Milestone.compiled in skipped) is bool(expected), skipped


@pytest.mark.parametrize("argv,dest", SPELLINGS)
def test_the_reader_and_the_predictions_parser_agree(argv, dest):
    assert flag_value(argv, dest) == getattr(parse_serve_flags(argv), dest)


RECORDED = [
    # what the prediction refuses is still read from a record: the server got it, the record says how it ended
    pytest.param(["-pp", "2", "--max-model-len", "8000"], 8000, id="unmodelled-flag-beside"),
    pytest.param(["--max-modle-len", "9", "--max-model-len", "8000"], 8000, id="misspelt-flag-beside"),
    pytest.param(["--max", "9", "--max-model-len", "8000"], 8000, id="ambiguous-prefix-beside"),
    pytest.param(["--max-model-len", "auto"], -1, id="auto-is-minus-one"),
    pytest.param(["--max-model-len", "8000", "--max-model-len", "lots"], None, id="last-value-unreadable"),
    pytest.param(["--max-model-len"], None, id="no-value"),
    # the whole command line is recorded: the runtime's own words come before vLLM's
    pytest.param(["podman", "run", "-e", "A=1", "--name", "c", "--", "img", "vllm", "serve", "--max_model_len=8k"],
                 8000, id="container-command-line"),
]


@pytest.mark.parametrize("argv,expected", RECORDED)
def test_a_recorded_argv_is_read_without_refusing_it(argv, expected):
    assert flag_value(argv, "max_model_len") == expected


@pytest.mark.parametrize("version,expected", [("0.8.3", None), ("0.8.4", 8000), ("not-a-version", 8000)],
                         ids=["0.8.3-reads-no-suffix", "0.8.4-reads-8k", "unknown-version-as-default"])
def test_the_cells_release_converts_the_value(version, expected):
    assert flag_value(["--max-model-len=8k"], "max_model_len", version) == expected


@pytest.mark.parametrize("flag,dest", [
    ("--max-model-len", "max_model_len"), ("--max_model_len", "max_model_len"), ("--max-model", "max_model_len"),
    ("--max-model-len=8k", "max_model_len"), ("--max", None), ("--max-num-seqs", "max_num_seqs"),
    ("--fork-flag", None), ("8000", None)], ids=lambda v: str(v))
def test_which_dest_a_flag_spelling_is(flag, dest):
    assert flag_dest(flag) == dest


def test_the_spelling_a_probe_sets_is_the_one_vllm_reads_last():
    argv = ["--max-model-len", "8000", "--dtype", "auto", "--max_model_len=9000"]
    assert spelling_of(argv, "max_model_len") == "--max_model_len"
    assert spelling_of(["--dtype", "auto"], "max_model_len") is None
    assert option_name("max_model_len") == "--max-model-len" and option_name("block_size") == "--block-size"


def test_the_prediction_still_refuses_what_the_reader_passes_over():
    with pytest.raises(UsageError, match="ambiguous"):
        parse_serve_flags(["--max", "9", "--max-model-len", "8000"])


def test_each_block_size_is_defined_once():
    found = {}
    for path in (ROOT / "harness").rglob("*.py"):
        for name in re.findall(r"^((?:GPU|CPU|CPU_MLA)_BLOCK(?:, *(?:GPU|CPU|CPU_MLA)_BLOCK)*) *=", path.read_text(),
                               re.M):
            for n in re.split(r", *", name):
                found.setdefault(n, []).append(str(path.relative_to(ROOT)))
    assert found == {n: ["harness/predict/predictor.py"] for n in ("GPU_BLOCK", "CPU_BLOCK", "CPU_MLA_BLOCK")}


# ---------------------------------------------------------------- booted, then read by every command


class ArgvServer(FakeRuntime):
    """A fake vLLM that reads its argv with vllm_reads: it boots a request of up to 12,000 tokens in its 1 GiB pool
    (16,000 tokens) and refuses a longer one with vLLM's estimate 12,000, whatever spelling carried the length."""

    def script_for(self, cell: Cell) -> Script:
        self.started.append(cell.id)
        length = vllm_reads(cell.server_args).max_model_len
        if length <= 12000:
            return Script.booted(kv_tokens=16000)
        return Script.refused_kv(max_len=length, needed_gib=round(length / 16000, 2), available_gib=1.0,
                                 estimate=12000)


BASELINE = {"length": {"label": "mml", "flag": "--max-model-len", "values": [8000, 16000]}}
CANONICAL_ARGS = ["--dtype", "float32", "--kv-cache-memory-bytes", str(GIB), "--block-size", "16"]
SPELT_ARGS = ["--dtype", "float32", "--kv_cache_memory_bytes=1G", "--block_size=16"]


def _named(flag: str) -> dict:
    return {"length": {"label": "mml", "values": {v: {"args": [f"{flag}={v}"]} for v in ("8k", "16k")}}}


VARIANTS = [
    pytest.param({"length": {**BASELINE["length"], "flag": "--max_model_len"}}, [], id="axis-flag---max_model_len"),
    pytest.param({"length": {**BASELINE["length"], "flag": "--max-model"}}, [], id="axis-flag---max-model"),
    pytest.param(_named("--max-model-len"), ["--axis", "length"], id="args---max-model-len=8k"),
    pytest.param(_named("--max_model_len"), ["--axis", "length"], id="args---max_model_len=8k"),
]


def _readings(tmp_path: Path, axes: dict, args: list[str], frontier_args: list[str], capsys) -> dict[str, object]:
    """What run's summary, analyze, report, plan and frontier say of a matrix booted on ArgvServer, with what differs
    only by spelling taken out (the cell ids `mml8k`/`mml8000`, run ids and paths)."""
    matrix = write_matrix(tmp_path / "m.yaml", {"name": "spell", "command": ["fake-vllm"], "model": str(MODEL),
                                                "timeout_s": 10, "linger_s": 0, "args": args, "axes": axes})
    runtime = ArgvServer()

    def cmd(*argv: str) -> str:
        capsys.readouterr()
        assert main([str(a) for a in argv], runtimes=lambda loaded: runtime) == 0, capsys.readouterr()
        return re.sub(r"mml(8|16)k\b", lambda m: f"mml{m.group(1)}000", capsys.readouterr().out)

    out: dict[str, object] = {}
    run_out = cmd("run", "--matrix", matrix, "--results-dir", tmp_path / "r")
    out["run summary"] = re.findall(r"KV needed \S+ GiB, KV pool \S+ GiB|KV needed —", run_out)
    run_dir = next((tmp_path / "r").iterdir())
    analysis = json.loads(cmd("analyze", run_dir, "--json"))
    out["analyze"] = {k: v for k, v in analysis.items() if k != "run_id"}
    out["report"] = [cell.strip() for line in cmd("report", run_dir).splitlines()[1:]
                     for cell in line.split("│")[2:3] if cell.strip() and not cell.strip().startswith("⏱")]
    plan = json.loads(cmd("plan", "--matrix", matrix, "--json"))
    out["plan"] = [(c["cell_id"], c["why"], c["prediction"]["max_model_len"]) for c in plan["cells"]]
    found = json.loads(cmd("frontier", "--matrix", matrix, "--results-dir", tmp_path / "f", "--json", *frontier_args))
    out["frontier"] = [{k: v for k, v in g.items() if k != "template"} for g in found["groups"]]
    out["frontier boots"] = runtime.started[2:]  # the probes (ArgvServer booted or refused each by the length it read)
    return out


@pytest.mark.parametrize("axes,frontier_args", VARIANTS)
def test_every_command_reads_a_spelt_length_as_the_canonical_one(tmp_path, axes, frontier_args, capsys, monkeypatch):
    """Before issue 31, `--max_model_len` gave "no max_model_len axis" from analyze and "KV needed —" on each cell;
    `--kv_cache_memory_bytes=1G` left the pool unknown."""
    monkeypatch.setenv("COLUMNS", "400")  # the grids' cells compared, not how ids of other lengths fold them
    canonical = _readings(tmp_path / "canonical", BASELINE, CANONICAL_ARGS, [], capsys)
    spelt = _readings(tmp_path / "spelt", axes, SPELT_ARGS, frontier_args, capsys)
    assert canonical["run summary"] == ["KV needed ≈0.50 GiB, KV pool 1.00 GiB",
                                        "KV needed 1.00 GiB, KV pool 1.00 GiB"]
    assert canonical["analyze"]["length_axis"] == "length"
    assert canonical["frontier"][0]["frontier"] == 12000
    assert canonical["frontier boots"] == ["mml16000", "mml12000", "mml12016"]
    for what in canonical:
        assert spelt[what] == canonical[what], what


@pytest.mark.parametrize("spelt", [["--max_model_len=8k", "--kv_cache_memory_bytes=1G", "--block_size=16"],
                                   ["--max-model", "8000", "--kv-cache-memory-bytes=1G", "--block-s", "16"]],
                         ids=["underscores-equals", "prefixes"])
def test_kv_reads_a_spelt_length_as_the_canonical_one(spelt, capsys):
    def kv(flags: list[str]) -> dict:
        assert main(["kv", str(MODEL), "--json", "--", "--dtype", "float32", *flags]) == 0
        return json.loads(capsys.readouterr().out)

    canonical = kv(["--max-model-len", "8000", "--kv-cache-memory-bytes", str(GIB), "--block-size", "16"])
    assert canonical["max_model_len"] == 8000 and canonical["available_bytes"] == GIB
    assert kv(spelt) == canonical
