"""`frontier` on real vLLM for the CPU (about 3 boots, ~3 minutes on 2 cores): the largest max_model_len that boots
spec=draft, kv=tight of examples/cpu-tiny.yaml.

The true answer follows from the KV bytes (docs/cpu-calibration.md): the tiny Llama costs 1024 B of KV per token and
its draft model doubles that to 2048 B; the CPU backend allocates 128-token blocks, so 3 MiB holds
3145728 / (128 × 2048) = 12 blocks, and vLLM holds one back: 11 × 128 = 1408 tokens boot, 1536 do not."""

from __future__ import annotations

import json

import pytest

from tests.helpers.boots import CPU_EXAMPLE, harness_cli, only_run_dir, read_run
from tests.helpers.env import LIGHT_BOOT

pytestmark = pytest.mark.vllm

KV_BYTES, PER_TOKEN, BLOCK = 3 * 2**20, 2 * 1024, 128
TRUTH = (KV_BYTES // (BLOCK * PER_TOKEN) - 1) * BLOCK


@pytest.fixture(scope="module")
def frontier(vllm_cpu, tmp_path_factory):
    results = tmp_path_factory.mktemp("frontier")
    # --no-prediction: the search from the upper bound, vLLM's estimate and bisection alone (what `frontier` does when
    # the model cannot be predicted); starting from the prediction is tests/unit/test_frontier_prediction.py
    proc = harness_cli("frontier", "--matrix", str(CPU_EXAMPLE), "--select", "spec=draft,kv=tight", "--hi", "2048",
                       "--no-prediction", "--results-dir", str(results), "--json", env={**vllm_cpu, **LIGHT_BOOT},
                       timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout), only_run_dir(results), vllm_cpu


def test_the_frontier_is_the_length_the_kv_bytes_allow_found_in_three_boots(frontier):
    doc, _, _ = frontier
    assert TRUTH == 1408
    [g] = doc["groups"]
    assert g["group"] == {"spec": "draft", "kv": "tight"}
    assert (g["status"], g["frontier"], g["refused_at"], g["block"]) == ("found", TRUTH, TRUTH + BLOCK, BLOCK)
    assert g["boots"] <= 3, g["probes"]
    assert [p["length"] for p in g["probes"]] == [2048, TRUTH, TRUTH + BLOCK], "hi, vLLM's estimate, one block above"


def test_every_probe_is_a_recorded_cell_of_an_ordinary_run(frontier):
    _, run_dir, _ = frontier
    run = read_run(run_dir)
    assert run["status"] == "complete" and (run_dir / "frontier.json").is_file()
    cells = {c["cell_id"]: c for c in run["cells"]}
    assert list(cells) == ["mml2048-spec_draft-kv_tight", "mml1408-spec_draft-kv_tight", "mml1536-spec_draft-kv_tight"]
    ok = cells["mml1408-spec_draft-kv_tight"]
    assert ok["outcome"] == "booted" and ok["kv"]["kv_tokens"] == (TRUTH // BLOCK + 1) * BLOCK
    assert "--max-model-len" in ok["argv"] and ok["argv"][ok["argv"].index("--max-model-len") + 1] == "1408"
    for cid in ("mml2048-spec_draft-kv_tight", "mml1536-spec_draft-kv_tight"):
        assert cells[cid]["reason"] == "kv_cache_too_small"
        assert cells[cid]["refusal"]["estimated_max_model_len"] == TRUTH
        assert (run_dir / "logs" / f"{cid}.log").is_file()


def test_analyzing_the_probes_recovers_the_bytes_per_token_and_the_floor(frontier):
    _, run_dir, env = frontier
    proc = harness_cli("analyze", str(run_dir), "--json", env=env, timeout=1500)
    assert proc.returncode == 0, proc.stderr
    [g] = json.loads(proc.stdout)["groups"]
    assert g["need"]["bytes_per_token"] == pytest.approx(PER_TOKEN, rel=0.01)
    assert g["crossover"]["kind"] == "below" and g["crossover"]["length"] == TRUTH
    floor = next(f for f in g["floors"] if f["length"] == 2048)
    assert floor["floor_bytes"] == (2048 // BLOCK + 1) * BLOCK * PER_TOKEN == 4_456_448  # calibrated edge
