"""Which of a list of selectors (`exclude`, `expect`'s `where`) a cell matches, in work linear in the cells plus the
rules: checking every rule against every cell is cells × rules (100 × 100 values and 6,666 exclude rules: 66 million
checks, 40 s to validate a 300 KB file).

The rules are indexed by axis value: rule i is bit i, and for each axis and value the index holds the int whose bits
are the rules that value satisfies on that axis (a rule that does not name the axis is satisfied by every value). A
cell's matching rules are the AND of its values' ints — one big-integer AND per axis, done by the interpreter in
machine words — and the first of them is the lowest bit set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from harness.matrix.model import Selector


def _bits(indices: Iterable[int], n: int) -> int:
    """The int with these bits set (of `n`), built in one pass: summing `1 << i` would cost n² / 64 word operations."""
    buf = bytearray((n + 7) // 8)
    for i in indices:
        buf[i >> 3] |= 1 << (i & 7)
    return int.from_bytes(buf, "little")


class SelectorIndex:
    """`selectors` indexed by the value each axis of `axes` takes. Every axis and value a selector names must be one
    of `axes` (the loader refuses the matrix otherwise, before any cell is built)."""

    def __init__(self, selectors: Sequence[Selector], axes: Mapping[str, Sequence[str]]):
        n = len(selectors)
        self._all = (1 << n) - 1
        naming: dict[str, list[int]] = {axis: [] for axis in axes}
        allowing: dict[str, dict[str, list[int]]] = {axis: {} for axis in axes}
        for i, selector in enumerate(selectors):
            for axis, names in selector.items():
                naming[axis].append(i)
                for name in (names if isinstance(names, list) else [names]):
                    allowing[axis].setdefault(name, []).append(i)
        self._masks: dict[str, dict[str, int]] = {}
        for axis, values in axes.items():
            free = self._all & ~_bits(naming[axis], n)
            self._masks[axis] = {v: free | _bits(allowing[axis].get(v, ()), n) for v in values}

    def matching(self, assignment: Mapping[str, str]) -> int:
        """The rules the cell with these axis values matches, as bits (0: none)."""
        hits = self._all
        for axis, masks in self._masks.items():
            hits &= masks[assignment[axis]]
            if not hits:
                break
        return hits


def as_flags(bits: int, n: int) -> list[bool]:
    """Bit i of `bits` for i in 0..n-1, read in one pass (a shift per bit would be n² / 64 word operations)."""
    return [c == "1" for c in reversed(format(bits, f"0{n}b"))] if n else []
