"""Reduce one physical log line to its message.

Every vLLM version decorates the same message differently (ANSI colour, a process prefix that may appear twice, a
``LEVEL MM-DD HH:MM:SS [file.py:123]`` header, uvicorn's ``INFO:     ``, torch's ``[rank0]:``), and tracebacks and
pydantic errors carry none of it. Matching on the bare message keeps each fact pattern to one shape across versions.
What a paste adds around vLLM's line (a ">" quote, the prefix of the CI, compose, kubectl or journald that showed it:
wrappers.py) comes off here too, first, so every parser after this sees the line as vLLM wrote it.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from .wrappers import Wrapper, unwrap

MAX_LINE_CHARS = 64 * 1024
"""Longer lines are cut before matching: no real fact line is near this, and it bounds the work per line."""
MAX_LINE_BYTES = MAX_LINE_CHARS * 4
"""The bytes of a line read from a file before it is cut (harness.files.iter_lines): a UTF-8 character is at most
4 bytes."""

# Colour codes (CSI), and the APC marks Buildkite's agent puts before each line it timestamps ("ESC _bk;t=<ms> BEL").
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b_[^\x07\x1b]{0,200}(?:\x07|\x1b\\)")
# Process prefixes: (EngineCore_DP0 pid=7), (VllmWorker rank=0 pid=9), Ray's (RayWorkerWrapper pid=9, ip=10.0.0.2),
# and torch.distributed's [rank0]:, repeated, since a decorated stream can carry more than one.
_LEADING_DECOR = re.compile(
    r"""\A(?:\s*
        (?:\([A-Za-z_][^()\n]{0,100}?\ pid=\d+(?:,\ ip=[^()\s]{1,64})?\)
          |\[rank\d+\]:
        ))+\s*""",
    re.VERBOSE,
)
_HEADER = re.compile(
    r"""\A(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)
        (?:\s+(?:\d{4}-)?(?P<stamp>\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)   # vLLM: LEVEL MM-DD HH:MM:SS
                                                            # (NIM's logger: LEVEL YYYY-MM-DD HH:MM:SS.fff)
           (?:\s+\[(?P<where>[^\]\n]{0,300})\]              #        [file.py:123]
            |\s+(?P<where0>[\w.\-]{1,200}:\d{1,7})\])?         #        file.py:123] (V0, up to 0.7)
         |:                                                  # uvicorn: INFO:     Application startup complete.
        )\s?""",
    re.VERBOSE,
)
# What is left of vLLM's header when a paste starts at its "[file.py:123]" (the level and the date cut off).
_BARE_WHERE = re.compile(r"\A\[(?P<where>[\w./-]{1,200}\.py:\d{1,7})\]\s")
_CARET_ANSI = re.compile(r"\^\[\[[0-9;?]*[A-Za-z]")
# The same codes as syslog (rsyslog, CloudWatch's agent) writes the ESC of a control character: "#033[1;36m".
_OCTAL_ANSI = re.compile(r"#033\[[0-9;?]*[A-Za-z]")
_LINE_NO = re.compile(r":\d{1,7}\Z")
_SEGMENT_SPLIT = re.compile(r"\r\n|\r|\n")
# Records glued into one line (a paste whose newlines were lost): each vLLM record's start, its process prefix and
# header, after whitespace mid-line ("... in forward (VllmWorkerProcess pid=9) ERROR 07-03 19:33:28 [x.py:238] ...").
# A line is cut there only after a record's header: what comes before the first header is a wrapper's prefix
# (a CI's time, compose's service name) or a record's lost head, kept with its record.
_RECORD_HEADER = r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d "
_GLUED = re.compile(r"\s+(?=(?:\([A-Za-z_][\w ]{0,60} pid=\d{1,10}\) )?" + _RECORD_HEADER + ")")
_RECORD = re.compile(_RECORD_HEADER)
#: Only a line this long can hold glued records worth splitting (a record's header alone is ~40 characters).
_GLUED_MIN = 200
# A log pasted into an issue or an email: "> " quote markers (nested ones too) before the line.
_QUOTED = re.compile(r"\A(?:[ \t]*>)+[ \t]?")

QUIET_LEVELS = frozenset({"DEBUG", "INFO", "WARNING", "WARN"})
"""Levels at which no refusal is ever logged: such a line can mention a refusal's words without being one."""


def strip_ansi(line: str) -> str:
    """`line` without its colour codes and Buildkite's timestamp marks, and without any other ESC: the text a log
    line says (what is left may still hold other control characters: harness.escape shows them)."""
    return _ANSI.sub("", line).replace("\x1b", "") if "\x1b" in line else line


def segments(line: str) -> list[str]:
    """A fed "line" split on any embedded CR/LF (tqdm redraws, a caller's unsplit record) and, in a long line, at
    each vLLM record glued to the one before it (a paste that lost its newlines); trailing ends dropped."""
    if "\r" not in line and "\n" not in line:
        return [line] if len(line) < _GLUED_MIN else _unglue(line)
    return [piece for part in _SEGMENT_SPLIT.split(line) if part
            for piece in (_unglue(part) if len(part) >= _GLUED_MIN else (part,)) if piece]


_LEVELS = ("ERROR ", "INFO ", "WARNING ", "DEBUG ", "CRITICAL ")


def _unglue(line: str) -> list[str]:
    """`line` cut before each record glued after another record's header (see _GLUED)."""
    found = [i for i in (line.find(level) for level in _LEVELS) if i != -1]
    if not found or not any(line.find(level, min(found) + 5) != -1 for level in _LEVELS):
        return [line]  # no second header can follow the first: nothing glued (most long lines)
    pieces: list[str] = []
    start = 0
    for m in _GLUED.finditer(line):
        if _RECORD.search(line, start, m.start()) is not None:
            pieces.append(line[start:m.start()])
            start = m.end()
    pieces.append(line[start:])
    return pieces


class Line(NamedTuple):
    """One physical line taken apart."""

    process: str
    """The process prefix as printed ("(EngineCore_DP0 pid=7)", "[rank1]:"), "" when none: which rank said it."""
    level: str | None
    """None when the line had no log header (tracebacks, pydantic errors)."""
    stamp: str | None
    """The header's "MM-DD HH:MM:SS[.fff]", when it has one."""
    message: str
    source: str | None = None
    """The file the header names, without its directory or line ("kv_cache_utils.py" of "[v1/core/kv_cache_utils.py:
    1087]"): which of vLLM's modules logged the record. None when the line has no header or its header names none."""
    wrappers: tuple[Wrapper, ...] = ()
    """The prefixes a paste carried before vLLM's line (GitHub Actions, compose, …), outermost first."""


def _source(where: str | None) -> str | None:
    if not where:
        return None
    name = where.rpartition(":")[0] if _LINE_NO.search(where) else where
    return name.rpartition("/")[2].strip() or None


#: The last line split_line took apart and its parts: the parser's pre-check takes a line apart to learn its level,
#: and the parser then reads the same line (a tuple, swapped whole: safe across threads).
_last: tuple[str, Line] = ("", Line("", None, None, ""))


def split_line(line: str) -> Line:
    """`line` taken apart (see Line); the same line twice in a row is taken apart once."""
    global _last
    last = _last
    if last[0] is line:
        return last[1]
    parts = _split_line(line)
    _last = (line, parts)
    return parts


def _split_line(line: str) -> Line:
    line = strip_ansi(line)
    if "^[[" in line:  # colour codes pasted in caret notation (`cat -v`, some CI viewers)
        line = _CARET_ANSI.sub("", line)
    if "#033[" in line:  # colour codes as syslog escapes them
        line = _OCTAL_ANSI.sub("", line)
    process = ""
    if line[:1] == "\ufeff":  # a downloaded CI log's byte-order mark
        line = line[1:]
    if line[:1] in (">", " ", "\t") and (quoted := _QUOTED.match(line)):
        line = line[quoted.end():]
    if line[:1] == "`":  # a line pasted as Markdown inline code
        line = line.strip("`")
    wrappers, line = unwrap(line)
    decor = _LEADING_DECOR.match(line)
    if decor:
        process = " ".join(decor.group().split())
        line = line[decor.end():]
    else:
        line = line.lstrip()
    level = stamp = source = None
    header = _HEADER.match(line)
    if header:
        level, stamp = header.group("level"), header.group("stamp")
        source = _source(header.group("where") or header.group("where0"))
        line = line[header.end():]
    elif line[:1] == "[" and (where := _BARE_WHERE.match(line)):  # a header pasted from its "[file.py:123]" on
        source = _source(where.group("where"))
        line = line[where.end():]
    return Line(process, level, stamp, line.strip(), source, wrappers)


def quiet_at_once(line: str) -> bool | None:
    """Whether `line` is one INFO/WARNING/DEBUG record, where that shows at once: a bare vLLM line (its level first:
    nothing split_line strips can come before it), or one behind a process prefix and no colour code (no wrapper
    begins with "(" or "[rank"). None: only split_line can tell."""
    if "\r" in line or "\n" in line:
        return False
    first = line[:1]
    if first in ("I", "W", "D"):
        header = _HEADER.match(line)
    elif first in ("(", "[") and "\x1b" not in line and "^[[" not in line and (decor := _LEADING_DECOR.match(line)):
        header = _HEADER.match(line[decor.end():])
    else:
        return None
    return None if header is None else header.group("level") in QUIET_LEVELS


def is_quiet_record(line: str) -> bool:
    """Whether `line` is one INFO/WARNING/DEBUG record, as split_line reads it (at once where quiet_at_once can
    tell)."""
    quiet = quiet_at_once(line)
    return split_line(line).level in QUIET_LEVELS if quiet is None else quiet
