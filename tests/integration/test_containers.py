"""The container runtime on a real Docker engine with the locally built vLLM CPU image: the seed's patch workflow
(unpatched vs patched), numbers parsed from container logs, clean refusals of bad input before any cell runs, a
`repro` command that boots the same cell when pasted into a shell, and no container of ours left after any of it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.matrix.load import read_yaml
from harness.runtime.ports import free_port
from tests.builders import variant_of
from tests.figures import figure
from tests.helpers.boots import (
    boots_in_a_shell,
    check_timeline,
    harness_cli,
    interrupt_when_started,
    only_run_dir,
    run_matrix,
    stopped_mid_boot,
)
from tests.helpers.env import ROOT

pytestmark = pytest.mark.docker
EXAMPLE = ROOT / "examples" / "cpu-container.yaml"
LABEL = "boot-harness.owner-pid"


def our_containers() -> list[str]:
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}"],
                         capture_output=True, text=True, check=True).stdout
    return [n for n in out.split() if n]


@pytest.fixture
def no_leftovers():
    yield
    assert our_containers() == [], "a container of ours survived the test"


def variant(tmp_path: Path, name: str = "variant.yaml", **changes) -> Path:
    """The container example with `changes`, at tmp_path/examples/NAME beside a copy of its patch: the patch path
    stays relative to the matrix file, as in the example."""
    (tmp_path / "patches").mkdir(exist_ok=True)
    (tmp_path / "patches" / "cpu_worker-kv-floor.patch").write_bytes(
        (ROOT / "patches" / "cpu_worker-kv-floor.patch").read_bytes())
    return variant_of(EXAMPLE, tmp_path / "examples" / name, **changes)


@pytest.fixture(scope="module")
def container_run(docker_image, tmp_path_factory):
    return run_matrix(EXAMPLE, tmp_path_factory.mktemp("container-example"), docker_image)


def test_the_container_example_exits_0_with_every_expectation_matched(container_run):
    proc, run_dir, cells = container_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert len(cells) == 6 and all(c["matched"] for c in cells.values())
    assert our_containers() == []


def test_the_unpatched_image_ignores_the_floor_and_the_patched_one_boots_with_it(container_run):
    cells = container_run[2]
    assert cells["image_unpatched-spec_draft-floor_env"]["outcome"] == "refused"
    assert cells["image_patched-spec_draft-floor_none"]["outcome"] == "refused"
    booted = cells["image_patched-spec_draft-floor_env"]
    assert booted["outcome"] == "booted"
    assert booted["kv"]["kv_tokens"] == 2560, "0.005 GiB floor at 2048 B/token, in 128-token blocks"


def test_container_cells_carry_a_timeline_from_the_image_present_to_the_verdict(container_run):
    _, run_dir, cells = container_run
    for cid, cell in cells.items():
        check_timeline(cell, run_dir / "logs" / f"{cid}.log")
        m = cell["timeline"]["milestones"]
        assert 0 <= m["pulled"] <= m["started"] <= m["first_line"], m


def test_refusal_numbers_come_from_the_container_log(container_run):
    r = container_run[2]["image_unpatched-spec_draft-floor_none"]["refusal"]
    assert (r["kind"], r["max_seq_len"], r["estimated_max_model_len"]) == ("kv_cache_too_small", 2048, 1408)


def test_container_cells_are_predicted_through_their_mounts_and_agree(container_run):
    """The model lives in a bind mount: the prediction reads its config.json on the host side of the mount."""
    for cid, cell in container_run[2].items():
        record = cell["prediction"]
        assert record["prediction"] and record["agrees"] is True, (cid, record)


def test_a_patched_cell_records_the_patch_and_keeps_the_file_it_mounted(container_run):
    _, run_dir, cells = container_run
    cell = cells["image_patched-spec_draft-floor_env"]
    (patch,) = cell["patches"]
    kept = run_dir / patch["patched_file"]
    import hashlib

    assert hashlib.sha256(kept.read_bytes()).hexdigest() == patch["patched_sha256"]
    assert "KV floor: raised the KV cache" in (run_dir / cell["log_path"]).read_text()
    c = cell["container"]
    assert c["engine"] == "docker" and c["engine_version"] and c["image_digest"].startswith("sha256:")
    assert cells["image_unpatched-spec_off-floor_none"]["patches"] == []


def test_a_patch_hash_mismatch_is_rejected_before_any_cell_runs(docker_image, tmp_path, no_leftovers):
    doc = read_yaml(EXAMPLE.read_text())
    doc["axes"]["image"]["patched"]["patches"][0]["base_sha256"] = "0" * 64
    path = variant(tmp_path, axes=doc["axes"])
    proc = harness_cli("run", "--matrix", str(path), "--results-dir", str(tmp_path / "r"), env=docker_image)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "cpu_worker.py" in lines[0] and "5889af10bfa8" in lines[0] and "0" * 64 in lines[0]


def test_a_missing_image_with_pull_never_is_one_clear_line(docker_image, tmp_path, no_leftovers):
    path = variant(tmp_path, image="boot-harness/no-such-image:nope")
    proc = harness_cli("run", "--matrix", str(path), "--results-dir", str(tmp_path / "r"), env=docker_image)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "image: boot-harness/no-such-image:nope is not present on the docker engine and `pull: never` "
        "(build or load it, or set `pull: missing`)")


def test_an_unreachable_engine_is_one_clear_line(docker_image, tmp_path):
    proc = harness_cli("run", "--matrix", str(EXAMPLE), "--results-dir", str(tmp_path / "r"),
                       env={**docker_image, "DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("runtime: the docker engine does not answer at unix:///nonexistent")


@pytest.mark.slow
def test_repro_prints_a_command_that_boots_the_same_cell_in_a_shell(docker_image, tmp_path, no_leftovers):
    cell = "image_patched-spec_draft-floor_env"
    port = free_port()
    proc = harness_cli("repro", "--matrix", str(EXAMPLE), cell, "--port", str(port), "--results-dir",
                       str(tmp_path / "r"), env=docker_image)
    assert proc.returncode == 0, proc.stderr
    command = proc.stdout.strip()  # the steps that make the patched file, then the run
    assert command.splitlines()[-1].startswith("docker run --rm --init") and "--shm-size 1g" in command
    assert ":/opt/venv/lib/python3.11/site-packages/vllm/v1/worker/cpu_worker.py:ro" in command
    boots_in_a_shell(command, port, 300, ["docker", "rm", "-f", f"bh-repro-{cell}"])


def test_ctrl_c_of_a_container_run_leaves_no_container(docker_image, tmp_path):
    results = tmp_path / "r"
    code, out, took = interrupt_when_started(
        ["run", "--matrix", str(EXAMPLE), "--results-dir", str(results), "--select", "image=unpatched,spec=off"],
        docker_image, lambda: bool(our_containers()), settle_s=3)
    figure("Ctrl-C of a container run mid-boot: harness out after, s", round(took, 2))
    assert code == 130, out[-2000:]
    assert our_containers() == []
    stopped_mid_boot(only_run_dir(results))
