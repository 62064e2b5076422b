"""Watching one boot: one deadline over four signals, a sighting as soon as one of them is decisive.

- a refusal line decides at once (vLLM takes seconds more to exit), then the exit code and the rest of the log are
  collected for `linger_s`;
- the server's exit decides once the lines still in the pipe are read (the refusal may be among them);
- /health 200 decides once the listener is proven ours and, with `probe`, one completion has been served;
- the deadline decides.

The watch says what it saw (harness.verdict.policy.Sighting); what that makes the cell — refused, crashed, ... — is the
verdict policy's to decide (harness.verdict.policy), with what the runtime and the executor know besides.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from harness.clock import SYSTEM, Clock
from harness.logfacts import LogFacts, LogParser, Signal
from harness.logfacts.timeline import Milestone, PhaseAt
from harness.predict.serve_flags import eager
from harness.runtime.base import Server
from harness.units import fmt_seconds
from harness.verdict.catalogue import Reason
from harness.verdict.policy import CAUSED, Sighting, SightingKind
from harness.watch.events import Event, EventKind, EventQueue
from harness.watch.health import HealthPoller, ProbeResult, probe_completion
from harness.watch.logsink import DEFAULT_MAX_BYTES, LogSink
from harness.watch.timeline import TimelineRecorder

#: After the server exited, how long to wait for the last lines still in the pipe.
DRAIN_S = 3.0
#: The longest the loop blocks on the queue before it looks at the clock again.
SLICE_S = 0.1
#: When /health answered but the listener is not (or no longer) ours: how long to wait for our own server's exit.
EXITED_AFTER_HEALTH_S = 1.0


@dataclass(frozen=True)
class WatchConfig:
    timeout_s: float
    probe: bool = True
    linger_s: float = 10.0
    poll_interval_s: float = 0.25
    health_path: str = "/health"
    probe_timeout_s: float = 60.0
    #: The saved log's cap, and the characters of log read for facts before lines are only skimmed for what
    #: decides (harness.watch.logsink, LogParser's `full_chars`); None: every line kept and read.
    log_max_bytes: int | None = DEFAULT_MAX_BYTES


@dataclass
class Observation:
    """What one watch saw: the decisive sighting, when each thing happened (seconds from the start) and the log's
    facts."""

    sighting: Sighting
    exit_code: int | None = None
    ready_s: float | None = None
    ready_line_s: float | None = None
    event_s: float | None = None
    verdict_s: float | None = None
    facts: LogFacts = field(default_factory=lambda: LogParser().facts)


PollerFactory = Callable[[str, EventQueue, Clock, float], HealthPoller]
Prober = Callable[[str, float], ProbeResult]


def _default_poller(config: WatchConfig) -> PollerFactory:
    def make(url: str, events: EventQueue, clock: Clock, deadline: float) -> HealthPoller:
        return HealthPoller(url, events, clock, deadline, config.poll_interval_s, config.health_path)

    return make


def _exit_detail(code: int) -> str:
    if code < 0:
        return f"server was killed by signal {-code} before it was ready"
    if code == 0:
        return "server exited with code 0 before it was ready"
    return f"server exited with code {code} before it was ready, and its log names no known refusal"


class Watch:
    """One boot's watch. `run()` returns what it saw; the caller tears the server down afterwards."""

    def __init__(self, server: Server, events: EventQueue, sink: LogSink, config: WatchConfig,
                 clock: Clock = SYSTEM, poller: PollerFactory | None = None, prober: Prober = probe_completion,
                 started_at: float | None = None, timeline: TimelineRecorder | None = None):
        self.server, self.events, self.sink, self.config = server, events, sink, config
        self.clock = clock
        self.start = clock.now() if started_at is None else started_at
        #: The cell's milestones: the runtime marked its own before the watch began; lines, /health and the probe here.
        self.timeline = timeline or TimelineRecorder(clock, self.start)
        self.deadline = self.start + config.timeout_s
        self.parser = LogParser(full_chars=config.log_max_bytes)
        self._late_refusals = 0
        self._poller_factory = poller or _default_poller(config)
        self._prober = prober
        self.exit_code: int | None = None
        self.eof = False
        #: When the server last logged a readiness line: how long the verdict took after that is the health
        #: poll's and the probe's latency.
        self.ready_line_t: float | None = None

    def _next(self, timeout: float):
        """The next event; a quiet slice is when the log file catches up, so `tail -f` and a SIGKILL lose nothing."""
        ev = self.events.get(timeout)
        if ev is None:
            self.sink.flush()
        return ev

    def _rel(self, t: float | None) -> float | None:
        return None if t is None else round(t - self.start, 3)

    def _exit_waiter(self) -> None:
        code = self.server.wait(None)
        self.events.put(Event(EventKind.exit, self.clock.now(), code=code))

    def _found(self, kind: SightingKind, detail: str, event_t: float | None,
               ready_t: float | None = None) -> Observation:
        facts = self.parser.facts
        refusal = facts.refusal if kind == SightingKind.refusal else None
        cause = facts.cause if kind in CAUSED else None
        return Observation(Sighting(kind, detail, refusal=refusal, exit_code=self.exit_code, cause=cause),
                           exit_code=self.exit_code,
                           ready_s=self._rel(ready_t), ready_line_s=self._rel(self.ready_line_t),
                           event_s=self._rel(event_t), verdict_s=self._rel(self.clock.now()))

    def _take(self, ev: Event) -> Signal:
        if ev.kind == EventKind.line:
            self.sink.write(ev.text or "")
            signal = self.parser.feed(ev.text or "")
            for milestone in self.parser.take_milestones():
                self.timeline.mark(milestone, ev.t)  # when the line arrived, on our clock
            if self.parser.late_refusals != self._late_refusals:
                self._late_refusals = self.parser.late_refusals
                self.sink.note("the line above reads like a refusal, but the server had said it was ready: not read "
                               "as one (readiness ends the refusal watch)")
            return signal
        if ev.kind == EventKind.eof:
            self.eof = True
        elif ev.kind == EventKind.exit:
            self.exit_code = ev.code
        return Signal.NONE

    def phase(self, t: float) -> PhaseAt:
        """Where the server is at `t`; the phases this boot skips (graphs under --enforce-eager or on a CPU, compile
        under --enforce-eager) are never named."""
        facts = self.parser.facts
        return self.timeline.phase(t, facts.skipped(eager(self.server.argv, facts.vllm_version)))

    def _refusal_found(self, t: float) -> Observation:
        refusal = self.parser.facts.refusal
        assert refusal is not None
        # the line says only "failed": the root cause is the detail
        generic = refusal.kind == Reason.engine_core_failed_root_cause_not_shown
        return self._found(SightingKind.refusal,
                           (self.parser.facts.error_line or refusal.message) if generic else refusal.message,
                           t)

    def _drain_after_exit(self, t_exit: float) -> Observation:
        """The server is gone; its last lines may still be in the pipe, and they may hold the refusal."""
        until = self.clock.now() + DRAIN_S
        while not self.eof and self.clock.now() < until:
            ev = self._next(min(SLICE_S, until - self.clock.now()))
            if ev is not None and self._take(ev) is Signal.REFUSAL:
                return self._refusal_found(t_exit)
        if self.parser.facts.refusal is not None:
            return self._refusal_found(t_exit)
        detail = _exit_detail(self.exit_code if self.exit_code is not None else -1)
        if self.parser.facts.error_line:
            detail = f"{detail}; last error: {self.parser.facts.error_line}"
        return self._found(SightingKind.exit, detail, t_exit)

    def _on_healthy(self, t: float) -> Observation:
        code = self.server.wait(0)
        if code is None and not self.server.owns_listener():
            code = self.server.wait(EXITED_AFTER_HEALTH_S)  # ours may have answered and died, socket and all
            if code is None:
                return self._found(SightingKind.stale_listener, f"{self.server.base_url} answered /health 200 but the "
                                   "listener is not our server", t)
        if code is not None:
            # Our own server exited around its first 200: a crash, whoever answered. `stale_server` would say that our
            # server was fine and someone else's was in the way.
            return self._exited_after_health(code, "right after /health answered 200", t)
        self.timeline.mark(Milestone.healthy, t)
        self.parser.listening()  # ours answered: no later line is a refusal, whatever it reads like
        if not self.config.probe:
            return self._found(SightingKind.healthy, "/health answered 200", t, ready_t=t)
        remaining = max(1.0, self.deadline - self.clock.now())
        result = self._probe(min(self.config.probe_timeout_s, remaining))
        if result.ok:
            self.timeline.mark(Milestone.served)
            return self._found(SightingKind.healthy, f"/health answered 200; {result.detail}", t, ready_t=t)
        self.sink.note(f"probe failed: {result.detail}")
        code = self.exit_code if self.exit_code is not None else self.server.wait(0)
        if code is None and result.connection_lost:
            code = self.server.wait(EXITED_AFTER_HEALTH_S)  # a lost connection: see whether our server went with it
        if code is not None:
            return self._exited_after_health(code, f"during the probe ({result.detail})", t)
        return self._found(SightingKind.probe_failed, result.detail, t, ready_t=t)

    def _exited_after_health(self, code: int, when: str, t: float) -> Observation:
        self.exit_code = code
        return self._found(SightingKind.exit_after_health, f"server exited with code {code} {when}", t, ready_t=t)

    def _probe(self, timeout_s: float) -> ProbeResult:
        """The probe runs in its own thread while this loop goes on writing the log: a first completion can take long
        (a compile, a warm-up), and the lines a server prints meanwhile must go to the file, not pile up in memory."""
        box: list[ProbeResult] = []

        def probe() -> None:
            try:
                box.append(self._prober(self.server.base_url, timeout_s))
            finally:
                self.events.put(Event(EventKind.probed, self.clock.now()))

        threading.Thread(target=probe, daemon=True, name="probe").start()
        while True:
            ev = self._next(SLICE_S)
            if ev is None:
                continue
            if ev.kind == EventKind.probed:
                break
            self._take(ev)
        return box[0] if box else ProbeResult(False, "the probe raised an exception")

    def _linger(self) -> None:
        """After a refusal: give the server `linger_s` to exit on its own, keeping every line it still writes."""
        until = self.clock.now() + self.config.linger_s
        while self.clock.now() < until and not (self.eof and self.exit_code is not None):
            ev = self._next(min(SLICE_S, until - self.clock.now()))
            if ev is not None:
                self._take(ev)

    def run(self) -> Observation:
        threading.Thread(target=self._exit_waiter, daemon=True, name="exit-waiter").start()
        poller = self._poller_factory(self.server.base_url, self.events, self.clock, self.deadline).start()
        try:
            seen = self._watch(poller)
        finally:
            poller.stop()
        if seen.sighting.kind == SightingKind.refusal:
            self._linger()
            seen.exit_code = self.exit_code
        seen.facts = self.parser.facts
        if seen.sighting.kind in CAUSED:  # what the server wrote while it went down may hold the root cause
            seen.sighting = replace(seen.sighting, cause=seen.facts.cause)
        return seen

    def collect_rest(self, limit_s: float = 2.0) -> None:
        """After teardown: the lines the server wrote while being stopped still belong in its log."""
        until = self.clock.now() + limit_s
        while not self.eof and self.clock.now() < until:
            ev = self._next(min(SLICE_S, until - self.clock.now()))
            if ev is not None:
                self._take(ev)

    def _watch(self, poller: HealthPoller) -> Observation:
        while True:
            now = self.clock.now()
            if now >= self.deadline:
                return self._found(SightingKind.deadline, f"no verdict within {fmt_seconds(self.config.timeout_s)}: "
                                   f"{self.phase(self.deadline).describe()}", self.deadline)
            ev = self._next(min(SLICE_S, self.deadline - now))
            if ev is None:
                continue
            signal = self._take(ev)
            if signal is Signal.REFUSAL:
                return self._refusal_found(ev.t)
            if signal is Signal.READY:
                self.ready_line_t = ev.t  # the last one ("Application startup complete.") is when it listens
                poller.wake()
            elif ev.kind == EventKind.exit:
                return self._drain_after_exit(ev.t)
            elif ev.kind == EventKind.healthy:
                return self._on_healthy(ev.t)
