"""The parser's pre-check: whether a log line may say anything, decided before it is taken apart.

Most lines of a boot say nothing the parser reads, and a flood's every line must cost next to nothing. A line is read
when it holds a fact or phase keyword, or a needle of a cause that holds at any level; a line that is not a quiet
record (INFO/WARNING/DEBUG) is read also when it holds any cause's needle, a traceback's start or frame, or an
exception's name. A cause is never read from a quiet record but through its any-level patterns, so a quiet record is
held against the short list alone, and the long one is searched only on the other lines. Every set is derived from
the catalogue and the fact patterns: no line a cause's pattern matches can be dropped here (tests/unit/test_causes.py).
"""

from __future__ import annotations

from harness.verdict.causes.match import ANY_FRAME_NEEDLE, ANY_LEVEL_NEEDLES, EXCEPTION_STEMS, NEEDLES, TRACEBACK_START
from harness.verdict.causes.needles import Needles

from . import patterns as p
from . import phases
from .text import is_quiet_record, quiet_at_once


def _least(strings: tuple[str, ...]) -> tuple[str, ...]:
    """`strings` less those that hold another one ("Model loading took" holds "took"): the same lines hold one."""
    unique = tuple(dict.fromkeys(strings))
    return tuple(s for s in unique if not any(o != s and o in s for o in unique))


#: The fact patterns' and the phase lines' keywords.
KEYWORDS: tuple[str, ...] = _least((*p.KEYWORDS, *phases.KEYWORDS))
#: What makes a line worth reading at any level.
AT_ANY_LEVEL: tuple[str, ...] = _least((*KEYWORDS, *ANY_LEVEL_NEEDLES))
#: What makes a line that is not a quiet record worth reading too.
LOUD: tuple[str, ...] = tuple(s for s in _least((*AT_ANY_LEVEL, *NEEDLES, TRACEBACK_START, ANY_FRAME_NEEDLE,
                                                 *EXCEPTION_STEMS)) if s not in AT_ANY_LEVEL)

#: The anchors of each list (needles.py), rare in the recorded logs' lines that hold none of its strings: they decide
#: the speed, never which lines are read (`python benchmarks/parser_anchors.py` chooses them again).
QUIET_ANCHORS: tuple[str, ...] = ('ing ', 'emory', 'ode', 'ion', 'KV ', 'load', 'block', 'ook', 'Error')
ANCHORS: tuple[str, ...] = ('ot ', 'ail', 'emo', 'ion', 'ing ', 'ed ', ' to', ' lo', 'ode', 'dev', 'KV ', 'ace',
    'le ', 'orc', 'res', 'ncomplete', 'rror', 't o', 'ade')

_QUIET = Needles(AT_ANY_LEVEL, QUIET_ANCHORS)
_ALL = Needles((*AT_ANY_LEVEL, *LOUD), ANCHORS)
_AT_ANY_LEVEL = frozenset(AT_ANY_LEVEL)


def worth_reading(text: str) -> bool:
    """Whether the parser should take `text` (one physical line) apart: see the module's docstring."""
    quiet = quiet_at_once(text)
    if quiet:
        return _QUIET.any(text)
    if quiet is False:
        return _ALL.any(text)
    # Its level unknown yet: one pass over the strings, and the line taken apart only when it holds a loud one alone.
    wanted, held = _ALL.holds(text, _AT_ANY_LEVEL)
    return wanted or (held and not is_quiet_record(text))
