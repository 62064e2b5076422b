"""Classify one cleaned log message as a refusal, and decide which refusal a boot is remembered by.

The order of the checks matters: a message can carry two refusals' words (0.15+ logs "Failed to load model - not
enough GPU memory. ... (original error: CUDA out of memory ...)"), and the more specific reading must win.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.verdict.catalogue import Reason

from . import patterns as p
from .model import MESSAGE_MAX_CHARS, Refusal
from .text import QUIET_LEVELS

GENERIC_KIND = Reason.engine_init_failed


def _trim(message: str) -> str:
    return message[:MESSAGE_MAX_CHARS]


def _gib(value: str | None, unit: str | None) -> float | None:
    if value is None or unit is None:
        return None
    return float(value) * p.UNIT_GIB[unit]


def _kv_insufficient(msg: str) -> Refusal | None:
    m = p.KV_INSUFFICIENT.search(msg)
    if not m:
        return None
    est = p.KV_ESTIMATED.search(msg, m.end())
    return Refusal(
        kind=Reason.kv_insufficient,
        message=_trim(msg),
        max_seq_len=p.to_int(m.group(1)),
        needed_gib=p.to_float(m.group(2)),
        available_gib=p.to_float(m.group(3)),
        estimated_max_model_len=p.to_int(est.group(1)) if est else None,
    )


def _no_cache_memory(msg: str) -> Refusal | None:
    if not p.NO_CACHE_MEMORY.search(msg):
        return None
    return Refusal(kind=Reason.no_cache_memory, message=_trim(msg))


def _autofit_impossible(msg: str) -> Refusal | None:
    if not p.AUTOFIT_IMPOSSIBLE.search(msg):
        return None
    return Refusal(kind=Reason.autofit_impossible, message=_trim(msg))


def _max_len_exceeds(msg: str) -> Refusal | None:
    m = p.MAX_LEN_EXCEEDS.search(msg)
    if not m:
        return None
    # Raised, it reads "... To allow overriding this maximum, ..." or sits behind an exception class; logged as the
    # VLLM_ALLOW_LONG_MAX_MODEL_LEN warning, it has neither (and ≤0.11 adds "Make sure the value is correct ...").
    raised = p.MAX_LEN_RAISED_MARK in msg or _has_exception_lead(msg)
    if p.MAX_LEN_WARNING_MARK in msg or not raised:
        return None
    return Refusal(
        kind=Reason.max_len_exceeds_model,
        message=_trim(msg),
        max_seq_len=p.to_int(m.group(1)),
        derived_max_model_len=p.to_int(m.group(2)),
    )


def _has_exception_lead(msg: str) -> bool:
    """True when the message is an exception's text ("ValueError: ...", "Value error, ..."), not a log sentence."""
    return not msg.startswith("User-specified")


def _memory_busy(msg: str) -> Refusal | None:
    m = p.GPU_MEMORY_BUSY.search(msg) or p.CPU_MEMORY_BUSY.search(msg)
    if not m:
        return None
    req = p.BUSY_REQUESTED.search(msg, m.end() - len("is less than"))
    return Refusal(
        kind=Reason.gpu_memory_busy,
        message=_trim(msg),
        available_gib=p.to_float(m.group(1)),
        needed_gib=p.to_float(req.group(1)) if req else None,
    )


def _profiling_busy(msg: str) -> Refusal | None:
    m = p.PROFILING_BUSY.search(msg)
    if not m:
        return None
    return Refusal(kind=Reason.gpu_memory_busy, message=_trim(msg), available_gib=p.to_float(m.group(1)))


def _with_allocation(kind: Reason, msg: str) -> Refusal:
    tried = p.OOM_TRIED.search(msg)
    free = p.OOM_FREE.search(msg)
    return Refusal(
        kind=kind,
        message=_trim(msg),
        needed_gib=_gib(*tried.groups()) if tried else None,
        available_gib=_gib(*free.groups()) if free else None,
    )


def _weights_dont_fit(msg: str) -> Refusal | None:
    if not p.WEIGHTS_DONT_FIT.search(msg):
        return None
    return _with_allocation(Reason.weights_dont_fit, msg)


def _oom(msg: str) -> Refusal | None:
    if not p.OOM.search(msg):
        return None
    return _with_allocation(Reason.oom, msg)


def _engine_init_failed(msg: str) -> Refusal | None:
    if not p.ENGINE_INIT_FAILED.search(msg):
        return None
    return Refusal(kind=GENERIC_KIND, message=_trim(msg))


# (substring that must be present, classifier): the substring test keeps the regexes off lines that cannot match.
_CLASSIFIERS: tuple[tuple[str, Callable[[str], Refusal | None]], ...] = (
    ("To serve at least one request", _kv_insufficient),
    ("No available memory for the cache blocks", _no_cache_memory),
    ("Cannot auto-fit", _autofit_impossible),
    ("User-specified max_model_len", _max_len_exceeds),
    ("memory on ", _memory_busy),
    ("Error in memory profiling", _profiling_busy),
    ("Failed to load model", _weights_dont_fit),
    ("ut of memory", _oom),
    ("OutOfMemoryError", _oom),
    ("Engine core initialization failed", _engine_init_failed),
)


#: The substrings a refusal's message must hold, one of them: a line without any cannot be one.
NEEDLES: tuple[str, ...] = tuple(needle for needle, _ in _CLASSIFIERS)


def classify_refusal(message: str, level: str | None = None) -> Refusal | None:
    """The refusal this cleaned message states, or None. INFO/WARNING/DEBUG lines are never refusals."""
    if level in QUIET_LEVELS:
        return None
    for needle, classify in _CLASSIFIERS:
        if needle in message:
            refusal = classify(message)
            if refusal is not None:
                return refusal
    return None


def keep_first_specific(current: Refusal | None, new: Refusal) -> Refusal:
    """The refusal a boot is remembered by: the first specific one; the generic kind only until a specific one."""
    if current is None:
        return new
    if current.kind == GENERIC_KIND and new.kind != GENERIC_KIND:
        return new
    return current
