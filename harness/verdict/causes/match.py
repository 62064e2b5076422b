"""One cleaned log message to the cause it states, and the substrings that decide cheaply which lines to try.

Every pattern of the catalogue carries a needle that every line it matches holds; `PREFILTER` is derived from them
(a few common stems, plus each needle no stem covers), so the parser's keyword pre-check can never drop a line before
its cause is tried (tests/unit/test_causes.py proves every needle contains a prefilter entry).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import CAUSES
from .model import WEAK, Cause, Numbers, Pattern, read_groups

#: Stems the needles hold: one substring test stands for all the needles holding it in the parser's pre-check. Chosen
#: (a greedy cover) to be few and rare in the lines of a boot that names no cause; a needle none holds is tried itself.
STEMS: tuple[str, ...] = (
    "not ", "rror", "able", "iled", "valid ", "support", "must", "anti", " memory", "max_mode", "imed out", "driver",
    "ment", "ivisible", "ncomplet", "Can't lo", " transfo", "torch._", "remote", " mod", " cou", "EADDRINU",
    "ttention", "device_c", "Reposito", "/dev/shm", "gated re", "when war", "that can", "size_per", "Max retr",
    "ddress a", "Errno 98", "Watchdog", "CUBLAS_S", "is restr", "Please i", "huggingf", "undefine", "HeaderTo",
    "Killed", "ptxas", "o se")
#: The lines of a traceback that are not exception lines: its start and its frames (decide.py reads the frames).
TRACEBACK_START = "Traceback (most recent call last)"
FRAME_NEEDLE = 'File "'
#: Any traceback's frame, a plain one ('File "/x.py", line 9, in f') or IPython's ("File ~/x.py:49, in f(...)",
#: "File [~/x.py:49](http://...)"): one substring test for all of them in the parser's pre-check.
ANY_FRAME_NEEDLE = "File "

_TABLE: tuple[tuple[Cause, Pattern], ...] = tuple((c, p) for c in CAUSES for p in c.patterns)
_ANY_LEVEL: tuple[tuple[Cause, Pattern], ...] = tuple((c, p) for c, p in _TABLE if p.any_level)
NEEDLES: tuple[str, ...] = tuple(dict.fromkeys(p.needle for _, p in _TABLE))
#: The needles of the lines that stop the watch (a refusal vLLM prints as it gives up): what a log line past the
#: parser's bound must hold to be read at all.
STOP_NEEDLES: tuple[str, ...] = tuple(dict.fromkeys(p.needle for c, p in _TABLE if c.stops and not p.any_level))
#: The needles of the patterns tried on quiet lines too (an INFO/WARNING record passes the parser's pre-check only
#: by a fact keyword or one of these).
ANY_LEVEL_NEEDLES: tuple[str, ...] = tuple(dict.fromkeys(p.needle for _, p in _ANY_LEVEL))
PREFILTER: tuple[str, ...] = (*STEMS, *(n for n in NEEDLES if not any(s in n for s in STEMS)),
                              TRACEBACK_START, ANY_FRAME_NEEDLE)


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
    for cause, pattern in _ANY_LEVEL if quiet else _TABLE:
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
                     cause.stops and pattern.rank != WEAK and not pattern.any_level)
    return None
