"""The tolerance flags of `compare` and `bisect` (`--tolerance`, `--time-tolerance`, `--memory-tolerance`) read from
their text: a mistake is a UsageError naming the flag. The two-sided ones are one type read by one parser
(harness.analysis.tolerance.Tolerance; the units of its quantity)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from harness.analysis.tolerance import (
    DEFAULT_MEMORY_TOLERANCE,
    DEFAULT_TIME_TOLERANCE,
    UNITS,
    Quantity,
    Tolerance,
)
from harness.errors import UsageError


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


@dataclass(frozen=True)
class _Grammar:
    """How one quantity's flag is written and refused."""

    flag: str
    example: str
    parts: str
    """What the flag takes, for the line that refuses a wrong count of parts."""
    size: str
    """The absolute part named with an example, for the line that refuses a part."""
    beyond: str
    limit: float
    """The largest absolute part (a number of bytes must fit a signed 64-bit count)."""
    flags: re.RegexFlag


_GRAMMAR = {
    Quantity.seconds: _Grammar("--time-tolerance", "25%,30s", "a percentage and seconds", "seconds (30s)",
                               "duration", math.inf, re.RegexFlag(0)),
    Quantity.bytes: _Grammar("--memory-tolerance", "10%,256MiB", "a percentage and a size", "a size (256MiB)",
                             "memory", 1 << 62, re.IGNORECASE),
}


def parse_two_sided(text: str, default: Tolerance) -> Tolerance:
    """`25%,30s`, `10%,256MiB` (either order; one part keeps `default`'s other; the units of `default`'s quantity)
    → a Tolerance of that quantity. A mistake is one UsageError naming the flag."""
    g = _GRAMMAR[default.quantity]
    units = {name.lower(): scale for name, scale in UNITS[default.quantity]}
    pattern = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|" + "|".join(units) + r")\s*$", g.flags)
    rel, absolute = default.rel, default.absolute
    parts = str(text).split(",")
    if not 1 <= len(parts) <= 2:
        raise UsageError(f"{g.flag} {text}: write {g.parts}, e.g. {g.example}")
    seen = set()
    for part in parts:
        m = pattern.match(part)
        kind = None if m is None else "%" if m.group(2) == "%" else "size"
        if m is None or kind in seen:
            raise UsageError(f"{g.flag} {text}: {part.strip()!r} is not a percentage ({g.example.split(',')[0]}) "
                             f"or {g.size}")
        seen.add(kind)
        value = float(m.group(1))
        scale = units.get(m.group(2).lower(), 1)
        if not math.isfinite(value) or value * scale > g.limit:  # digits enough to overflow a float
            raise UsageError(f"{g.flag} {text}: {part.strip()!r} is beyond any {g.beyond}")
        if kind == "%":
            rel = value / 100
        else:
            absolute = value if default.quantity == Quantity.seconds else int(value * scale)
    return Tolerance(rel, absolute, default.quantity)


def parse_time_tolerance(text: str) -> Tolerance:
    """`--time-tolerance 25%,30s` → Tolerance.of_seconds(0.25, 30)."""
    return parse_two_sided(text, DEFAULT_TIME_TOLERANCE)


def parse_memory_tolerance(text: str) -> Tolerance:
    """`--memory-tolerance 10%,256MiB` (B, KiB, MiB, GiB, TiB) → Tolerance.of_bytes(0.10, 256 MiB)."""
    return parse_two_sided(text, DEFAULT_MEMORY_TOLERANCE)
