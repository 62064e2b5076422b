"""Running cells: start each through its runtime, watch it, tear it down, record it — whatever happens in between.

Teardown runs with SIGINT/SIGTERM held back, so a second Ctrl-C cannot leave a half-stopped server; the interrupt is
delivered right after, the run is marked `interrupted` with every finished cell kept.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from harness.cells import Cell
from harness.errors import CellStartError
from harness.logfacts import LogParser
from harness.matrix.load import LoadedMatrix
from harness.results.model import CellResult, Expected, GpuInfo, Timings
from harness.results.store import RunStore, now
from harness.runtime import scratch
from harness.runtime.base import CellContext, Runtime
from harness.secrets import Masker, secret_values
from harness.watch.events import ThreadedEvents
from harness.watch.logsink import LogSink
from harness.watch.loop import Verdict, Watch, WatchConfig

_HELD = {signal.SIGINT, signal.SIGTERM}


class Interrupted(Exception):
    """The harness was asked to stop (SIGINT/SIGTERM); raised where the run can still clean up."""


class Observer(Protocol):
    def cell_started(self, cell: Cell) -> None: ...

    def cell_finished(self, cell: Cell, result: CellResult) -> None: ...


class NullObserver:
    def cell_started(self, cell: Cell) -> None:
        pass

    def cell_finished(self, cell: Cell, result: CellResult) -> None:
        pass


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM while tearing down; they are delivered on exit from the block.

    Held by swapping the Python-level handlers, not with pthread_sigmask: a mask only covers the calling thread, and
    while a cell runs the log reader and exit waiter threads take the signal instead, whose Python handler then runs
    in the main thread all the same, in the middle of the teardown."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _frame: pending.append(signum)) for s in _HELD}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        if pending:
            signal.raise_signal(pending[0])


@contextlib.contextmanager
def interrupts_raise() -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C: both raise Interrupted in the main thread, so `finally` blocks run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in _HELD}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _expected(cell: Cell) -> Expected | None:
    return Expected(outcome=cell.expected.outcome, reason=cell.expected.reason) if cell.expected else None


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

    def run(self, cell: Cell, gpus: list[GpuInfo] | None = None, assigned: bool = True) -> CellResult:
        """Boot one cell; `gpus` are the devices a scheduler reserved for it (recorded, and — when `assigned` — the
        only ones it is given; a matrix's shared `gpus:` request is passed on as written)."""
        masker = Masker(self.base_masker_values | secret_values(cell.env, cell.server_args))
        log_path = self.store.log_path(cell.id)
        work = scratch.claim(self.store.work_dir(cell.id))
        ctx = CellContext(run_dir=self.store.run_dir, work_dir=work, masker=masker, matrix_dir=self.loaded.base_dir,
                          labels={"boot-harness.run": self.store.run.run_id, "boot-harness.cell": cell.id},
                          gpu_ids=None if gpus is None or not assigned else [g.id or str(g.index) for g in gpus])
        sink = LogSink(log_path, masker, echo=self.echo)
        started_at, t0 = now(), time.monotonic()
        events = ThreadedEvents()
        server = watch = None
        argv: list[str] = []
        try:
            try:
                with signals_held():  # an interrupt between "started" and "we hold its handle" would leak it
                    server = self.runtime.start(cell, ctx, events.line_sink)
            except CellStartError as exc:
                sink.note(f"could not start the cell: {exc}")
                verdict = Verdict("error", "start_failed", str(exc), facts=LogParser().facts)
            else:
                argv = server.argv
                sink.note("argv: " + " ".join(masker.argv(argv)))
                watch = Watch(server, events, sink, self.config, started_at=t0)
                verdict = watch.run()
        finally:
            exit_code = None
            with signals_held():  # a second Ctrl-C must not cut the teardown short
                if server is not None:
                    exit_code = server.stop()
                    if watch is not None:
                        watch.collect_rest()
                events.close()
                sink.close()
                scratch.remove(work, self.keep_work)
        if verdict.exit_code is None:
            verdict.exit_code = exit_code
        result = self._result(cell, verdict, server, argv, masker, sink, started_at, t0)
        if result.container and result.container.oom_killed and result.outcome in ("crashed", "timeout"):
            result.outcome, result.reason = "crashed", "oom_killed"
            result.detail = f"the engine OOM-killed the container; {result.detail}"
            result.matched = cell.expected.matches("crashed", "oom_killed") if cell.expected else None
        if gpus:
            result.gpus = list(gpus)
        return result

    def _result(self, cell: Cell, v: Verdict, server, argv: list[str], masker: Masker, sink: LogSink,
                started_at, t0: float) -> CellResult:
        expected = _expected(cell)
        matched = cell.expected.matches(v.outcome, v.reason) if cell.expected else None
        return CellResult(
            cell_id=cell.id, axes=dict(cell.axes), runtime=self.runtime.name, argv=masker.argv(argv),
            env=masker.env(cell.env),
            outcome=v.outcome, reason=v.reason, detail=masker(v.detail), expected=expected,
            matched=matched, exit_code=v.exit_code,
            timings=Timings(ready_s=v.ready_s, ready_line_s=v.ready_line_s, event_s=v.event_s, verdict_s=v.verdict_s,
                            total_s=round(time.monotonic() - t0, 3)),
            kv=v.facts.kv, refusal=v.facts.refusal.model_copy(update={"message": masker(v.facts.refusal.message)})
            if v.facts.refusal else None,
            vllm_version=v.facts.vllm_version, log_path=str(self.store.log_path(cell.id).relative_to(self.store.run_dir)),
            log_tail=sink.tail, started_at=started_at, finished_at=now(),
            port=getattr(server, "port", None), container=server.container_info() if server else None,
            patches=server.applied_patches() if server else [],
        )


def watch_config(loaded: LoadedMatrix, timeout_s: float | None = None) -> WatchConfig:
    m = loaded.matrix
    return WatchConfig(timeout_s=m.timeout_s if timeout_s is None else timeout_s, probe=m.probe, linger_s=m.linger_s)


def run_cells(cells: list[Cell], runner: CellRunner, observer: Observer | None = None) -> list[CellResult]:
    """Run cells in order, recording each the moment it ends; on an interrupt the run is marked and re-raised."""
    observer = observer or NullObserver()
    store = runner.store
    results = []
    with interrupts_raise():
        try:
            for cell in cells:
                observer.cell_started(cell)
                result = runner.run(cell)
                store.record(result)
                results.append(result)
                observer.cell_finished(cell, result)
        except (Interrupted, KeyboardInterrupt):
            with signals_held():
                store.finish("interrupted")
            raise
    return results
