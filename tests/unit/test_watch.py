"""How the watch loop decides, shown with a fake runtime (a small class, not a mock) and an injectable clock."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from harness.clock import FakeClock
from harness.masking import Masker
from harness.verdict.policy import Evidence, decide
from harness.watch.events import Event, ThreadedEvents
from harness.watch.health import ProbeResult
from harness.watch.logsink import LogSink
from harness.watch.loop import Watch, WatchConfig

REFUSAL = ("ERROR 11-29 10:00:01 [kv_cache_utils.py:700] To serve at least one request with the model's max seq len "
           "(4096), (0.02 GiB KV cache is needed, which is larger than the available KV cache memory (0.01 GiB). "
           "Based on the available memory, the estimated maximum model length is 3072. Try increasing ...")


class ScriptedEvents(ThreadedEvents):
    """Events from a script; an empty queue advances the fake clock by the wait instead of sleeping."""

    def __init__(self, clock: FakeClock, script: list[tuple[float, Event]]):
        super().__init__(clock)
        self.fake = clock
        self.script = sorted(script, key=lambda x: x[0])

    def get(self, timeout: float) -> Event | None:
        if self.script and self.script[0][0] <= self.fake.now() + timeout:
            at, ev = self.script.pop(0)
            self.fake.advance(at - self.fake.now())
            return Event(ev.kind, self.fake.now(), ev.text, ev.code)
        self.fake.advance(timeout)
        return super().get(0)


class FakeServer:
    base_url = "http://127.0.0.1:1"
    port = 1
    argv = ["fake"]

    def __init__(self, owns: bool = True):
        self.owns = owns
        self.exited = threading.Event()
        self.code: int | None = None

    def wait(self, timeout=None):
        self.exited.wait(timeout if timeout is not None else None) if timeout != 0 else None
        return self.code

    def owns_listener(self) -> bool:
        return self.owns

    def stop(self, grace_s: float = 5.0):
        self.exited.set()
        return self.code

    def container_info(self):
        return None

    def applied_patches(self):
        return []


class NoPoller:
    """Health comes from the script in these tests, not from HTTP."""

    def __init__(self, *a):
        self.woken = 0

    def start(self):
        return self

    def wake(self):
        self.woken += 1

    def stop(self):
        pass


def line(t: float, text: str) -> tuple[float, Event]:
    return (t, Event("line", 0, text=text))


def watch(tmp_path: Path, script, *, timeout_s=900.0, probe=True, probe_ok=True, owns=True, linger_s=10.0,
          prober=None):
    clock = FakeClock()
    script = [(clock.now() + t, ev) for t, ev in script]
    events = ScriptedEvents(clock, script)
    sink = LogSink(tmp_path / "cell.log", Masker())
    server = FakeServer(owns)
    w = Watch(server, events, sink, WatchConfig(timeout_s=timeout_s, probe=probe, linger_s=linger_s), clock=clock,
              poller=NoPoller, prober=(lambda url, t: ProbeResult(probe_ok, "probe said so")) if prober is None
              else lambda url, t: prober(server))
    seen = w.run()
    sink.close()
    return Seen(seen, decide(Evidence(sighting=seen.sighting)))


class Seen:
    """What the watch saw, with the verdict the policy gives it (the watch itself decides no outcome)."""

    def __init__(self, seen, decision):
        self.seen, self.outcome, self.reason, self.detail = seen, decision.outcome, decision.reason, decision.detail

    def __getattr__(self, name):
        return getattr(self.seen, name)


def test_health_200_and_a_served_token_is_booted(tmp_path):
    v = watch(tmp_path, [line(1, "INFO Available KV cache memory: 1.5 GiB"), (40, Event("healthy", 0))])
    assert (v.outcome, v.reason) == ("booted", "ready")
    assert v.ready_s == pytest.approx(40) and v.facts.kv.available_gib == 1.5


def test_a_refusal_line_decides_at_once_without_waiting_for_the_exit(tmp_path):
    v = watch(tmp_path, [line(30, REFUSAL), (38, Event("exit", 0, code=1)), (38.1, Event("eof", 0))])
    assert (v.outcome, v.reason) == ("refused", "kv_cache_too_small")
    assert v.event_s == pytest.approx(30) and v.verdict_s == pytest.approx(30)
    # the exit code is still collected within linger_s
    assert v.exit_code == 1
    r = v.facts.refusal
    assert (r.max_seq_len, r.needed_gib, r.available_gib, r.estimated_max_model_len) == (4096, 0.02, 0.01, 3072)


def test_an_exit_without_a_known_refusal_is_a_crash(tmp_path):
    v = watch(tmp_path, [line(1, "Traceback (most recent call last):"), (2, Event("exit", 0, code=3)),
                         (2.1, Event("eof", 0))])
    assert (v.outcome, v.reason, v.exit_code) == ("crashed", "exited", 3)


def test_a_refusal_still_in_the_pipe_when_the_process_exits_is_a_refusal(tmp_path):
    v = watch(tmp_path, [(5, Event("exit", 0, code=1)), line(5.2, REFUSAL), (5.3, Event("eof", 0))])
    assert (v.outcome, v.reason) == ("refused", "kv_cache_too_small")


def test_exit_zero_before_ready_is_a_crash(tmp_path):
    v = watch(tmp_path, [(1, Event("exit", 0, code=0)), (1.1, Event("eof", 0))])
    assert (v.outcome, v.reason) == ("crashed", "exited_before_ready")


def test_only_the_generic_engine_failure_line_is_a_crash_named_engine_init_failed(tmp_path):
    v = watch(tmp_path, [line(3, "RuntimeError: Engine core initialization failed. See root cause above. "
                                 "Failed core proc(s): {}"), (4, Event("exit", 0, code=1)), (4.1, Event("eof", 0))])
    assert (v.outcome, v.reason) == ("crashed", "engine_core_failed_root_cause_not_shown")


def test_nothing_decisive_before_the_deadline_is_a_timeout(tmp_path):
    v = watch(tmp_path, [line(1, "INFO loading")], timeout_s=900)
    assert (v.outcome, v.reason) == ("timeout", "deadline")
    assert v.verdict_s == pytest.approx(900, abs=0.2)


def test_a_failed_probe_after_health_is_a_crash(tmp_path):
    v = watch(tmp_path, [(40, Event("healthy", 0))], probe_ok=False)
    assert (v.outcome, v.reason) == ("crashed", "probe_failed")


def test_a_server_that_dies_under_the_probe_is_a_crash_that_says_it_exited(tmp_path):
    def dies(server: FakeServer) -> ProbeResult:
        server.code = 1
        return ProbeResult(False, "probe failed: ConnectionError: reset by peer", connection_lost=True)

    v = watch(tmp_path, [(40, Event("healthy", 0))], prober=dies)
    assert (v.outcome, v.reason, v.exit_code) == ("crashed", "exited", 1)
    assert "during the probe" in v.detail and "reset by peer" in v.detail


def test_a_lost_probe_connection_to_a_server_that_lives_on_is_probe_failed(tmp_path):
    v = watch(tmp_path, [(40, Event("healthy", 0))],
              prober=lambda server: ProbeResult(False, "probe failed: ConnectionError", connection_lost=True))
    assert (v.outcome, v.reason) == ("crashed", "probe_failed")


def test_without_probe_health_alone_is_booted(tmp_path):
    v = watch(tmp_path, [(40, Event("healthy", 0))], probe=False, probe_ok=False)
    assert v.outcome == "booted"


def test_health_from_a_listener_that_is_not_ours_is_an_error_never_booted(tmp_path):
    v = watch(tmp_path, [(2, Event("healthy", 0))], owns=False)
    assert (v.outcome, v.reason) == ("error", "stale_server")


def test_every_line_goes_to_the_log_file(tmp_path):
    watch(tmp_path, [line(1, "first"), line(2, REFUSAL), line(3, "after the refusal"), (4, Event("exit", 0, code=1)),
                     (4.1, Event("eof", 0))])
    text = (tmp_path / "cell.log").read_text()
    assert "first" in text and "To serve at least one request" in text and "after the refusal" in text


def test_the_log_file_keeps_up_while_the_server_is_quiet(tmp_path):
    """What the server said reaches the file at the first quiet moment, not when 8 KiB have piled up or the cell ends:
    an engineer tails it during a ten-minute boot, and a SIGKILLed harness leaves it whole."""
    seen: list[str] = []

    def prober(_server):
        seen.append((tmp_path / "cell.log").read_text())  # the loop is still running: nothing has closed the file
        return ProbeResult(True, "ok")

    watch(tmp_path, [line(1, "INFO Loading weights took 300 s"), (40, Event("healthy", 0))], prober=prober)
    assert "Loading weights took 300 s" in seen[0]


# ---------------------------------------------------------------- readiness ends the refusal watch

READY = "INFO 11-29 10:00:02 [api_server.py:3] Starting vLLM API server 0 on http://127.0.0.1:1"
STARTUP = "INFO:     Application startup complete."


def test_a_refusal_line_after_the_server_said_it_was_ready_is_no_refusal(tmp_path):
    v = watch(tmp_path, [line(1, READY), line(1.1, STARTUP), line(1.2, REFUSAL), (3, Event("healthy", 0))])
    assert (v.outcome, v.reason) == ("booted", "ready") and v.facts.refusal is None
    assert v.facts.refusal_after_ready.startswith("To serve at least one request")
    log = (tmp_path / "cell.log").read_text().splitlines()
    assert log[log.index(REFUSAL) + 1].startswith("[boot-harness] the line above reads like a refusal")


def test_a_server_that_dies_after_a_late_refusal_line_is_a_crash_not_a_refusal(tmp_path):
    v = watch(tmp_path, [line(1, STARTUP), line(1.2, REFUSAL), (2, Event("exit", 0, code=1)), (2.1, Event("eof", 0))])
    assert (v.outcome, v.reason, v.exit_code) == ("crashed", "exited", 1)


def test_a_refusal_line_before_the_listening_line_still_decides(tmp_path):
    v = watch(tmp_path, [line(1, REFUSAL), line(1.1, READY), (3, Event("healthy", 0))])
    assert (v.outcome, v.reason) == ("refused", "kv_cache_too_small")


def test_health_200_ends_the_refusal_watch_of_a_server_that_never_logs_a_listening_line():
    from harness.logfacts import LogParser, Signal

    parser = LogParser()
    parser.listening()  # what the watch says once /health answered 200 and the listener is ours
    assert parser.feed(REFUSAL) is Signal.NONE and parser.facts.refusal is None
    assert parser.late_refusals == 1


# ---------------------------------------------------------------- the log's cap and the parser's bound

FILLER = "WARNING 11-29 10:00:00 [flood.py:1] the same warning again, and again: " + "x" * 30  # 100 characters


def test_a_log_past_its_cap_keeps_its_head_and_its_last_lines(tmp_path):
    cap = 64 * 1024
    sink = LogSink(tmp_path / "cell.log", Masker(), max_bytes=cap)
    sent = [f"{i:06d} {FILLER}" for i in range(10_000)]  # ~1 MB: 16 times the cap
    for text in sent:
        sink.write(text)
    sink.close()
    data = (tmp_path / "cell.log").read_bytes()
    lines = data.decode().removesuffix("\n").split("\n")
    cut = sink.record()
    assert len(data) <= cap + 512 and cut is not None
    assert (cut.written_lines, cut.written_bytes) == (10_000, sum(len(t) + 1 for t in sent))
    (gap,) = [i for i, x in enumerate(lines) if x.startswith("[boot-harness]")]
    head, tail = lines[:gap], lines[gap + 1:]
    assert lines[gap].startswith(f"[boot-harness] {cut.dropped_lines} lines (")
    assert f"last {len(tail)} lines" in lines[gap]
    assert "cap of 64.0 KiB (log_max_mb)" in lines[gap]
    assert head == sent[:len(head)] and tail == sent[-len(tail):]  # nothing reordered, nothing torn
    assert len(head) + cut.dropped_lines + len(tail) == 10_000
    assert cut.dropped_bytes == sum(len(t) + 1 for t in sent[len(head):-len(tail)])
    assert cap // 4 <= sum(len(t) + 1 for t in tail) <= cap // 2  # the tail: between one and two rotations
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cell.log"]  # the tail files were ours, and are gone


def test_a_log_within_its_cap_or_without_one_is_whole(tmp_path):
    for cap in (64 * 1024, None):  # 50 KB: past the head's half of the cap, within the cap
        sink = LogSink(tmp_path / "cell.log", Masker(), max_bytes=cap)
        for _ in range(500):
            sink.write(FILLER)
        sink.close()
        assert (tmp_path / "cell.log").read_text() == (FILLER + "\n") * 500 and sink.record() is None


def test_past_its_bound_the_parser_only_skims_and_still_decides(monkeypatch):
    from harness.logfacts import LogParser, Signal
    from harness.logfacts import parser as log_parser

    read = {"n": 0}
    real = log_parser.LogParser._read

    def counted(self, text):
        read["n"] += 1
        return real(self, text)

    monkeypatch.setattr(log_parser.LogParser, "_read", counted)
    parser = LogParser(full_chars=100 * len(FILLER))
    for _ in range(100):
        parser.feed(FILLER)
    before = read["n"]
    for _ in range(50_000):
        parser.feed(FILLER)
        parser.feed("INFO 11-29 10:00:01 [gpu_worker.py:1] Model loading took 1.5 GiB and 2.0 seconds")
    assert read["n"] == before  # 100,000 lines past the bound, none read in full
    for _ in range(5_000):  # a flood of KV lines: read for the first SKIM_TELLING only
        parser.feed("INFO 11-29 10:00:01 [gpu_worker.py:1] Available KV cache memory: 1.5 GiB")
    assert read["n"] == before + log_parser.SKIM_TELLING
    assert parser.feed("x" * 60_000 + REFUSAL) is Signal.NONE  # a refusal's words past the skimmed head
    assert parser.feed(REFUSAL) is Signal.REFUSAL
    facts = parser.facts
    assert facts.kv.available_gib == 1.5 and facts.kv.model_load_gib is None
    assert facts.skimmed_lines == 105_002 and facts.lines == 105_102
