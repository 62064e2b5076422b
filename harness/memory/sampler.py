"""The sampler: a thread that reads one boot's probe every `interval_s` from the server's start until it is stopped
(after the verdict, and the probe of a booted cell), on the cell's own clock, so each sample sits on the timeline.

A probe that fails ends the curve with its reason (the run owner drops the reason when the server exited on its own:
then the curve simply ended with the server); either way the cell goes on. Nothing here raises into the boot, and
nothing here asks the container engine whether the server still runs: an engine call from this thread at the moment a
container exits changes what the watch's own calls see of an engine going away.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.clock import SYSTEM, Clock
from harness.errors import ProbeFailed
from harness.memory.probe import DeviceReading, Limit, MemoryProbe


@dataclass
class Samples:
    """What the sampler collected: every sample in full (thinned only when the record is written)."""

    limit: Limit
    points: list[tuple[float, int]] = field(default_factory=list)
    #: Per GPU, per sample (NVML probes): the readings, aligned with `points`.
    devices: list[tuple[DeviceReading, ...]] = field(default_factory=list)
    stopped: str | None = None


#: How long `end()` waits for a sample in progress (the stats API's answer takes up to a second).
JOIN_S = 2.0


class MemorySampler:
    def __init__(self, probe: MemoryProbe, interval_s: float, start: float, clock: Clock = SYSTEM,
                 alive: Callable[[], bool] = lambda: True, pace: Clock = SYSTEM):
        """`clock` stamps the samples (the cell's clock: the timeline's); `pace` times the waits between them. They
        differ in a unit test: a FakeClock moves only when slept on, so a sampler sleeping on the cell's clock would
        carry the watch's deadline away with it."""
        self.probe, self.interval_s, self.start, self.clock, self.pace = probe, interval_s, start, clock, pace
        #: Whether the server still runs: a probe failing after it exited is the curve's natural end, not a fault.
        self._alive = alive
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples = Samples(Limit(None, None))

    def begin(self) -> MemorySampler:
        """Start sampling in a daemon thread until `end()`; returns at once. The thread asks the limit first: that is
        an engine call for a container (its stats), which must never hold up the watch (a line not yet written to
        the log when the harness is killed is a line lost)."""
        self._thread = threading.Thread(target=self._run, daemon=True, name="memory-sampler")
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self.samples.limit = self.probe.limit()
        except ProbeFailed as exc:
            self.samples.stopped = str(exc)
            return
        except Exception as exc:  # noqa: BLE001 - a sampler never fails the cell
            self.samples.stopped = f"the memory probe failed: {type(exc).__name__}: {exc}"
            return
        self._loop()

    def sample_once(self) -> bool:
        """One sample; False once the probe can no longer answer (the reason kept, unless the server had exited)."""
        t = self.clock.now()
        try:
            reading = self.probe.read()
        except Exception as exc:  # noqa: BLE001 - ProbeFailed, or a probe's bug: the curve stops, the cell goes on
            if self._alive() and not self._stop.is_set():
                self.samples.stopped = (str(exc) if isinstance(exc, ProbeFailed)
                                        else f"the memory probe failed: {type(exc).__name__}: {exc}")
                self.samples.stopped += f" (at {round(t - self.start, 1)} s)"
            return False
        self.samples.points.append((round(t - self.start, 3), int(reading.bytes)))
        if reading.devices:
            self.samples.devices.append(reading.devices)
        return True

    def _loop(self) -> None:
        due = self.pace.now()
        while not self._stop.is_set():
            if not self.sample_once():
                return
            due += self.interval_s
            now = self.pace.now()
            if due < now:  # a slow read (an engine call): keep the pace, never a burst to catch up
                due = now + self.interval_s
            if self.pace.wait(self._stop, due - now):
                return

    def end(self, final: bool = True) -> Samples:
        """Stop sampling (one last sample first when `final`, so the curve reaches the verdict) and hand over what
        was sampled. Never waits long: a probe stuck in an engine call (a hung engine) is left to its daemon thread,
        and the curve says so — the teardown must not wait for it."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=JOIN_S)
            if thread.is_alive():
                self.samples.stopped = self.samples.stopped or "the memory probe did not answer when the boot ended"
            elif final and self.samples.stopped is None and self.samples.limit.kind is not None:
                self._stop.clear()
                self.sample_once()
                self._stop.set()
        s = self.samples  # a copy: a thread left behind may still append to its own
        return Samples(s.limit, list(s.points), list(s.devices), s.stopped)


class Unreadable:
    """A probe that could not be made: the curve is empty and says why."""

    def __init__(self, why: str, source=None):
        from harness.memory.model import MemorySource

        self.why = why
        self.source = source or MemorySource.process

    def limit(self) -> Limit:
        raise ProbeFailed(self.why)

    def read(self):
        raise ProbeFailed(self.why)
