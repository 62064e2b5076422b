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
    """The real queue: producers are the log reader, the exit waiter and the health poller threads.

    Bounded, so a server flooding its log is slowed to the pace the watch loop reads at (the pipe fills, the server
    blocks on write) instead of growing our memory; once closed, producers drop what they have and end."""

    MAXSIZE = 4096

    def __init__(self, clock: Clock = time.monotonic, maxsize: int = MAXSIZE):
        self.clock = clock
        self._q: queue.Queue[Event] = queue.Queue(maxsize=maxsize)
        self._closed = False

    def put(self, event: Event) -> None:
        while not self._closed:
            try:
                self._q.put(event, timeout=0.1)
                return
            except queue.Full:
                continue

    def close(self) -> None:
        """Nobody reads any more: let blocked producers go, and drop what is queued."""
        self._closed = True
        try:
            while True:
                self._q.get_nowait()
        except queue.Empty:
            pass

    def line_sink(self, text: str | None) -> None:
        self.put(Event("eof", self.clock()) if text is None else Event("line", self.clock(), text=text))

    def get(self, timeout: float) -> Event | None:
        try:
            return self._q.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
