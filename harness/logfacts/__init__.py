"""Facts and refusals read from a vLLM server's boot log, for every vLLM version from 0.6 to 0.34 and the fork, saved
bare or pasted inside a CI, compose, kubectl or journald prefix (text.py, wrappers.py).

Feed lines to a ``LogParser`` as the server prints them and act on each ``Signal``; read ``LogParser.facts`` (or call
``parse_text`` / ``parse_file`` on a finished log) for the numbers a boot logged and the refusal it ended with.
"""

from .classify import classify_refusal
from .model import KvFacts, LogFacts, Refusal, RefusalKind, Signal
from .parser import LogParser, parse_file, parse_lines, parse_text

__all__ = [
    "KvFacts",
    "LogFacts",
    "LogParser",
    "Refusal",
    "RefusalKind",
    "Signal",
    "classify_refusal",
    "parse_file",
    "parse_lines",
    "parse_text",
]
