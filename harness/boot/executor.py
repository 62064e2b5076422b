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
cell records each GPU's name, driver, total and free memory at start. A `gpu_memory_busy` refusal means memory was
held when vLLM looked: that attempt is contaminated, its log is kept as `logs/<id>.attempt1.log`, and the cell is booted
once more after the wait. What the second attempt's refusal means (the configuration's verdict, or `error` /
`gpu_memory_held` when its GPUs were still above idle) is the verdict policy's to say (harness.verdict.policy).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from pathlib import Path
from typing import Any

from harness.boot.attempt import Attempt, CellRunner, NullObserver, Observer
from harness.boot.signals import Interrupted, interrupts_raise, signals_held
from harness.cells import Cell
from harness.logfacts.timeline import Milestone
from harness.gpu.idle import IdleBaseline, IdleWait
from harness.gpu.inventory import GpuPool, Inventory
from harness.results.model import CellResult, GpuInfo
from harness.verdict import Reason

#: The refusal that means "memory was held when the engine looked", on a GPU or (CPU backend) in RAM.
BUSY_REASON = Reason.gpu_memory_busy.value
JOIN_SLICE_S = 0.2


class _TrackedServer:
    """A started server as the registry sees it: stopped either by its owner (the runner's teardown) or, on an
    interrupt, by the main thread — and then its cell's verdict is void."""

    def __init__(self, inner: Any, cell_id: str, live: _LiveServers):
        self._inner, self._cell_id, self._live = inner, cell_id, live
        self._lock = threading.Lock()
        self._owner_stopping = False
        self.killed = False

    def __getattr__(self, name: str) -> Any:  # argv, base_url, port, wait, owns_listener, container_info, ...
        return getattr(self._inner, name)

    def stop(self, *args: Any, **kwargs: Any) -> int | None:
        with self._lock:
            self._owner_stopping = True
        try:
            return self._inner.stop(*args, **kwargs)
        finally:
            self._live.forget(self._cell_id, self)

    def kill(self) -> bool:
        """Stop from outside (main thread). False when the owner is already tearing it down."""
        with self._lock:
            if self._owner_stopping:
                return False
            self.killed = True
        self._live.mark_killed(self._cell_id)  # before the stop: the worker may see the exit at once
        self._inner.stop()
        return True


class _LiveServers:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: dict[str, _TrackedServer] = {}
        self._stopping = False
        self.killed: set[str] = set()

    def add(self, cell_id: str, server: Any) -> _TrackedServer:
        tracked = _TrackedServer(server, cell_id, self)
        with self._lock:
            late = self._stopping
            if not late:
                self._servers[cell_id] = tracked
        if late:  # started while the main thread was stopping everything: stop it here, void its verdict
            tracked.kill()
        return tracked

    def mark_killed(self, cell_id: str) -> None:
        with self._lock:
            self.killed.add(cell_id)

    def forget(self, cell_id: str, tracked: _TrackedServer) -> None:
        with self._lock:
            if self._servers.get(cell_id) is tracked:
                del self._servers[cell_id]

    def stop_all(self) -> list[str]:
        """Stop every server no owner is tearing down yet, all at once; returns the cells whose verdict is void."""
        with self._lock:
            self._stopping = True
            victims = list(self._servers.items())
        threads = [threading.Thread(target=tracked.kill, name=f"stop-{cell_id}") for cell_id, tracked in victims]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with self._lock:
            return sorted(self.killed)

    def was_killed(self, cell_id: str) -> bool:
        with self._lock:
            return cell_id in self.killed

    def running(self) -> list[str]:
        with self._lock:
            return list(self._servers)


class _TrackingRuntime:
    """The cell's runtime, registering each server it starts."""

    def __init__(self, inner: Any, live: _LiveServers):
        self._inner, self._live = inner, live
        self.name = inner.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def start(self, cell: Cell, ctx: Any, on_line: Any) -> Any:
        return self._live.add(cell.id, self._inner.start(cell, ctx, on_line))


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


def _note(log: Path, *lines: str) -> None:
    try:
        with log.open("a", encoding="utf-8") as f:
            for line in lines:
                f.write(f"[boot-harness] {line}\n")
    except OSError:
        pass


def _gpu_line(gpus: list[GpuInfo]) -> str:
    return "gpus: " + "; ".join(
        f"{g.index} (id {g.id}, {g.name}, driver {g.driver}, {g.free_gib} of {g.total_gib} GiB free at start)"
        for g in gpus)


class Executor:
    """Run cells `parallel` at a time (1: one after the other). With `gpus_per_cell` > 0 each cell gets its own GPUs
    from `inventory`; with `shared_gpus` every cell gets the matrix's request and waits for those GPUs."""

    def __init__(self, runner: CellRunner, inventory: Inventory, parallel: int, gpus_per_cell: int = 0,
                 observer: Observer | None = None, idle: IdleBaseline | None = None, retry_busy: bool = True,
                 shared_gpus: list[int] | None = None):
        """`shared_gpus`: the GPUs every cell gets from the matrix's own `gpus:` request (one cell at a time): each
        cell waits for them to be idle and records them, and is handed the request as written."""
        if parallel < 1:
            raise ValueError("parallel must be at least 1")
        if shared_gpus and (parallel > 1 or gpus_per_cell > 0):
            raise ValueError("shared GPUs are for one cell at a time, without gpus_per_cell")
        self.shared = list(shared_gpus or [])
        self.inventory = inventory
        self.parallel = parallel
        self.gpus_per_cell = gpus_per_cell
        self.observer = _LockedObserver(observer or NullObserver())
        self.retry_busy = retry_busy
        self.store = runner.store
        self.live = _LiveServers()
        self.runner = dataclasses.replace(runner, runtime=_TrackingRuntime(runner.runtime, self.live))
        self.pool = GpuPool(inventory.devices(), gpus_per_cell) if gpus_per_cell > 0 else None
        self.idle = idle if idle is not None else (IdleBaseline(inventory) if self.pool or self.shared else None)
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
            except (Interrupted, KeyboardInterrupt):
                with signals_held():
                    self._shutdown(workers)
                    self.store.finish("interrupted")
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
                try:
                    result = self._run_cell(cell, indices)
                finally:
                    if self.pool is not None:
                        self.pool.release(indices)
                if result is None:  # interrupted: its server was stopped by us, so there is no verdict
                    return
                self.store.record(result)
                with self._lock:
                    self._results[cell.id] = result
                self.observer.cell_finished(cell, result)
        except BaseException as exc:  # a bug in a runtime or here: stop everything, the main thread re-raises
            with self._lock:
                self._errors.append(exc)
            self.stop.set()
        finally:
            finished.put(threading.current_thread().name)

    def _prepare(self, indices: list[int]) -> tuple[list[GpuInfo] | None, IdleWait | None]:
        if not indices:
            return None, None
        assert self.idle is not None
        wait = self.idle.wait(indices, self.stop)
        return [self.inventory.info(i) for i in indices], wait

    def _attempt(self, cell: Cell, indices: list[int], gpus: list[GpuInfo] | None, number: int = 1,
                 wait: IdleWait | None = None) -> CellResult:
        t0 = time.monotonic()
        try:
            return self.runner.run(cell, Attempt(gpus=gpus, assigned=self.pool is not None, number=number,
                                                 gpus_not_idle=wait.describe() if wait and not wait.idle else None,
                                                 on_milestone=lambda m, at: self.observer.cell_milestone(cell, m, at)))
        finally:
            with self._lock:
                self.timeline.append((cell.id, tuple(indices), t0, time.monotonic()))

    def _run_cell(self, cell: Cell, indices: list[int]) -> CellResult | None:
        log = self.store.log_path(cell.id)
        gpus, wait = self._prepare(indices)
        if self.stop.is_set():
            return None
        self.observer.cell_started(cell)
        result = self._attempt(cell, indices, gpus)
        if self.live.was_killed(cell.id):
            return None
        self._gpu_notes(log, gpus, wait)
        if not (self.retry_busy and result.outcome == "refused" and result.reason == BUSY_REASON):
            return result
        # Contaminated: memory was held when vLLM looked. Keep the attempt's log, wait for idle, boot once more.
        first = log.with_name(f"{cell.id}.attempt1.log")
        _note(log, f"attempt 1 refused {BUSY_REASON} while memory was held: contaminated, not the configuration's "
                   "verdict; booting once more after the idle wait")
        if log.exists():
            log.replace(first)
        gpus, wait = self._prepare(indices)
        if self.stop.is_set():
            return None
        result = self._attempt(cell, indices, gpus, number=2, wait=wait)
        if self.live.was_killed(cell.id):
            return None
        self._gpu_notes(log, gpus, wait)
        _note(log, f"attempt 2 of 2; attempt 1 refused {BUSY_REASON} (contaminated), its log: "
                   f"{first.relative_to(self.store.run_dir)}")
        return result

    def _gpu_notes(self, log: Path, gpus: list[GpuInfo] | None, wait: IdleWait | None) -> None:
        if gpus:
            _note(log, _gpu_line(gpus), *([f"before start: {wait.describe()}"] if wait else []))
