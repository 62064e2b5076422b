"""One way to print a size or a count, for every output (terminal, pipe, markdown, HTML, JSON-free text)."""

from __future__ import annotations

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
    return "—" if s is None else f"{s:.1f} s"
