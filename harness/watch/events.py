"""The four signals of one boot, as timestamped events on one queue, so one loop can decide under one deadline."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from harness.clock import SYSTEM, Clock


class EventKind(StrEnum):
    line = "line"
    eof = "eof"
    exit = "exit"
    healthy = "healthy"
    probed = "probed"


@dataclass(frozen=True)
class Event:
    kind: EventKind
    t: float
    text: str | None = None
    code: int | None = None


class EventQueue(Protocol):
    def put(self, event: Event) -> None: ...

    def get(self, timeout: float) -> Event | None: ...


#: Log text waiting for the watch loop, in characters. Past it the log reader stops reading until the loop catches
#: up, so a server that floods its log waits on its pipe instead of growing the harness's memory.
MAX_PENDING_CHARS = 16 * 1024 * 1024


class ThreadedEvents:
    """The real queue: producers are the log reader, the exit waiter and the health poller threads.

    Bounded by the log text pending, not by a count of lines (a line may be 64 KiB), so a server flooding its log is
    slowed to the pace the watch loop reads at (the pipe fills, the server blocks on write) instead of growing our
    memory. Only the log reader ever waits; exit, health and probe events always go through."""

    def __init__(self, clock: Clock = SYSTEM, max_pending_chars: int = MAX_PENDING_CHARS):
        self.clock = clock
        self._q: queue.Queue[Event] = queue.Queue()
        self._room = threading.Condition()
        self._pending = 0
        self._max_pending = max_pending_chars
        self._closed = False

    def put(self, event: Event) -> None:
        self._q.put(event)

    def line_sink(self, text: str | None) -> None:
        if text is None:
            self.put(Event(EventKind.eof, self.clock.now()))
            return
        with self._room:
            while self._pending and self._pending + len(text) > self._max_pending and not self._closed:
                self._room.wait(0.5)
            if self._closed:
                return  # the watch is over and nobody reads any more: drop, never block the reader for ever
            self._pending += len(text)
        self.put(Event(EventKind.line, self.clock.now(), text=text))

    def get(self, timeout: float) -> Event | None:
        try:
            ev = self._q.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        if ev.kind == EventKind.line:
            with self._room:
                self._pending -= len(ev.text or "")
                self._room.notify_all()
        return ev

    def close(self) -> None:
        """Nobody reads any more: lines that still arrive are dropped instead of waiting for room, and what is queued
        is let go."""
        with self._room:
            self._closed = True
            self._room.notify_all()
        try:
            while True:
                self._q.get_nowait()
        except queue.Empty:
            pass
