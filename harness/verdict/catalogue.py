"""The catalogue of verdicts: every outcome and every reason a cell can be recorded with, with one line of meaning each.

The one list the matrix validates `expect: reason:` against (a misspelt reason is a `validate` error, not a rule that
can never match), the results schema enumerates, and docs/results.md renders (tests/unit/test_verdict.py keeps the
table in step).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

from harness.names import Named


class Outcome(Named):
    booted = "booted"
    refused = "refused"
    crashed = "crashed"
    timeout = "timeout"
    error = "error"


OUTCOME_MEANINGS: dict[Outcome, str] = {
    Outcome.booted: "the server answered /health 200 and served one token: the configuration boots",
    Outcome.refused: "vLLM refused the configuration at start-up, in a line the parser knows",
    Outcome.crashed: "the server died (or failed its first request) without a known refusal",
    Outcome.timeout: "no verdict within the cell's deadline",
    Outcome.error: "the harness could not tell: not a verdict on the configuration",
}


@dataclass(frozen=True)
class ReasonInfo:
    outcome: Outcome
    meaning: str


class Reason(Named):
    ready = "ready"
    kv_insufficient = "kv_insufficient"
    no_cache_memory = "no_cache_memory"
    autofit_impossible = "autofit_impossible"
    max_len_exceeds_model = "max_len_exceeds_model"
    gpu_memory_busy = "gpu_memory_busy"
    oom = "oom"
    weights_dont_fit = "weights_dont_fit"
    engine_init_failed = "engine_init_failed"
    exited = "exited"
    exited_before_ready = "exited_before_ready"
    killed = "killed"
    probe_failed = "probe_failed"
    oom_killed = "oom_killed"
    deadline = "deadline"
    start_failed = "start_failed"
    stale_server = "stale_server"
    gpu_memory_held = "gpu_memory_held"
    engine_lost = "engine_lost"
    gpu_lost = "gpu_lost"


REASONS: dict[Reason, ReasonInfo] = {
    Reason.ready: ReasonInfo(Outcome.booted, "/health answered 200 (and, with `probe`, a 1-token completion was served)"),
    Reason.kv_insufficient: ReasonInfo(
        Outcome.refused, "the KV cache cannot hold one request of max_model_len (\"To serve at least one request ...\")"),
    Reason.no_cache_memory: ReasonInfo(
        Outcome.refused, "no memory is left for a single KV block (\"No available memory for the cache blocks\")"),
    Reason.autofit_impossible: ReasonInfo(
        Outcome.refused, "auto-fit found no room for even one token (\"Cannot auto-fit max_model_len\")"),
    Reason.max_len_exceeds_model: ReasonInfo(
        Outcome.refused, "max_model_len is above what the model's config allows (\"User-specified max_model_len\")"),
    Reason.gpu_memory_busy: ReasonInfo(
        Outcome.refused, "free memory at start-up was below what was asked, usually held by another process "
                         "(\"Free memory on device ... is less than desired\", \"Error in memory profiling\")"),
    Reason.oom: ReasonInfo(Outcome.refused, "an allocation ran out of memory (CUDA/torch OutOfMemoryError)"),
    Reason.weights_dont_fit: ReasonInfo(
        Outcome.refused, "the weights do not fit (\"Failed to load model - not enough GPU memory\")"),
    Reason.engine_init_failed: ReasonInfo(
        Outcome.crashed, "the engine core failed to start and the log names no known refusal"),
    Reason.exited: ReasonInfo(Outcome.crashed, "the server exited with a non-zero code (before it was ready, or "
                                               "around its first request)"),
    Reason.exited_before_ready: ReasonInfo(Outcome.crashed, "the server exited with code 0 before it was ready"),
    Reason.killed: ReasonInfo(Outcome.crashed, "the server was killed by a signal"),
    Reason.probe_failed: ReasonInfo(Outcome.crashed, "/health answered 200 but the 1-token completion failed"),
    Reason.oom_killed: ReasonInfo(Outcome.crashed, "the container engine OOM-killed the container"),
    Reason.deadline: ReasonInfo(Outcome.timeout, "nothing decisive happened before the cell's deadline (`timeout_s`)"),
    Reason.start_failed: ReasonInfo(
        Outcome.error, "the harness could not start the server (the engine refused the container, exec failed, ...)"),
    Reason.stale_server: ReasonInfo(
        Outcome.error, "/health answered from a listener that is not this cell's server"),
    Reason.engine_lost: ReasonInfo(
        Outcome.error, "the container engine stopped answering (hung, restarted) while the server was booting, and the "
                       "server then died or never decided: the engine's fault, not this configuration's verdict"),
    Reason.gpu_lost: ReasonInfo(
        Outcome.error, "a GPU of the cell was lost while it ran (NVML: \"GPU is lost\", \"Unknown Error\"): whatever "
                       "the server did says nothing about the configuration; the run starts no more cells on it"),
    Reason.gpu_memory_held: ReasonInfo(
        Outcome.error, "refused gpu_memory_busy on both attempts while the GPUs were still above their idle level: "
                       "memory held by something else, not this configuration's verdict"),
}


#: For the records' pydantic models: the enum members as a Literal, so a record holds the enums while its JSON and
#: its JSON Schema hold the plain names (inline, as when the records held strings).
OutcomeMember = Literal[tuple(Outcome)]  # type: ignore[valid-type]
ReasonMember = Literal[tuple(Reason)]  # type: ignore[valid-type]
#: For what users write (the matrix): the plain names, so a validation error lists them as written.
OutcomeName = Literal[tuple(o.value for o in Outcome)]  # type: ignore[valid-type]
ReasonName = Literal[tuple(r.value for r in Reason)]  # type: ignore[valid-type]
#: The reasons a log line can give by itself (harness.logfacts.classify): a refusal's kind is its reason.
REFUSAL_KINDS: tuple[Reason, ...] = (
    Reason.kv_insufficient, Reason.no_cache_memory, Reason.autofit_impossible, Reason.max_len_exceeds_model,
    Reason.gpu_memory_busy, Reason.oom, Reason.weights_dont_fit, Reason.engine_init_failed)
RefusalKind = Literal[REFUSAL_KINDS]  # type: ignore[valid-type]


def check_reason(reason: str, outcome: str | None = None) -> str:
    """`reason` if the catalogue has it (and it is one of `outcome`'s); else a ValueError that lists the choices."""
    choices = reasons_of(outcome) if outcome in Outcome.__members__ else list(Reason)
    if reason not in Reason.__members__:
        near = difflib.get_close_matches(reason, [r.value for r in Reason], n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise ValueError(f"unknown reason {reason!r}: {hint}the reasons{f' of {outcome}' if outcome else ''} are "
                         f"{', '.join(r.value for r in choices)}")
    if outcome in Outcome.__members__ and REASONS[Reason(reason)].outcome != Outcome(outcome):
        raise ValueError(f"reason {reason!r} belongs to outcome {REASONS[Reason(reason)].outcome}, not {outcome}: "
                         f"a rule expecting it could never match (the reasons of {outcome} are "
                         f"{', '.join(r.value for r in choices)})")
    return reason


def reasons_of(outcome: Outcome | str) -> list[Reason]:
    return [r for r, info in REASONS.items() if info.outcome == Outcome(outcome)]


def reason_table() -> str:
    """docs/results.md's table of reasons, rendered from the catalogue."""
    rows = ["| outcome | reason | meaning |", "|---|---|---|"]
    for reason, info in REASONS.items():
        rows.append(f"| `{info.outcome}` | `{reason}` | {info.meaning} |")
    return "\n".join(rows)
