"""Ports and other people's servers: no cell is ever `booted` on a server that is not its own, and one run's gc never
touches another run's live servers.

- Two `boot-harness run` at once in one results directory, and a `boot-harness gc` while both are live: every cell
  boots, and its own server's log shows that it served that cell's /health and completion (the served lines carry
  the server's port, and they came through this cell's own pipe).
- Runs forced onto one port (a wrapper pins the port picker, as a port race would): the run whose server binds boots;
  one whose server never binds sees the other's 200 and says `stale_server`; one whose server loses the bind crashes;
  one started after the port is taken says `start_failed`. None is `booted`.
- Containers: a run's containers survive `gc` and another run's start-up sweep while their harness lives.
- A stale `active/` record whose process group id now belongs to someone else's processes (pids are reused: pid_max is
  32768 on many hosts) must not get them killed.

Already covered cell by cell in tests/integration/test_process_runtime.py: a foreign server already answering on the
chosen port (`start_failed`) and one that takes the port after the start (`stale_server`).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.runtime.ports import free_port
from tests.cli import start_boot_harness
from tests.helpers.reliability import (
    DOCKER_LOCK,
    Harness,
    cli,
    containers,
    fake_matrix,
    kill_pids,
    live,
    marks,
    read_json,
    remove_containers,
    run_dirs,
    server_pids,
    wait_for,
)

SERVED = re.compile(r"fake: served (GET /health|POST /v1/completions) 200 pid=(\d+) port=(\d+)")

#: `boot-harness ARGS` with every port the process runtime picks pinned to $PINNED_PORT: a port race, on purpose.
PINNED = ("import os, sys\nimport harness.runtime.process as p\n"
          "p.free_port = lambda host='127.0.0.1': int(os.environ['PINNED_PORT'])\n"
          "from harness.cli import main\nsys.exit(main(sys.argv[1:]))\n")


def _cases(n: int, mark_root: Path, prefix: str) -> dict[str, dict[str, str]]:
    cases = {}
    for i in range(n):
        name = f"{prefix}{i}"
        (mark_root / name).mkdir(parents=True)
        cases[name] = {"FAKE_VLLM_SCENARIO": "boot", "FAKE_VLLM_DELAY": "0.4", "FAKE_VLLM_PROBE_DELAY": "0.2",
                       "FAKE_VLLM_LOG_REQUESTS": "1", "FAKE_VLLM_CHILD": "1", "FAKE_VLLM_MARKS": str(mark_root / name)}
    return cases


def test_two_concurrent_runs_and_a_gc_boot_only_their_own_servers(tmp_path):
    results, marks_root = tmp_path / "r", tmp_path / "marks"
    m1 = fake_matrix(tmp_path / "one.yaml", _cases(5, marks_root, "one"), name="one")
    m2 = fake_matrix(tmp_path / "two.yaml", _cases(5, marks_root, "two"), name="two")
    h1 = Harness("run", "--matrix", str(m1), "--results-dir", str(results), log=tmp_path / "one.out")
    h2 = Harness("run", "--matrix", str(m2), "--results-dir", str(results), log=tmp_path / "two.out")
    try:
        wait_for("both runs to have a live server", lambda: len({p.parent.parent.name for p in
                                                                  results.glob("*/active/*.json")}) == 2, 30)
        gc = cli("gc", "--results-dir", str(results), "--engine", "podman")  # process groups only (see below)
        rc1, rc2 = h1.wait(60), h2.wait(60)
    finally:
        h1.kill()
        h2.kill()
        kill_pids(server_pids(marks_root))
    assert gc.returncode == 0 and "0 process group(s), 0 other process(es), 0 work dir(s) removed" in gc.stdout, \
        gc.stdout + gc.stderr
    assert (rc1, rc2) == (0, 0), h1.output[-2000:] + h2.output[-2000:]
    runs = run_dirs(results)
    assert len(runs) == 2
    for run_dir in runs:
        run = read_json(run_dir / "results.json")
        assert run["status"] == "complete" and len(run["cells"]) == 5
        for cell in run["cells"]:
            assert (cell["outcome"], cell["reason"]) == ("booted", "ready"), cell["detail"]
            served = SERVED.findall((run_dir / cell["log_path"]).read_text())
            kinds = {k for k, _, port in served if int(port) == cell["port"]}
            assert kinds == {"GET /health", "POST /v1/completions"}, f"{cell['cell_id']}: served {served}"
            assert all(int(port) == cell["port"] for _, _, port in served), "another server's lines in this log"
    assert [p for p in server_pids(marks_root) if live(p)] == []


def test_runs_forced_onto_one_port_never_boot_on_each_others_server(tmp_path):
    port = free_port()
    mark_root = tmp_path / "marks"

    def start_pinned(name: str, scenario: str, delay: float, probe_delay: float = 0.0) -> subprocess.Popen:
        (mark_root / name).mkdir(parents=True)
        m = fake_matrix(tmp_path / f"{name}.yaml", {name: {
            "FAKE_VLLM_SCENARIO": scenario, "FAKE_VLLM_DELAY": str(delay), "FAKE_VLLM_PROBE_DELAY": str(probe_delay),
            "FAKE_VLLM_LOG_REQUESTS": "1", "FAKE_VLLM_MARKS": str(mark_root / name)}}, name=name, timeout_s=20)
        out = (tmp_path / f"{name}.out").open("w")
        return start_boot_harness("run", "--matrix", m, "--results-dir", tmp_path / name, stdout=out,
                                  stderr=subprocess.STDOUT, program=(sys.executable, "-c", PINNED),
                                  env={"PINNED_PORT": str(port)})

    procs = {}
    try:
        # The owner binds ~3 s after its server starts: long enough for the blind run's harness to have started its
        # own server on a loaded machine (a run starting after the bind is refused at start instead: `late`).
        procs["owner"] = start_pinned("owner", "boot", 3.0, probe_delay=6.0)  # binds at ~3 s, serves until ~9 s
        time.sleep(0.3)
        procs["blind"] = start_pinned("blind", "never_bind", 0.1)  # never binds: sees the owner's 200
        procs["loser"] = start_pinned("loser", "boot", 4.5)  # binds too late: EADDRINUSE
        wait_for("the owner to bind", lambda: marks(mark_root / "owner", "bound"), 20)
        procs["late"] = start_pinned("late", "boot", 0.1)  # the port answers before it starts
        codes = {name: p.wait(60) for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
        kill_pids(server_pids(mark_root))
    cells = {name: read_json(run_dirs(tmp_path / name)[0] / "results.json")["cells"][0] for name in procs}
    got = {name: (c["outcome"], c["reason"]) for name, c in cells.items()}
    assert got["owner"] == ("booted", "ready"), cells["owner"]["detail"]
    assert got["blind"] == ("error", "stale_server"), {n: c["detail"] for n, c in cells.items()}
    # the loser either starts before the owner binds (then EADDRINUSE: exited, or the owner's 200: stale_server) or,
    # on a slow machine, after it (then the port already answers: start_failed); never booted
    assert got["loser"] in {("crashed", "exited"), ("error", "stale_server"), ("error", "start_failed")}, got
    assert got["late"] == ("error", "start_failed"), got
    assert [n for n, (o, _) in got.items() if o == "booted"] == ["owner"]
    # `error` fails a run (exit 1); a crash with no expectation does not
    assert codes == {**{n: 1 if got[n][0] == "error" else 0 for n in procs}, "owner": 0}, codes


@pytest.mark.docker
def test_a_live_container_run_survives_gc_and_another_runs_sweep(docker_image, tmp_path):
    (tmp_path / "marks" / "slow").mkdir(parents=True)
    m = fake_matrix(tmp_path / "live.yaml", {"slow": {"FAKE_VLLM_SCENARIO": "boot", "FAKE_VLLM_PROBE_DELAY": "6",
                                                      "FAKE_VLLM_MARKS": "/marks/slow"}},
                    runtime="docker", name="live", timeout_s=30,
                    extra_mounts=[{"source": str(tmp_path / "marks"), "target": "/marks", "read_only": False}])
    other = fake_matrix(tmp_path / "other.yaml", {"quick": {"FAKE_VLLM_SCENARIO": "boot"}}, runtime="docker",
                        name="other")
    with DOCKER_LOCK:
        h = Harness("run", "--matrix", str(m), "--results-dir", str(tmp_path / "r1"), log=tmp_path / "live.out")
        try:
            wait_for("the live run's probe", lambda: marks(tmp_path / "marks" / "slow", "probe"), 60)
            mine = containers(value=str(h.pid))
            gc = cli("gc", "--engine", "docker", "--results-dir", str(tmp_path / "r1"))
            sweep = cli("run", "--matrix", str(other), "--results-dir", str(tmp_path / "r2"))
            still = containers(value=str(h.pid))
            rc = h.wait(60)
        finally:
            h.kill()
            remove_containers(containers(value=str(h.pid)))
    assert mine and still == mine, "a live run's container was removed"
    assert gc.returncode == 0 and sweep.returncode == 0, gc.stdout + sweep.stderr
    assert "gc: removed" not in sweep.stderr
    assert rc == 0 and read_json(run_dirs(tmp_path / "r1")[0] / "results.json")["cells"][0]["outcome"] == "booted"


def test_gc_does_not_kill_a_process_group_that_merely_reuses_a_recorded_id(tmp_path):
    # A harness SIGKILLed while its server (no children) starts: PDEATHSIG takes the server, the record stays.
    (tmp_path / "marks").mkdir()
    m = fake_matrix(tmp_path / "m.yaml", {"hang": {"FAKE_VLLM_SCENARIO": "hang",
                                                   "FAKE_VLLM_MARKS": str(tmp_path / "marks")}})
    h = Harness("run", "--matrix", str(m), "--results-dir", str(tmp_path / "r"), log=tmp_path / "out")
    try:
        wait_for("the server", lambda: marks(tmp_path / "marks", "started"), 30)
        h.signal(signal.SIGKILL)
        h.wait(10)
    finally:
        h.kill()
    wait_for("PDEATHSIG", lambda: not any(live(p) for p in server_pids(tmp_path / "marks")), 10)
    (record,) = (tmp_path / "r").glob("*/active/*.json")
    # Later, the group id is reused: someone else's process group has it now.
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
    data = read_json(record)
    data["pgid"] = bystander.pid
    record.write_text(json.dumps(data))
    try:
        # --engine podman: sweep process groups only, not this host's docker containers (other tests count those)
        cli("gc", "--results-dir", str(tmp_path / "r"), "--engine", "podman")
        time.sleep(0.2)
        assert bystander.poll() is None, "gc killed a process group that was not the harness's"
    finally:
        if bystander.poll() is None:
            bystander.send_signal(signal.SIGKILL)
        bystander.wait(10)
