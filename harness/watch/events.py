"""The four signals of one boot, as timestamped events on one queue, so one loop can decide under one deadline."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

Clock = Callable[[], float]

EventKind = Literal["line", "eof", "exit", "healthy"]


@dataclass(frozen=True)
class Event:
    kind: EventKind
    t: float
    text: str | None = None
    code: int | None = None


class EventQueue(Protocol):
    def put(self, event: Event) -> None: ...

    def get(self, timeout: float) -> Event | None: ...


class ThreadedEvents:
    """The real queue: producers are the log reader, the exit waiter and the health poller threads."""

    def __init__(self, clock: Clock = time.monotonic):
        self.clock = clock
        self._q: queue.Queue[Event] = queue.Queue()

    def put(self, event: Event) -> None:
        self._q.put(event)

    def line_sink(self, text: str | None) -> None:
        self.put(Event("eof", self.clock()) if text is None else Event("line", self.clock(), text=text))

    def get(self, timeout: float) -> Event | None:
        try:
            return self._q.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
