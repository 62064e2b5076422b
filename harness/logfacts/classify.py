"""Which lines are refusals, and which refusal a boot is remembered by: read from the catalogue of causes.

A line is matched to its cause once (harness.verdict.causes.match, in the catalogue's order: a message that carries
two causes' words, like 0.15+'s "Failed to load model - not enough GPU memory ... (original error: CUDA out of
memory ...)", is the earlier, finer one's). A cause whose line vLLM prints as it gives up (`Cause.stops`) is a refusal:
the watch stops on it, with the numbers it states.
"""

from __future__ import annotations

from harness.verdict.catalogue import Reason
from harness.verdict.causes.match import Match, match

from .model import MESSAGE_MAX_CHARS, Refusal
from .text import QUIET_LEVELS

GENERIC_KIND = Reason.engine_core_failed_root_cause_not_shown
#: The Refusal's fields the causes' numbers fill, by the same names.
_FIELDS = ("max_seq_len", "needed_gib", "available_gib", "estimated_max_model_len", "derived_max_model_len")


def refusal_of(found: Match | None) -> Refusal | None:
    """The refusal a matched line is, when its cause stops the watch."""
    if found is None or not found.stops:
        return None
    numbers = {k: v for k, v in found.numbers.items() if k in _FIELDS and isinstance(v, (int, float))}
    for key in ("max_seq_len", "estimated_max_model_len", "derived_max_model_len"):
        if key in numbers:
            numbers[key] = int(numbers[key])
    return Refusal(kind=Reason(found.cause.id), message=found.line[:MESSAGE_MAX_CHARS], **numbers)


def classify_refusal(message: str, level: str | None = None) -> Refusal | None:
    """The refusal this cleaned message states, or None. INFO/WARNING/DEBUG lines are never refusals."""
    return refusal_of(match(message, level in QUIET_LEVELS))


def keep_first_specific(current: Refusal | None, new: Refusal) -> Refusal:
    """The refusal a boot is remembered by: the first specific one; the generic kind only until a specific one."""
    if current is None:
        return new
    if current.kind == GENERIC_KIND and new.kind != GENERIC_KIND:
        return new
    return current
