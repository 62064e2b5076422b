"""The refusals vLLM decides from the configuration alone, predicted with the catalogue's cause ids before any GPU
minute: a cell that cannot boot is known before it is booted, with the same hint its log would give.

vLLM's own checks, read in the 0.10.1 sources (vllm/config.py; the same conditions since 0.4):
- ModelConfig.verify_with_parallel_config: "Total number of attention heads ({h}) must be divisible by tensor
  parallel size ({tp})." (tp_not_divisible);
- SchedulerConfig._verify_args: "max_num_batched_tokens ({b}) is smaller than max_model_len ({m})" when chunked
  prefill is off (config_invalid_batched_tokens); V1 turns it on unless `--no-enable-chunked-prefill` is given;
- the executor's "please set tensor_parallel_size to less than max local gpu count" (vllm/v1/executor/
  multiproc_executor.py: world_size = tensor × pipeline, each of the data-parallel replicas its own) (not_enough_gpus);
- the GPU worker's _check_if_gpu_supports_dtype: "Bfloat16 is only supported on GPUs with compute capability of at
  least 8.0" for an explicit `--dtype bfloat16` (dtype_unsupported_gpu; `auto` falls back to float16 there).
The length check (max_len_exceeds_model) is predictor.py's `_length_refusal`, decided first as vLLM does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.gpu.capability import capability_of
from harness.predict.serve_flags import ServeFlags


#: The causes `plan` and `kv` predict from the configuration (max_len_exceeds_model: predictor.py's length check).
PREDICTED = ("max_len_exceeds_model", "config_invalid_batched_tokens", "tp_not_divisible", "not_enough_gpus",
             "dtype_unsupported_gpu")


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


def config_refusals(raw: dict[str, Any] | None, flags: ServeFlags, *, pipeline: int = 1, max_model_len: int | None,
                    machine: Machine | None) -> list[ConfigRefusal]:
    """Every refusal the configuration meets, in the order vLLM checks them (the first is the one the log shows).
    `raw`: the model's config.json; `max_model_len`: the length vLLM will use (the flag's, else the model's)."""
    out: list[ConfigRefusal] = []
    batched = flags.max_num_batched_tokens
    if flags.enable_chunked_prefill is False and batched is not None and max_model_len and batched < max_model_len:
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
    cap = capability_of(machine.gpu_name) if machine is not None and machine.gpu_name else None
    if cap is not None and flags.dtype.lower() in ("bfloat16", "bf16") and cap < (8, 0):
        out.append(ConfigRefusal("dtype_unsupported_gpu",
                                 {"dtype_asked": "bfloat16", "min_capability": "8.0", "gpu": machine.gpu_name[:80],
                                  "capability": f"{cap[0]}.{cap[1]}"},
                                 f"--dtype bfloat16 needs compute capability 8.0; {machine.gpu_name[:80]} has "
                                 f"{cap[0]}.{cap[1]}: the GPU worker refuses it"))
    return out
