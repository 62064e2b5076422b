"""The container runtime on a real podman engine (its Docker-compatible API, `podman system service`), set up by
scripts/setup-podman.sh: boot, refusal and crash verdicts from a live podman log, exit codes, the engine recorded as
podman, the seed's patch workflow (copy out of a created container, hashes, read-only bind mount), a `podman run`
repro that boots in a shell, and no container of ours left, also after the harness is SIGKILLed and `gc` runs.

The server is tests/fakes/fake_vllm.py, bind-mounted into the small Debian+Python base image (the 4.5 GB vLLM CPU image
is not copied into podman's store); what is under test is the engine path, which real vLLM exercises on docker."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from harness.runtime.ports import free_port
from tests import builders
from tests.cli import start_boot_harness
from tests.helpers.boots import boots_in_a_shell, harness_cli, only_run_dir, read_run
from tests.helpers.env import PODMAN_CLI_ENV, STANDIN_NVML

pytestmark = pytest.mark.podman
LABEL = "boot-harness.owner-pid"
TARGET = "/etc/debian_version"
MARK = "patched-by-boot-harness"


def podman_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check,
                          env={**os.environ, **PODMAN_CLI_ENV}, timeout=120)


def our_containers() -> list[str]:
    out = podman_cli("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}").stdout
    return [n for n in out.split() if n]


@pytest.fixture
def no_leftovers(podman):
    yield
    left = our_containers()
    for name in left:
        podman_cli("rm", "-f", name, check=False)
    assert left == [], "a container of ours survived the test"


def matrix(path: Path, image: str, cases: dict[str, dict], **top) -> Path:
    """One axis `case` of fake-server scenarios, on podman: the fake is mounted at /fake and run by the image's
    python3."""
    return builders.fake_matrix(path, cases, axis="case",
                                **{"runtime": "podman", "image": image, "timeout_s": 60, **top})


def test_boot_refusal_and_crash_on_podman_with_the_engine_recorded(podman, tmp_path, no_leftovers):
    cases = {
        "boot": {"env": {"FAKE_VLLM_SCENARIO": "boot"}},
        "refuse": {"env": {"FAKE_VLLM_SCENARIO": "refuse"}},
        "crash": {"env": {"FAKE_VLLM_SCENARIO": "crash", "FAKE_VLLM_ERROR_TEXT": "boom"}},
    }
    expect = [{"where": {"case": "boot"}, "outcome": "booted"},
              {"where": {"case": "refuse"}, "outcome": "refused", "reason": "kv_cache_too_small"},
              {"where": {"case": "crash"}, "outcome": "crashed"}]
    m = matrix(tmp_path / "m.yaml", podman["PODMAN_IMAGE"], cases, expect=expect)
    proc = harness_cli("run", "--matrix", str(m), "--results-dir", str(tmp_path / "r"), env=podman, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    cells = {c["cell_id"]: c for c in read_run(only_run_dir(tmp_path / "r"))["cells"]}
    assert {k: (c["outcome"], c["matched"]) for k, c in cells.items()} == {
        "case_boot": ("booted", True), "case_refuse": ("refused", True), "case_crash": ("crashed", True)}
    refusal = cells["case_refuse"]["refusal"]
    assert (refusal["max_seq_len"], refusal["estimated_max_model_len"]) == (4096, 3072), "parsed from podman's log"
    assert cells["case_refuse"]["exit_code"] == 1 and cells["case_crash"]["exit_code"] not in (None, 0)
    assert "boom" in cells["case_crash"]["detail"]
    c = cells["case_boot"]["container"]
    assert c["engine"] == "podman" and c["engine_version"], c


def _patch_for(base: bytes) -> tuple[str, str, str]:
    """A unified diff replacing the file's one line, with a comment preamble as the seed's patch has."""
    old = base.decode().rstrip("\n")
    patched = f"{MARK}\n".encode()
    text = (f"# Replaces {TARGET} (a test of the APPLY workflow on podman).\n\n"
            f"--- a{TARGET}\n+++ b{TARGET}\n@@ -1 +1 @@\n-{old}\n+{MARK}\n")
    return text, hashlib.sha256(base).hexdigest(), hashlib.sha256(patched).hexdigest()


def test_the_seeds_patch_workflow_on_podman_mounts_the_patched_file(podman, tmp_path, no_leftovers):
    base = podman_cli("run", "--rm", "--entrypoint", "cat", podman["PODMAN_IMAGE"], TARGET).stdout.encode()
    text, base_sha, patched_sha = _patch_for(base)
    (tmp_path / "p.patch").write_text(text)
    cases = {"patched": {"env": {"FAKE_VLLM_SCENARIO": "boot"},
                         "patches": [{"target": TARGET, "patch": "p.patch", "base_sha256": base_sha,
                                      "patched_sha256": patched_sha}]}}
    # The entrypoint shows the file the server sees, then runs the fake.
    m = matrix(tmp_path / "m.yaml", podman["PODMAN_IMAGE"], cases,
               entrypoint=["sh", "-c",
                           f'echo "target says: $(cat {TARGET})"; exec python3 /fake/fake_vllm.py "$@"', "sh"])
    proc = harness_cli("run", "--matrix", str(m), "--results-dir", str(tmp_path / "r"), env=podman, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "r")
    (cell,) = read_run(run_dir)["cells"]
    assert cell["outcome"] == "booted"
    assert f"target says: {MARK}" in (run_dir / cell["log_path"]).read_text()
    (applied,) = cell["patches"]
    assert hashlib.sha256((run_dir / applied["patched_file"]).read_bytes()).hexdigest() == patched_sha

    doc = yaml.safe_load(m.read_text())
    doc["axes"]["case"]["patched"]["patches"][0]["base_sha256"] = "0" * 64
    bad = builders.write_matrix(tmp_path / "bad.yaml", doc)
    proc = harness_cli("run", "--matrix", str(bad), "--results-dir", str(tmp_path / "r2"), env=podman, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert base_sha[:12] in proc.stderr and "0" * 64 in proc.stderr


def test_repro_prints_a_podman_run_that_boots_in_a_shell(podman, tmp_path, no_leftovers):
    m = matrix(tmp_path / "m.yaml", podman["PODMAN_IMAGE"], {"boot": {"env": {"FAKE_VLLM_SCENARIO": "boot"}}})
    port = free_port()
    proc = harness_cli("repro", "--matrix", str(m), "case_boot", "--port", str(port), env=podman)
    assert proc.returncode == 0, proc.stderr
    command = proc.stdout.strip()
    assert command.startswith("podman run --rm --init"), command
    boots_in_a_shell(command, port, 120, ["podman", "rm", "-f", "bh-repro-case_boot"], env=PODMAN_CLI_ENV)


def test_a_sigkilled_harness_leaves_a_container_that_gc_removes(podman, tmp_path, no_leftovers):
    m = matrix(tmp_path / "m.yaml", podman["PODMAN_IMAGE"],
               {"slow": {"env": {"FAKE_VLLM_SCENARIO": "boot", "FAKE_VLLM_DELAY": "120"}}})
    h = start_boot_harness("run", "--matrix", m, "--results-dir", tmp_path / "r", env=podman,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not our_containers():
            time.sleep(0.3)
        assert our_containers(), "the harness never started its container"
    finally:
        h.send_signal(signal.SIGKILL)
        h.wait(timeout=30)
    assert len(our_containers()) == 1, "a SIGKILLed harness's container keeps running"
    gc = harness_cli("gc", "--engine", "podman", env=podman)
    assert gc.returncode == 0, gc.stderr
    assert our_containers() == [], gc.stdout + gc.stderr
    # the killed run's directory is still a valid, resumable run
    run = json.loads((only_run_dir(tmp_path / "r") / "results.json").read_text())
    assert run["status"] == "running" and run["cells"] == []


# ---- GPUs on podman (scripts/setup-gpu-stubs.sh puts a stub `nvidia.com/gpu` CDI spec in /etc/cdi)
def podman_version() -> str:
    return podman_cli("version", "--format", "{{.Server.Version}}").stdout.strip()


def test_a_gpu_matrix_on_a_podman_whose_api_ignores_cdi_is_refused_in_one_line(podman, tmp_path, no_leftovers):
    """podman's compat API honours CDI device requests only from 5.4: before that the container would start without a
    GPU and say nothing. Preflight says so, exit 2, before any image is pulled or cell runs."""
    m = matrix(tmp_path / "m.yaml", "registry.invalid/never/pulled:1", {"boot": {}}, gpus="all", pull="always")
    proc = harness_cli("run", "--matrix", str(m), "--results-dir", str(tmp_path / "r"), env={**podman, **STANDIN_NVML})
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"gpus: podman {podman_version()} ignores GPU requests through its Docker-compatible API")
    assert not (tmp_path / "r").exists()


def test_runtime_docker_pointed_at_podman_is_podman_for_gpus(podman, tmp_path, no_leftovers):
    """The request style follows the engine that answers, not the name in the matrix."""
    m = matrix(tmp_path / "m.yaml", podman["PODMAN_IMAGE"], {"boot": {}}, gpus="all", runtime="docker")
    proc = harness_cli("run", "--matrix", str(m), "--results-dir", str(tmp_path / "r"),
                       env={**podman, **STANDIN_NVML, "DOCKER_HOST": podman["CONTAINER_HOST"]})
    assert proc.returncode == 2 and proc.stderr.startswith("gpus: podman "), proc.stderr


def test_the_gpu_probe_sees_that_podmans_api_started_the_container_without_a_gpu(podman):
    """What the version gate stands for, seen on the engine itself: a CDI device request through the compat API is
    accepted and ignored (podman#22645); the probe container has no NVIDIA_VISIBLE_DEVICES, so it is not granted."""
    import docker

    from harness.runtime.engine import device_requests, engine_info, probe_gpus

    client = docker.DockerClient(base_url=podman["CONTAINER_HOST"])
    info = engine_info(client, "podman")
    if info.version_tuple() >= (5, 4):
        pytest.fail(f"podman {info.version} should honour CDI requests: this test expects the old behaviour")
    probe = probe_gpus(client, podman["PODMAN_IMAGE"], device_requests(info.name, "all"), info.name)
    assert not probe.granted and probe.visible == "<unset>"


def test_repro_prints_a_podman_run_with_the_cdi_device_and_it_gets_the_gpu_env(podman, tmp_path, no_leftovers):
    """podman's own CLI does take CDI devices (--device nvidia.com/gpu=all): the printed repro boots in a shell, and
    the stub spec's environment is inside the container."""
    m = matrix(tmp_path / "m.yaml", podman["PODMAN_IMAGE"], {"boot": {"env": {"FAKE_VLLM_SCENARIO": "boot"}}},
               gpus="all")
    port = free_port()
    proc = harness_cli("repro", "--matrix", str(m), "case_boot", "--port", str(port), env=podman)
    assert proc.returncode == 0, proc.stderr
    command = proc.stdout.strip()
    assert command.startswith("podman run --rm --init") and "--device nvidia.com/gpu=all" in command, command
    shell = subprocess.Popen(["bash", "-c", command], env={**os.environ, **PODMAN_CLI_ENV}, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        deadline, seen = time.monotonic() + 120, ""
        while time.monotonic() < deadline and shell.poll() is None:
            # the server's own environment (an exec gets the container's configured env, without CDI's edits)
            got = podman_cli("exec", "bh-repro-case_boot", "sh", "-c", "tr '\\0' '\\n' < /proc/1/environ", check=False)
            if got.returncode == 0:
                seen = next((ln.split("=", 1)[1] for ln in got.stdout.splitlines()
                             if ln.startswith("NVIDIA_VISIBLE_DEVICES=")), "")
                break
            time.sleep(0.5)
        assert seen == "all", shell.stdout.read() if shell.poll() is not None else "never started"
    finally:
        podman_cli("rm", "-f", "bh-repro-case_boot", check=False)
        shell.wait(timeout=60)
