"""The bisection itself, over an injected probe: pure, no boot, no I/O — the runner's probe boots (or reads a record a
resumed run already has), a test's probe is a script.

Candidates 0..n-1, oldest first; 0 is the good end, n-1 the bad end, each probed first (`--repeat K` times): an end
that does not give its side is EndsDisagree (exit 2). Then the untested candidate nearest the middle of what is left
is probed until no candidate lies between the last good and the first bad: ⌈log2(n-1)⌉ probes for n-2 candidates
between the ends. A skip (an `error` record, an image that cannot be pulled, a patch that no longer applies) is left
out like `git bisect skip` and the next nearest taken; a candidate whose K probes disagree has flipped, and is left
out too. When left-out candidates lie between the last good and the first bad, the answer is that range, not a
boundary.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from harness.bisect.oracle import Mark, Said
from harness.errors import EndsDisagree, UsageError

#: (candidate index, repetition 1..K) → what that probe said.
Probe = Callable[[int, int], Said]


@dataclass(frozen=True)
class Step:
    """One candidate probed: what each repetition said, and the range still open after it."""

    index: int
    said: tuple[Said, ...]
    lo: int
    hi: int
    #: Probes the rest may still take (the worst case, with no skip).
    left: int

    @property
    def mark(self) -> Mark:
        marks = {s.mark for s in self.said}
        if Mark.skip in marks or len(marks) > 1:
            return Mark.skip
        return next(iter(marks))

    @property
    def flipped(self) -> bool:
        marks = {s.mark for s in self.said}
        return Mark.skip not in marks and len(marks) > 1


@dataclass
class Found:
    """Where the search ended: `lo` the last good, `hi` the first bad, unless candidates between them were left out
    (`skipped`, `flipped`): then the first bad is one of lo+1..hi."""

    n: int
    lo: int
    hi: int
    steps: list[Step] = field(default_factory=list)

    @property
    def left_out(self) -> dict[int, Step]:
        return {s.index: s for s in self.steps if s.mark == Mark.skip}

    @property
    def between(self) -> list[int]:
        """Left-out candidates between the last good and the first bad: why the answer is a range."""
        return sorted(i for i in self.left_out if self.lo < i < self.hi)

    @property
    def exact(self) -> bool:
        return not self.between

    @property
    def probes(self) -> int:
        return sum(len(s.said) for s in self.steps)


def worst_probes(lo: int, hi: int, skipped: AbstractSet[int] = frozenset(), repeat: int = 1) -> int:
    """Probes a search between a known good `lo` and a known bad `hi` takes at most, skips aside."""
    open_ = sum(1 for i in range(lo + 1, hi) if i not in skipped)
    return math.ceil(math.log2(open_ + 1)) * repeat if open_ else 0


def _nearest_middle(lo: int, hi: int, skipped: set[int]) -> int | None:
    middle = (lo + hi) / 2
    inner = [i for i in range(lo + 1, hi) if i not in skipped]
    return min(inner, key=lambda i: (abs(i - middle), i)) if inner else None


def bisect(n: int, probe: Probe, repeat: int = 1, on_step: Callable[[Step], None] = lambda step: None,
           describe: Callable[[int], str] = str) -> Found:
    """Find the first bad of `n` candidates (n ≥ 2). `describe` names a candidate in EndsDisagree's line."""
    if n < 2:
        raise UsageError("a bisect needs a good end and a bad end")
    if repeat < 1:
        raise UsageError("--repeat: at least 1")
    found = Found(n, 0, n - 1)
    ends: list[Step] = []
    for index, want in ((0, Mark.good), (n - 1, Mark.bad)):
        said = _probe(probe, index, repeat)
        step = Step(index, said, 0, n - 1, worst_probes(0, n - 1, repeat=repeat) + (repeat if index == 0 else 0))
        found.steps.append(step)
        on_step(step)
        ends.append(step)
        if step.mark != want:
            raise EndsDisagree(_ends_line(ends, n, describe))
    skipped: set[int] = set()
    while (mid := _nearest_middle(found.lo, found.hi, skipped)) is not None:
        said = _probe(probe, mid, repeat)
        step = Step(mid, said, found.lo, found.hi, 0)
        if step.mark == Mark.skip:
            skipped.add(mid)
        elif step.mark == Mark.good:
            found.lo = mid
        else:
            found.hi = mid
        step = Step(mid, said, found.lo, found.hi, worst_probes(found.lo, found.hi, skipped, repeat))
        found.steps.append(step)
        on_step(step)
    return found


def _probe(probe: Probe, index: int, repeat: int) -> tuple[Said, ...]:
    """Up to `repeat` probes of one candidate; a skip ends them (an environment fault is not measured K times)."""
    out: list[Said] = []
    for k in range(1, repeat + 1):
        said = probe(index, k)
        out.append(said)
        if said.mark == Mark.skip:
            break
    return tuple(out)


def _said(step: Step) -> str:
    words = [s.said for s in step.said]
    if len(set(words)) == 1:
        return words[0] + (f" ({len(words)} times)" if len(words) > 1 else "")
    return ", then ".join(words)


def _ends_line(ends: list[Step], n: int, describe: Callable[[int], str]) -> str:
    good = ends[0]
    if good.mark != Mark.good:
        why = "flipped" if good.flipped else "is not good"
        return f"the ends disagree: the good end {describe(0)} {why}: it gave {_said(good)}"
    bad = ends[1]
    why = "flipped" if bad.flipped else "is not bad"
    return (f"the ends disagree: the bad end {describe(n - 1)} {why}: it gave {_said(bad)}, the good end "
            f"{describe(0)} gave {_said(good)}")
