"""The faults a shared GPU runner meets that are not the harness's own kills (docs/reliability.md, "Runner faults").

A server that eats host memory must be the one the kernel's OOM killer takes: a process server's oom_score_adj is
raised, a container runs under the matrix's `memory:` limit and its OOM kill is recorded as such. Tried inside a
memory-limited container, never by exhausting this machine."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from harness.runtime.process import SERVER_OOM_SCORE_ADJ
from tests import builders
from tests.cli import start_boot_harness
from tests.helpers.env import (
    PODMAN_CLI_ENV,  # the CLI's settings
    STANDIN_NVML,
    require,
)
from tests.helpers.reliability import cli, figure, only_run, read_json, wait_for
from tests.reliability.private_dockerd import PrivateDockerd, base_image, remove_private_dockerd, start_private_dockerd


@pytest.fixture(scope="module")
def own_dockerd(tmp_path_factory) -> Iterator[PrivateDockerd]:
    """A second dockerd to restart and freeze (tests/reliability/private_dockerd.py): the machine's engine is serving
    the suite's other tests meanwhile."""
    image = base_image()
    require("a second dockerd with the base image", os.geteuid() == 0 and image is not None and shutil.which("ip"),
            "run as root with scripts/setup-container-example.sh's base image in docker and iproute2")
    d = start_private_dockerd(tmp_path_factory.mktemp("dockerd", numbered=True), image)
    try:
        yield d
    finally:
        remove_private_dockerd(d)


#: Writes 256 MiB, touching every page (a zero-filled buffer costs no memory until written), then waits.
HOG = "import time; b = b'x' * (256 * 2**20); time.sleep(60)"


@pytest.mark.docker
def test_a_container_that_eats_its_memory_limit_is_oom_killed_and_recorded_so(docker_image, tmp_path):
    m = builders.write_matrix(tmp_path / "m.yaml", {
        "name": "hog", "runtime": "docker", "image": docker_image["VLLM_CPU_IMAGE"], "pull": "never", "model": "m",
        "memory": "64m", "entrypoint": ["/opt/venv/bin/python", "-c", HOG], "timeout_s": 60,
        "axes": {"case": {"hog": {}}}, "expect": [{"outcome": "crashed", "reason": "oom_killed"}]})
    t0 = time.monotonic()
    proc = cli("run", "--matrix", str(m), "--results-dir", str(tmp_path / "r"))
    figure("an OOM-killed container: verdict, s", round(time.monotonic() - t0, 2))
    assert proc.returncode == 0, proc.stderr  # matched: crashed (oom_killed), the harness itself untouched
    (cell,) = read_json(only_run(tmp_path / "r") / "results.json")["cells"]
    assert (cell["outcome"], cell["reason"], cell["container"]["oom_killed"]) == ("crashed", "oom_killed", True)
    assert cell["exit_code"] == 137


def test_a_process_server_is_the_oom_killers_first_choice_not_the_harness(tmp_path):
    """The server and what it forks carry oom_score_adj 1000; the harness keeps its own."""
    marks = tmp_path / "adj"
    code = (f"import os, pathlib, sys, time; p = pathlib.Path({str(marks)!r}); "
            "p.write_text(open('/proc/self/oom_score_adj').read().strip()); "
            "child = os.fork()\n"
            "if child == 0:\n"
            "    (p.parent / 'child').write_text(open('/proc/self/oom_score_adj').read().strip()); os._exit(0)\n"
            "os.waitpid(child, 0); time.sleep(60)")
    m = builders.write_matrix(tmp_path / "m.yaml", {
        "name": "adj", "command": [sys.executable, "-c", code], "model": "m", "timeout_s": 4,
        "axes": {"case": {"one": {}}}})
    proc = cli("run", "--matrix", str(m), "--results-dir", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr  # no expectation: a timeout is what it is
    assert marks.read_text() == str(SERVER_OOM_SCORE_ADJ) == (tmp_path / "child").read_text()
    with open("/proc/self/oom_score_adj") as f:
        assert int(f.read()) < SERVER_OOM_SCORE_ADJ, "the harness's own score is not raised"


def test_a_hung_engine_makes_the_cell_an_error_that_names_the_call_and_the_run_goes_on(own_dockerd, tmp_path):
    """dockerd stops answering (SIGSTOP: a stuck engine) while a cell boots, for longer than a call may take and past
    the cell's deadline: the cell is `error (engine_lost)` naming the call that hung, never a timeout verdict on the
    configuration; the harness waits for nothing forever, and once the engine answers again the run finishes its
    next cell and leaves no container."""
    m = builders.fake_matrix(tmp_path / "m.yaml", {"a_hang": {"FAKE_VLLM_SCENARIO": "hang"},
                                                   "b_boot": {"FAKE_VLLM_SCENARIO": "boot"}},
                             axis="case", runtime="docker", image=own_dockerd.image, timeout_s=8, engine_timeout_s=2)
    marks = tmp_path / "r"
    harness = start_boot_harness("run", "--matrix", m, "--results-dir", marks, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, env={"DOCKER_HOST": own_dockerd.host})
    out = ""
    try:
        wait_for("the first cell's server logging", lambda: any(
            "args:" in f.read_text(errors="replace") for f in marks.glob("*/logs/case_a_hang.log")), timeout=60)
        time.sleep(1)
        own_dockerd.freeze()
        t_stop = time.monotonic()
        time.sleep(12)  # past the cell's 8 s deadline and several 2 s call timeouts
    finally:
        own_dockerd.thaw()
    figure("engine frozen (dockerd SIGSTOPped), s", round(time.monotonic() - t_stop, 1))
    out, _ = harness.communicate(timeout=120)
    assert harness.returncode == 1, out  # an error cell: not every expectation met
    assert "Traceback" not in out, out
    run = read_json(only_run(marks) / "results.json")
    hang, boot = run["cells"]
    assert (hang["outcome"], hang["reason"]) == ("error", "engine_lost"), hang["detail"]
    assert "did not answer within 2 s" in hang["detail"] and hang["container"]["engine_trouble"], hang
    assert hang["container"]["engine"] == "docker", hang["container"]
    assert (boot["outcome"], boot["reason"], boot["container"]["engine_trouble"]) == ("booted", "ready", None)
    assert run["status"] == "complete"
    assert own_dockerd.our_containers() == [], "a container of ours survived the run"


def test_two_runs_on_one_runner_both_complete_and_a_run_still_going_cannot_be_resumed_twice(tmp_path):
    """Two CI jobs (or a person beside the nightly) run one matrix at once: into two results dirs and into the same
    one. Neither start-up sweep touches the other's servers or work dirs, ports never collide, every cell of each is
    recorded in its own run directory. A `--resume` of a run another process is still writing is refused in one
    line, before anything is swept or started."""
    m = builders.fake_matrix(tmp_path / "m.yaml", {v: {"FAKE_VLLM_SCENARIO": "boot", "FAKE_VLLM_DELAY": "1.5"}
                                                   for v in ("a", "b", "c")}, axis="case",
                             expect=[{"outcome": "booted"}])
    dirs = [tmp_path / "one", tmp_path / "two", tmp_path / "shared", tmp_path / "shared"]
    runs = [start_boot_harness("run", "--matrix", m, "--results-dir", d, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT) for d in dirs]
    first = wait_for("a run directory", lambda: sorted((tmp_path / "one").glob("*/results.json")), timeout=60)[0]
    resumed = cli("run", "--matrix", str(m), "--resume", str(first.parent))
    outs = [p.communicate(timeout=180)[0] for p in runs]
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr
    (line,) = resumed.stderr.splitlines()
    assert "another boot-harness (pid" in line and "is writing this run now" in line, line
    assert [p.returncode for p in runs] == [0, 0, 0, 0], outs
    assert all("gc: removed" not in o and "Traceback" not in o for o in outs), outs
    run_dirs = [p.parent for d in dirs[:3] for p in sorted(d.glob("*/results.json"))]
    assert len(run_dirs) == 4 and len({r.name for r in run_dirs}) == 4, run_dirs  # the shared dir holds two runs
    for r in run_dirs:
        run = read_json(r / "results.json")
        assert run["status"] == "complete" and [c["outcome"] for c in run["cells"]] == ["booted"] * 3, run
    ports = [c["port"] for r in run_dirs for c in read_json(r / "results.json")["cells"]]
    figure("two runs at once: cells recorded of 12", len(ports))
    resumed_after = cli("run", "--matrix", str(m), "--resume", str(first.parent))
    assert resumed_after.returncode == 0, resumed_after.stderr  # let go with the process: nothing left to boot


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MiB tmpfs: a results dir that fills up, without filling this machine."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)],
                             capture_output=True, text=True).returncode == 0
    require("a small tmpfs (mount needs root)", mounted, "run the suite as root, as CI does")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_full_disk_cuts_the_log_keeps_every_record_whole_and_resume_finishes_the_run(small_disk, tmp_path):
    """A server floods its log into a results dir that fills: its log is cut with a marker (the boot goes on), the
    record that no longer fits is one line naming the file and the errno, exit non-zero, no traceback, every JSON on
    disk whole; once there is room, `--resume` finishes the run."""
    m = builders.fake_matrix(tmp_path / "m.yaml", {
        "a_boot": {"FAKE_VLLM_SCENARIO": "boot"},
        "b_flood": {"FAKE_VLLM_SCENARIO": "flood", "FAKE_VLLM_FLOOD_MB": "6", "FAKE_VLLM_FLOOD_LINE_KB": "64"},
        "c_boot": {"FAKE_VLLM_SCENARIO": "boot"}}, axis="case", expect=[{"outcome": "booted"}], timeout_s=60)
    full = cli("run", "--matrix", str(m), "--results-dir", str(small_disk))
    out = full.stdout + full.stderr
    assert full.returncode == 1 and "Traceback" not in out, out
    (line,) = [x for x in full.stderr.splitlines() if "could not be written" in x]
    assert "No space left on device (ENOSPC)" in line and "--resume" in line, line
    run_dir = only_run(small_disk)
    for f in [run_dir / "results.json", *sorted((run_dir / "cells").glob("*.json"))]:
        read_json(f)  # whole JSON, every one
    kept = [c["cell_id"] for c in read_json(run_dir / "results.json")["cells"]]
    figure("a full disk: finished cells kept", len(kept))
    assert kept[:1] == ["case_a_boot"], kept
    log = (run_dir / "logs" / "case_b_flood.log").read_bytes()
    assert len(log) < 3 * 2**20, "the log stopped where the disk was full"
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    resumed = cli("run", "--matrix", str(m), "--resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    run = read_json(run_dir / "results.json")
    assert run["status"] == "complete" and [c["outcome"] for c in run["cells"]] == ["booted"] * 3, run


def start_restart_run(tmp_path, runtime: str, image: str, env: dict[str, str]):
    """Two cells on `runtime`; returns once the first one's server (30 s from ready) is logging: when a restart
    catches it mid-boot."""
    m = builders.fake_matrix(tmp_path / "m.yaml", {"a_boot": {"FAKE_VLLM_SCENARIO": "boot", "FAKE_VLLM_DELAY": "30"},
                                                   "b_boot": {"FAKE_VLLM_SCENARIO": "boot"}},
                             axis="case", runtime=runtime, image=image, timeout_s=60, engine_timeout_s=5,
                             expect=[{"outcome": "booted"}])
    results = tmp_path / "r"
    harness = start_boot_harness("run", "--matrix", m, "--results-dir", results, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, env=env)
    wait_for("the first cell's server logging", lambda: any(
        "args:" in f.read_text(errors="replace") for f in results.glob("*/logs/case_a_boot.log")), timeout=60)
    return harness, results


def assert_the_restart_voided_only_the_cell_in_flight(harness, results, left: Callable[[], list[str]]) -> None:
    out, _ = harness.communicate(timeout=180)
    assert harness.returncode == 1 and "Traceback" not in out, out
    run = read_json(only_run(results) / "results.json")
    a, b = run["cells"]
    assert (a["outcome"], a["reason"]) == ("error", "engine_lost"), a["detail"]
    assert "went away" in a["container"]["engine_trouble"], a["container"]
    assert (b["outcome"], b["reason"]) == ("booted", "ready"), b["detail"]
    assert run["status"] == "complete"
    assert left() == [], "a container of ours survived the run"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_dockerd_restart_mid_run_is_an_error_not_a_verdict_and_the_run_goes_on(own_dockerd, tmp_path, sig):
    """dockerd restarted while a cell boots. SIGTERM, as `systemctl restart docker` (an upgrade) does: it closes its
    API, stops every container (the server exits 143) and ends; SIGKILL: it dies at once, its containers run on
    under containerd until the new daemon (no live-restore) stops them. Either way the cell in flight is
    `error (engine_lost)`, never `crashed` — the configuration was not at fault; the next cell waits for the engine
    and boots; the run completes and nothing of ours is left on the restarted engine."""
    harness, results = start_restart_run(tmp_path, "docker", own_dockerd.image, {"DOCKER_HOST": own_dockerd.host})
    try:
        t_gone = time.monotonic()
        stopped = own_dockerd.stop(sig)
        time.sleep(2)
    finally:
        own_dockerd.start()
    figure(f"engine away (dockerd {sig.name}ed and started again), s", round(time.monotonic() - t_gone, 1))
    assert stopped == (0 if sig == signal.SIGTERM else -sig), f"dockerd's exit on {sig.name}: {stopped}"
    assert_the_restart_voided_only_the_cell_in_flight(harness, results, own_dockerd.our_containers)


def test_a_sweep_meets_a_container_its_run_removes_meanwhile_and_carries_on(own_dockerd, monkeypatch):
    """The start-up sweep lists our containers, then reads each; a container another run removes in between (its cell
    ended) is no leftover and no error — the sweep removes the dead owner's other containers and the run starts. The
    interleaving is forced: the engine is real, its answer to the sweep's read of the first container is a 404."""
    from harness import sweep
    from harness.runtime import engine as eng

    dead = subprocess.Popen(["true"])
    dead.wait()
    labels = ["--label", f"boot-harness.owner-pid={dead.pid}", "--label", f"boot-harness.host={socket.gethostname()}"]
    made = [own_dockerd.docker("create", *labels, own_dockerd.image, "true").stdout.strip() for _ in range(2)]
    assert all(made), made
    monkeypatch.setenv("DOCKER_HOST", own_dockerd.host)
    real_connect = eng.connect

    def connect_racing_a_removal(engine: str, *args, **kwargs):
        client = real_connect(engine, *args, **kwargs)
        inspect = client.api.inspect_container

        def removed_just_before(container_id, *a, **kw):
            if container_id == made[0]:
                own_dockerd.docker("rm", "-f", made[0])
            return inspect(container_id, *a, **kw)

        monkeypatch.setattr(client.api, "inspect_container", removed_just_before)
        return client

    monkeypatch.setattr(eng, "connect", connect_racing_a_removal)
    swept = sweep.Swept()
    sweep.sweep_containers("docker", swept)
    assert swept.engines_unreachable == [] and len(swept.containers) == 1, swept
    assert own_dockerd.our_containers() == [], "the dead owner's other container was left"


def podman_containers_of_ours() -> list[str]:
    return subprocess.run(["podman", "ps", "-a", "-q", "--filter", "label=boot-harness.owner-pid"],
                          capture_output=True, text=True, env={**os.environ, **PODMAN_CLI_ENV}).stdout.split()


@pytest.mark.podman
def test_a_podman_service_restart_mid_run_is_an_error_not_a_verdict_and_the_run_goes_on(podman, tmp_path):
    """The podman service killed while a cell boots, its container stopped as a dockerd restart stops every container
    (SIGTERM, exit 143), the service started again (scripts/setup-podman.sh, as an upgrade's restart would): the same
    as dockerd's restart above."""
    (service,) = [int(p) for p in subprocess.run(["pgrep", "-f", "podman system service"], capture_output=True,
                                                  text=True).stdout.split()]
    harness, results = start_restart_run(tmp_path, "podman", podman["PODMAN_IMAGE"],
                                         {"CONTAINER_HOST": podman["CONTAINER_HOST"]})
    try:
        os.kill(service, signal.SIGKILL)
        t_gone = time.monotonic()
        victim = subprocess.run(["podman", "ps", "-q", "--filter", "label=boot-harness.cell=case_a_boot"],
                                capture_output=True, text=True, env={**os.environ, **PODMAN_CLI_ENV}).stdout.split()
        subprocess.run(["podman", "kill", "--signal", "TERM", *victim], capture_output=True,
                       env={**os.environ, **PODMAN_CLI_ENV})
        time.sleep(3)
    finally:
        back = subprocess.run(["bash", str(builders.ROOT / "scripts" / "setup-podman.sh")], capture_output=True,
                              text=True)
    figure("engine away (podman service killed and started again), s", round(time.monotonic() - t_gone, 1))
    assert back.returncode == 0, back.stderr
    assert victim, "the first cell's container was running"
    assert_the_restart_voided_only_the_cell_in_flight(harness, results, podman_containers_of_ours)


def test_a_gpu_lost_mid_run_voids_the_cell_in_flight_and_stops_the_run_in_one_line(tmp_path):
    """NVML starts saying "GPU is lost" while a cell boots (the stand-in NVML, as pynvml says it): that cell is
    `error (gpu_lost)`, whatever its server did; no more cells start on the GPU, the run says so in one line and ends
    non-zero, interrupted, so `--resume` finishes it once the GPU is back."""
    lost = tmp_path / "lost"
    m = builders.fake_matrix(tmp_path / "m.yaml", {"a_boot": {"FAKE_VLLM_SCENARIO": "boot", "FAKE_VLLM_DELAY": "3"},
                                                   "b_boot": {"FAKE_VLLM_SCENARIO": "boot"}},
                             axis="case", gpus_per_cell=1, expect=[{"outcome": "booted"}])
    env = {**STANDIN_NVML, "STANDIN_NVML_HOLD_S": "0", "STANDIN_NVML_LOST_FILE": str(lost)}
    results = tmp_path / "r"
    harness = start_boot_harness("run", "--matrix", m, "--results-dir", results, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=env)
    wait_for("the first cell's server logging", lambda: any(
        "args:" in f.read_text(errors="replace") for f in results.glob("*/logs/case_a_boot.log")), timeout=60)
    lost.touch()
    out, err = harness.communicate(timeout=120)
    assert harness.returncode == 130 and "Traceback" not in out + err, out + err
    (line,) = [x for x in err.splitlines() if "is lost" in x]
    assert line.startswith("GPU 0 (GPU-") and "NVML says GPU is lost: no more cells start on it" in line, line
    run = read_json(only_run(results) / "results.json")
    (a,) = run["cells"]  # b never started
    assert (a["outcome"], a["reason"]) == ("error", "gpu_lost"), a["detail"]
    assert run["status"] == "interrupted"
    lost.unlink()  # the GPU is back
    resumed = cli("run", "--matrix", str(m), "--resume", str(only_run(results)), env=env)
    assert resumed.returncode == 1, resumed.stderr  # the voided cell stays an error; b boots
    assert [c["outcome"] for c in read_json(only_run(results) / "results.json")["cells"]] == ["error", "booted"]


def test_gpu_cells_of_two_runs_take_turns_on_a_shared_gpu_instead_of_booting_into_each_others_memory(tmp_path):
    """Two runs on one runner with one (stand-in) GPU between them: a cell holds the GPU host-wide while it runs, so
    the other run's cell waits for it (and says so in its log) instead of booting beside it; both runs complete."""
    m = builders.fake_matrix(tmp_path / "m.yaml", {v: {"FAKE_VLLM_SCENARIO": "boot", "FAKE_VLLM_DELAY": "1"}
                                                   for v in ("a", "b")}, axis="case", gpus_per_cell=1,
                             expect=[{"outcome": "booted"}])
    env = {**STANDIN_NVML, "STANDIN_NVML_HOLD_S": "0"}
    runs = [start_boot_harness("run", "--matrix", m, "--results-dir", tmp_path / d, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=env) for d in ("one", "two")]
    outs = [p.communicate(timeout=180)[0] for p in runs]
    assert [p.returncode for p in runs] == [0, 0], outs
    spans = []
    for d in ("one", "two"):
        run_dir = only_run(tmp_path / d)
        for c in read_json(run_dir / "results.json")["cells"]:
            assert c["outcome"] == "booted", c["detail"]
            spans.append((c["started_at"], c["finished_at"], d, c["cell_id"]))
    spans.sort()
    overlaps = [(a, b) for a, b in zip(spans, spans[1:], strict=False) if b[0] < a[1]]
    figure("two runs, one GPU: cells booted at once on it", len(overlaps))
    assert overlaps == [], overlaps
    logs = "".join(f.read_text() for f in tmp_path.glob("*/*/logs/*.log"))
    assert "which another run on this host had a cell on" in logs


@pytest.mark.podman
def test_ctrl_c_still_stops_a_run_whose_engine_hangs(podman, tmp_path):
    """The engine's API frozen under a booting cell, then Ctrl-C: the harness still stops (every engine call of its
    teardown is bounded: an unbounded one waits for ever on a frozen engine), records no verdict for the cell, marks
    the run interrupted and exits 130; what it could not remove while the engine hung, the next run's sweep (here
    `gc`) removes once it answers. The cell's deadline is 600 s away and the wait for the exit a 300 s hang guard:
    how long the stop took is a figure."""
    (service,) = [int(p) for p in subprocess.run(["pgrep", "-f", "podman system service"], capture_output=True,
                                                  text=True).stdout.split()]
    m = builders.fake_matrix(tmp_path / "m.yaml", {"a_hang": {"FAKE_VLLM_SCENARIO": "hang"}}, axis="case",
                             runtime="podman", image=podman["PODMAN_IMAGE"], timeout_s=600, engine_timeout_s=2)
    results = tmp_path / "r"
    env = {"CONTAINER_HOST": podman["CONTAINER_HOST"]}
    harness = start_boot_harness("run", "--matrix", m, "--results-dir", results, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, env=env)
    try:
        wait_for("the cell's server logging", lambda: any(
            "args:" in f.read_text(errors="replace") for f in results.glob("*/logs/case_a_hang.log")), timeout=60)
        os.kill(service, signal.SIGSTOP)
        time.sleep(3)  # a call or two of the watch has hung by now
        t_int = time.monotonic()
        harness.send_signal(signal.SIGINT)
        try:
            out, _ = harness.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            harness.kill()
            pytest.fail(f"hung: the harness still ran 300 s after Ctrl-C: {harness.communicate()[0][-2000:]}")
        took = time.monotonic() - t_int
    finally:
        os.kill(service, signal.SIGCONT)
    figure("Ctrl-C while the engine hangs: harness out after, s", round(took, 1))
    assert harness.returncode == 130 and "Traceback" not in out, out
    run = read_json(only_run(results) / "results.json")
    assert run["status"] == "interrupted" and run["cells"] == [], "stopped mid-boot: no verdict for the cell"
    gc = cli("gc", "--results-dir", str(results), "--engine", "podman", env=env)
    assert gc.returncode == 0, gc.stderr
    assert podman_containers_of_ours() == [], "a container of ours survived gc"
