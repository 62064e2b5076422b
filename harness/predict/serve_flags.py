"""The `vllm serve` flags that change the KV cache, read from the flags as a user pastes them; the rest are ignored.

Suffixes as vLLM reads them (vllm/utils/argparse_utils.py `human_readable_int`): `k`/`m`/`g` are powers of 1000,
`K`/`M`/`G` powers of 1024, so `128k` is 128,000 tokens and `128K` 131,072; `4G` bytes is 4 GiB.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from harness import units
from harness.errors import UsageError


def human_int(text: str, flag: str) -> int:
    value = units.human_int(text)
    if value is None:
        raise UsageError(f"{flag} {text!r}: not a number (write 131072, 128k, 128K, 4G)")
    return value


@dataclass(frozen=True)
class ServeFlags:
    model: str | None = None
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    block_size: int | None = None
    speculative: dict[str, Any] = field(default_factory=dict)
    enable_prefix_caching: bool | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    kv_cache_memory_bytes: int | None = None
    mamba_cache_mode: str | None = None
    mamba_cache_dtype: str | None = None
    mamba_ssm_cache_dtype: str | None = None
    #: --async-scheduling / --no-async-scheduling; None: vLLM's default (on, unless a draft model is used)
    async_scheduling: bool | None = None


_VALUED = {
    "--model": "model",
    "--max-model-len": "max_model_len", "--tensor-parallel-size": "tensor_parallel_size", "-tp": "tensor_parallel_size",
    "--dtype": "dtype", "--kv-cache-dtype": "kv_cache_dtype", "--block-size": "block_size",
    "--speculative-config": "speculative", "--max-num-batched-tokens": "max_num_batched_tokens",
    "--max-num-seqs": "max_num_seqs", "--kv-cache-memory-bytes": "kv_cache_memory_bytes",
    "--kv-cache-memory": "kv_cache_memory_bytes", "--mamba-cache-mode": "mamba_cache_mode",
    "--mamba-cache-dtype": "mamba_cache_dtype", "--mamba-ssm-cache-dtype": "mamba_ssm_cache_dtype",
}
_SWITCHES = {
    "--enable-prefix-caching": ("enable_prefix_caching", True),
    "--no-enable-prefix-caching": ("enable_prefix_caching", False),
    "--async-scheduling": ("async_scheduling", True), "--no-async-scheduling": ("async_scheduling", False),
}
#: vLLM's own choices (config/cache.py MambaDType, MambaCacheMode)
_CHOICES = {"mamba_cache_dtype": ("auto", "float32", "float16", "bfloat16"),
            "mamba_ssm_cache_dtype": ("auto", "float32", "float16", "bfloat16"),
            "mamba_cache_mode": ("align", "none")}
_INTS = {"max_model_len", "tensor_parallel_size", "block_size", "max_num_batched_tokens", "max_num_seqs",
         "kv_cache_memory_bytes"}


def parse_serve_flags(argv: list[str]) -> ServeFlags:
    """The flags of `vllm serve … FLAGS` (or a cell's argv) that size the KV cache; unknown flags are skipped."""
    values: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg.partition("=")
        if name in _SWITCHES:
            values[_SWITCHES[name][0]] = _SWITCHES[name][1]
        elif name in _VALUED:
            if eq:
                raw = inline
            elif i + 1 < len(argv):
                raw = argv[i + 1]
                i += 1
            else:
                raise UsageError(f"{name}: expects a value")
            key = _VALUED[name]
            if key == "speculative":
                try:
                    values[key] = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise UsageError(f"--speculative-config: not JSON ({exc.msg})") from None
                if not isinstance(values[key], dict):
                    raise UsageError("--speculative-config: must be a JSON object")
            elif key in _INTS:
                if key == "max_model_len" and raw.strip().lower() in ("-1", "auto"):
                    raise UsageError("--max-model-len auto: auto-fit is not predicted; give a length")
                values[key] = human_int(raw, name)
            else:
                allowed = _CHOICES.get(key)
                if allowed and raw not in allowed:
                    raise UsageError(f"{name} {raw!r}: not one of {', '.join(allowed)}")
                values[key] = raw
        i += 1
    return ServeFlags(**values)
