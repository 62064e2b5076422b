"""Hostile process shapes: a server whose processes leave its process group — a double-forked setsid daemon, a child
in a group of its own, a server that moved itself into a new session and listens on its port
(tests/fakes/escaping_server.py). Every one carries the server's id (BOOT_HARNESS_SERVER_ID), so teardown and gc find
them by it (harness.runtime.carriers), whatever their group or session.

After a `run` (a booted, a refused and a crashed cell, one run shared) and after a SIGKILLed harness and `gc`, none of
them is alive and the port is free; bystanders carrying another server id or none survive. The scan itself is tried
on a /proc that lies (unreadable, vanished, huge, cut entries), on pid reuse, on exact ids only and on a process that
forks while it is being killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.clock import SYSTEM, FakeClock
from harness.runtime import carriers
from harness.runtime.carriers import Carrier, proc_start_time
from harness.runtime.ports import listener_pids
from harness.runtime.process import REAP_S, ProcessServer
from harness.runtime.records import Stopped
from harness.runtime.server_env import SERVER_ID_VAR
from tests.helpers.env import ROOT
from tests.helpers.reliability import fake_matrix, kill_pids, live, only_run, read_json, wait_for

ESCAPER = ROOT / "tests" / "fakes" / "escaping_server.py"
SHAPES = ("daemon", "group", "session")
#: Another server's id (a harness that is not this one): its processes are never ours to end.
OTHER_ID = f"{2**22}-1-{'ef' * 8}"
ID = f"{2**22}-2-{'0123456789abcdef'}"
#: A command that does not end within this hung: it fails the test, it does not wait for ever.
HUNG_S = 120
#: A process signalled to end is polled this many times, 20 ms apart, before the test says it survived.
TRIES = 250


def gone(pid: int) -> bool:
    """True once `pid` is no live process of this session, polled a bounded number of times."""
    try:
        wait_for(f"process {pid} to end", lambda: not live(pid), TRIES * 0.02)
        return True
    except AssertionError:
        return False


def escaping_matrix(path: Path, marks: Path, outcomes: list[str], **top) -> Path:
    cases = {}
    for outcome in outcomes:
        (marks / outcome).mkdir(parents=True)
        cases[outcome] = {"ESCAPE_OUTCOME": outcome, "ESCAPE_MARKS": str(marks / outcome)}
    return fake_matrix(path, cases, command=[sys.executable, str(ESCAPER)], memory_interval_s=None, linger_s=0.2,
                       **top)


def shape_pids(mark_dir: Path) -> dict[str, int]:
    return {p.name.split(".")[0]: int(p.name.split(".")[1]) for p in mark_dir.iterdir()}


def port_of(mark_dir: Path) -> int:
    return int(next(mark_dir.glob("session.*")).read_text())


@pytest.fixture(scope="module")
def bystanders() -> Iterator[dict[str, subprocess.Popen]]:
    """Processes in sessions of their own: one carrying another server's id, one carrying none."""
    env = {k: v for k, v in os.environ.items() if k != SERVER_ID_VAR}
    procs = {"another server id": subprocess.Popen(["sleep", "600"], start_new_session=True,
                                                   env={**env, SERVER_ID_VAR: OTHER_ID}),
             "no server id": subprocess.Popen(["sleep", "600"], start_new_session=True, env=env)}
    yield procs
    for proc in procs.values():
        proc.kill()
        proc.wait(10)


def still_running(proc: subprocess.Popen) -> bool:
    try:
        proc.wait(timeout=0.1)
        return False
    except subprocess.TimeoutExpired:
        return True


# ---------------------------------------------------------------------------------------------------- a run


@pytest.fixture(scope="module")
def escaped_run(tmp_path_factory, bystanders):
    """One `run` (in this process, as harness.cli.main runs it) of a booted, a refused and a crashed cell, each of
    whose servers leaves a daemon, a child in its own group and a listener in a new session."""
    from harness.cli import main

    base = tmp_path_factory.mktemp("escaped-run")
    marks = base / "marks"
    matrix = escaping_matrix(base / "m.yaml", marks, ["boot", "refuse", "crash"])
    try:
        code = main(["run", "--matrix", str(matrix), "--results-dir", str(base / "r")])
        yield code, only_run(base / "r"), marks
    finally:
        for d in marks.iterdir():
            kill_pids(shape_pids(d).values())


@pytest.mark.parametrize("outcome,expected", [("boot", "booted"), ("refuse", "refused"), ("crash", "crashed")])
def test_a_run_ends_every_process_of_a_server_whatever_its_group_or_session(escaped_run, outcome, expected):
    code, run_dir, marks = escaped_run
    assert code in (0, 1), f"run exited {code}"
    record = read_json(run_dir / "cells" / f"case_{outcome}.json")
    assert record["outcome"] == expected, f"{record['outcome']}: {record.get('detail')}"
    pids = shape_pids(marks / outcome)
    assert set(pids) == set(SHAPES), f"the fake did not start every shape: {pids}"
    alive = {shape: pid for shape, pid in pids.items() if not gone(pid)}
    assert alive == {}, f"outlived the run: {alive}"
    assert listener_pids(port_of(marks / outcome)) == set(), "the server's port is still listened on"
    assert not list((run_dir / "active").glob("*.json")), "the record goes once nothing carries the id"


@pytest.mark.parametrize("who", ["another server id", "no server id"])
def test_a_runs_teardown_spares_processes_that_do_not_carry_its_server_id(escaped_run, bystanders, who):
    assert still_running(bystanders[who]), f"the bystander with {who} was killed"


# ---------------------------------------------------------------------------------------------------- gc


def test_gc_ends_what_a_sigkilled_harness_left_outside_the_group(tmp_path, harnesses, bystanders, capsys,
                                                                  monkeypatch):
    from harness.cli import main

    monkeypatch.setattr("harness.runtime.engine.DEFAULT_HOSTS", {})  # no engine: the machine's containers stay
    marks = tmp_path / "marks"
    matrix = escaping_matrix(tmp_path / "m.yaml", marks, ["hang"], timeout_s=HUNG_S)
    h = harnesses("run", "--matrix", str(matrix), "--results-dir", str(tmp_path / "r"), log=tmp_path / "out")
    pids: dict[str, int] = {}
    try:
        wait_for("every shape in place", lambda: len(list((marks / "hang").iterdir())) == len(SHAPES), 60)
        pids = shape_pids(marks / "hang")
        record = next((tmp_path / "r").glob("*/active/case_hang.json"))
        leader = read_json(record)["pgid"]
        h.proc.kill()
        h.wait(30)
        assert gone(leader), "the leader outlived its SIGKILLed harness (PR_SET_PDEATHSIG)"
        assert all(live(pid) for pid in pids.values()), "the escaped processes are the leftovers gc is for"

        capsys.readouterr()
        assert main(["gc", "--results-dir", str(tmp_path / "r")]) == 0
        out = capsys.readouterr().out
        alive = {shape: pid for shape, pid in pids.items() if not gone(pid)}
        assert alive == {}, f"outlived gc: {alive}\n{out}"
        assert listener_pids(port_of(marks / "hang")) == set(), "the escaped server still listens on its port"
    finally:
        h.kill()
        kill_pids(pids.values())
    for pid in pids.values():
        assert f"killed process {pid} (cell case_hang: outside its process group" in out, out
    assert "3 other process(es)" in out and not record.exists(), out
    assert all(still_running(p) for p in bystanders.values()), "gc killed a process that carried no id of ours"


# ---------------------------------------------------------------------------------------------------- the scan


def sleeper(**env: str) -> subprocess.Popen:
    base = {k: v for k, v in os.environ.items() if k != SERVER_ID_VAR}
    return subprocess.Popen(["sleep", "600"], start_new_session=True, env={**base, **env})


def test_only_a_process_carrying_the_exact_id_is_a_carrier():
    ours = sleeper(**{SERVER_ID_VAR: ID})
    others = [sleeper(**{SERVER_ID_VAR: ID + "0"}), sleeper(**{SERVER_ID_VAR: "0" + ID}),
              sleeper(OTHER=f"{SERVER_ID_VAR}={ID}"), sleeper(**{SERVER_ID_VAR: OTHER_ID}), sleeper()]
    try:
        found = carriers.find(ID)
        assert found == [Carrier(ours.pid, proc_start_time(ours.pid), ours.pid)]
    finally:
        for p in [ours, *others]:
            p.kill()
            p.wait(10)


def test_a_signal_reaches_only_the_same_process_still_carrying_the_id():
    ours, other = sleeper(**{SERVER_ID_VAR: ID}), sleeper(**{SERVER_ID_VAR: OTHER_ID})
    try:
        start = proc_start_time(ours.pid)
        reused = Carrier(ours.pid, start + 1, ours.pid)  # the pid as another process would hold it
        assert not carriers.send(reused, ID, signal.SIGKILL) and still_running(ours)
        not_carrying = Carrier(other.pid, proc_start_time(other.pid), other.pid)
        assert not carriers.send(not_carrying, ID, signal.SIGKILL) and still_running(other)
        assert carriers.send(Carrier(ours.pid, start, ours.pid), ID, signal.SIGKILL)
        assert ours.wait(HUNG_S) == -signal.SIGKILL
    finally:
        for p in (ours, other):
            p.kill()
            p.wait(10)


_FORKER = textwrap.dedent("""
    import os, sys, time
    # forks a new child every millisecond (each does nothing but wait), up to 300: a daemon forking while it is killed
    for _ in range(300):
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        time.sleep(0.001)
    time.sleep(600)
""")


def test_what_forks_while_it_is_being_killed_is_found_by_the_next_round():
    forker = subprocess.Popen([sys.executable, "-c", _FORKER], start_new_session=True,
                              env={**os.environ, SERVER_ID_VAR: ID})
    try:
        wait_for("the forker's children", lambda: len(carriers.find(ID) or ()) > 5, 30)
        ended = carriers.kill_all(ID, SYSTEM)
        assert ended.left == [] and carriers.find(ID) == [], "a carrier outlived the rounds"
        assert forker.wait(HUNG_S) == -signal.SIGKILL and len(ended.killed) > 5
    finally:
        carriers.kill_all(ID, SYSTEM)
        forker.kill()
        forker.wait(10)


def _pid_dir(root: Path, pid: int | str, environ: bytes | None = None, state: str = "S") -> Path:
    d = root / str(pid)
    d.mkdir()
    (d / "stat").write_text(f"{pid} (x y) {state} 1 {pid} {pid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0")
    if environ is not None:
        (d / "environ").write_bytes(environ)
    return d


def test_the_scan_takes_a_proc_that_lies_in_its_stride(tmp_path):
    """Unreadable, vanished, linked, FIFO, oversized and cut environments, broken and zombie stats: each is no
    carrier and no error; the one well-formed carrier is found."""
    entry = f"{SERVER_ID_VAR}={ID}".encode()
    cap = carriers.ENVIRON_MAX_BYTES
    root = tmp_path / "proc"
    root.mkdir()
    _pid_dir(root, 100, b"PATH=/bin\0" + entry + b"\0HOME=/\0")
    _pid_dir(root, 101).joinpath("environ").mkdir()  # not a file
    _pid_dir(root, 102)  # vanished between the listing and the read
    _pid_dir(root, 103).joinpath("environ").symlink_to("/dev/zero")
    os.mkfifo(_pid_dir(root, 104) / "environ")  # no writer: a read that would block
    _pid_dir(root, 105, b"J=" + b"j" * cap + b"\0" + entry + b"\0")  # past the bound
    _pid_dir(root, 106, b"J=" + b"j" * (cap - len(entry) - 4) + b"\0" + entry + b"ff\0")  # the bound cuts a longer id
    (_pid_dir(root, 107, entry + b"\0") / "stat").write_text("garbage")
    _pid_dir(root, 108, entry + b"\0", state="Z")
    _pid_dir(root, "12a", entry + b"\0")
    _pid_dir(root, "self", entry + b"\0")
    assert carriers.find(ID, proc=str(root)) == [Carrier(100, 777, 100)]
    assert carriers.find(ID, proc=str(tmp_path / "no-proc")) is None


def test_a_teardown_kills_a_sigterm_deaf_daemon_when_the_grace_runs_out(tmp_path):
    """The group's leader ends on SIGTERM; its setsid daemon ignores it and is SIGKILLed after the grace, on a
    FakeClock (no real grace waited): nothing is left, so the server's active/ record goes."""
    script = textwrap.dedent("""
        import os, signal, sys, time
        if os.fork() == 0:
            os.setsid()
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
            os.rename(sys.argv[1] + ".tmp", sys.argv[1])
            time.sleep(600)
            os._exit(0)
        time.sleep(600)
    """)
    leader = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "daemon")], start_new_session=True,
                              env={**os.environ, SERVER_ID_VAR: ID})
    daemon = 0
    try:
        daemon = int(wait_for("the daemon", lambda: (tmp_path / "daemon").exists()
                              and (tmp_path / "daemon").read_text(), 30))
        record = tmp_path / "case.json"
        record.write_text("{}")
        clock = FakeClock()
        server = ProcessServer(leader, ["x"], 0, record, clock, server_id=ID)  # type: ignore[arg-type]  # a stand-in leader
        stop = server.stop(grace_s=3.0)
        assert (stop.how, stop.exit_code, stop.left) == (Stopped.killed, -signal.SIGTERM, 0), stop
        assert gone(daemon), "the TERM-deaf daemon outlived the teardown"
        assert server.left == [] and not record.exists()
        assert 3.0 <= sum(clock.slept) < 3.0 + REAP_S + carriers.KILL_ROUNDS * carriers.KILL_WAIT_S
    finally:
        kill_pids([daemon] if daemon else [])
        leader.kill()
        leader.wait(10)
