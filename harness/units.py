"""One way to print a size or a count, for every output (terminal, pipe, markdown, HTML, JSON-free text)."""

from __future__ import annotations

import re

KIB, MIB, GIB = 1024, 1024**2, 1024**3


def fmt_bytes(b: float | None, signed: bool = False) -> str:
    """Bytes in the unit that keeps them readable, chosen per value: GiB from 0.1 GiB up, MiB from 0.1 MiB, KiB
    from 1 KiB, else bytes — so a 3 MiB budget reads `3.00 MiB`, never `0 GiB`."""
    if b is None:
        return "—"
    sign = "+" if signed and b > 0 else ""
    a = abs(b)
    if a >= 0.1 * GIB:
        return f"{sign}{b / GIB:.2f} GiB"
    if a >= 0.1 * MIB:
        return f"{sign}{b / MIB:.2f} MiB"
    if a >= KIB:
        return f"{sign}{b / KIB:.1f} KiB"
    return f"{sign}{b:.0f} B"


def fmt_tokens(n: float | None) -> str:
    return "—" if n is None else f"{n:,.0f}"


def fmt_seconds(s: float | None) -> str:
    """`27.1 s`; from 100 s on whole seconds with thousands separators (`1,390 s`): a night's phases stay readable."""
    if s is None:
        return "—"
    return f"{s:,.0f} s" if abs(s) >= 100 else f"{s:.1f} s"


_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")


def read_human_int(text: str, *, tera: bool = True) -> int:
    """vLLM's human_readable_int: `131072`, `128k` (10**3), `128K` (2**10), `4G`, `25.6k` — `k` 10**3 … `t` 10**12,
    `K` 2**10 … `T` 2**40, decimals only with decimal suffixes. `tera`: the release knows t/T (0.13.0 on; before,
    `1T` falls through to int() and is refused). A ValueError when it is no such integer (the one for a decimal with
    a binary suffix says so)."""
    value = str(text).strip()
    m = _HUMAN.fullmatch(value)
    if m:
        number, suffix = m.groups()
        decimal = {"k": 10**3, "m": 10**6, "g": 10**9, **({"t": 10**12} if tera else {})}
        binary = {"K": 2**10, "M": 2**20, "G": 2**30, **({"T": 2**40} if tera else {})}
        if suffix in decimal:
            return int(float(number) * decimal[suffix])
        if suffix in binary:
            if "." in number:
                raise ValueError(f"no decimals with a binary suffix (did you mean {number}{suffix.lower()}?)")
            return int(number) * binary[suffix]
    return int(value)


def human_int(text: str) -> int | None:
    """`read_human_int` as the newest vLLM reads it, None where it is no such integer."""
    try:
        return read_human_int(text)
    except ValueError:
        return None


def plural(n: int, word: str, words: str | None = None) -> str:
    """`1 run`, `3 runs` (`words`: a plural that is not `word` + s)."""
    return f"{n:,} {word if n == 1 else words or word + 's'}"
