"""Teardown under pressure: a second Ctrl-C, a Ctrl-C that lands in a teardown, and an engine child that dies as a
zombie nobody reaps. Each of these left a server alive or held the harness up; see docs/reliability.md."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.helpers.env import ROOT
from tests.helpers.reliability import (
    Harness,
    check_run_dir,
    fake_matrix,
    figure,
    kill_pids,
    live,
    marks,
    only_run,
    server_pids,
    wait_for,
)

DEAF_ENGINE = {"FAKE_VLLM_IGNORE_TERM": "1", "FAKE_VLLM_CHILD": "1"}


def _deaf_run(tmp_path: Path, **top) -> tuple[Harness, Path]:
    (tmp_path / "marks").mkdir()
    matrix = fake_matrix(tmp_path / "m.yaml", {"v": {"FAKE_VLLM_SCENARIO": "hang", **DEAF_ENGINE,
                                                     "FAKE_VLLM_MARKS": str(tmp_path / "marks")}}, **top)
    h = Harness("run", "--matrix", str(matrix), "--results-dir", str(tmp_path / "r"), log=tmp_path / "out")
    wait_for("the engine child", lambda: marks(tmp_path / "marks", "child"), 30)
    return h, tmp_path / "marks"


def _finish(h: Harness, mark_dir: Path, t0: float) -> tuple[int, float, list[int], Path]:
    try:
        rc = h.wait(30)
        took = time.monotonic() - t0
        alive = [p for p in server_pids(mark_dir) if live(p)]
    finally:
        h.kill()
        kill_pids(server_pids(mark_dir))
    return rc, took, alive, only_run(mark_dir.parent / "r")


def test_a_second_ctrl_c_during_teardown_still_stops_every_server(tmp_path):
    """Ctrl-C, and Ctrl-C again half a second later while a SIGTERM-deaf server is in its 3 s grace."""
    h, mark_dir = _deaf_run(tmp_path)
    t0 = h.signal(signal.SIGINT)
    time.sleep(0.5)
    h.signal(signal.SIGINT)
    rc, took, alive, run_dir = _finish(h, mark_dir, t0)
    assert rc == 130
    assert alive == [], f"server processes {alive} outlived the harness"
    assert not list(run_dir.glob("active/*.json")) and not list(run_dir.glob("work/*"))
    assert check_run_dir(run_dir)["status"] == "interrupted"


def test_one_ctrl_c_during_the_teardown_of_a_timed_out_server_still_stops_it(tmp_path):
    # timeout at 1 s, then 3 s of SIGTERM grace: the Ctrl-C at ~2 s lands in the middle of it
    h, mark_dir = _deaf_run(tmp_path, timeout_s=1)
    time.sleep(1.8)
    t0 = h.signal(signal.SIGINT)
    rc, took, alive, run_dir = _finish(h, mark_dir, t0)
    assert rc == 130
    assert alive == [], f"server processes {alive} outlived the harness"
    assert not list(run_dir.glob("active/*.json"))


def test_a_second_ctrl_c_during_a_parallel_teardown_still_marks_the_run_interrupted(tmp_path):
    cases = {}
    for v in ("v1", "v2"):
        (tmp_path / "marks" / v).mkdir(parents=True)
        cases[v] = {"FAKE_VLLM_SCENARIO": "hang", **DEAF_ENGINE, "FAKE_VLLM_MARKS": str(tmp_path / "marks" / v)}
    matrix = fake_matrix(tmp_path / "m.yaml", cases)
    h = Harness("run", "--matrix", str(matrix), "--results-dir", str(tmp_path / "r"), "--parallel", "2",
                log=tmp_path / "out")
    pids: set[int] = set()
    try:
        for v in ("v1", "v2"):
            wait_for("the engine children", lambda v=v: marks(tmp_path / "marks" / v, "child"), 30)
        h.signal(signal.SIGINT)
        time.sleep(0.5)
        h.signal(signal.SIGINT)
        rc = h.wait(30)
        for v in ("v1", "v2"):
            pids |= server_pids(tmp_path / "marks" / v)
        alive = [p for p in pids if live(p)]
    finally:
        h.kill()
        kill_pids(pids)
    assert rc == 130 and alive == []
    assert check_run_dir(only_run(tmp_path / "r"))["status"] == "interrupted"


_UNREAPED = textwrap.dedent("""
    # A process that adopts orphans and never reaps them: PID 1 of a container without an init, or a CI job run under
    # a subreaper. The engine child orphaned by its dying leader stays a zombie in the server's process group.
    import ctypes, json, signal, sys, tempfile
    from pathlib import Path
    ctypes.CDLL("libc.so.6").prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    sys.path.insert(0, sys.argv[1])
    from harness.runtime.process import ProcessServer
    sent = []  # every signal the teardown sent the server's group: the work it did, counted
    signal_group = ProcessServer._signal_group
    def counted(self, sig):
        sent.append(signal.Signals(sig).name)
        return signal_group(self, sig)
    ProcessServer._signal_group = counted
    from tests.helpers.fake_boot import boot
    result, _ = boot(Path(tempfile.mkdtemp(dir=sys.argv[2])), "boot", env={"FAKE_VLLM_CHILD": "1"})
    print(json.dumps({"outcome": result.outcome, "teardown_s": result.timings.total_s - result.timings.verdict_s,
                      "sent": sent}))
""")


def test_an_unreaped_zombie_in_the_group_does_not_hold_up_the_teardown(tmp_path):
    """A group whose only member left is a zombie is gone: one SIGTERM ends the server, and the teardown neither
    waits out the grace for the zombie nor SIGKILLs it every poll until its reap time runs out (a hundred times)."""
    import json

    out = subprocess.run([sys.executable, "-c", _UNREAPED, str(ROOT), str(tmp_path)], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    figure("teardown of a booted server whose engine child is an unreaped zombie, s", round(got["teardown_s"], 3))
    assert got["outcome"] == "booted"
    # the first SIGTERM, and at most one SIGKILL (a SIGTERM slower than the grace on a loaded machine)
    assert got["sent"][0] == "SIGTERM" and got["sent"].count("SIGKILL") <= 1, got["sent"]
