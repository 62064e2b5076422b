"""A two-sided tolerance: a change counts only beyond *both* a relative and an absolute part.

Boot times and memory peaks are noisy in two ways at once: 30 s more on a 40-minute boot is noise, and so is 40 % more
on a 2-second phase; 10 % of a 500 MiB CPU boot is sampling noise, and so is 256 MiB of a 70 GiB GPU peak. One type
serves `compare`'s and `bisect`'s time and memory tolerances and the change points' minimum magnitude; its quantity
says what the absolute part counts (seconds or bytes) and so how it is written. The flags' text is read by
harness.cli.tolerances.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from harness.units import KIB, MIB, fmt_bytes


class Quantity(StrEnum):
    """What a tolerance's absolute part counts."""

    seconds = "seconds"
    bytes = "bytes"


#: The units each quantity's absolute part is written in, largest first (a flag's suffix; `describe`'s name).
UNITS: dict[Quantity, tuple[tuple[str, int], ...]] = {
    Quantity.seconds: (("s", 1),),
    Quantity.bytes: (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", MIB), ("KiB", KIB), ("B", 1)),
}


@dataclass(frozen=True)
class Tolerance:
    """`rel` of the first value and `absolute` (seconds, or whole bytes) — a change must pass both."""

    rel: float
    absolute: float
    quantity: Quantity = Quantity.seconds

    @classmethod
    def of_seconds(cls, rel: float, seconds: float) -> Tolerance:
        return cls(rel, seconds, Quantity.seconds)

    @classmethod
    def of_bytes(cls, rel: float, size: int) -> Tolerance:
        return cls(rel, size, Quantity.bytes)

    def exceeded(self, a: float, b: float) -> bool:
        """From `a` to `b` is strictly beyond both parts (compare, bisect: a change equal to the tolerance is none)."""
        d = abs(b - a)
        return d > self.absolute and d > self.rel * abs(a)

    def reached(self, a: float, b: float) -> bool:
        """From `a` to `b` is at least both parts (the change points' minimum magnitude, which a step may equal)."""
        return abs(b - a) >= max(self.absolute, self.rel * a)

    def ratio(self, a: float, b: float) -> float:
        """How far beyond its threshold a change is (1 is on it): of the changes that fail, the smallest is the
        weakest."""
        threshold = max(self.absolute, self.rel * a)
        return abs(b - a) / threshold if threshold else math.inf

    def describe(self) -> str:
        """`25% and 30 s`, `10% and 256 MiB`: a size as the flag writes it where it is a round number of a unit."""
        if self.quantity == Quantity.seconds:
            return f"{self.rel:.0%} and {self.absolute:g} s"
        size = next((f"{self.absolute / unit:g} {name}" for name, unit in UNITS[Quantity.bytes]
                     if self.absolute >= unit and (self.absolute * 100) % unit == 0), fmt_bytes(self.absolute))
        return f"{self.rel:.0%} and {size}"


DEFAULT_TIME_TOLERANCE = Tolerance.of_seconds(0.25, 30.0)
DEFAULT_MEMORY_TOLERANCE = Tolerance.of_bytes(0.10, 256 * MIB)
