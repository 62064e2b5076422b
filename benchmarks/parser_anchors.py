"""Choose the anchors of the parser's substring sets again (harness.verdict.causes.needles): a greedy cover of each
set's strings by their substrings, each pick the one that saves the most substring tests per line, measured on the
recorded logs' lines (tests/data/logs) that hold none of the set's strings.
Prints the tuples to paste into harness/verdict/causes/match.py (ANCHORS) and harness/logfacts/precheck.py
(QUIET_ANCHORS, ANCHORS). The anchors decide the parser's speed only: a string no anchor holds is its own.

    python benchmarks/parser_anchors.py [--min-len 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.logfacts import precheck  # noqa: E402 - sys.path first
from harness.verdict.causes import match  # noqa: E402 - sys.path first

LOGS = ROOT / "tests" / "data" / "logs"
#: The fake server's flood line (benchmarks/parser_speed.py): a warning loop is a log too.
FLOOD = "WARNING 11-29 10:00:00 [flood.py:1] the same warning again, and again, and again: " + "x" * 60


def cover(strings: tuple[str, ...], lines: list[str], min_len: int) -> tuple[str, ...]:
    """Greedy: each pick saves the most substring tests per ordinary line (the strings it files are no longer tried
    one by one, but each is tried again on the lines that hold the anchor); stop when no pick saves any."""
    plain = [t for t in lines if not any(s in t for s in strings)]
    subs: dict[str, set[str]] = {}
    for s in strings:
        for n in range(min(min_len, len(s)), len(s) + 1):
            for i in range(len(s) - n + 1):
                subs.setdefault(s[i:i + n], set()).add(s)
    subs = {a: filed for a, filed in subs.items() if len(filed) > 1}
    rate: dict[str, float] = {}

    def passes(a: str) -> float:
        if a not in rate:
            rate[a] = sum(a in t for t in plain) / max(1, len(plain))
        return rate[a]

    def saves(a: str) -> float:
        k = len(subs[a] & left)
        return k - 1 - passes(a) * k if k > 1 else 0.0

    left, chosen = set(strings), []
    while left and subs:
        best = max(subs, key=lambda a: (saves(a), len(a), a))
        if saves(best) <= 0:
            break
        chosen.append(best)
        left -= subs.pop(best)
    return tuple(chosen)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-len", type=int, default=3)
    args = ap.parse_args()
    lines = [line for path in sorted(LOGS.rglob("*.log"))
             for line in path.read_text(encoding="utf-8", errors="replace").splitlines()] + [FLOOD] * 50
    sets = (("match.ANCHORS", match.NEEDLES), ("precheck.QUIET_ANCHORS", precheck.AT_ANY_LEVEL),
            ("precheck.ANCHORS", (*precheck.AT_ANY_LEVEL, *precheck.LOUD)))
    for name, strings in sets:
        anchors = cover(tuple(dict.fromkeys(strings)), lines, args.min_len)
        print(f"{name} ({len(strings)} strings, {len(anchors)} anchors):\n{anchors!r}\n")


if __name__ == "__main__":
    main()
