"""One container engine as a runtime holds it: connected on first use, named as what really answers (podman behind
`runtime: docker` is podman), and the one place that reads a failed call as the engine's trouble or the cell's.

An engine may go away under a run (a restart, an upgrade): each cell waits a bounded time for it to answer again, so
a restart is not a verdict on a cell; one that stays away stops the run (EngineGone: an interrupt, `--resume` finishes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.clock import SYSTEM, Clock
from harness.errors import EngineGone
from harness.runtime import engine as eng

if TYPE_CHECKING:
    import docker

#: How long a cell waits for an engine that went away (a restart, an upgrade) to answer again, and how often it asks.
ENGINE_RETURN_S, ENGINE_PING_S = 60.0, 0.5


class EngineConnection:
    def __init__(self, name: str, timeout_s: float = eng.DEFAULT_CALL_TIMEOUT_S, clock: Clock = SYSTEM):
        #: The engine the matrix names (`runtime:`); `engine` is the one that answers.
        self.name, self.timeout_s, self.clock = name, timeout_s, clock
        self._client: docker.DockerClient | None = None
        self.info: eng.EngineInfo | None = None

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = eng.connect(self.name, self.timeout_s)
            self.info = eng.engine_info(self._client, self.name)
        return self._client

    @property
    def engine(self) -> str:
        """The engine that answers; the configured one until connected."""
        return self.info.name if self.info else self.name

    @property
    def version(self) -> str | None:
        return self.info.version if self.info else None

    def client_kwargs(self) -> dict[str, Any]:
        """docker-py's client keywords for a client of its own (testcontainers makes one per container)."""
        return eng.client_kwargs(self.name, self.timeout_s)

    def trouble(self, call: str, exc: BaseException) -> str | None:
        """What a failed `call` says about the engine (hung, went away), or None: the answer was the cell's."""
        return eng.trouble(self.engine, call, exc, self.timeout_s)

    def await_return(self) -> None:
        """Return once the engine answers, on a connection of its own (a pooled one may still reach an engine that is
        shutting down); EngineGone when it has not for ENGINE_RETURN_S."""
        deadline = self.clock.now() + ENGINE_RETURN_S
        while True:
            try:
                eng.connect(self.name, self.timeout_s).close()
                return
            except Exception as exc:  # noqa: BLE001 - docker-py raises several unrelated types for "nothing there"
                if self.clock.now() >= deadline:
                    raise EngineGone(f"runtime: the {self.engine} engine has not answered for {ENGINE_RETURN_S:g} s "
                                     f"({type(exc).__name__}): the run stops here") from None
                self.clock.sleep(ENGINE_PING_S)
