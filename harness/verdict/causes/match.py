"""One cleaned log message to the cause it states, and the substrings that decide cheaply which lines to try.

Every pattern of the catalogue carries a needle that every line it matches holds. A line is tried only against the
patterns whose needle it holds, found through a few anchors (needles.py), and the parser's pre-check is built from
the same needles (harness.logfacts.precheck), so no line can be dropped before its cause is tried
(tests/unit/test_causes.py derives that from the catalogue).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import CAUSES
from .model import WEAK, Cause, Numbers, Pattern, read_groups
from .needles import Needles

#: Substrings the needles share, rare in the lines of a boot that names no cause: a line is searched for these, and a
#: needle is tried only where one of its anchors is (a needle none holds is its own). They decide the speed, never
#: which lines are read; `python benchmarks/parser_anchors.py` chooses them again from the recorded logs.
ANCHORS: tuple[str, ...] = ('rror', 'ot ', 'ail', 'on ', 'ed ', 'ble', ' to', 'emo', 'id ', 'mple', 'max', 'res',
    'ins', 'torch._', 'driver', 'dev', 'ace')
#: The lines of a traceback that are not exception lines: its start and its frames (decide.py reads the frames).
TRACEBACK_START = "Traceback (most recent call last)"
FRAME_NEEDLE = 'File "'
#: Any traceback's frame, a plain one ('File "/x.py", line 9, in f') or IPython's ("File ~/x.py:49, in f(...)",
#: "File [~/x.py:49](http://...)"): one substring test for all of them in the parser's pre-check.
ANY_FRAME_NEEDLE = "File "
#: What an exception's own line holds ("ValueError", "Exception: ...", "SystemExit", "KeyboardInterrupt": the endings
#: of decide.exception_numbers' types): the last exception of a boot no cause names is read from it.
EXCEPTION_STEMS = ("rror", "Exception", "Exit", "Interrupt")

_TABLE: tuple[tuple[Cause, Pattern], ...] = tuple((c, p) for c in CAUSES for p in c.patterns)
_ANY_LEVEL: tuple[tuple[Cause, Pattern], ...] = tuple((c, p) for c, p in _TABLE if p.any_level)
NEEDLES: tuple[str, ...] = tuple(dict.fromkeys(p.needle for _, p in _TABLE))
#: The needles of the lines that stop the watch (a refusal vLLM prints as it gives up): what a log line past the
#: parser's bound must hold to be read at all.
STOP_NEEDLES: tuple[str, ...] = tuple(dict.fromkeys(p.needle for c, p in _TABLE
                                                if c.stops and p.stops and not p.any_level))
#: The needles of the patterns tried on quiet lines too (an INFO/WARNING record passes the parser's pre-check only
#: by a fact keyword or one of these).
ANY_LEVEL_NEEDLES: tuple[str, ...] = tuple(dict.fromkeys(p.needle for _, p in _ANY_LEVEL))
_SEARCH = Needles(NEEDLES, ANCHORS)
#: Each needle to the positions in the table of the patterns that carry it.
_AT: dict[str, tuple[int, ...]] = {n: tuple(i for i, (_, p) in enumerate(_TABLE) if p.needle == n)
                                   for n in NEEDLES}


#: Causes still read after the server said it was up: uvicorn logs "Application startup complete" before it binds
#: its socket, so a port taken shows after the readiness line, and nothing is listening.
AFTER_READY: frozenset[str] = frozenset({"port_in_use"})


@dataclass(frozen=True)
class Match:
    """A line read as a cause: which, how much it says (model.GENERIC/WEAK/SPECIFIC), the numbers it stated."""

    cause: Cause
    rank: int
    numbers: Numbers
    line: str
    stops: bool


def match(message: str, quiet: bool = False) -> Match | None:
    """The cause `message` states, or None. A `quiet` line (INFO, WARNING, DEBUG) is tried only against the few
    patterns that hold at any level: advice and warnings mention a cause's words without being one."""
    for cause, pattern in _ANY_LEVEL if quiet else _candidates(message):
        if pattern.needle not in message:
            continue
        compiled = pattern.compiled
        m = compiled.search(message) if compiled is not None else None
        if compiled is not None and m is None:
            continue
        numbers: Numbers | None = {} if m is None else (pattern.read or read_groups)(message, m)
        if numbers is None:
            continue
        for also in cause.also:
            if also.name not in numbers and (value := also.read(message)) is not None:
                numbers[also.name] = value
        if cause.derive is not None:
            numbers = {**numbers, **cause.derive(numbers)}
        return Match(cause, pattern.rank, numbers, message,
                     cause.stops and pattern.stops and pattern.rank != WEAK and not pattern.any_level)
    return None


def _candidates(message: str) -> list[tuple[Cause, Pattern]]:
    """The patterns whose needle `message` holds, in the table's order (a line that reads as two causes is the
    earlier one's)."""
    found = _SEARCH.found(message)
    if not found:
        return []
    if len(found) == 1:
        return [_TABLE[i] for i in _AT[found[0]]]
    return [_TABLE[i] for i in sorted({i for n in found for i in _AT[n]})]
