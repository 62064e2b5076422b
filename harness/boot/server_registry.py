"""The registry of started servers that lets the main thread stop them all on an interrupt (harness.boot.executor says
why). A server is stopped either by its owner (the runner's teardown) or, on an interrupt, by the main thread — and
then its cell's verdict is void, so the run records nothing for it and `--resume` boots it again.

The proxies are the real `Server` and `Runtime` Protocols (harness.runtime.base), member by member: a member added to
a Protocol is a member to add here, not one that silently bypasses the registry.
"""

from __future__ import annotations

import threading

from harness.matrix.cells import Cell
from harness.memory.probe import MemoryProbe
from harness.runtime.base import CellContext, LineSink, Runtime, Server
from harness.runtime.pull import PullObserver
from harness.runtime.records import AppliedPatch, ContainerInfo, ServerStop
from harness.shell import Step


class TrackedServer:
    """A started server as the registry sees it; `kill` is the main thread's stop."""

    def __init__(self, inner: Server, cell_id: str, live: LiveServers):
        self._inner, self._cell_id, self._live = inner, cell_id, live
        self._lock = threading.Lock()
        self._owner_stopping = False
        self.killed = False

    @property
    def base_url(self) -> str:
        return self._inner.base_url

    @base_url.setter
    def base_url(self, value: str) -> None:
        self._inner.base_url = value

    @property
    def port(self) -> int | None:
        return self._inner.port

    @property
    def argv(self) -> list[str]:
        return self._inner.argv

    @argv.setter
    def argv(self, value: list[str]) -> None:
        self._inner.argv = value

    def wait(self, timeout: float | None = None) -> int | None:
        return self._inner.wait(timeout)

    def owns_listener(self) -> bool:
        return self._inner.owns_listener()

    def container_info(self) -> ContainerInfo | None:
        return self._inner.container_info()

    def applied_patches(self) -> list[AppliedPatch]:
        return self._inner.applied_patches()

    def pids(self) -> set[int]:
        return self._inner.pids()

    def memory_probe(self) -> MemoryProbe:
        return self._inner.memory_probe()

    def stop(self, grace_s: float | None = None) -> ServerStop:
        """The owner's stop (its verdict stands). No `grace_s`: the server's own default. After the main thread's
        `kill`, the kill's own value (a stop is final)."""
        with self._lock:
            self._owner_stopping = True
        try:
            return self._inner.stop() if grace_s is None else self._inner.stop(grace_s)
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


class LiveServers:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: dict[str, TrackedServer] = {}
        self._stopping = False
        self.killed: set[str] = set()

    def add(self, cell_id: str, server: Server) -> TrackedServer:
        tracked = TrackedServer(server, cell_id, self)
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

    def forget(self, cell_id: str, tracked: TrackedServer) -> None:
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


class TrackingRuntime:
    """The cell's runtime, registering each server it starts; everything else is the inner runtime's."""

    def __init__(self, inner: Runtime, live: LiveServers):
        self._inner, self._live = inner, live

    @property
    def name(self) -> str:
        return self._inner.name

    @name.setter
    def name(self, value: str) -> None:
        self._inner.name = value

    @property
    def notes(self) -> list[str]:
        return self._inner.notes

    @notes.setter
    def notes(self, value: list[str]) -> None:
        self._inner.notes = value

    @property
    def pull_observer(self) -> PullObserver | None:
        return self._inner.pull_observer

    @pull_observer.setter
    def pull_observer(self, value: PullObserver | None) -> None:
        self._inner.pull_observer = value

    def preflight(self, cells: list[Cell], gpu_checks: bool = True) -> None:
        self._inner.preflight(cells, gpu_checks)

    def start(self, cell: Cell, ctx: CellContext, on_line: LineSink) -> Server:
        return self._live.add(cell.id, self._inner.start(cell, ctx, on_line))

    def command_line(self, cell: Cell, ctx: CellContext, host_port: int = 8000) -> list[str]:
        return self._inner.command_line(cell, ctx, host_port)

    def planned_command_line(self, cell: Cell, ctx: CellContext, host_port: int = 8000) -> tuple[list[str], list[Step]]:
        return self._inner.planned_command_line(cell, ctx, host_port)

    def read_server_file(self, cell: Cell, path: str) -> bytes | None:
        return self._inner.read_server_file(cell, path)

    def image_labels(self, ref: str) -> dict[str, str]:
        return self._inner.image_labels(ref)

    def image_digest(self, ref: str) -> str | None:
        return self._inner.image_digest(ref)
