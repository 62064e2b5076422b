"""The tolerance flags of `compare` and `bisect` (`--tolerance`, `--time-tolerance`, `--memory-tolerance`) read from
their text: a mistake is a UsageError naming the flag. What a tolerance means lives with what it compares
(harness.analysis.timing.TimeTolerance, harness.analysis.compare.MemoryTolerance)."""

from __future__ import annotations

import math
import re

from harness.analysis.compare import DEFAULT_MEMORY_TOLERANCE, MemoryTolerance
from harness.analysis.timing import DEFAULT_TIME_TOLERANCE, TimeTolerance
from harness.errors import UsageError
from harness.units import GIB, KIB, MIB


def parse_tolerance(text: str) -> float:
    """`2%`, `2` (percent) or `0.02` (a fraction) → 0.02."""
    raw = str(text).strip()
    try:
        if raw.endswith("%"):
            value = float(raw[:-1]) / 100
        else:
            value = float(raw)
            value = value / 100 if value >= 1 else value
    except ValueError:
        raise UsageError(f"--tolerance {text}: not a number (write 2%, 2 or 0.02)") from None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"--tolerance {text}: must be a finite fraction or percentage, 0 or more")
    return value


_MEM_PART = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|b|kib|mib|gib|tib)\s*$", re.IGNORECASE)
_MEM_UNIT = {"b": 1, "kib": KIB, "mib": MIB, "gib": GIB, "tib": 1 << 40}


def parse_memory_tolerance(text: str) -> MemoryTolerance:
    """`10%,256MiB` (either order; one part keeps the other's default; B, KiB, MiB, GiB, TiB) → MemoryTolerance."""
    rel, abs_bytes = DEFAULT_MEMORY_TOLERANCE.rel, DEFAULT_MEMORY_TOLERANCE.abs_bytes
    parts = str(text).split(",")
    if not 1 <= len(parts) <= 2:
        raise UsageError(f"--memory-tolerance {text}: write a percentage and a size, e.g. 10%,256MiB")
    seen = set()
    for part in parts:
        m = _MEM_PART.match(part)
        kind = None if m is None else "%" if m.group(2) == "%" else "size"
        if m is None or kind in seen:
            raise UsageError(f"--memory-tolerance {text}: {part.strip()!r} is not a percentage (10%) or a size "
                             "(256MiB)")
        seen.add(kind)
        value = float(m.group(1))
        if not math.isfinite(value) or value * _MEM_UNIT.get(m.group(2).lower(), 1) > 1 << 62:
            raise UsageError(f"--memory-tolerance {text}: {part.strip()!r} is beyond any memory")
        if kind == "%":
            rel = value / 100
        else:
            abs_bytes = int(value * _MEM_UNIT[m.group(2).lower()])
    return MemoryTolerance(rel, abs_bytes)


_TIME_PART = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|s)\s*$")


def parse_time_tolerance(text: str) -> TimeTolerance:
    """`25%,30s` (either order; one part keeps the other's default) → TimeTolerance(0.25, 30)."""
    rel, abs_s = DEFAULT_TIME_TOLERANCE.rel, DEFAULT_TIME_TOLERANCE.abs_s
    parts = [p for p in str(text).split(",")]
    if not 1 <= len(parts) <= 2:
        raise UsageError(f"--time-tolerance {text}: write a percentage and seconds, e.g. 25%,30s")
    seen = set()
    for part in parts:
        m = _TIME_PART.match(part)
        if not m or m.group(2) in seen:
            raise UsageError(f"--time-tolerance {text}: {part.strip()!r} is not a percentage (25%) or seconds (30s)")
        seen.add(m.group(2))
        value = float(m.group(1))
        if not math.isfinite(value):  # digits enough to overflow a float
            raise UsageError(f"--time-tolerance {text}: {part.strip()!r} is beyond any duration")
        if m.group(2) == "%":
            rel = value / 100
        else:
            abs_s = value
    return TimeTolerance(rel, abs_s)
