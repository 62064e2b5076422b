"""What a cause is: one way a vLLM boot fails, written once (id, kind, meaning, how it is recognised, the numbers it
reads, the hint), and what finding it in a log gives (`Finding`, the record's `cause`).

The kind, not the entry, decides the outcome: a configuration that cannot boot here is `refused`, a machine that
failed the boot is `error` (not a verdict on the configuration), anything else `crashed`.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from harness.verdict.outcome import Outcome

from . import shapes


class CauseKind(StrEnum):
    config_refusal = "config_refusal"
    """The configuration cannot boot on this hardware (vLLM checked it and said no)."""
    resource = "resource"
    """Memory ran out (GPU or host) at a phase of the boot."""
    environment = "environment"
    """The machine, the install, the network or the Hub failed the boot: nothing about the configuration."""
    crash = "crash"
    """The server died of something else: a bug, or a cause the log does not show."""


#: The outcome each kind gives.
KIND_OUTCOME: dict[CauseKind, Outcome] = {
    CauseKind.config_refusal: Outcome.refused,
    CauseKind.resource: Outcome.refused,
    CauseKind.environment: Outcome.error,
    CauseKind.crash: Outcome.crashed,
}


#: How much a line says about the root cause, low to high: the decisive line is the first of the highest rank.
ANNOUNCES = -1
"""A line that only announces the failure whose traceback follows ("EngineCore failed to start."): decisive only in a
paste cut right after it; any wrapper or exception line after it says more."""
GENERIC = 0
"""A wrapper that only says something failed ("Engine core initialization failed. See root cause above")."""
WEAK = 1
"""Often a consequence of another process's failure (an NCCL error on the rank whose peer died, a timeout waiting for
a peer, "# GPU blocks: 0" with no refusal after it)."""
SPECIFIC = 2

Numbers = dict[str, int | float | str]
Reader = Callable[[str, "re.Match[str]"], "Numbers | None"]


def read_groups(message: str, m: re.Match[str]) -> Numbers:
    """The default reader: every named group that matched, `*_gib` as a float, a count as an int, else the text."""
    out: Numbers = {}
    for name, text in m.groupdict().items():
        if text is None:
            continue
        if name.endswith("_gib"):
            out[name] = float(text)
        elif (n := shapes.to_int(text)) is not None:
            out[name] = n
        else:
            out[name] = text.strip()[:200]
    return out


@dataclass(frozen=True)
class Pattern:
    """One wording: `needle` is a plain substring every line it matches holds (the cheap pre-check the parser's
    keyword filter is built from), `regex` the shape searched after it (None: the needle alone is the shape)."""

    needle: str
    regex: str | None = None
    rank: int = SPECIFIC
    any_level: bool = False
    """Tried on INFO/WARNING lines too (a number vLLM logged as information that still decides a boot)."""
    stops: bool = True
    """False: a line printed as the process starts to give up, before the traceback that names the cause (the engine
    core's "EngineCore failed to start."): it names the cause only when the log ends there, so the watch goes on."""
    read: Reader | None = None
    flags: int = 0
    compiled: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    """`regex` compiled once (__post_init__)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "compiled", re.compile(self.regex, self.flags) if self.regex else None)


@dataclass(frozen=True)
class Also:
    """A figure the decisive line states beside what its pattern reads (the device, an errno, the HTTP status),
    searched in the line once it is known to be this cause's: the first group that matched, converted."""

    name: str
    regex: str
    convert: Callable[[str], int | float | str] = str
    compiled: re.Pattern[str] = field(init=False, repr=False, compare=False)
    """`regex` compiled once (__post_init__)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "compiled", re.compile(self.regex))

    def read(self, message: str) -> int | float | str | None:
        m = self.compiled.search(message)
        text = next((g for g in m.groups() if g is not None), None) if m is not None else None
        if text is None:
            return None
        try:
            return self.convert(text)
        except ValueError:
            return None


@dataclass(frozen=True)
class Cause:
    id: str
    kind: CauseKind
    meaning: str
    patterns: tuple[Pattern, ...]
    hints: tuple[str, ...]
    """Templates over the numbers, most precise first: the first whose every field was read is the hint."""
    numbers: tuple[str, ...] = ()
    """The numbers its lines may state, by name (the pattern groups' names and what `derive` adds)."""
    aliases: tuple[str, ...] = ()
    """Names this cause had before the catalogue (recorded runs and matrices still say them)."""
    stops: bool = False
    """A line of it ends the watch at once: vLLM printed it as it gave up (the refusals it was built around)."""
    also: tuple[Also, ...] = ()
    """Figures read from the decisive line wherever they stand in it (what no pattern's groups hold)."""
    derive: Callable[[Numbers], Numbers] | None = None
    """Numbers worked out from the ones read (what would boot)."""
    examples: tuple[str, ...] = field(default=(), repr=False)
    """Lines in the sources' words that must be read as this cause (tests/unit/test_causes.py)."""

    @property
    def outcome(self) -> Outcome:
        return KIND_OUTCOME[self.kind]

    def hint(self, numbers: Mapping[str, object]) -> str:
        for template in self.hints:
            fields = {f for _, f, _, _ in string.Formatter().parse(template) if f}
            if fields <= numbers.keys():
                try:
                    return template.format(**numbers)
                except (ValueError, TypeError):  # a number of another type than the template's format
                    continue
        return self.meaning


class Finding(BaseModel):
    """The cause a log shows: the catalogue's id (None: no cause the catalogue knows, and `line` is the exception that
    ended the boot), its kind and outcome, the decisive line, the numbers it states, the hint."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    kind: CauseKind
    outcome: Outcome
    line: str = Field("", max_length=2000)
    numbers: dict[str, int | float | str] = Field(default_factory=dict)
    hint: str = ""
    process: str = Field("", description="the process prefix of the decisive line (\"(EngineCore_DP0 pid=7)\")")
