"""One attempt at booting one cell: start it through its runtime, watch it, tear it down — whatever happens in between —
and turn the evidence into the cell's record, with the verdict policy deciding once and `matched` computed once.

Teardown runs with SIGINT/SIGTERM held back, so a second Ctrl-C cannot leave a half-stopped server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from harness.boot.signals import signals_held
from harness.clock import SYSTEM, Clock
from harness.errors import CellStartError, UsageError
from harness.gpu.records import GpuInfo
from harness.logfacts import LogParser
from harness.logfacts.timeline import Milestone, Timeline
from harness.masking import Masker, secret_values
from harness.matrix.cells import Cell
from harness.matrix.load import LoadedMatrix
from harness.memory.curve import summarize
from harness.memory.model import MemoryCurve
from harness.memory.probe import MemoryProbe
from harness.memory.sampler import MemorySampler, Samples, Unreadable
from harness.predict.cell import predict_cell
from harness.predict.prediction import PredictionRecord
from harness.predict.serve_flags import eager, flag_value
from harness.results.model import CellResult, Expected, Timings
from harness.results.store import RunStore, now
from harness.runtime import scratch
from harness.runtime.base import CellContext, Runtime, Server
from harness.runtime.compile_cache import CompileCache
from harness.runtime.records import CompileCacheUse, ServerStop
from harness.verdict.catalogue import REASONS, Reason
from harness.verdict.causes import CauseKind
from harness.verdict.policy import Decision, Evidence, decide
from harness.watch.events import ThreadedEvents
from harness.watch.logsink import LogSink
from harness.watch.loop import Observation, Watch, WatchConfig
from harness.watch.timeline import TimelineRecorder

#: The verdicts that say memory ran out: their detail carries the curve's peak.
MEMORY_REASONS = (*(r for r, info in REASONS.items() if info.kind == CauseKind.resource), Reason.oom_killed)


class Observer(Protocol):
    def cell_started(self, cell: Cell) -> None: ...

    def cell_milestone(self, cell: Cell, milestone: Milestone, at_s: float) -> None:
        """The cell's server reached `milestone`, `at_s` seconds after the cell started (its live phase)."""

    def cell_finished(self, cell: Cell, result: CellResult) -> None: ...


class NullObserver:
    """An Observer that watches nothing; subclass it to watch only some of the events."""

    def cell_started(self, cell: Cell) -> None:
        pass

    def cell_milestone(self, cell: Cell, milestone: Milestone, at_s: float) -> None:
        pass

    def cell_finished(self, cell: Cell, result: CellResult) -> None:
        pass


@dataclass(frozen=True)
class Attempt:
    """What the executor knows about this attempt before it starts."""

    #: The GPUs reserved for the cell (recorded); None on a CPU slot.
    gpus: list[GpuInfo] | None = None
    #: Whether the cell is *given* those GPUs (its own set), or passes the matrix's shared `gpus:` request on as
    #: written.
    assigned: bool = True
    #: 2 for the retry after a gpu_memory_busy refusal.
    number: int = 1
    #: The idle wait before this attempt, when it ended with the GPUs still above idle (IdleWait.describe()).
    gpus_not_idle: str | None = None
    #: Told each milestone as it happens, with seconds since the cell started (the live progress's phase).
    on_milestone: Callable[[Milestone, float], None] | None = None
    #: Asked once the server is gone: whether a GPU of the cell was lost meanwhile (a line), None when all answer.
    gpu_check: Callable[[], str | None] | None = None
    #: Where a GPU cell's memory is read (NVML on its GPUs, the server's PIDs told apart); None: the server's own
    #: probe (its process tree, the container's stats).
    gpu_memory: Callable[[Server], MemoryProbe] | None = None


def watch_config(loaded: LoadedMatrix, timeout_s: float | None = None) -> WatchConfig:
    m = loaded.matrix
    return WatchConfig(timeout_s=m.timeout_s if timeout_s is None else timeout_s, probe=m.probe, linger_s=m.linger_s,
                       log_max_bytes=None if m.log_max_mb is None else int(m.log_max_mb * 2**20))


@dataclass
class CellRunner:
    """Boots one cell through a runtime and turns what happened into a CellResult."""

    loaded: LoadedMatrix
    runtime: Runtime
    store: RunStore
    config: WatchConfig
    keep_work: bool = False
    #: Secrets of the harness's own environment: the process runtime passes it on, and servers echo their env/args.
    base_masker_values: set[str] = field(default_factory=secret_values)
    #: Called with every (masked) log line as it arrives: `repro --exec` streams the server's log this way.
    echo: Callable[[str], None] | None = None
    #: The run's shared torch.compile cache; None: every cell compiles in its own scratch.
    compile_cache: CompileCache | None = None
    #: What the watch, the timeline and the timings read time from (one clock per attempt, never mixed).
    clock: Clock = SYSTEM

    def run(self, cell: Cell, attempt: Attempt = Attempt()) -> CellResult:
        m = self.loaded.matrix  # the command/entrypoint too: `sh -c "HF_TOKEN=… vllm serve …"` is one
        quoted = [*(cell.command or m.command), *(m.entrypoint or []), *cell.server_args]
        masker = Masker(self.base_masker_values | secret_values(cell.env, quoted))
        sink = LogSink(self.store.log_path(cell.id), masker, echo=self.echo, max_bytes=self.config.log_max_bytes,
                       anchor=self.store.run_dir)
        try:
            work = scratch.claim(self.store.work_dir(cell.id), self.store.run_dir)
        except BaseException:
            sink.close()
            raise
        gpus = attempt.gpus
        started_at, t0 = now(), self.clock.now()
        timeline = TimelineRecorder(self.clock, t0, on_mark=attempt.on_milestone)
        cache = self.compile_cache.checkout(work) if self.compile_cache else None
        cache_use: CompileCacheUse | None = None
        ctx = CellContext(run_dir=self.store.run_dir, work_dir=work, masker=masker, matrix_dir=self.loaded.base_dir,
                          mark=timeline.mark, compile_cache=cache.path if cache else None,
                          labels={"boot-harness.run": self.store.run.run_id, "boot-harness.cell": cell.id},
                          gpu_ids=None if gpus is None or not attempt.assigned
                          else [g.id or str(g.index) for g in gpus])
        events = ThreadedEvents(self.clock)
        server: Server | None = None
        sampler: MemorySampler | None = None
        samples: Samples | None = None
        watch: Watch | None = None
        seen: Observation | None = None
        start_error: str | None = None
        argv: list[str] = []
        try:
            try:
                with signals_held():  # an interrupt between "started" and "we hold its handle" would leak it
                    server = self.runtime.start(cell, ctx, events.line_sink)
            except CellStartError as exc:
                sink.note(f"could not start the cell: {exc}")
                start_error = str(exc)
            else:
                argv = server.argv
                sampler = self._sampler(server, attempt, t0)
                sink.note("argv: " + " ".join(masker.argv(argv)))
                watch = Watch(server, events, sink, self.config, started_at=t0, timeline=timeline,
                              clock=self.clock)
                seen = watch.run()
        finally:
            stop: ServerStop | None = None
            with signals_held():  # a second Ctrl-C must not cut the teardown short
                if sampler is not None:  # the verdict (and a booted cell's probe) is in: the curve ends here
                    samples = sampler.end()
                    if seen is not None and seen.exit_code is not None:  # it exited on its own: a probe that
                        samples.stopped = None  # failed meanwhile met the server's end, not a fault of its own
                if server is not None:
                    stop = server.stop()
                    if watch is not None:
                        watch.collect_rest()
                events.close()
                sink.close()
                if self.compile_cache is not None:  # the server is gone: what it compiled is complete, or not kept
                    phases = (watch.parser.facts if watch else LogParser().facts).timeline
                    cache_use = self.compile_cache.checkin(cache, phases.milestones.compiled is not None,
                                                           phases.durations.compile_cache_hit)
                scratch.remove(work, self.keep_work)
        container = server.container_info() if server else None
        decision = decide(Evidence(sighting=seen.sighting if seen else None, start_error=start_error,
                                   oom_killed=bool(container and container.oom_killed),
                                   engine_trouble=container.engine_trouble if container else None,
                                   gpu_lost=attempt.gpu_check() if attempt.gpu_check else None,
                                   retried_busy=attempt.number > 1, gpus_not_idle=attempt.gpus_not_idle))
        decided_at = t0 + seen.verdict_s if seen and seen.verdict_s is not None else self.clock.now()
        facts = seen.facts if seen else LogParser().facts
        skip = facts.skipped(eager(argv, facts.vllm_version))
        record = timeline.timeline(facts.timeline.durations, decided_at, skip)
        memory = summarize(samples, sampler.probe.source, sampler.interval_s, record.milestones, facts.kv, skip,
                           _utilization(argv, facts.vllm_version)) if sampler and samples else None
        return self._result(cell, decision, seen, stop, server, argv, masker, sink, started_at, t0, attempt,
                            record, cache_use, memory)

    def _sampler(self, server: Server, attempt: Attempt, t0: float) -> MemorySampler | None:
        """The boot's memory sampler, started; None with `memory_interval_s: null`. Whatever the probe does, the
        cell goes on (a probe that cannot even be made is a curve with its reason)."""
        interval = self.loaded.matrix.memory_interval_s
        if interval is None:
            return None
        try:
            probe = attempt.gpu_memory(server) if attempt.gpu_memory else server.memory_probe()
        except Exception as exc:  # noqa: BLE001 - a sampler never fails the cell
            probe = Unreadable(f"no memory probe: {type(exc).__name__}: {exc}")
        return MemorySampler(probe, interval, t0, self.clock).begin()

    def _result(self, cell: Cell, d: Decision, seen: Observation | None, stop: ServerStop | None, server: Server | None,
                argv: list[str], masker: Masker, sink: LogSink, started_at, t0: float, attempt: Attempt,
                timeline: Timeline, cache_use: CompileCacheUse | None, memory: MemoryCurve | None) -> CellResult:
        facts = seen.facts if seen else LogParser().facts
        code = seen.exit_code if seen and seen.exit_code is not None else stop.exit_code if stop else None
        read = self.runtime.read_server_file
        prediction = _prediction(cell, read, facts, d, masker) if argv else None
        return masker.record(CellResult(  # every field masked: a prediction's note, a container's error quote values
            cell_id=cell.id, axes=dict(cell.axes), runtime=self.runtime.name, argv=masker.argv(argv),
            env=masker.env(cell.env),
            outcome=d.outcome, reason=d.reason, detail=masker(_with_memory(d, memory)),
            expected=Expected(outcome=cell.expected.outcome, reason=cell.expected.reason,
                              within_s=cell.expected.within_s) if cell.expected else None,
            matched=cell.expected.matches(d.outcome, d.reason, seen.verdict_s if seen else None)
            if cell.expected else None,
            exit_code=code, stop=stop,
            timings=Timings(ready_s=seen.ready_s, ready_line_s=seen.ready_line_s, event_s=seen.event_s,
                            verdict_s=seen.verdict_s, total_s=round(self.clock.now() - t0, 3)) if seen
            else Timings(total_s=round(self.clock.now() - t0, 3)),
            timeline=timeline, compile_cache=cache_use,
            kv=facts.kv, memory=memory,
            refusal=facts.refusal.model_copy(update={"message": masker(facts.refusal.message)})
            if facts.refusal else None,
            cause=facts.cause if facts.cause is not None and facts.cause.id == d.reason else None,
            prediction=prediction, vllm_version=facts.vllm_version,
            log_path=str(self.store.log_path(cell.id).relative_to(self.store.run_dir)),
            log_tail=sink.tail, log_cut=sink.record(facts.skimmed_lines), started_at=started_at, finished_at=now(),
            port=server.port if server else None, container=server.container_info() if server else None,
            patches=server.applied_patches() if server else [], gpus=list(attempt.gpus or []),
            attempts=attempt.number, contaminated=attempt.number > 1,
        ))


def _utilization(argv: list[str], version: str | None) -> float | None:
    try:
        value = flag_value(argv, "gpu_memory_utilization", version)
    except UsageError:
        return None
    return value if isinstance(value, float) and 0 < value <= 1 else None


def _with_memory(d: Decision, memory: MemoryCurve | None) -> str:
    """A boot killed by memory says how close its curve came: the last thing a person asks about an OOM."""
    if d.reason not in MEMORY_REASONS or memory is None or memory.peak_bytes is None:
        return d.detail
    return f"{d.detail}; memory: {memory.describe()}" if d.detail else f"memory: {memory.describe()}"


def _prediction(cell: Cell, read, facts, d: Decision, masker: Masker) -> PredictionRecord:
    """The cell's prediction, or why there is none: the boot already happened, so a prediction that fails for any
    reason (a config the predictor does not know, a bug in it) is a note on the cell's record, never a lost cell and
    a run left `running`."""
    try:
        return predict_cell(cell.server_args, lambda path: read(cell, path), facts.kv, facts.refusal, d.outcome,
                            d.reason, facts.vllm_version, env=cell.env)
    except Exception as exc:  # noqa: BLE001 - whatever it was, the record must be written
        return PredictionRecord(skipped=masker(f"not predicted: the predictor failed: {type(exc).__name__}: {exc}"))
