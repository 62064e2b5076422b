"""The one executor: cells in slots on one host — one slot is the sequential run — each worker taking the next cell,
reserving a disjoint GPU set (or the matrix's shared GPUs, or a CPU slot), waiting for those GPUs to go idle, booting
the cell through the CellRunner, releasing, and recording it. Results come back in the matrix's order whatever order
they finished in. Every path that boots cells (a run, repro --exec, the pytest plugin, the frontier) runs them here,
so GPU hygiene and the memory-busy retry are the same everywhere.

Stopping (Ctrl-C, SIGTERM). Python delivers signals to the main thread only, and a worker is deep in a watch loop that
only ends at a verdict. So the scheduler keeps every started server in a registry; on an interrupt the main thread
(1) sets the stop event — no worker takes another cell or keeps waiting for a GPU, (2) stops every server that its
worker has not begun to tear down yet, with SIGINT/SIGTERM held back, which makes each watch loop end at once, (3) joins
the workers, whose CellRunner.run tears down in `finally` as always, (4) marks the run interrupted and re-raises. A
cell whose server the main thread had to stop is not recorded — its "verdict" would be the harness's own kill — so
`--resume` boots it again. No server outlives the run: every one is stopped by its owner or by the main thread, and
each worker thread lives until its servers are torn down (the process runtime's PR_SET_PDEATHSIG fires when the
*thread* that started a server exits, which is why servers are never handed between threads).

GPU hygiene. Before a cell starts, its GPUs must be back at their idle baseline (bounded wait, harness.gpu.idle); the
cell records each GPU's name, driver, total and free memory at start (harness.boot.notes writes them to its log). A
`gpu_memory_busy` refusal means memory was held when vLLM looked: that attempt is contaminated, its log is kept as
`logs/<id>.attempt1.log`, and the cell is booted once more after the wait (harness.boot.retry.BusyRetry, the default
policy). What the second attempt's refusal means (the configuration's verdict, or `error` / `gpu_memory_held` when its
GPUs were still above idle) is the verdict policy's to say (harness.verdict.policy).

The executor is the scheduler only: the registry of live servers is harness.boot.server_registry, the retry
harness.boot.retry, the log notes harness.boot.notes.
"""

from __future__ import annotations

import dataclasses
import queue
import threading

from harness.boot.attempt import Attempt, CellRunner, NullObserver, Observer
from harness.boot.notes import gpu_notes, note
from harness.boot.retry import BusyRetry, RetryPolicy
from harness.boot.server_registry import LiveServers, TrackingRuntime
from harness.boot.signals import interrupts_raise, signals_held
from harness.clock import Clock
from harness.errors import GpuLost, GpusGone, RunStopped
from harness.gpu.hostlock import HostGpuLocks
from harness.gpu.idle import IdleBaseline, IdleWait
from harness.gpu.inventory import GpuPool, Inventory
from harness.gpu.records import GpuInfo
from harness.logfacts.timeline import Milestone
from harness.matrix.cells import Cell
from harness.memory.gpu_probe import GpuProbe
from harness.results.model import CellResult, RunStatus
from harness.verdict import Reason

JOIN_SLICE_S = 0.2


class _LockedObserver:
    def __init__(self, inner: Observer):
        self._inner, self._lock = inner, threading.Lock()

    def cell_started(self, cell: Cell) -> None:
        with self._lock:
            self._inner.cell_started(cell)

    def cell_milestone(self, cell: Cell, milestone: Milestone, at_s: float) -> None:
        with self._lock:
            self._inner.cell_milestone(cell, milestone, at_s)

    def cell_finished(self, cell: Cell, result: CellResult) -> None:
        with self._lock:
            self._inner.cell_finished(cell, result)


class Executor:
    """Run cells `parallel` at a time (1: one after the other). With `gpus_per_cell` > 0 each cell gets its own GPUs
    from `inventory`; with `shared_gpus` every cell gets the matrix's request and waits for those GPUs."""

    def __init__(self, runner: CellRunner, inventory: Inventory, parallel: int, gpus_per_cell: int = 0,
                 observer: Observer | None = None, idle: IdleBaseline | None = None,
                 retry: RetryPolicy = BusyRetry(), shared_gpus: list[int] | None = None, clock: Clock | None = None):
        """`shared_gpus`: the GPUs every cell gets from the matrix's own `gpus:` request (one cell at a time): each
        cell waits for them to be idle and records them, and is handed the request as written. `retry`: what a first
        attempt's result makes the executor do (harness.boot.retry: a RetryPolicy).
        `clock`: the runner's unless given; the idle wait made here and `timeline` read it."""
        if parallel < 1:
            raise ValueError("parallel must be at least 1")
        if shared_gpus and (parallel > 1 or gpus_per_cell > 0):
            raise ValueError("shared GPUs are for one cell at a time, without gpus_per_cell")
        self.shared = list(shared_gpus or [])
        self.inventory = inventory
        self.parallel = parallel
        self.gpus_per_cell = gpus_per_cell
        self.observer = _LockedObserver(observer or NullObserver())
        self.retry = retry
        self.clock = clock if clock is not None else runner.clock
        self.store = runner.store
        self.live = LiveServers()
        self.runner = dataclasses.replace(runner, runtime=TrackingRuntime(runner.runtime, self.live))
        self.pool = GpuPool(inventory.devices(), gpus_per_cell) if gpus_per_cell > 0 else None
        #: GPUs held host-wide while a cell runs, so another run on this runner waits instead of being refused for
        #: this one's memory; real GPUs only (a fake inventory's are this process's own).
        self.host_locks = HostGpuLocks(inventory, self.clock)
        self.idle = idle if idle is not None else (
            IdleBaseline(inventory, clock=self.clock) if self.pool or self.shared else None)
        self._captured = False
        self.stop = threading.Event()
        self._results: dict[str, CellResult] = {}
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()
        #: (cell id, GPU indices, t_start, t_end) per attempt: what tests and the benchmark look at.
        self.timeline: list[tuple[str, tuple[int, ...], float, float]] = []

    # ---- main thread
    def run(self, cells: list[Cell], observer: Observer | None = None) -> list[CellResult]:
        """Boot `cells`; may be called again (the pytest plugin and the frontier boot one cell at a time): the idle
        baseline is measured once, before the first cell, not while a cell's memory is still being released."""
        if observer is not None:
            self.observer = _LockedObserver(observer)
        if self.idle is not None and not self._captured:
            self.idle.capture()
            self._captured = True
        self.stop.clear()
        self._results, self._errors = {}, []
        todo: queue.SimpleQueue[Cell] = queue.SimpleQueue()
        for c in cells:
            todo.put(c)
        finished: queue.SimpleQueue[str] = queue.SimpleQueue()  # one post per worker as it returns (see _wait_for)
        workers = [threading.Thread(target=self._worker, args=(todo, finished), name=f"cell-worker-{i}")
                   for i in range(min(self.parallel, len(cells)))]
        with interrupts_raise():
            try:
                for w in workers:
                    w.start()
                self._wait_for(workers, finished)
            except (RunStopped, KeyboardInterrupt):
                with signals_held():
                    self._shutdown(workers)
                    self.store.finish(RunStatus.interrupted)
                raise
            except BaseException:
                with signals_held():
                    self._shutdown(workers)
                raise
        return [self._results[c.id] for c in cells if c.id in self._results]

    def _wait_for(self, workers: list[threading.Thread], finished: queue.SimpleQueue[str]) -> None:
        """Wait until every worker has returned, raising the first worker's error at once.

        Never by Thread.join while an interrupt may raise: on Python < 3.13 an exception from a signal handler inside
        join() releases the *running* thread's state lock and marks it stopped (CPython gh-90882), so the join in
        _shutdown, and the interpreter's own join at exit, return while that worker is still tearing its cell down —
        the run was marked interrupted and the process exited with a cell's work directory half removed. A queue the
        workers post to on their way out is safe to interrupt."""
        left = len(workers)
        while left:
            try:
                finished.get(timeout=JOIN_SLICE_S)
                left -= 1
            except queue.Empty:
                pass
            if self._errors:
                raise self._errors[0]
        for w in workers:  # each has posted its last act: these return at once (and, held, cannot be cut short)
            with signals_held():
                w.join()

    def _shutdown(self, workers: list[threading.Thread]) -> None:
        self.stop.set()
        self.live.stop_all()
        for w in workers:
            if w.ident is not None:
                w.join()

    # ---- workers
    def _worker(self, todo: queue.SimpleQueue[Cell], finished: queue.SimpleQueue[str]) -> None:
        try:
            while not self.stop.is_set():
                try:
                    cell = todo.get_nowait()
                except queue.Empty:
                    return
                indices: list[int] = list(self.shared)
                if self.pool is not None:
                    got = self.pool.reserve(self.stop)
                    if got is None:
                        return
                    indices = got
                held = self.host_locks.acquire(indices, self.stop)
                if held is None:  # stopped while another run held the GPUs
                    if self.pool is not None:
                        self.pool.release(indices)
                    return
                waited = self.host_locks.waited.get(tuple(indices), 0.0)
                try:
                    result = self._run_cell(cell, indices)
                finally:
                    self.host_locks.release(held)
                    if self.pool is not None:
                        self.pool.release(indices)
                if waited >= 0.5:  # after the attempt: its log is written from the start when the server starts
                    note(self.store.log_path(cell.id), f"before start: waited {waited:.1f} s for GPU(s) {indices}, "
                                                       "which another run on this host had a cell on")
                if result is None:  # interrupted: its server was stopped by us, so there is no verdict
                    return
                self.store.record(result)
                with self._lock:
                    self._results[cell.id] = result
                self.observer.cell_finished(cell, result)
                if result.reason == Reason.gpu_lost:  # no more cells on that GPU: the run stops, resumable
                    raise GpusGone(f"{self._lost(indices) or 'a GPU of ' + cell.id + ' is lost'}: no more cells "
                                   "start on it; the run stops here")
        except GpuLost as exc:  # lost between cells (the idle wait, the GPU's record): the same stop
            with self._lock:
                self._errors.append(GpusGone(f"{exc}: no more cells start on it; the run stops here"))
            self.stop.set()
        except BaseException as exc:  # noqa: BLE001 - a bug in a runtime or here: stop everything, the main thread re-raises
            with self._lock:
                self._errors.append(exc)
            self.stop.set()
        finally:
            finished.put(threading.current_thread().name)

    def _lost(self, indices: list[int]) -> str | None:
        """Whether a GPU of the cell stopped answering (asked once its server is gone)."""
        for i in indices:
            try:
                self.inventory.used_bytes(i)
            except GpuLost as exc:
                return str(exc)
        return None

    def _prepare(self, indices: list[int]) -> tuple[list[GpuInfo] | None, IdleWait | None]:
        if not indices:
            return None, None
        assert self.idle is not None
        wait = self.idle.wait(indices, self.stop)
        return [self.inventory.info(i) for i in indices], wait

    def _attempt(self, cell: Cell, indices: list[int], gpus: list[GpuInfo] | None, number: int = 1,
                 wait: IdleWait | None = None) -> CellResult:
        t0 = self.clock.now()
        try:
            return self.runner.run(cell, Attempt(gpus=gpus, assigned=self.pool is not None, number=number,
                                                 gpus_not_idle=wait.describe() if wait and not wait.idle else None,
                                                 on_milestone=lambda m, at: self.observer.cell_milestone(cell, m, at),
                                                 gpu_check=(lambda: self._lost(indices)) if indices else None,
                                                 gpu_memory=(lambda server: GpuProbe(self.inventory, indices,
                                                                                     server.pids))
                                                 if indices else None))
        finally:
            with self._lock:
                self.timeline.append((cell.id, tuple(indices), t0, self.clock.now()))

    def _run_cell(self, cell: Cell, indices: list[int]) -> CellResult | None:
        """Boot `cell` on `indices` after their idle wait, and again if the retry policy says so; None: interrupted
        (its server stopped by the main thread, so there is no verdict to record)."""
        log = self.store.log_path(cell.id)

        def boot(number: int) -> CellResult | None:
            gpus, wait = self._prepare(indices)
            if self.stop.is_set():
                return None
            if number == 1:
                self.observer.cell_started(cell)
            # the verdict policy hears of GPUs still above idle on a retry only (its `gpu_memory_held`)
            result = self._attempt(cell, indices, gpus, number=number, wait=wait if number > 1 else None)
            if self.live.was_killed(cell.id):
                return None
            gpu_notes(log, gpus, wait)
            return result

        first = boot(1)
        return None if first is None else self.retry.settle(first, log, boot)
