"""How each server was stopped, as the cell record holds it (harness.runtime.records.ServerStop): the FakeRuntime's
servers through a whole run (a clean SIGTERM, a server gone before the stop, a deaf one SIGKILLed after the grace on
a FakeClock), the report's one line for the deaf one only, and a container's stop told from the engine's last state
(exit code 137 or the server's own, OOMKilled, the stop's seconds) without an engine."""

from __future__ import annotations

import threading

import pytest

from harness.boot.session import RunOptions, RunSession
from harness.clock import FakeClock
from harness.masking import Masker
from harness.runtime.base import CellContext
from harness.runtime.container_server import ContainerServer
from harness.runtime.fake import FakeRuntime, Script
from harness.runtime.records import Stopped
from tests.builders import fake_cells

GRACE_S = 5.0  # the FakeServer's default: the runner stops with the server's own grace


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """c_a boots and honours SIGTERM, c_b is refused and exits on its own, c_d boots but ignores SIGTERM."""
    tmp_path = tmp_path_factory.mktemp("stops")
    loaded, cells = fake_cells(tmp_path, values=("a", "b", "d"))
    clock = FakeClock()
    runtime = FakeRuntime({"c_b": Script.refused_kv(), "c_d": Script(Script.booted().lines, deaf=True)}, clock=clock)
    session = RunSession.open(loaded, cells, RunOptions(results_dir=tmp_path / "r"), runtime=runtime)
    results = {r.cell_id: r for r in session.run()}
    session.finish()
    return results, session.run_dir


def test_each_record_says_how_its_server_was_stopped(stopped_run):
    results, _ = stopped_run
    got = {cid: (r.stop.how, r.stop.exit_code, r.stop.gone_s, r.exit_code) for cid, r in results.items() if r.stop}
    assert got == {"c_a": (Stopped.terminated, -15, 0.0, -15),
                   "c_b": (Stopped.exited, 1, 0.0, 1),
                   "c_d": (Stopped.killed, -9, GRACE_S, -9)}
    assert {r.stop.grace_s for r in results.values() if r.stop} == {GRACE_S}


def test_the_record_on_disk_holds_the_stop_and_loads_again(stopped_run):
    from harness.results.store import load_run

    _, run_dir = stopped_run
    run, _ = load_run(run_dir)
    assert {c.cell_id: c.stop.how for c in run.cells if c.stop} == {
        "c_a": Stopped.terminated, "c_b": Stopped.exited, "c_d": Stopped.killed}


def test_the_report_names_the_killed_server_and_nothing_for_clean_stops(stopped_run, capsys, monkeypatch, tmp_path):
    from harness.cli import main

    _, run_dir = stopped_run
    for name in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    md = tmp_path / "r.md"
    capsys.readouterr()
    assert main(["report", str(run_dir), "--markdown", str(md)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    said = "ignored SIGTERM; SIGKILLed after the 5.0 s grace, gone 0.0 s later"
    assert text.count(said) == 1, text
    assert md.read_text().count(said) == 1
    assert "SIGTERM" not in text.replace(said, ""), "a clean stop says nothing"


def test_a_fake_servers_second_stop_returns_the_first(tmp_path):
    _, (cell, _) = fake_cells(tmp_path)
    ctx = CellContext(run_dir=tmp_path, work_dir=tmp_path, masker=Masker(set()), matrix_dir=tmp_path)
    server = FakeRuntime(default=Script.hangs()).start(cell, ctx, lambda _: None)
    first = server.stop(1.0)
    assert server.stop(7.0) is first and (first.how, first.grace_s) == (Stopped.terminated, 1.0)


# ---------------------------------------------------------------------------------------------------- containers


class _Container:
    """As much of docker-py's Container as a stop reads: its stop takes `takes_s` on the clock, then the state."""

    id = name = "c0"

    def __init__(self, clock: FakeClock, state: dict, takes_s: float, fails: Exception | None = None):
        self.clock, self.attrs, self.takes_s, self.fails = clock, {"State": {"Status": "running"}}, takes_s, fails
        self.final = state
        self.stopped_with: list[int] = []

    @property
    def status(self) -> str:
        return self.attrs["State"]["Status"]

    def reload(self) -> None:
        pass

    def stop(self, timeout: int) -> None:
        self.stopped_with.append(timeout)
        if self.fails:
            raise self.fails
        self.clock.advance(self.takes_s)
        self.attrs = {"State": {"Status": "exited", **self.final}}


class _Conn:
    engine, version = "docker", "27"

    def trouble(self, call: str, exc: BaseException) -> str | None:
        return f"docker: `{call}` did not answer" if isinstance(exc, TimeoutError) else None


class _Tc:
    def __init__(self, container):
        self.container = container

    def get_wrapped_container(self):
        return self.container

    def stop(self, **kwargs) -> None:
        pass


def _container_stop(state: dict, takes_s: float, running: bool = True, fails: Exception | None = None):
    clock = FakeClock()
    container = _Container(clock, state, takes_s, fails)
    server = ContainerServer.__new__(ContainerServer)  # no engine: the state machine of a stop only
    server.conn, server.tc, server.clock, server.container = _Conn(), _Tc(container), clock, container
    server._state, server._stopping, server._stopped, server.engine_trouble = None, False, None, None
    server._lock = threading.Lock()
    if not running:
        container.attrs = {"State": {"Status": "exited", **state}}
    return server.stop(grace_s=2.0), container


@pytest.mark.parametrize("state,takes_s,how,gone_s", [
    ({"ExitCode": 143}, 0.3, Stopped.terminated, 0.3),  # the init's forward of TERM ended the server
    ({"ExitCode": 0}, 0.3, Stopped.terminated, 0.3),  # the server caught TERM and exited its own way
    ({"ExitCode": 137}, 2.4, Stopped.killed, 2.4),  # the engine's SIGKILL once its 2 s ran out
    ({"ExitCode": 137, "OOMKilled": True}, 2.4, Stopped.unknown, None),  # the kernel's kill, not the grace's
    ({"ExitCode": 137}, 0.5, Stopped.unknown, None),  # a SIGKILL inside the grace: not the engine's stop
])
def test_a_containers_stop_is_told_from_its_exit_code_and_never_guessed(state, takes_s, how, gone_s):
    stop, container = _container_stop(state, takes_s)
    assert (stop.how, stop.gone_s, stop.exit_code, stop.grace_s) == (how, gone_s, state["ExitCode"], 2)
    assert container.stopped_with == [2]
    assert (stop.note is None) == (how != Stopped.unknown), stop.note


def test_a_container_gone_before_the_stop_exited_and_one_the_engine_would_not_stop_is_unknown():
    stop, container = _container_stop({"ExitCode": 1}, 0.0, running=False)
    assert (stop.how, stop.exit_code, stop.gone_s, container.stopped_with) == (Stopped.exited, 1, 0.0, [])
    stop, _ = _container_stop({}, 0.0, fails=TimeoutError())
    assert stop.how == Stopped.unknown and stop.note == "docker: `stop` did not answer"
