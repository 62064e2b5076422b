"""Time as a value passed in: the one seam every wait in the harness goes through (as tenacity injects `sleep`).

A `Clock` reads a monotonic time and sleeps; `SYSTEM` is the real one. `FakeClock` moves only when something sleeps
on it, so a unit test of a 180 s idle wait or a 5 s stop grace runs in microseconds and never really sleeps. It is the
only clock: the watch (its events, health poller and timeline) and the fake GPU inventory read this one too, so one
attempt's deadlines, milestones and waits are all on the same time.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic clock."""

    def sleep(self, seconds: float) -> None:
        """Let `seconds` pass (never negative)."""

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Sleep up to `seconds`, returning early (True) once `event` is set: an interruptible sleep."""


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds))


SYSTEM: Clock = SystemClock()


class FakeClock:
    """A clock that only moves when slept on (or `advance`d); thread-safe. `slept` lists every sleep, in order."""

    def __init__(self, start: float = 1000.0):
        self._t = start
        self._lock = threading.Lock()
        self.slept: list[float] = []

    def now(self) -> float:
        with self._lock:
            return self._t

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._t += max(0.0, seconds)

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.slept.append(seconds)
            self._t += max(0.0, seconds)
        time.sleep(0)  # yield, so other threads see the time move as they would

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if event.is_set():
            return True
        self.sleep(seconds)
        return event.is_set()
