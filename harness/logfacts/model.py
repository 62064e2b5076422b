"""What a vLLM boot log says, as data.

These models are the contract between the log parser and everything that records or judges a boot: every field is
optional because each vLLM version logs a different subset, and a missing fact must read as "not logged", never as 0.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field

from harness.verdict.catalogue import RefusalKind
from harness.verdict.causes import Finding

from .timeline import Milestone, Timeline, skipped

MESSAGE_MAX_CHARS = 2000


class Refusal(BaseModel):
    """One decisive "this configuration will not boot" line, with the numbers it carries."""

    model_config = ConfigDict(extra="forbid")

    kind: RefusalKind
    """The cause's id (harness.verdict.causes); a record that names it by its old name reads as the cause."""
    message: str = Field(max_length=MESSAGE_MAX_CHARS)
    """The refusal line's message: ANSI, process prefix and log header stripped, at most 2000 characters."""
    max_seq_len: int | None = None
    """kv_insufficient: N of "max seq len (N)"; max_len_exceeds_model: the user's max_model_len."""
    needed_gib: float | None = None
    """kv_insufficient: KV needed; gpu_memory_busy: memory requested; oom / weights_dont_fit: the failed allocation."""
    available_gib: float | None = None
    """kv_insufficient: KV available; gpu_memory_busy: free memory at startup; oom: free memory, when torch says."""
    estimated_max_model_len: int | None = None
    derived_max_model_len: int | None = None
    """max_len_exceeds_model: the model's own limit D (None when the config names none)."""


class KvFacts(BaseModel):
    """The memory facts a boot logs on its way up; None when this version or configuration does not log it."""

    model_config = ConfigDict(extra="forbid")

    model_load_gib: float | None = None
    available_gib: float | None = None
    """"Available KV cache memory: X GiB" (V0: "the rest of the memory reserved for KV Cache is X GiB"; the CPU
    backend: X of "Auto set (X/T) GiB for KV cache", what it sized from free memory); the smallest value when several
    workers log it, since the engine sizes the pool by its tightest worker. None when the size was given (below)."""
    reserved_gib: float | None = None
    """The KV size the worker set: kv_cache_memory_bytes on GPU, or the CPU backend's "Explicitly set / Auto set (X/T)
    GiB" (an Auto line fills available_gib too)."""
    kv_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_tokens: int | None = None
    cuda_graph_gib: float | None = None
    """Measured graph memory ("Graph capturing finished ... took X GiB"), else the estimate logged before profiling.
    A capture logged before the KV cache is sized is the V2 model runner's profiling pass (0.29+), not the measured
    one: it counts only when nothing else is known (a boot refused before its real capture)."""
    cuda_graph_estimated_gib: float | None = None
    """vLLM's estimate of its CUDA-graph memory, from sample captures while profiling (0.18+; taken off the KV budget
    by default from 0.20): "Estimated CUDA graph memory: X GiB total" (the V1 model runner, before the KV cache is
    sized), else Y of "CUDA graph pool memory: X GiB (actual), Y GiB (estimated)" (after the capture; the V2 model
    runner's only word on it). The largest when several workers (TP ranks) log it: each rank captures its own graphs
    on its own GPU, so the rank whose graphs need the most is the one whose memory must hold them."""
    cuda_graph_actual_gib: float | None = None
    """What the real capture took by vLLM's own comparison: X of "CUDA graph pool memory: X GiB (actual), Y GiB
    (estimated)" (0.18+, logged only when an estimate was made), beside the estimate; the largest across workers,
    for the same reason."""
    offload_cap_gib: float | None = None
    offload_uncapped_gib: float | None = None
    floor_raised_bytes: int | None = None
    """The KV cache an operator floor raised the pool to, in bytes (patches/cpu_worker-kv-floor.patch's line)."""
    autofit_max_model_len: int | None = None
    """The max_model_len auto-fit settled on: B of "reduced from A to B", or the full length when it fits."""
    engine_init_s: float | None = None
    mla_backend: str | None = None
    """The CPU platform's MLA kernel ("Using AMX_MLA backend."): AMX keeps the 128-token block, the reference
    kernel forces 16."""
    device: str | None = None
    """The KV cache's device as the log names it: `gpu`, `cpu` (the CPU worker's "… set (X/Y) GiB for KV cache")."""
    block_size: int | None = None
    """The block size vLLM chose: a hybrid's raised attention block ("Setting attention block size to N tokens"),
    else the backend's preferred one ("Setting kv cache block size to N"); None when it kept the default."""
    mamba_padding_pct: float | None = None
    """How much a hybrid's state page was padded to the attention page ("Padding mamba page size by X%")."""
    padding_layers: int | None = None
    """Layers vLLM added to even out its layer groups ("Add N padding layers"; the first such line)."""
    mamba_cache_mode: str | None = None
    """"align" when prefix caching turned the state's prefix cache on ("Mamba cache mode is set to 'align'")."""
    cpu_ssm_dtype: str | None = None
    """The CPU platform's reset of the SSM state ("Reset SSM cache type to float32"): an AVX-512 BF16 CPU."""


class LogFacts(BaseModel):
    """Everything one boot log told us, accumulated line by line."""

    model_config = ConfigDict(extra="forbid")

    vllm_version: str | None = None
    kv: KvFacts = Field(default_factory=KvFacts)
    refusal: Refusal | None = None
    """The most specific refusal seen: the first specific one wins; the generic wrapper only fills a gap."""
    cause: Finding | None = None
    """Why the boot failed, as far as the log shows: the catalogue's cause of the decisive line (the first of the
    highest rank, whichever process said it), its numbers and hint; with no cause known, the exception that ended the
    boot (`id` null). None when the log shows neither."""
    ready_lines: list[str] = Field(default_factory=list)
    error_line: str | None = None
    """The last exception line (`SomeError: …`) other than the generic engine failure: the root cause of a crash
    that is not a known refusal, e.g. `RuntimeError: Insufficient space in /dev/shm …`."""
    lines: int = 0
    """Physical lines fed."""
    timeline: Timeline = Field(default_factory=Timeline)
    """The phases the log shows: milestones in seconds since its first timestamp (1 s resolution; a line without a
    time takes the last one before it), the durations vLLM printed, and the phase the log ended in."""
    enforce_eager: bool | None = None
    """Whether the engine ran eager (no torch.compile, no graphs), when its config line or a warning says so."""
    refusal_after_ready: str | None = None
    """The first refusal-looking message after the server said it was ready (a listening line, or /health 200 as the
    watch tells the parser): never a refusal — vLLM refuses a configuration while its engine starts, not once it
    serves — but kept, since it says something went wrong later."""
    skimmed_lines: int = 0
    """Lines past the parser's bound (`LogParser(full_chars=…)`): only searched for what decides a boot (a refusal, a
    readiness line, an exception's line), never for facts, so a flooding server cannot hold up its own verdict."""

    def skipped(self, eager_flag: bool) -> frozenset[Milestone]:
        """The milestones this boot will not pass (naming the phase a server is in never names one of them).
        `eager_flag`: the server's flags ask for eager mode, as vLLM reads them (`serve_flags.eager`); its config
        line says so later."""
        return skipped(eager_flag or bool(self.enforce_eager), self.kv.device)


class Signal(enum.StrEnum):
    """What one fed line means to a watcher deciding whether to keep waiting."""

    REFUSAL = "refusal"
    """A decisive refusal (any kind, the generic engine_init_failed included): stop waiting, the boot failed."""
    READY = "ready"
    """A readiness line: poll /health now."""
    NONE = "none"
