"""The run owner: one place that opens a run (plan its slots, sweep leftovers, preflight the runtime, create or resume
the store with the matrix's cell order), runs cells through the one Executor, finishes the run and says its exit code.

Every entry point that boots cells is a few lines over it: `boot-harness run` and `repro --exec`
(harness.cli.run), the pytest plugin (harness.pytest_plugin), the frontier (harness.boot.frontier); an empty shard is
a session with nothing to boot. Nothing else creates a RunStore, sweeps or preflights.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.boot.attempt import CellRunner, Observer, watch_config
from harness.boot.executor import Executor
from harness.boot.slots import SlotPlan, plan_slots
from harness.clock import SYSTEM, Clock
from harness.errors import UsageError
from harness.exitcodes import ExitCode
from harness.gpu.inventory import Inventory
from harness.masking import Masker
from harness.matrix.cells import Cell
from harness.matrix.load import LoadedMatrix
from harness.matrix.scheduler import SchedulerRef
from harness.results.model import CellResult, RunResult, RunStatus
from harness.results.store import RunLock, RunStore, new_run_id
from harness.runtime import make_runtime, scratch
from harness.runtime.base import CellContext, Runtime
from harness.runtime.compile_cache import RUN_DIR_NAME, CompileCache, planned_dir
from harness.runtime.pull import PullObserver
from harness.shell import Step
from harness.sweep import Swept, sweep_before_run

Say = Callable[[str], None]


@dataclass(frozen=True)
class RunOptions:
    """How to run: the knobs of `boot-harness run`, as one value every entry point fills in."""

    results_dir: Path = Path("results")
    #: Finish this run directory instead of starting one: only the cells it lacks are booted.
    resume: Path | None = None
    #: The `--select` expressions (recorded with the run).
    selection: list[str] | None = None
    #: "I/N" when this run is a shard (recorded; a resume must name the same shard).
    shard: str | None = None
    #: The scheduler job this shard runs as (`--shard auto`), recorded with the run; a resume records the job that
    #: resumed it.
    scheduler: SchedulerRef | None = None
    #: Override of the matrix's per-cell deadline.
    timeout_s: float | None = None
    keep_work: bool = False
    #: `--parallel`: "auto" or a count.
    parallel: str | int = "1"
    gpu_idle_timeout_s: float | None = None
    #: A run id instead of a fresh one (the frontier names its runs `<matrix>-frontier`).
    run_id: str | None = None
    #: Every (masked) log line, as it arrives (`repro --exec` streams the server's log).
    echo: Callable[[str], None] | None = None
    #: The one clock every wait of the run reads and sleeps on (deadlines, idle waits, stop graces); a test passes a
    #: FakeClock (harness.clock).
    clock: Clock = SYSTEM

    def __post_init__(self) -> None:
        from harness.gpu.inventory import parse_parallel

        parse_parallel(self.parallel)  # `--parallel abc` is exit 2 even for a dry run
        t = self.timeout_s
        if t is not None and not (math.isfinite(t) and t > 0):
            raise UsageError(f"--timeout-s: must be a finite number of seconds greater than 0 (got {t:g})")
        for name in ("gpu_idle_timeout_s",):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise UsageError(f"--{name.replace('_', '-')}: must be a finite number of seconds, 0 or more")


@dataclass
class RunSession:
    loaded: LoadedMatrix
    store: RunStore
    #: The selected cells, in the matrix's order; `todo` those this run still has to boot (a resume skips the rest).
    cells: list[Cell]
    todo: list[Cell]
    runtime: Runtime | None = None
    plan: SlotPlan | None = None
    executor: Executor | None = None
    #: What the start-up sweep removed (containers, process groups, work dirs of killed runs).
    swept: Swept = field(default_factory=Swept)
    #: This process writes the run directory (harness.results.store.RunLock); let go by close().
    lock: RunLock | None = None
    #: The run's compile cache: the session made it, its cells use it (the runner), close() lets it go.
    compile_cache: CompileCache | None = None
    #: `--keep-work`: the run's own compile cache is left for a person, as the cells' scratch is.
    keep_work: bool = False

    @classmethod
    def open(cls, loaded: LoadedMatrix, cells: list[Cell], options: RunOptions = RunOptions(), *,
             runtime: Runtime | None = None, say: Say = lambda line: None, pull_observer: PullObserver | None = None,
             env: dict[str, str] | None = None, inventory: Inventory | None = None) -> RunSession:
        """Every check before a run directory exists (exit 2 if one fails), then the store. `cells` may be empty
        (a shard that holds no cell): the run is recorded, complete, with nothing booted."""
        order = [c.id for c in cells]
        # a run that another process is still writing is refused before anything is swept, started or rewritten
        lock = RunLock(options.resume) if options.resume else None
        if not cells:
            store = cls._store(loaded, loaded.matrix.runtime, order, options)
            return cls(loaded, store, cells, [], lock=lock or RunLock(store.run_dir))
        plan = plan_slots(loaded.matrix, options.parallel, options.gpu_idle_timeout_s, env=env, inventory=inventory)
        runtime = runtime or make_runtime(loaded)
        if pull_observer is not None:
            runtime.pull_observer = pull_observer
        swept = sweep_before_run(options.resume.parent if options.resume else options.results_dir, runtime.name)
        runtime.preflight(cells)
        for note in runtime.notes:
            say(note)
        store = cls._store(loaded, runtime.name, order, options)
        lock = lock or RunLock(store.run_dir)
        done = store.done()
        _vet(store, loaded, [c for c in cells if c.id not in done])
        cache = CompileCache.for_run(loaded.matrix.compile_cache, loaded.base_dir, store.run_dir, plan.parallel)
        runner = CellRunner(loaded, runtime, store, watch_config(loaded, options.timeout_s),
                            keep_work=options.keep_work,
                            echo=options.echo, compile_cache=cache, clock=options.clock)
        return cls(loaded, store, cells, [c for c in cells if c.id not in done], runtime, plan, plan.executor(runner),
                   swept, lock, cache, options.keep_work)

    @staticmethod
    def _store(loaded: LoadedMatrix, runtime: str, order: list[str], options: RunOptions) -> RunStore:
        if options.resume:
            store = RunStore.open(options.resume, loaded, order)
            recorded = store.run.shard
            if (recorded or None) != (options.shard or None):
                raise UsageError(f"{options.resume}: this run is shard {recorded or 'none (the whole selection)'}; "
                                 f"resume it with {'--shard ' + recorded if recorded else 'no --shard'}")
            store.run.status = RunStatus.running
            if options.scheduler is not None:
                store.run.scheduler = options.scheduler
            return store
        return RunStore.create(options.results_dir, loaded, runtime, order, selection=options.selection,
                               shard=options.shard, run_id=options.run_id, scheduler=options.scheduler)

    @property
    def run_dir(self) -> Path:
        return self.store.run_dir

    def run(self, observer: Observer | None = None) -> list[CellResult]:
        """Boot every cell still to do. On Ctrl-C/SIGTERM the run is marked interrupted and Interrupted raised."""
        if not self.todo:
            return []
        return self._execute(self.todo, observer)

    def boot(self, cell: Cell, observer: Observer | None = None) -> CellResult | None:
        """Boot one cell (the pytest plugin's test, the frontier's probe) through the same executor; a cell the
        matrix did not list is added to the run's order after those it did. None: interrupted."""
        self.store.add_to_order(cell.id)
        results = self._execute([cell], observer)
        return results[0] if results else None

    def _execute(self, cells: list[Cell], observer: Observer | None) -> list[CellResult]:
        if self.executor is None:
            raise UsageError("this session has no runtime (a run with no cell to boot)")
        return self.executor.run(cells, observer)

    def finish(self, status: RunStatus = RunStatus.complete) -> RunResult:
        self.close()
        return self.store.finish(status)

    def close(self) -> None:
        """Let go of what the run holds beside its records (the run's compile cache); idempotent. A harness killed
        before this leaves it to the next run's sweep."""
        if self.compile_cache is not None:
            self.compile_cache.close(self.keep_work)
        try:  # each cell's scratch went with its cell: the folder that held them is left only when it holds one
            (self.store.run_dir / "work").rmdir()
        except OSError:
            pass  # absent, or it holds a kept cell's scratch
        if self.lock is not None:
            self.lock.release()

    def exit_code(self) -> ExitCode:
        """FAILED when a selected cell errored (where its expectation did not say so) or missed its expectation."""
        selected = {c.id for c in self.cells}
        bad = [c for c in self.store.run.cells
               if c.cell_id in selected and (c.matched is False or c.errored_unexpected())]
        return ExitCode.FAILED if bad else ExitCode.OK


def repro_command(loaded: LoadedMatrix, cell: Cell, results_dir: Path, port: int = 8000, *,
                  runtime: Runtime | None = None) -> list[list[str]]:
    """The commands a person pastes, in order, to boot `cell` by hand (harness.shell.format_script joins them): those
    that make what the server needs (the image, each patched file under `results_dir/repro/patches/<cell>/`, as a
    run keeps it under its folder: the cell's id once in the path), then the server's. Planned as `run --dry-run`
    plans, so printing it touches nothing: no engine, no pull, no file (`repro --exec` is the run that does); the
    engine's CLI takes GPUs its own way, so nothing probes them."""
    runtime = runtime or make_runtime(loaded)
    keep = Path(results_dir) / "repro"  # the repro's "run": patches/<cell>/ in it, the cell's scratch at <cell>/
    # a run's own cache is gone with the run: a repro boots cold, unless the matrix keeps its cache in a directory
    cache = planned_dir(loaded.matrix.compile_cache, loaded.base_dir, None)
    ctx = CellContext(run_dir=keep, work_dir=keep / cell.id, masker=Masker(), matrix_dir=loaded.base_dir,
                      compile_cache=cache)
    tokens, steps = runtime.planned_command_line(cell, ctx, port)
    return [*(list(command) for step in steps for command in step.commands), tokens]


def planned_commands(loaded: LoadedMatrix, cells: list[Cell], options: RunOptions = RunOptions(),
                     runtime: Runtime | None = None) -> list[tuple[Cell, list[str], list[Step]]]:
    """`run --dry-run`: for each cell the run would boot, its command and the steps a run would take first, touching
    nothing (no engine, no pull, no file); paths are those the run directory would have. A resume boots only the
    cells its run directory lacks (checked as the run checks it: the same matrix, the same shard), so only those."""
    runtime = runtime or make_runtime(loaded)
    run_dir = options.resume or Path(options.results_dir) / "<run-id>"
    if options.resume:
        store = RunSession._store(loaded, runtime.name, [c.id for c in cells], options)  # reads, writes nothing
        cells = [c for c in cells if c.id not in store.done()]
        _vet(store, loaded, cells)  # what the run would refuse, a dry run refuses too
    out = []
    cache = planned_dir(loaded.matrix.compile_cache, loaded.base_dir, run_dir)
    for c in cells:
        ctx = CellContext(run_dir=run_dir, work_dir=run_dir / "work" / c.id, masker=Masker(),
                          matrix_dir=loaded.base_dir,
                          compile_cache=cache)
        tokens, steps = runtime.planned_command_line(c, ctx)
        out.append((c, tokens, steps))
    return out


def _vet(store: RunStore, loaded: LoadedMatrix, todo: list[Cell]) -> None:
    """What the run writes in its folder is the run's own (RunStore.vet): each cell's scratch and the run's own
    compile cache are made anew, so nothing may be at their paths (a dead run's were swept before this) but what this
    process made (a session reopened in-process)."""
    fresh = [store.work_dir(c.id) for c in todo]
    if todo and loaded.matrix.compile_cache == "run":
        fresh.append(store.run_dir / RUN_DIR_NAME)
    store.vet([c.id for c in todo], [p for p in fresh if not scratch.made_here(p)])


def frontier_run_id(loaded: LoadedMatrix) -> str:
    return new_run_id(f"{loaded.matrix.name}-frontier")

