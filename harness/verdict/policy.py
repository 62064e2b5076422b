"""From raw evidence to a verdict, once: an ordered chain of small rules, the first that applies decides.

The watch only says what it saw (a `Sighting`: a refusal line, an exit, /health, the deadline); the runtime adds what
the engine knows (the container was OOM-killed); the executor adds what the earlier attempt and the GPU wait showed.
`decide` turns all of it into (outcome, reason, detail). Whether that matched the cell's expectation is computed from
the decision alone, by whoever builds the record, once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from harness.logfacts import Refusal
from harness.verdict.catalogue import REASONS, Reason
from harness.verdict.causes import GENERIC_CAUSE, UNCAUGHT, Finding
from harness.verdict.outcome import Outcome


class SightingKind(StrEnum):
    """What kind of decisive thing the watch saw."""

    refusal = "refusal"
    exit = "exit"
    healthy = "healthy"
    probe_failed = "probe_failed"
    exit_after_health = "exit_after_health"
    stale_listener = "stale_listener"
    deadline = "deadline"


@dataclass(frozen=True)
class Sighting:
    """The decisive thing the watch observed, in its own words."""

    kind: SightingKind
    detail: str
    refusal: Refusal | None = None
    exit_code: int | None = None
    cause: Finding | None = None
    """The log's root cause as the parser read it (refusal and exit sightings): its kind decides the outcome."""


#: The sightings a cause in the log explains: a refusal line, and the server's exit before it was ready.
CAUSED = frozenset({SightingKind.refusal, SightingKind.exit})

@dataclass(frozen=True)
class Evidence:
    """Everything known about one attempt at booting a cell."""

    #: What the watch saw; None when the server was never started.
    sighting: Sighting | None = None
    #: Why the server could not be started (the runtime's CellStartError).
    start_error: str | None = None
    #: The container engine says it OOM-killed the container.
    oom_killed: bool = False
    #: An earlier attempt of this cell was refused gpu_memory_busy (this one is the retry).
    retried_busy: bool = False
    #: How the wait for idle GPUs before this attempt ended, when they were *not* idle (IdleWait.describe()).
    gpus_not_idle: str | None = None
    #: Which engine call did not answer, or how the engine went away, while the cell ran (container runtimes).
    engine_trouble: str | None = None
    #: A GPU of the cell was lost while it ran (NVML), in a line.
    gpu_lost: str | None = None


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    reason: Reason
    detail: str

    def __post_init__(self) -> None:
        if REASONS[self.reason].outcome != self.outcome:
            raise ValueError(f"reason {self.reason} belongs to {REASONS[self.reason].outcome}, not {self.outcome}")


Rule = Callable[[Evidence], "Decision | None"]


def start_failed(ev: Evidence) -> Decision | None:
    if ev.start_error is not None:
        return Decision(Outcome.error, Reason.start_failed, ev.start_error)
    return None


def stale_listener(ev: Evidence) -> Decision | None:
    if ev.sighting and ev.sighting.kind == SightingKind.stale_listener:
        return Decision(Outcome.error, Reason.stale_server, ev.sighting.detail)
    return None


def _crash_of(f: Sighting) -> Decision | None:
    """What an exit, a failed probe or the generic engine failure is, before anything else is known."""
    if f.kind == SightingKind.refusal and f.refusal is not None and f.refusal.kind == GENERIC_CAUSE.id:
        return Decision(Outcome.crashed, Reason.engine_core_failed_root_cause_not_shown, f.detail)
    if f.kind in (SightingKind.exit, SightingKind.exit_after_health):
        code = f.exit_code if f.exit_code is not None else -1
        if code < 0:
            return Decision(Outcome.crashed, Reason.killed, f.detail)
        if code == 0 and f.kind == SightingKind.exit:
            return Decision(Outcome.crashed, Reason.exited_before_ready, f.detail)
        return Decision(Outcome.crashed, Reason.exited, f.detail)
    if f.kind == SightingKind.probe_failed:
        return Decision(Outcome.crashed, Reason.probe_failed, f.detail)
    return None


def oom_killed(ev: Evidence) -> Decision | None:
    """A container the engine OOM-killed died of that, whatever the watch saw it as (a crash, or a hang to the
    deadline); a refusal vLLM printed first stays the refusal."""
    f = ev.sighting
    if not (ev.oom_killed and f):
        return None
    if f.kind == SightingKind.deadline or _crash_of(f) is not None:
        return Decision(Outcome.crashed, Reason.oom_killed, f"the engine OOM-killed the container; {f.detail}")
    return None


def gpu_lost(ev: Evidence) -> Decision | None:
    """A GPU lost under a cell voids whatever the cell did on it: a boot, a refusal, a crash alike."""
    if ev.gpu_lost:
        what = f"; the server meanwhile: {ev.sighting.detail}" if ev.sighting else ""
        return Decision(Outcome.error, Reason.gpu_lost, ev.gpu_lost + what)
    return None


def engine_lost(ev: Evidence) -> Decision | None:
    """A server that died, or never decided, while its engine was not answering says nothing about its configuration
    (a dockerd restart stops every container with 143); one that refused or booted meanwhile still did."""
    f = ev.sighting
    if ev.engine_trouble and f is not None and (f.kind == SightingKind.deadline or _crash_of(f) is not None):
        return Decision(Outcome.error, Reason.engine_lost, f"{ev.engine_trouble}; then {f.detail}")
    return None


def memory_held(ev: Evidence) -> Decision | None:
    f = ev.sighting
    busy = (f is not None and f.kind == SightingKind.refusal and f.refusal is not None
            and f.refusal.kind == Reason.gpu_mem_util_exceeds_free)
    if busy and f is not None and ev.retried_busy and ev.gpus_not_idle:
        return Decision(Outcome.error, Reason.gpu_memory_held,
                        f"refused gpu_mem_util_exceeds_free on both attempts, the second with {ev.gpus_not_idle}: "
                        f"memory held by something else, not this configuration's verdict ({f.detail})")
    return None


def caused(ev: Evidence) -> Decision | None:
    """A refusal line, or an exit, that the log explains: the cause's kind gives the outcome (a configuration that
    cannot boot here is refused, a machine that failed it is error, anything else crashed) and its id the reason.
    A server killed by a signal, or one whose log shows only the generic wrapper, is left to the crash rules unless
    a cause was found; the wrapper alone is its own finding on a refusal line."""
    f = ev.sighting
    if f is None or f.kind not in CAUSED:
        return None
    cause = f.cause
    if cause is None or cause.id is None:
        if f.kind == SightingKind.refusal and f.refusal is not None and f.refusal.kind != GENERIC_CAUSE.id:
            reason = Reason(f.refusal.kind)
            return Decision(REASONS[reason].outcome, reason, f.detail)
        return None
    reason = Reason(cause.id)
    general = cause.id in (GENERIC_CAUSE.id, UNCAUGHT.id)
    if general and (f.kind == SightingKind.exit and (f.exit_code is None or f.exit_code < 0)):
        return None  # killed by a signal: the crash rules say so
    if cause.id == GENERIC_CAUSE.id and f.kind == SightingKind.exit:
        return None  # the wrapper seen only after the exit reads as before: an exit
    return Decision(REASONS[reason].outcome, reason, f.detail if general else cause.line or f.detail)


def crashed(ev: Evidence) -> Decision | None:
    return _crash_of(ev.sighting) if ev.sighting else None


def booted(ev: Evidence) -> Decision | None:
    if ev.sighting and ev.sighting.kind == SightingKind.healthy:
        return Decision(Outcome.booted, Reason.ready, ev.sighting.detail)
    return None


def timed_out(ev: Evidence) -> Decision | None:
    if ev.sighting and ev.sighting.kind == SightingKind.deadline:
        return Decision(Outcome.timeout, Reason.deadline, ev.sighting.detail)
    return None


#: In order: the first rule that applies decides.
RULES: tuple[Rule, ...] = (gpu_lost, start_failed, stale_listener, oom_killed, engine_lost, memory_held, caused,
                           crashed, booted,
                          timed_out)


def decide(ev: Evidence, rules: tuple[Rule, ...] = RULES) -> Decision:
    for rule in rules:
        decision = rule(ev)
        if decision is not None:
            return decision
    raise ValueError(f"no rule decides {ev}")  # a sighting kind without a rule: a bug, never a silent verdict
