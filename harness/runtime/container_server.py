"""A started cell's container, as the watch loop sees a server: its host port, its exit (and OOMKilled), a stop that
reads the exit code before it removes the container, and the first sign that the engine hung or went away meanwhile.
"""

from __future__ import annotations

import math
import os
import threading

from harness.clock import SYSTEM, Clock
from harness.memory.probe import MemoryProbe
from harness.memory.process_tree import descendants
from harness.runtime.connection import EngineConnection
from harness.runtime.container_stats import ContainerStatsProbe
from harness.runtime.leftovers import Leftovers
from harness.runtime.ports import HOST
from harness.runtime.records import AppliedPatch, ContainerInfo, ServerStop, Stopped
from harness.units import fmt_seconds

#: How often the host port and the exit code are looked for again, and how many times the port.
PORT_POLL_S, PORT_POLLS = 0.05, 50
EXIT_POLL_S, WAIT_RETRY_S = 0.1, 0.2
#: A container's exit code when SIGKILL ended its init (128 + 9): the engine's stop after its grace, or the kernel's OOM
#: killer (State.OOMKilled tells them apart). SIGTERM forwarded by the init ends it with the server's own code.
SIGKILL_EXIT = 137
#: The exit wait asks the engine in slices this long, so a hung engine never holds its thread for good.
WAIT_SLICE_S = 10


class ContainerServer:
    def __init__(self, conn: EngineConnection, leftovers: Leftovers, tc, container_port: int, argv: list[str],
                 image: str, image_id: str, repo_digest: str | None, patches: list[AppliedPatch],
                 clock: Clock = SYSTEM):
        self.conn, self.leftovers, self.tc = conn, leftovers, tc
        self.clock = clock
        self.container = tc.get_wrapped_container()
        self.container_port = container_port
        self.argv = argv
        self.image, self.image_id, self.repo_digest = image, image_id, repo_digest
        self._patches = patches
        self._init_pid = 0
        self._state: dict | None = None
        self._stopping = False  # a stop has begun: the exit wait stops asking
        self._stopped: ServerStop | None = None
        self._lock = threading.Lock()
        #: The first sign that the engine hung or went away while the cell ran (harness.runtime.engine.trouble).
        self.engine_trouble: str | None = None
        self.port = self._host_port()
        self.base_url = f"http://{HOST}:{self.port}" if self.port else f"http://{HOST}:0"

    def _host_port(self) -> int | None:
        key = f"{self.container_port}/tcp"
        for _ in range(PORT_POLLS):
            self.container.reload()
            bindings = (self.container.attrs.get("NetworkSettings", {}).get("Ports") or {}).get(key)
            if bindings:
                return int(bindings[0]["HostPort"])
            if self.container.status in ("exited", "dead"):
                return None
            self.clock.sleep(PORT_POLL_S)
        return None

    def _noted(self, call: str, exc: BaseException) -> None:
        if self.engine_trouble is None:
            self.engine_trouble = self.conn.trouble(call, exc)

    def _reloaded(self) -> bool:
        """The container's state read again; False, the engine's trouble noted, when the engine did not answer."""
        try:
            self.container.reload()
            return True
        except Exception as exc:  # noqa: BLE001 - any failed call: the engine's trouble, noted
            self._noted("inspect", exc)
            return False

    def wait(self, timeout: float | None = None) -> int | None:
        if timeout is None:
            while True:
                try:
                    return int(self.container.wait(timeout=WAIT_SLICE_S)["StatusCode"])
                except Exception:  # noqa: BLE001 - a slice ran out, it was removed under us, or the engine hung up
                    code = self._exit_code()
                    if code is not None or self._stopping:
                        return code
                    self.clock.sleep(WAIT_RETRY_S)
        deadline = self.clock.now() + timeout
        while True:
            code = self._exit_code()
            if code is not None or self.clock.now() >= deadline:
                return code
            self.clock.sleep(min(EXIT_POLL_S, max(0.0, deadline - self.clock.now())))

    def _exit_code(self) -> int | None:
        if self._state is not None:
            return self._state.get("ExitCode")
        if not self._reloaded():
            return None
        state = self.container.attrs.get("State", {})
        if state.get("Status") in ("exited", "dead"):
            return state.get("ExitCode")
        return None

    def owns_listener(self) -> bool:
        """The host port was assigned to this container by the engine; it is ours while the container runs."""
        return self._reloaded() and self.container.status == "running" and self._host_port() == self.port

    def stop(self, grace_s: float = 2.0) -> ServerStop:
        """SIGTERM (through the container's init), SIGKILL after `grace_s`, then remove. vLLM ignores SIGTERM
        mid-start-up, and the whole teardown must fit in the 5 s an interrupted run promises: the engine's stop and
        removal add 1-1.5 s on a loaded machine, so a second less grace than the process runtime's 3 s."""
        with self._lock:
            if self._stopped is not None:
                return self._stopped
            self._stopping = True
            grace = max(1, math.ceil(grace_s))  # the engine's stop takes whole seconds
            t0 = self.clock.now()
            signalled, failed = False, None
            try:
                if self._exit_code() is None:  # read afresh: one that exited on its own is not signalled
                    signalled = True
                    self.container.stop(timeout=grace)
            except Exception as exc:  # noqa: BLE001 - gone already, or the engine is in trouble (noted)
                self._noted("stop", exc)
                failed = self.conn.trouble("stop", exc)
            gone_s = round(self.clock.now() - t0, 3)
            # The engine going away right after the server died is what killed it (a `systemctl restart docker`
            # stops every container, then closes its API): the last calls' trouble is the cell's engine trouble too.
            try:
                self.container.reload()
                self._state = dict(self.container.attrs.get("State", {}))
            except Exception as exc:  # noqa: BLE001 - removed already, or the engine away: no last state to keep
                self._noted("inspect", exc)
                self._state = {}
            removal = None
            try:
                self.tc.stop(force=True, delete_volume=True)
            except Exception as exc:  # noqa: BLE001 - gone already; or the engine is away: removed once it is back
                self._noted("remove", exc)
                if trouble := self.conn.trouble("remove", exc):
                    self.leftovers.leave(self.container.id)
                    removal = f"{trouble}; the container is left for `boot-harness gc`"
            self._stopped = self._how(signalled, failed, grace, gone_s, removal)
            return self._stopped

    def _how(self, signalled: bool, failed: str | None, grace: int, gone_s: float, removal: str | None) -> ServerStop:
        """How the engine's stop ended it, from the container's last state: its stop sends TERM and, after the grace,
        KILL itself, so only the exit code tells them apart (137: SIGKILL to the init; any other: the server ended on
        the forwarded TERM) — and a 137 is the grace's only when the kernel did not OOM-kill it and the stop waited the
        grace out. Whatever the engine cannot tell is `unknown`."""
        state = self._state or {}
        code = state.get("ExitCode")
        note = "; ".join(n for n in (failed, removal) if n) or None
        if not signalled:
            return ServerStop(how=Stopped.exited, grace_s=grace, gone_s=0.0, exit_code=code, note=note)
        status = state.get("Status")
        if failed is not None or status not in ("exited", "dead") or code is None:
            why = None if failed else f"the container was {status} after the engine's stop" if status else \
                "the engine's last state of the container could not be read"
            return ServerStop(how=Stopped.unknown, grace_s=grace, exit_code=code,
                              note="; ".join(n for n in (why, note) if n))
        if code != SIGKILL_EXIT:
            return ServerStop(how=Stopped.terminated, grace_s=grace, gone_s=gone_s, exit_code=code, note=note)
        if state.get("OOMKilled") or gone_s < grace:
            why = "OOM-killed while it was stopped" if state.get("OOMKilled") else \
                f"SIGKILLed {fmt_seconds(gone_s)} into a {grace} s grace, not by the engine's stop"
            return ServerStop(how=Stopped.unknown, grace_s=grace, exit_code=code,
                              note="; ".join(n for n in (why, note) if n))
        return ServerStop(how=Stopped.killed, grace_s=grace, gone_s=gone_s, exit_code=code, note=note)

    def container_info(self) -> ContainerInfo:
        return ContainerInfo(
            engine=self.conn.engine, engine_version=self.conn.version,
            image=self.image, image_digest=self.repo_digest or self.image_id,
            container_id=self.container.id, container_name=self.container.name,
            oom_killed=(self._state or {}).get("OOMKilled"), engine_trouble=self.engine_trouble,
        )

    def applied_patches(self) -> list[AppliedPatch]:
        return list(self._patches)

    def init_pid(self) -> int:
        """The container's init as the engine's inspect names it (a host PID); 0 until it runs, or when this host's
        /proc does not show it (the harness in a PID namespace of its own)."""
        if not self._init_pid:
            try:
                self.container.reload()
                self._init_pid = int((self.container.attrs.get("State") or {}).get("Pid") or 0)
            except Exception:  # noqa: BLE001 - the engine's trouble is noted by the watch's own calls
                return 0
        return self._init_pid if self._init_pid and os.path.exists(f"/proc/{self._init_pid}") else 0

    def pids(self) -> set[int]:
        """The container's init and its tree on this host; empty when this host cannot see them."""
        pid = self.init_pid()
        return descendants([pid]) if pid else set()

    def memory_probe(self) -> MemoryProbe:
        import psutil

        return ContainerStatsProbe(self.container, self.conn.engine, psutil.virtual_memory().total, self.init_pid)
