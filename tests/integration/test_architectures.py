"""The KV predictor against real vLLM on the CPU, on the architectures whose KV is not layers x heads x tokens:
MLA (DeepSeek-V2), a sliding window on every layer (Mistral), sliding and full layers in two groups (Gemma 2), and
hybrids whose per-sequence state shares the pool (Qwen3-Next's GDN, NemotronH's mamba2).
examples/cpu-architectures.yaml boots them once; every number vLLM logged must be the predicted one, and `plan`,
which boots nothing, must have said each outcome before."""

from __future__ import annotations

import json

import pytest

from tests.helpers.boots import harness_cli, run_matrix
from tests.helpers.env import LIGHT_BOOT, ROOT, require

pytestmark = pytest.mark.vllm
MATRIX = ROOT / "examples" / "cpu-architectures.yaml"


@pytest.fixture(scope="module")
def arch_run(vllm_cpu, tmp_path_factory):
    require("the tiny architecture models (ARCH_MODELS)", "ARCH_MODELS" in vllm_cpu,
            "run `. \"$(bash scripts/setup-cpu-example.sh | tail -1)\"` first")
    plan = harness_cli("plan", "--matrix", str(MATRIX), "--platform", "cpu-local", "--json", env=vllm_cpu)
    # light boots: the numbers vLLM logs, not its process tree, are under test
    proc, _, cells = run_matrix(MATRIX, tmp_path_factory.mktemp("architectures"), {**vllm_cpu, **LIGHT_BOOT})
    return plan, proc, cells


def test_each_architecture_boots_or_refuses_as_expected(arch_run):
    _, proc, cells = arch_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(cells) == ["arch_gemma2", "arch_mistral_swa", "arch_mla", "arch_nemotronh", "arch_qwen3next"]


@pytest.mark.parametrize("cell_id,bytes_per_token", [
    ("arch_mla", 2 * 576 * 2),           # one latent of kv_lora_rank 512 + rope 64 per layer, bf16
    ("arch_mistral_swa", 2 * 2 * 2 * 32 * 2),
    ("arch_gemma2", 4 * 2 * 2 * 32 * 2),
    ("arch_qwen3next", 1 * 2 * 2 * 64 * 2),  # the one attention layer; the 3 GDN layers are state, not per token
    ("arch_nemotronh", 1 * 2 * 2 * 32 * 2),
])
def test_the_boot_logged_exactly_the_predicted_numbers(arch_run, cell_id, bytes_per_token):
    cell = arch_run[2][cell_id]
    record = cell["prediction"]
    assert record["agrees"] is True, record
    facts = {c["fact"]: c for c in record["checks"]}
    assert record["prediction"]["bytes_per_token"] == bytes_per_token
    if cell["outcome"] == "booted":
        assert facts["kv_tokens"]["predicted"] == cell["kv"]["kv_tokens"]
        assert round(facts["max_concurrency"]["predicted"], 2) == cell["kv"]["max_concurrency"]
    else:
        assert facts["estimated_max_model_len"]["predicted"] == cell["refusal"]["estimated_max_model_len"]


def test_the_sliding_window_and_the_layer_groups_are_what_vllm_allocated(arch_run):
    cells = arch_run[2]
    swa = cells["arch_mistral_swa"]["prediction"]["prediction"]
    # min(1024 - 1 + 2048 in flight, 4096) = 3071 tokens → 24 + 1 blocks per request, not cdiv(4096, 128) = 32
    assert swa["blocks_per_request"] == 25 and cells["arch_mistral_swa"]["kv"]["kv_tokens"] == 20971
    gemma = cells["arch_gemma2"]["prediction"]["prediction"]
    assert sorted((g["kind"], g["blocks_per_request"]) for g in gemma["groups"]) == [("full", 32), ("sliding", 21)]


def test_plan_said_every_outcome_before_anything_booted(arch_run):
    plan, _, cells = arch_run
    assert plan.returncode == 0, plan.stderr
    planned = {c["cell_id"]: c["predicted_outcome"] for c in json.loads(plan.stdout)["cells"]}
    assert planned == {cid: c["outcome"] for cid, c in cells.items()}


def test_the_hybrids_state_is_the_fixed_term_vllm_charged(arch_run):
    cells = arch_run[2]
    gdn = cells["arch_qwen3next"]
    facts = {c["fact"]: c for c in gdn["prediction"]["checks"]}
    padding = facts["mamba_padding_pct"]
    assert padding["agrees"] and gdn["kv"]["mamba_padding_pct"] == padding["logged"]
    mamba2 = cells["arch_nemotronh"]
    p = mamba2["prediction"]["prediction"]
    # 2 mamba2 layers in 2 groups, 3 align-mode blocks each (mamba2 keeps a checkpoint block), 32 KiB pages
    assert p["state_bytes_per_seq"] == 2 * 3 * 32768 and p["mamba_cache_mode"] == "align"
    assert mamba2["refusal"]["estimated_max_model_len"] == 3200
