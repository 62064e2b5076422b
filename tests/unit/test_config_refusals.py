"""Issue 40, items 4 and 6: each cause states by how much and what would boot; the refusals vLLM decides from the
configuration alone are predicted by `plan` and `kv` with the catalogue's ids and hints, before any boot."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.gpu.capability import capability_of
from harness.predict.model import read_model
from harness.predict.predictor import predict
from harness.predict.refusals import Machine
from harness.predict.serve_flags import parse_serve_flags
from harness.verdict.causes.match import match
from tests.builders import FAKE_VLLM, write_matrix
from tests.helpers.env import ROOT

TINY = ROOT / "tests" / "data" / "kv" / "models" / "tiny-llama"  # 4 attention heads, 32768 positions


# --- item 4: by how much, and what would boot ------------------------------------------------------------------------

@pytest.mark.parametrize("line,cause,numbers,hint", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 23.54 GiB "
     "of which 1.02 GiB is free.", "cuda_oom_unknown", {"short_gib": 0.94}, "(0.94 GiB short)"),
    ("ValueError: Free memory on device (10.5/79.1 GiB) on startup is less than desired GPU memory utilization (0.9, "
     "71.2 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
     "gpu_mem_util_exceeds_free", {"short_gib": 60.7}, "60.7 GiB below the 71.2 GiB asked"),
    ("ValueError: max_num_batched_tokens (2048) is smaller than max_model_len (4096). This effectively limits the "
     "maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences.",
     "config_invalid_batched_tokens", {"least_batched": 4096}, "at least 4096 (was 2048)"),
    ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has "
     "compute capability 7.5. You can use float16 instead by explicitly setting the`dtype` flag in CLI, for example: "
     "--dtype=half.", "dtype_unsupported_gpu", {"suggested_dtype": "half", "capability": 7.5}, "use --dtype half"),
    ("ValueError: Total number of attention heads (40) must be divisible by tensor parallel size (16).",
     "tp_not_divisible", {"tp_sizes": "1, 2, 4, 8"}, "use 1, 2, 4, 8"),
    ("ValueError: Number of experts (60) must be divisible by expert parallel size (8).", "ep_not_divisible",
     {"ep_sizes": "1, 2, 4"}, "use 1, 2, 4"),
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: can't allocate memory: you tried to "
     "allocate 4294967296 bytes. Error code 12 (Cannot allocate memory)", "host_oom", {"needed_gib": 4.0},
     "allocating 4.00 GiB"),
], ids=["oom-short", "free-short", "least-batched", "dtype-half", "tp-sizes", "ep-sizes", "host-gib"])
def test_a_cause_states_by_how_much_and_what_would_boot(line, cause, numbers, hint):
    m = match(line)
    assert m is not None and m.cause.id == cause
    assert numbers.items() <= m.numbers.items(), m.numbers
    assert hint in m.cause.hint(m.numbers)


def test_capabilities_compare_as_numbers_not_text():
    """"10.0" sorts below "8.0" as text: a Blackwell GPU must not be told to use half."""
    m = match("ValueError: FP8 is only supported on GPUs with compute capability of at least 8.9. Your NVIDIA B200 GPU "
              "has compute capability 10.0.")
    assert m is not None and "suggested_dtype" not in m.numbers
    m = match("ValueError: FP8 is only supported on GPUs with compute capability of at least 8.9. Your NVIDIA A100 GPU "
              "has compute capability 8.0.")
    assert m is not None and m.numbers["suggested_dtype"] == "half"


def test_no_short_is_stated_where_the_allocation_was_not_above_the_free():
    m = match("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
              "23.54 GiB of which 1.02 GiB is free.")  # fragmentation: less asked than free
    assert m is not None and "short_gib" not in m.numbers and "short" not in m.cause.hint(m.numbers)


@pytest.mark.parametrize("name,cap", [("Tesla T4", (7, 5)), ("NVIDIA A100-SXM4-80GB", (8, 0)), ("NVIDIA A10G", (8, 6)),
                                      ("NVIDIA H100 80GB HBM3", (9, 0)), ("NVIDIA L4", (8, 9)),
                                      ("Tesla V100-SXM2-16GB", (7, 0)), ("NVIDIA GeForce RTX 4090", (8, 9)),
                                      ("NVIDIA B200", (10, 0)), ("a gpu of its own", None)])
def test_a_gpus_capability_from_its_name(name, cap):
    assert capability_of(name) == cap


# --- item 6: before any GPU minute ------------------------------------------------------------------------------------

@pytest.mark.parametrize("flags,machine,refused", [
    (["-tp", "3"], None, "tp_not_divisible"),
    (["-tp", "4"], None, None),
    (["-tp", "2"], Machine(gpus=1), "not_enough_gpus"),
    (["-tp", "2", "-dp", "2"], Machine(gpus=2), "not_enough_gpus"),     # each replica its own tensor-parallel GPUs
    (["-tp", "2", "-dp", "2"], Machine(gpus=4), None),
    (["--dtype", "bfloat16"], Machine(gpu_name="Tesla T4"), "dtype_unsupported_gpu"),
    (["--dtype", "bfloat16"], Machine(gpu_name="NVIDIA A100-SXM4-80GB"), None),
    (["--dtype", "auto"], Machine(gpu_name="Tesla T4"), None),           # auto falls back to float16 there
    (["--max-model-len", "8192", "--max-num-batched-tokens", "2048", "--no-enable-chunked-prefill"], None,
     "config_invalid_batched_tokens"),
    (["--max-model-len", "8192", "--max-num-batched-tokens", "2048"], None, None),  # chunked prefill on (V1)
    (["--max-num-batched-tokens", "2048", "--no-enable-chunked-prefill"], None,
     "config_invalid_batched_tokens"),                                   # against the model's own 32768
    (["--max-model-len", "40000", "-tp", "3"], None, "max_len_exceeds_model"),  # the length is checked first
])
def test_kv_predicts_the_config_refusals(flags, machine, refused):
    p = predict(read_model(str(TINY)), parse_serve_flags(flags), machine=machine)
    assert p.refused_by == refused, p.notes
    if refused and refused != "max_len_exceeds_model":
        assert p.refused_why and p.refused_hint and p.refused_numbers


@pytest.mark.parametrize("version,refused", [("0.11.0", None), ("0.12.0", "config_invalid_batched_tokens"),
                                             ("0.32.0", "config_invalid_batched_tokens")])
def test_chunked_prefill_off_is_kept_from_0_12(version, refused):
    """0.8-0.11 turn chunked prefill back on for a generating model (_set_default_args_v1), 0.12 keeps it off."""
    flags = ["--max-model-len", "8192", "--max-num-batched-tokens", "2048", "--no-enable-chunked-prefill"]
    p = predict(read_model(str(TINY)), parse_serve_flags(flags, version), version=version)
    assert p.refused_by == refused
    assert (refused is None) == any("turns chunked prefill back on" in n for n in p.notes)


def test_every_refusal_met_is_said_the_first_decides():
    p = predict(read_model(str(TINY)), parse_serve_flags(["-tp", "3", "--dtype", "bfloat16"]),
                machine=Machine(gpus=2, gpu_name="Tesla T4"))
    assert p.refused_by == "tp_not_divisible" and p.refused_hint.endswith("use 1, 2, 4")
    said = [n for n in p.notes if n.startswith("refused (")]
    assert [n.split(")")[0] for n in said] == ["refused (not_enough_gpus", "refused (dtype_unsupported_gpu"]


def test_kv_says_it_and_fails(capsys):
    code = main(["kv", str(TINY), "--gpu", "Tesla T4", "--", "--dtype", "bfloat16", "--max-model-len", "4096"])
    out = capsys.readouterr().out
    assert code == 1
    assert "does NOT boot (dtype_unsupported_gpu)" in out and "hint: Tesla T4 (compute capability 7.5) has no " \
        "bfloat16: use --dtype half" in " ".join(out.split())


def test_plan_knows_which_cells_cannot_boot(tmp_path, capsys):
    matrix = write_matrix(tmp_path / "m.yaml", {
        "name": "tp", "runtime": "process", "command": [sys.executable, str(FAKE_VLLM)], "model": str(TINY),
        "gpus": 2, "args": ["--kv-cache-memory-bytes", "3145728", "--max-model-len", "2048"],
        "axes": {"tp": {"flag": "--tensor-parallel-size", "values": [1, 3, 4]},
                 "dtype": {"flag": "--dtype", "values": ["float16", "bfloat16"]}},
        "expect": [{"where": {"tp": 3}, "outcome": "refused", "reason": "tp_not_divisible"},
                   {"where": {"tp": 4}, "outcome": "refused", "reason": "not_enough_gpus"}]})
    code = main(["plan", "--matrix", str(matrix), "--gpu", "Tesla T4", "--json"])
    cells = {c["cell_id"]: c for c in json.loads(capsys.readouterr().out)["cells"]}
    got = {k: (c["predicted_outcome"], c["predicted_reason"]) for k, c in cells.items()}
    assert code == 0, got
    assert sorted(got.values()) == sorted([
        ("booted", None), ("refused", "dtype_unsupported_gpu"),            # tp 1
        ("refused", "tp_not_divisible"), ("refused", "tp_not_divisible"),  # tp 3, either dtype
        ("refused", "not_enough_gpus"), ("refused", "not_enough_gpus")]), got
    hinted = [c["why"] for c in cells.values() if c["predicted_reason"] == "tp_not_divisible"]
    assert all("use 1, 2, 4" in w for w in hinted), hinted


def test_what_plan_predicts_is_named_in_the_catalogue():
    from harness.predict.refusals import PREDICTED
    from harness.verdict.causes import BY_ID

    assert set(PREDICTED) <= BY_ID.keys()


@pytest.mark.parametrize("args,outcome,reason,agrees", [
    (["-tp", "3"], "refused", "tp_not_divisible", True),
    (["-tp", "3"], "booted", "ready", False),            # predicted refused, it booted: the rule is wrong here
    (["-tp", "4"], "refused", "tp_not_divisible", False),  # refused, not predicted
    (["-tp", "3"], "error", "port_in_use", None),          # the machine failed: says nothing of the configuration
])
def test_a_boots_record_holds_the_predicted_config_refusal_against_its_log(args, outcome, reason, agrees):
    from harness.logfacts import KvFacts
    from harness.predict.cell import predict_cell

    record = predict_cell(["--model", str(TINY), "--max-model-len", "2048", *args],
                          lambda path: Path(path).read_bytes() if Path(path).is_file() else None, KvFacts(), None,
                          outcome, reason, "0.32.0")
    found = [c for c in record.checks if c.fact == "config_refusal"]
    assert [c.agrees for c in found] == ([] if agrees is None else [agrees]), record.checks


def test_plan_refuses_a_cell_whose_kv_cache_it_cannot_predict(tmp_path, capsys):
    """-pp 2 is not KV-predicted, but tensor × pipeline above the GPUs is still known before any boot."""
    matrix = write_matrix(tmp_path / "m.yaml", {
        "name": "pp", "runtime": "process", "command": [sys.executable, str(FAKE_VLLM)], "model": str(TINY),
        "gpus": 2, "args": ["--max-model-len", "2048", "-pp", "2"],
        "axes": {"tp": {"flag": "-tp", "values": [1, 2, 3]}},
        "expect": [{"where": {"tp": 2}, "outcome": "refused", "reason": "not_enough_gpus"}]})
    code = main(["plan", "--matrix", str(matrix), "--json"])
    cells = {c["cell_id"]: c for c in json.loads(capsys.readouterr().out)["cells"]}
    got = {k: (c["predicted_outcome"], c["predicted_reason"]) for k, c in cells.items()}
    assert code == 0 and sorted(got.values(), key=str) == sorted(
        [(None, None), ("refused", "not_enough_gpus"), ("refused", "tp_not_divisible")], key=str), got
    assert any("world size 4" in c["why"] and "not predicted" in c["why"] for c in cells.values())
