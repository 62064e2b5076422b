"""Values vLLM takes from the model's own config.json rather than from the flags (docs/kv-model.md, "Values vLLM takes
from the model's config"), held against published boots and against each release's rule.

The published cases (tests/data/kv/published, drafts/ included) are the evidence: each names its source and the vLLM
release it came from; every logged KV number must agree. The rule tests pin where a release starts or stops reading a
config value, so a table edit in versions.ConfigRules shows up as a failing release rather than a silent drift."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.errors import UsageError
from harness.predict.model import read_model
from harness.predict.predictor import predict
from harness.predict.serve_flags import ServeFlags, parse_serve_flags
from tests.helpers.kv_logs import PUBLISHED, held, published_cases

GIB = 1 << 30


def _write(config: dict, where: Path, quant: dict | None = None) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    (where / "config.json").write_text(json.dumps(config))
    if quant is not None:
        (where / "hf_quant_config.json").write_text(json.dumps(quant))
    return where


def _record(doc: dict, case: dict, tmp_path: Path, config: dict | None = None):
    model = _write(config or doc["config"], tmp_path / "model")
    flags = list(case["flags"])
    if doc.get("draft_config"):
        draft = _write(doc["draft_config"], tmp_path / "draft")
        flags = [a.replace("DRAFT", str(draft)) for a in flags]
    return held(["--model", str(model), *flags], case["log"], doc["vllm_version"])


@pytest.mark.parametrize("doc,case", list(published_cases("**/*.json")))
def test_every_published_boot_agrees_number_for_number(doc, case, tmp_path):
    assert doc.get("source") and doc.get("vllm_version"), "a case names its source and the release it came from"
    record = _record(doc, case, tmp_path)
    p = record.prediction
    assert p is not None, record.skipped
    assert record.agrees is not False, [c for c in record.checks if not c.agrees]
    want = doc["expect"]
    assert p.bytes_per_token == want["bytes_per_token"]
    for key in ("block_size", "state_content_bytes"):
        if key in want:
            assert getattr(p, key) == want[key], key
    facts = case.get("facts") or want.get("facts")
    if facts:
        assert sorted(c.fact for c in record.checks) == sorted(facts)


def _published(name: str) -> dict:
    return json.loads((PUBLISHED / name).read_text())


def _without_ssm_dtype(config: dict) -> dict:
    config = json.loads(json.dumps(config))
    (config.get("text_config") or config).pop("mamba_ssm_dtype")
    return config


@pytest.mark.parametrize("name", ["qwen3.6-35b-a3b-ssm-fp32.json", "qwen3.6-27b-fp8-tp2-fp8-kv.json"])
def test_ignoring_the_configs_ssm_dtype_over_predicts_the_pool_by_4_to_5_per_cent(name, tmp_path):
    # issue 21: with the model dtype for the SSM state the state page halves, the block shrinks, and the predicted
    # KV tokens land 4-5 % above what these boots logged
    doc = _published(name)
    case = {"flags": doc["flags"], "log": doc["logs"][0]}
    record = _record(doc, case, tmp_path, _without_ssm_dtype(doc["config"]))
    tokens = next(c for c in record.checks if c.fact == "kv_tokens")
    assert record.agrees is False and 0.035 < tokens.rel_error < 0.05, tokens


# --- the rules, release by release ----------------------------------------------------------------------------------

def _at(config: dict, version: str, tmp_path: Path, *flags: str, quant: dict | None = None,
        serve: ServeFlags | None = None):
    shape = read_model(_write(config, tmp_path / f"m{len(list(tmp_path.iterdir()))}", quant))
    return predict(shape, serve or parse_serve_flags(["--max-model-len", "4096", *flags]), version=version)


QWEN36 = _published("qwen3.6-27b-tp2-mtp-ssm-fp32.json")["config"]
CONV = 3 * (2 * 16 * 128 + 48 * 128)  # (kernel - 1) x conv dim, one rank
SSM = 48 * 128 * 128  # value heads x key dim x value dim


@pytest.mark.parametrize("version,ssm_bytes", [("0.16.0", 2), ("0.16.1", 4), ("0.17.0", 4), ("0.24.0", 4)])
def test_qwen35_text_configs_mamba_ssm_dtype_from_its_first_builds(version, ssm_bytes, tmp_path):
    p = _at(QWEN36, version, tmp_path)
    assert p.state_content_bytes == CONV * 2 + SSM * ssm_bytes


def test_an_explicit_ssm_cache_dtype_flag_beats_the_config(tmp_path):
    p = _at(QWEN36, "0.24.0", tmp_path, "--mamba-ssm-cache-dtype", "bfloat16")
    assert p.state_content_bytes == CONV * 2 + SSM * 2


def test_vllm_reads_mamba_ssm_dtype_from_the_text_config_only(tmp_path):
    moved = _without_ssm_dtype(QWEN36)
    moved["mamba_ssm_dtype"] = "float32"  # top level of a config with a text_config: not hf_text_config
    assert _at(moved, "0.24.0", tmp_path).state_content_bytes == CONV * 2 + SSM * 2


@pytest.mark.parametrize("version,ssm_bytes", [("0.26.0", 2), ("0.27.0", 4)])
def test_text_only_qwen35_architectures_joined_the_hook_in_0_27(version, ssm_bytes, tmp_path):
    flat = {**QWEN36["text_config"], "architectures": ["Qwen3_5ForCausalLM"]}
    assert _at(flat, version, tmp_path).state_content_bytes == CONV * 2 + SSM * ssm_bytes


NEMOTRON = json.loads((PUBLISHED.parent / "models" / "tiny-nemotronh" / "config.json").read_text())
NEMO_CONV, NEMO_SSM = 3 * 288 * 2, 8 * 32 * 16


@pytest.mark.parametrize("version,ssm_bytes", [("0.19.0", 2), ("0.20.0", 4)])
def test_the_nemotron_vl_wrapper_reads_its_text_configs_ssm_dtype_from_0_20(version, ssm_bytes, tmp_path):
    # before 0.20 no hook keys on the wrapper's architecture: the state follows the model dtype
    text = {**NEMOTRON, "mamba_ssm_cache_dtype": "float32"}
    wrapped = {"architectures": ["NemotronH_Nano_VL_V2"], "model_type": "NemotronH_Nano_VL_V2", "text_config": text,
               "torch_dtype": "bfloat16"}
    assert _at(wrapped, version, tmp_path).state_content_bytes == NEMO_CONV + NEMO_SSM * ssm_bytes


LLAMA31 = {  # meta-llama/Llama-3.1-8B's config.json (as copied in citsjtu2020/LLM-Prof sglang/Model_Config.md)
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 128000,
    "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256}
BF16_BPT = 32 * 8 * 256 * 2
MODELOPT_FP8 = {"producer": {"name": "modelopt", "version": "0.19.0"},
                "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}


@pytest.mark.parametrize("version,bpt,dtype", [("0.13.0", BF16_BPT, "bfloat16"), ("0.14.0", BF16_BPT // 2, "fp8_e4m3")])
def test_a_modelopt_checkpoints_kv_algorithm_sets_an_auto_kv_dtype_from_0_14(version, bpt, dtype, tmp_path):
    # the legacy hf_quant_config.json beside config.json is merged in, as vLLM's get_config does
    p = _at(LLAMA31, version, tmp_path, quant=MODELOPT_FP8)
    assert (p.bytes_per_token, p.kv_cache_dtype) == (bpt, dtype)


def test_an_explicit_kv_dtype_beats_the_modelopt_algorithm(tmp_path):
    assert _at(LLAMA31, "0.24.0", tmp_path, "--kv-cache-dtype", "bfloat16", quant=MODELOPT_FP8).bytes_per_token \
        == BF16_BPT


@pytest.mark.parametrize("version,bpt", [("0.19.0", BF16_BPT), ("0.20.0", 32 * 8 * 2 * (64 + 8))])
def test_an_nvfp4_kv_algorithm_is_mapped_from_0_20(version, bpt, tmp_path):
    cfg = {**LLAMA31, "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                              "kv_cache_quant_algo": "NVFP4"}}
    assert _at(cfg, version, tmp_path).bytes_per_token == bpt  # fp4 pairs + an fp8 scale per 16 values


CT_FP8_KV = {"quant_method": "compressed-tensors", "format": "float-quantized",
             "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False,
                                 "symmetric": True}}


@pytest.mark.parametrize("version,flag,bpt", [
    ("0.14.0", "auto", BF16_BPT),  # not read yet
    ("0.15.0", "auto", BF16_BPT // 2),
    ("0.15.0", "bfloat16", BF16_BPT // 2),  # the layer overrides even an explicit flag
    ("0.22.0", "bfloat16", BF16_BPT),  # from 0.22 only an auto flag takes the checkpoint's scheme
    ("0.22.0", "auto", BF16_BPT // 2),
])
def test_a_compressed_tensors_kv_cache_scheme_per_release(version, flag, bpt, tmp_path):
    cfg = {**LLAMA31, "quantization_config": CT_FP8_KV}
    assert _at(cfg, version, tmp_path, "--kv-cache-dtype", flag).bytes_per_token == bpt


DEEPSEEK = _published("deepseek-v3-mi308-tp8.json")["config"]


def test_mla_layers_take_modelopt_kv_but_not_the_compressed_tensors_scheme(tmp_path):
    latent = 61 * (512 + 64)
    assert _at({**DEEPSEEK, "quantization_config": CT_FP8_KV}, "0.22.0", tmp_path).bytes_per_token == latent * 2
    modelopt = {**DEEPSEEK, "quantization_config": {"quant_method": "modelopt", "kv_cache_quant_algo": "FP8"}}
    assert _at(modelopt, "0.22.0", tmp_path).bytes_per_token == latent


YARN_QWEN3 = {**json.loads(json.dumps(_published("qwen3-14b-dense.json")["config"])),
              "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}


@pytest.mark.parametrize("version,mml", [("0.29.0", 4 * 32768), ("0.30.0", 40960)])
def test_the_default_max_model_len_under_yarn_per_release(version, mml, tmp_path):
    # ≤0.29 multiplies original_max_position_embeddings by the factor; 0.30 takes max_position_embeddings as scaled
    shape = read_model(_write(YARN_QWEN3, tmp_path / "m"))
    assert predict(shape, parse_serve_flags([]), version=version).max_model_len == mml


def test_the_default_max_model_len_takes_the_smallest_length_key_and_llama3_is_not_scaled(tmp_path):
    assert predict(read_model(_write(LLAMA31, tmp_path / "a")), parse_serve_flags([]), version="0.24.0") \
        .max_model_len == 131072
    short = {**LLAMA31, "max_sequence_length": 8192}
    assert predict(read_model(_write(short, tmp_path / "b")), parse_serve_flags([]), version="0.24.0") \
        .max_model_len == 8192


@dataclass(frozen=True)
class _Overridden(ServeFlags):
    """ServeFlags with `--hf-overrides` (the predictor applies it; serve_flags.py does not parse it yet)."""

    hf_overrides: dict[str, Any] = field(default_factory=dict)


def test_hf_overrides_merge_into_the_text_config_from_0_11_1(tmp_path):
    over = {"text_config": {"mamba_ssm_dtype": "bfloat16"}}
    flags = _Overridden(max_model_len=4096, hf_overrides=over)
    merged = _at(QWEN36, "0.24.0", tmp_path, serve=flags)
    assert merged.state_content_bytes == CONV * 2 + SSM * 2
    assert any("--hf-overrides" in n for n in merged.notes)
    # before 0.11.1 the dict replaced text_config whole: the model loses its layers (read as the top level's)
    with pytest.raises(UsageError, match="num_hidden_layers"):
        _at(QWEN36, "0.11.0", tmp_path, serve=flags)


def test_hf_overrides_flat_keys_change_a_plain_model(tmp_path):
    flags = _Overridden(max_model_len=4096, hf_overrides={"num_key_value_heads": 4})
    assert _at(LLAMA31, "0.24.0", tmp_path, serve=flags).bytes_per_token == BF16_BPT // 2


LLAMA4 = {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "torch_dtype": "bfloat16",
          "text_config": {"model_type": "llama4_text", "num_hidden_layers": 48, "num_attention_heads": 40,
                          "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 5120,
                          "attention_chunk_size": 8192, "max_position_embeddings": 10485760}}
EAGLE = '{"method":"eagle","model":"/nonexistent","num_speculative_tokens":2}'


@pytest.mark.parametrize("version,chunked", [("0.9.2", False), ("0.10.0", True), ("0.10.1", False),
                                             ("0.13.0", False), ("0.14.0", True)])
def test_llama4_chunked_local_attention_per_release(version, chunked, tmp_path):
    # 36 of 48 layers attend in 8192-token chunks (every 4th is global, NoPE); where the hybrid KV cache manager is
    # off for them they are cached as full attention
    p = _at(LLAMA4, version, tmp_path, "--max-model-len", "131072")
    kinds = {g.kind for g in p.groups}
    assert ("sliding" in kinds) is chunked
    if chunked:
        chunk = next(g for g in p.groups if g.kind == "sliding")
        full = next(g for g in p.groups if g.kind == "full")
        assert chunk.blocks_per_request < full.blocks_per_request == 131072 // 16


def test_eagle_turns_chunked_local_attention_back_into_full(tmp_path):
    flags = ["--max-model-len", "131072", "--speculative-config", EAGLE]
    shape = read_model(_write(LLAMA4, tmp_path / "m"))
    p = predict(shape, parse_serve_flags(flags), version="0.14.0")
    assert {g.kind for g in p.groups} == {"full"}


GPT_OSS = _published("gpt-oss-120b-h100-refusal.json")["config"]


@pytest.mark.parametrize("version,sliding", [("0.9.0", False), ("0.9.1", True)])
def test_sliding_windows_next_to_full_layers_were_full_before_0_9_1(version, sliding, tmp_path):
    p = _at(GPT_OSS, version, tmp_path, "--max-model-len", "32768")
    assert ("sliding" in {g.kind for g in p.groups}) is sliding


GEMMA3_4B = _published("gemma-3-4b-mi300x-class-defaults.json")["config"]
GEMMA3_27B = _published("gemma-3-27b-rocm-hybrid-groups.json")["config"]


def test_gemma3s_text_config_takes_the_transformers_class_defaults_it_leaves_out(tmp_path):
    # gemma-3-4b-it's text_config names no heads and no head_dim; vLLM's hf_text_config is a Gemma3TextConfig, so
    # 8 heads, 4 KV heads of 256 and every 6th layer global (the published 0.23.0 boot agrees to the token)
    p = _at(GEMMA3_4B, "0.23.0", tmp_path)
    assert p.bytes_per_token == 34 * 4 * 512 * 2
    assert sum(g.layers for g in p.groups if g.kind == "full") == 5
    other = {**GEMMA3_4B, "model_type": "not_gemma3"}  # another wrapper's text config gets no such defaults
    with pytest.raises(UsageError, match="num_attention_heads"):
        _at(other, "0.23.0", tmp_path)


def test_gemma3s_own_values_beat_the_class_defaults_and_its_length_is_the_class_default(tmp_path):
    assert _at(GEMMA3_27B, "0.11.0", tmp_path).bytes_per_token == 62 * 16 * 256 * 2
    # gemma-3-27b-it names no max_position_embeddings: the class's 131072, its linear rope factor 8 not applied
    shape = read_model(_write(GEMMA3_27B, tmp_path / "d"))
    assert predict(shape, parse_serve_flags([]), version="0.11.0").max_model_len == 131072


def test_a_text_only_gemma3_checkpoint_takes_the_same_defaults(tmp_path):
    text = {**GEMMA3_4B["text_config"], "architectures": ["Gemma3ForCausalLM"], "torch_dtype": "bfloat16"}
    assert _at(text, "0.23.0", tmp_path).bytes_per_token == 34 * 4 * 512 * 2


def test_head_dim_null_falls_back_to_hidden_over_heads(tmp_path):
    cfg = {**LLAMA31, "head_dim": None}
    assert _at(cfg, "0.24.0", tmp_path).bytes_per_token == BF16_BPT


def test_falcons_multi_query_flag_means_one_kv_head(tmp_path):
    falcon = {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 4544, "n_head": 71,
              "n_layer": 32, "multi_query": True, "new_decoder_architecture": False, "torch_dtype": "bfloat16",
              "max_position_embeddings": 2048}
    assert _at(falcon, "0.24.0", tmp_path, "--max-model-len", "2048").bytes_per_token == 32 * 1 * 64 * 2 * 2


FALCON_H1 = {  # tiiuae/Falcon-H1-7B-Instruct's KV-relevant keys
    "architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "torch_dtype": "bfloat16",
    "num_hidden_layers": 44, "hidden_size": 3072, "num_attention_heads": 12, "num_key_value_heads": 2,
    "head_dim": 128, "mamba_d_ssm": 3072, "mamba_n_heads": 24, "mamba_d_head": 128, "mamba_n_groups": 1,
    "mamba_d_state": 256, "mamba_d_conv": 4, "max_position_embeddings": 262144}


def test_falcon_h1_runs_attention_and_a_mamba2_mixer_in_every_layer(tmp_path):
    p = _at(FALCON_H1, "0.24.0", tmp_path)
    assert p.bytes_per_token == 44 * 2 * 256 * 2
    state = [g for g in p.groups if g.kind == "state"]
    assert sum(g.layers for g in state) == 44
    conv = 3 * (3072 + 2 * 1 * 256) * 2
    assert p.state_content_bytes == conv + 24 * 128 * 256 * 2


def test_a_cell_reads_the_legacy_modelopt_file_as_kv_does(tmp_path):
    """A cell's prediction reads the model through its runtime (the container's files), not read_model: it must merge
    hf_quant_config.json too, or a cell and `kv` disagree about one checkpoint's KV dtype."""
    from harness.predict.cell import config_of
    from harness.predict.model import read_model

    model = _write(LLAMA31, tmp_path / "model", quant=MODELOPT_FP8)
    through_runtime = config_of(str(model), lambda p: Path(p).read_bytes() if Path(p).is_file() else None)
    assert through_runtime.config_values == read_model(model).config_values
    assert through_runtime.config_values.modelopt_kv is not None
