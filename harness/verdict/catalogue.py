"""The catalogue of verdicts: every outcome and every reason a cell can be recorded with, with one line of meaning each.

A reason is either a cause the log shows (harness.verdict.causes: its entry says the outcome, through its kind) or
something the harness saw itself (the server was ready, exited, was killed; the deadline passed; the engine or a GPU
was lost). The one list the matrix validates `expect: reason:` against (a misspelt reason is a `validate` error with a
"did you mean", not a rule that can never match), the results schema enumerates, and docs/results.md renders
(tests/unit/test_verdict.py keeps the table in step).

`Reason` is written out rather than built from the catalogue: code names reasons by attribute (`Reason.ready`,
`Reason.kv_cache_too_small`), which a type checker sees only in a written enum; tests/unit/test_causes.py proves its
cause members are exactly the catalogue's, and its aliases exactly the catalogue's old names. An old name is an enum
alias (`Reason.kv_insufficient is Reason.kv_cache_too_small`), and `Reason("kv_insufficient")` reads as the cause, so
recorded runs and matrices that say it still load and still match.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import BeforeValidator

from harness.verdict.causes import ALIASES, CAUSES, KIND_OUTCOME, CauseKind
from harness.verdict.outcome import OUTCOME_MEANINGS, Outcome

__all__ = ["OUTCOME_MEANINGS", "Outcome"]


@dataclass(frozen=True)
class ReasonInfo:
    outcome: Outcome
    meaning: str
    kind: CauseKind | None = None
    """The cause's kind, for a reason the log shows; None for what the harness saw itself."""


class Reason(StrEnum):
    ready = "ready"
    kv_cache_too_small = "kv_cache_too_small"
    no_cache_blocks = "no_cache_blocks"
    autofit_impossible = "autofit_impossible"
    max_len_exceeds_model = "max_len_exceeds_model"
    tp_not_divisible = "tp_not_divisible"
    pp_not_divisible = "pp_not_divisible"
    quant_tp_misaligned = "quant_tp_misaligned"
    not_enough_gpus = "not_enough_gpus"
    ep_not_divisible = "ep_not_divisible"
    dtype_unsupported_gpu = "dtype_unsupported_gpu"
    dtype_unsupported_model = "dtype_unsupported_model"
    quantization_unsupported_gpu = "quantization_unsupported_gpu"
    quantization_mismatch = "quantization_mismatch"
    quantization_dtype_mismatch = "quantization_dtype_mismatch"
    quant_config_missing = "quant_config_missing"
    unsupported_architecture = "unsupported_architecture"
    trust_remote_code = "trust_remote_code"
    unrecognized_argument = "unrecognized_argument"
    engine_args_mismatch = "engine_args_mismatch"
    config_invalid_batched_tokens = "config_invalid_batched_tokens"
    v1_unsupported = "v1_unsupported"
    attention_backend_unsupported = "attention_backend_unsupported"
    weight_loading_keyerror = "weight_loading_keyerror"
    speculative_config_invalid = "speculative_config_invalid"
    lora_rank_exceeds_max = "lora_rank_exceeds_max"
    gpu_mem_util_exceeds_free = "gpu_mem_util_exceeds_free"
    host_oom = "host_oom"
    cuda_oom_weights = "cuda_oom_weights"
    cuda_oom_sampler_warmup = "cuda_oom_sampler_warmup"
    cuda_oom_profiling = "cuda_oom_profiling"
    cuda_oom_kv_allocation = "cuda_oom_kv_allocation"
    cuda_oom_graph_capture = "cuda_oom_graph_capture"
    cuda_oom_unknown = "cuda_oom_unknown"
    gated_model = "gated_model"
    hf_offline_no_cache = "hf_offline_no_cache"
    missing_config_json = "missing_config_json"
    model_not_found = "model_not_found"
    bad_local_path = "bad_local_path"
    tokenizer_error = "tokenizer_error"
    transformers_too_old = "transformers_too_old"
    no_gpu_visible = "no_gpu_visible"
    invalid_device_ordinal = "invalid_device_ordinal"
    driver_mismatch = "driver_mismatch"
    cuda_lib_mismatch = "cuda_lib_mismatch"
    no_kernel_image = "no_kernel_image"
    extension_abi_mismatch = "extension_abi_mismatch"
    pinned_memory_unavailable = "pinned_memory_unavailable"
    cuda_fork_reinit = "cuda_fork_reinit"
    shm_too_small = "shm_too_small"
    port_in_use = "port_in_use"
    corrupt_checkpoint = "corrupt_checkpoint"
    compile_failed = "compile_failed"
    broken_install = "broken_install"
    cache_dir_unusable = "cache_dir_unusable"
    hub_rate_limited = "hub_rate_limited"
    disk_full = "disk_full"
    ray_placement_error = "ray_placement_error"
    nccl_error = "nccl_error"
    timeout_distributed_init = "timeout_distributed_init"
    timeout_engine_startup = "timeout_engine_startup"
    model_inspection_failed = "model_inspection_failed"
    engine_core_failed_root_cause_not_shown = "engine_core_failed_root_cause_not_shown"
    cuda_kernel_error = "cuda_kernel_error"
    model_code_error = "model_code_error"
    uncaught_exception = "uncaught_exception"
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
    # The names before the catalogue of causes: aliases of the causes they became.
    kv_insufficient = "kv_cache_too_small"
    no_cache_memory = "no_cache_blocks"
    gpu_memory_busy = "gpu_mem_util_exceeds_free"
    weights_dont_fit = "cuda_oom_weights"
    oom = "cuda_oom_unknown"
    engine_init_failed = "engine_core_failed_root_cause_not_shown"

    @classmethod
    def _missing_(cls, value: object) -> Reason | None:
        """An old name (`kv_insufficient`) is the cause it became."""
        canonical = ALIASES.get(value) if isinstance(value, str) else None
        return cls(canonical) if canonical is not None else None


#: What the harness saw itself (not a line of the log).
OBSERVED: dict[Reason, ReasonInfo] = {
    Reason.ready: ReasonInfo(Outcome.booted,
                             "/health answered 200 (and, with `probe`, a 1-token completion was served)"),
    Reason.exited: ReasonInfo(Outcome.crashed, "the server exited with a non-zero code (before it was ready, or "
                                               "around its first request) and its log names no exception"),
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
        Outcome.error, "refused gpu_mem_util_exceeds_free on both attempts while the GPUs were still above their idle "
                       "level: memory held by something else, not this configuration's verdict"),
}

REASONS: dict[Reason, ReasonInfo] = {
    Reason.ready: OBSERVED[Reason.ready],
    **{Reason(c.id): ReasonInfo(KIND_OUTCOME[c.kind], c.meaning, c.kind) for c in CAUSES},
    **{r: info for r, info in OBSERVED.items() if r is not Reason.ready},
}


def canonical_reason(value: Any) -> Any:
    """An old reason name as the cause it became; anything else as given (for the records' validators)."""
    return ALIASES.get(value, value) if isinstance(value, str) else value


#: The reasons a log line can give by itself: every cause of the catalogue.
REFUSAL_KINDS: tuple[Reason, ...] = tuple(Reason(c.id) for c in CAUSES)
#: For the records' pydantic models: the enum members as a Literal, so a record holds the enums while its JSON and
#: its JSON Schema hold the plain names (inline, as when the records held strings). The old names validate too (the
#: schema lists them, so an old record still validates against it) and are read as the causes they became.
if TYPE_CHECKING:  # what such a field holds: mypy cannot read a Literal built at run time
    OutcomeMember: TypeAlias = Outcome
    _ReasonLiteral: TypeAlias = Reason
    OutcomeName: TypeAlias = str
    ReasonName: TypeAlias = str
    _RefusalLiteral: TypeAlias = Reason
else:
    OutcomeMember = Literal[tuple(Outcome)]
    _ReasonLiteral = Literal[(*Reason, *ALIASES)]
    #: For what users write (the matrix): the plain names, old ones included, so a validation error lists them as
    #: written.
    OutcomeName = Literal[tuple(o.value for o in Outcome)]
    ReasonName = Literal[(*(r.value for r in Reason), *ALIASES)]
    _RefusalLiteral = Literal[(*REFUSAL_KINDS, *ALIASES)]
ReasonMember = Annotated[_ReasonLiteral, BeforeValidator(canonical_reason)]
RefusalKind = Annotated[_RefusalLiteral, BeforeValidator(canonical_reason)]


def check_reason(reason: str, outcome: str | None = None) -> str:
    """`reason` as the catalogue names it now (an old name is its cause), if the catalogue has it (and it is one of
    `outcome`'s); else a ValueError that lists the choices."""
    choices = reasons_of(outcome) if outcome is not None and outcome in Outcome.__members__ else list(Reason)
    if reason not in Reason.__members__:
        near = difflib.get_close_matches(reason, [*(r.value for r in Reason), *ALIASES], n=1)
        hint = f"did you mean {ALIASES.get(near[0], near[0])!r}? " if near else ""
        raise ValueError(f"unknown reason {reason!r}: {hint}the reasons{f' of {outcome}' if outcome else ''} are "
                         f"{', '.join(r.value for r in choices)}")
    known = Reason(reason)
    if outcome is not None and outcome in Outcome.__members__ and REASONS[known].outcome != Outcome(outcome):
        raise ValueError(f"reason {reason!r} belongs to outcome {REASONS[known].outcome}, not {outcome}: "
                         f"a rule expecting it could never match (the reasons of {outcome} are "
                         f"{', '.join(r.value for r in choices)})")
    return known.value


def reasons_of(outcome: Outcome | str) -> list[Reason]:
    return [r for r, info in REASONS.items() if info.outcome == Outcome(outcome)]


def reason_table(predicted: Collection[str] = ()) -> str:
    """docs/results.md's table of reasons, rendered from the catalogue: each cause's numbers (what its line states
    and what would boot), and whether `plan`/`kv` predict it before any boot (`predicted`: the ids
    harness.predict.refusals.PREDICTED names, handed in, since the predictor sits layers above the catalogue)."""
    from harness.verdict.causes import BY_ID

    old = {new: old for old, new in ALIASES.items()}
    rows = ["| outcome | reason | kind | meaning | numbers it states | before a boot |", "|---|---|---|---|---|---|"]
    for reason, info in REASONS.items():
        alias = f" (was `{old[reason.value]}`)" if reason.value in old else ""
        cause = BY_ID.get(reason.value)
        numbers = ", ".join(f"`{n}`" for n in cause.numbers) if cause is not None else ""
        before = "`plan`, `kv`" if reason.value in predicted else ""
        rows.append(f"| `{info.outcome}` | `{reason}`{alias} | {info.kind or 'observed'} | {info.meaning} | {numbers} "
                    f"| {before} |")
    return "\n".join(rows)
