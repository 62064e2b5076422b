"""The refusals vLLM decides from the configuration alone, predicted with the catalogue's cause ids before any GPU
minute: a cell that cannot boot is known before it is booted, with the same hint its log would give.

vLLM's own checks, read in the sdists of 0.10.1, 0.11.0, 0.12.0 and 0.32.0:
- ModelConfig.verify_with_parallel_config (0.10.1 vllm/config/__init__.py): "Total number of attention heads ({h})
  must be divisible by tensor parallel size ({tp})." (tp_not_divisible);
- SchedulerConfig._verify_args / verify_max_model_len (vllm/config/scheduler.py): "max_num_batched_tokens ({b}) is
  smaller than max_model_len ({m})" when chunked prefill is off (config_invalid_batched_tokens). 0.8-0.11's
  EngineArgs._set_default_args_v1 turns chunked prefill on for every generating model whatever the flag ("V1 always
  uses chunked prefills"); from 0.12.0 `--no-enable-chunked-prefill` is kept (a warning only), so it refuses;
- world size (tensor × pipeline) above the GPUs: 0.10.1's mp executor "please ensure that world_size (W) is less
  than than max local gpu count (G)", 0.32.0's ParallelConfig "World size (W) is larger than the number of available
  GPUs (G) in this node" (not_enough_gpus; the data-parallel replicas each need their own, counted too);
- the GPU worker's _check_if_gpu_supports_dtype (0.10.1 vllm/v1/worker/gpu_worker.py; 0.32.0 CudaPlatform.
  check_if_supports_dtype): "Bfloat16 is only supported on GPUs with compute capability of at least 8.0" for an
  explicit `--dtype bfloat16` (dtype_unsupported_gpu; `auto` resolves to a dtype the platform supports: float16).
The length check (max_len_exceeds_model) is predictor.py's `_length_refusal`, decided first as vLLM does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.gpu.capability import capability_of
from harness.predict.serve_flags import ServeFlags
from harness.predict.versions import release_of

#: The causes `plan` and `kv` predict from the configuration (max_len_exceeds_model: predictor.py's length check).
PREDICTED = ("max_len_exceeds_model", "config_invalid_batched_tokens", "tp_not_divisible", "not_enough_gpus",
             "dtype_unsupported_gpu")
#: Those decided by the model and the flags alone, whatever the machine: a boot's record holds its log against them.
MACHINE_FREE = ("config_invalid_batched_tokens", "tp_not_divisible")


@dataclass(frozen=True)
class Machine:
    """What the server will see: the GPUs a cell gets (None: unknown) and their name (NVML's, or `--gpu NAME`)."""

    gpus: int | None = None
    gpu_name: str | None = None


@dataclass(frozen=True)
class ConfigRefusal:
    cause: str
    """The catalogue's id (the one the boot's log would give)."""
    numbers: dict[str, Any] = field(default_factory=dict)
    why: str = ""

    @property
    def hint(self) -> str:
        """The catalogue's one-line hint over these numbers (and what its `derive` works out: what would boot)."""
        from harness.verdict.causes import BY_ID

        cause = BY_ID[self.cause]
        numbers = {**self.numbers, **(cause.derive(self.numbers) if cause.derive else {})}
        return cause.hint(numbers)


def _heads(raw: dict[str, Any] | None) -> int | None:
    cfg = raw or {}
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else None
    for source in (text, cfg):
        for key in ("num_attention_heads", "n_head"):
            v = (source or {}).get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
    return None


#: From this release an explicit `--no-enable-chunked-prefill` is kept (before, V1 turned chunked prefill back on).
CHUNKED_OFF_KEPT = (0, 12, 0)


def config_refusals(raw: dict[str, Any] | None, flags: ServeFlags, *, pipeline: int = 1, max_model_len: int | None,
                    machine: Machine | None, version: tuple[int, int, int] = CHUNKED_OFF_KEPT,
                    notes: list[str] | None = None) -> list[ConfigRefusal]:
    """Every refusal the configuration meets, in the order vLLM checks them (the first is the one the log shows).
    `raw`: the model's config.json; `max_model_len`: the length vLLM will use (the flag's, else the model's);
    `version`: the release whose rules apply; `notes`: where what was not refused and why is said."""
    out: list[ConfigRefusal] = []
    batched = flags.max_num_batched_tokens
    chunked_off = flags.enable_chunked_prefill is False
    if chunked_off and version < CHUNKED_OFF_KEPT and notes is not None:
        notes.append("--no-enable-chunked-prefill: vLLM before 0.12.0 turns chunked prefill back on for a generating "
                     "model (V1), so max_num_batched_tokens is not held against max_model_len")
    if chunked_off and version >= CHUNKED_OFF_KEPT and batched is not None and max_model_len \
            and batched < max_model_len:
        out.append(ConfigRefusal("config_invalid_batched_tokens", {"batched": batched, "max_model_len": max_model_len},
                                 f"--max-num-batched-tokens {batched:,} is below max_model_len {max_model_len:,} with "
                                 "chunked prefill off: vLLM refuses it before loading anything"))
    heads, tp = _heads(raw), flags.tensor_parallel_size
    if heads is not None and heads % tp:
        out.append(ConfigRefusal("tp_not_divisible", {"heads": heads, "tp": tp},
                                 f"--tensor-parallel-size {tp} does not divide the model's {heads} attention heads: "
                                 "vLLM refuses it before loading anything"))
    world = tp * max(1, pipeline) * max(1, flags.data_parallel_size)
    if machine is not None and machine.gpus is not None and world > machine.gpus:
        out.append(ConfigRefusal("not_enough_gpus", {"world_size": world, "gpus": machine.gpus},
                                 f"world size {world} (tensor × pipeline × data parallel) is above the "
                                 f"{machine.gpus} GPU(s) the cell gets: the executor refuses to start"))
    gpu = machine.gpu_name if machine is not None else None
    cap = capability_of(gpu) if gpu else None
    if gpu and cap is not None and flags.dtype.lower() in ("bfloat16", "bf16") and cap < (8, 0):
        out.append(ConfigRefusal("dtype_unsupported_gpu",
                                 {"dtype_asked": "bfloat16", "min_capability": "8.0", "gpu": gpu[:80],
                                  "capability": f"{cap[0]}.{cap[1]}"},
                                 f"--dtype bfloat16 needs compute capability 8.0; {gpu[:80]} has "
                                 f"{cap[0]}.{cap[1]}: the GPU worker refuses it"))
    return out


def refusals_of_argv(argv: list[str], read: Callable[[str], bytes | None], version: str,
                     machine: Machine | None) -> list[ConfigRefusal]:
    """The refusals of a server's argv where its KV cache is not predicted (a pipeline-parallel cell, a flag the KV
    model does not know): every flag read as that release reads it (serve_flags.flag_value), the model's config.json
    as the server sees it; [] when the model cannot be read. A length above the model's is predictor.py's."""
    from harness.files import parse_json
    from harness.predict.serve_flags import flag_value

    def value(dest: str, default: Any) -> Any:
        got = flag_value(argv, dest, version)
        return default if got is None else got

    model = flag_value(argv, "model", version)
    data = read(model.rstrip("/") + "/config.json") if isinstance(model, str) and model else None
    try:
        raw = parse_json(data, "config.json", strict=False) if data is not None else None
    except ValueError:
        raw = None
    if not isinstance(raw, dict):
        return []
    chunked = flag_value(argv, "enable_chunked_prefill", version)
    flags = ServeFlags(tensor_parallel_size=int(value("tensor_parallel_size", 1)), dtype=str(value("dtype", "auto")),
                       max_num_batched_tokens=flag_value(argv, "max_num_batched_tokens", version),
                       data_parallel_size=int(value("data_parallel_size", 1)),
                       enable_chunked_prefill=None if chunked is None else bool(chunked))
    length = flag_value(argv, "max_model_len", version)
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    own = text.get("max_position_embeddings") if isinstance(text, dict) else None
    return config_refusals(raw, flags, pipeline=int(value("pipeline_parallel_size", 1)),
                           max_model_len=length if isinstance(length, int) and length > 0 else
                           own if isinstance(own, int) else None, machine=machine, version=release_of(version))
