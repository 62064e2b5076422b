"""Which of many substrings a line holds, for the price of a few substring tests.

The catalogue's needles and the parser's keywords are a few hundred plain substrings, and a log line must be told
from them cheaply: most lines hold none. Each string is filed under one anchor it contains (a short substring chosen
to be rare in the lines of a boot that names no cause, and shared by many strings); a line is searched for the
anchors only, and a string is tried only where its anchor is. A string no anchor is in is its own anchor, so no
string can ever go untried: which anchors are given changes the speed, never the answer.

A loop of `in` tests beats a regex alternation and any() here (CPython's substring search skips through a line in C;
a regex tries every position in turn).
"""

from __future__ import annotations

from collections.abc import Iterable


class Needles:
    """A set of substrings, searched through anchors. `strings` keep their order in `found`."""

    def __init__(self, strings: Iterable[str], anchors: Iterable[str] = ()) -> None:
        self.strings: tuple[str, ...] = tuple(dict.fromkeys(s for s in strings if s))
        order = [a for a in dict.fromkeys(anchors) if a]
        filed: dict[str, list[str]] = {}
        for s in self.strings:
            filed.setdefault(next((a for a in order if a in s), s), []).append(s)
        #: (anchor, the strings filed under it; None when the anchor is its only string), the given anchors first.
        self.buckets: tuple[tuple[str, tuple[str, ...] | None], ...] = tuple(
            (a, None if b == [a] else tuple(b)) for a, b in sorted(filed.items(), key=lambda ab: _rank(order, ab[0])))

    def any(self, text: str) -> bool:
        """Whether `text` holds one of the strings."""
        for anchor, bucket in self.buckets:
            if anchor in text:
                if bucket is None:
                    return True
                for s in bucket:
                    if s in text:
                        return True
        return False

    def holds(self, text: str, wanted: frozenset[str]) -> tuple[bool, bool]:
        """Whether `text` holds one of `wanted` (a subset of the strings), and whether it holds any string: one pass
        that stops at the first of `wanted`, for a caller that would otherwise ask `any` and then `found`."""
        held = False
        for anchor, bucket in self.buckets:
            if anchor in text:
                if bucket is None:
                    if anchor in wanted:
                        return True, True
                    held = True
                else:
                    for s in bucket:
                        if s in text:
                            if s in wanted:
                                return True, True
                            held = True
        return False, held

    def found(self, text: str) -> list[str]:
        """The strings `text` holds, anchor by anchor."""
        out: list[str] = []
        for anchor, bucket in self.buckets:
            if anchor in text:
                if bucket is None:
                    out.append(anchor)
                else:
                    out.extend(s for s in bucket if s in text)
        return out


def _rank(order: list[str], anchor: str) -> int:
    return order.index(anchor) if anchor in order else len(order)
