"""The process runtime without a process: its preflight, and how a stop treats a process group (SIGTERM, the grace,
SIGKILL, members that linger), on a FakeClock and a group on paper. The same runtime on real processes, with a
scripted fake vLLM, is tests/integration/test_process_runtime.py."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from harness.clock import FakeClock
from harness.errors import RuntimeUnavailable
from harness.runtime.process import REAP_S, STOP_POLL_S, ProcessRuntime, ProcessServer
from harness.runtime.records import Stopped


def test_a_missing_command_is_a_clear_preflight_error(tmp_path):
    with pytest.raises(RuntimeUnavailable, match="not on PATH"):
        ProcessRuntime(["no-such-vllm-binary"]).preflight([])


class _Leader:
    """The Popen of the group's leader, as much of it as a stop uses."""

    pid = 424242
    returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode


class _Group(ProcessServer):
    """A server whose process group is on paper: SIGTERM ends it `term_s` later (never: it ignores SIGTERM), SIGKILL
    ends the leader at once and the rest of the group `linger_s` later."""

    def __init__(self, tmp_path: Path, clock: FakeClock, term_s: float | None = 0.0, linger_s: float = 0.0):
        (tmp_path / "c.json").write_text("{}")
        super().__init__(_Leader(), ["vllm", "serve"], 8000, tmp_path / "c.json", clock)  # type: ignore[arg-type]  # a stand-in leader
        self.term_s, self.linger_s = term_s, linger_s
        self.signals: list[int] = []
        self.gone_at: float | None = None

    def _signal_group(self, sig: int) -> bool:
        if not self.group_alive():
            return False
        self.signals.append(sig)
        now = self.clock.now()
        if sig == signal.SIGKILL:
            self.proc.returncode = -9
            self.gone_at = min(self.gone_at or float("inf"), now + self.linger_s)
        elif self.term_s is not None and self.gone_at is None:
            self.gone_at = now + self.term_s
        return True

    def group_alive(self) -> bool:
        alive = self.gone_at is None or self.clock.now() < self.gone_at
        if not alive and self.proc.returncode is None:
            self.proc.returncode = -15
        return alive


def test_a_group_that_ends_on_sigterm_is_never_killed(tmp_path):
    clock = FakeClock()
    server = _Group(tmp_path, clock, term_s=1.2)
    stop = server.stop(grace_s=3.0)
    assert (stop.how, stop.exit_code, stop.grace_s, stop.left) == (Stopped.terminated, -15, 3.0, 0)
    assert 1.2 <= stop.gone_s <= 1.2 + 2 * STOP_POLL_S, "gone when the group was, on the stop's clock"
    assert stop.clean and server.signals == [signal.SIGTERM]
    assert 1.2 <= sum(clock.slept) < 1.3, "polled until the group was gone, not for the whole grace"
    assert not (tmp_path / "c.json").exists(), "the group's record goes with it"


def test_a_group_that_ignores_sigterm_is_killed_when_the_grace_runs_out(tmp_path):
    clock = FakeClock()
    server = _Group(tmp_path, clock, term_s=None)
    stop = server.stop(grace_s=3.0)
    assert (stop.how, stop.exit_code, stop.grace_s) == (Stopped.killed, -9, 3.0)
    assert 3.0 <= stop.gone_s <= 3.0 + 2 * STOP_POLL_S and not stop.clean
    assert server.signals == [signal.SIGTERM, signal.SIGKILL]
    assert 3.0 <= sum(clock.slept) < 3.1


def test_a_group_gone_before_the_stop_is_not_signalled_and_says_it_exited(tmp_path):
    clock = FakeClock()
    server = _Group(tmp_path, clock)
    server.gone_at, server.proc.returncode = clock.now(), 1
    stop = server.stop(grace_s=3.0)
    assert (stop.how, stop.exit_code, stop.gone_s) == (Stopped.exited, 1, 0.0)
    assert server.signals == [] and clock.slept == []


def test_members_that_outlive_the_leader_are_killed_again_until_gone(tmp_path):
    clock = FakeClock()
    server = _Group(tmp_path, clock, term_s=None, linger_s=0.5)
    t0 = clock.now()
    stop = server.stop(grace_s=1.0)
    assert stop.how == Stopped.killed and 1.5 <= stop.gone_s <= 1.5 + 2 * STOP_POLL_S, "gone once its members were"
    assert stop.describe() == f"ignored SIGTERM; SIGKILLed after the 1.0 s grace, gone {stop.gone_s - 1:.1f} s later"
    assert server.signals[:2] == [signal.SIGTERM, signal.SIGKILL] and set(server.signals[2:]) == {signal.SIGKILL}
    assert len(server.signals) > 3 and not server.group_alive()
    assert 1.5 <= clock.now() - t0 < 1.6


def test_a_group_that_will_not_die_is_given_up_on_after_the_reap_bound(tmp_path):
    clock = FakeClock()
    server = _Group(tmp_path, clock, term_s=None, linger_s=3600)
    t0 = clock.now()
    stop = server.stop(grace_s=1.0)
    assert server.group_alive(), "gc reaps it later from its record; the stop does not hang"
    assert 1.0 + REAP_S <= clock.now() - t0 < 1.0 + REAP_S + 0.1
    assert (stop.how, stop.gone_s) == (Stopped.left, None) and stop.left >= 1
    assert (tmp_path / "c.json").exists(), "its record stays for gc"


def test_a_stop_is_final(tmp_path):
    clock = FakeClock()
    server = _Group(tmp_path, clock)
    first = server.stop()
    assert server.stop() is first
    assert server.signals == [signal.SIGTERM]
