"""What each vLLM release's `serve` parser does with the KV flags, read off the 0.8.0-0.34.0 wheels (docs/kv-model.md,
"Flag spellings"): the argv rewrite (Grammar), every KV option's history (its dest, how its value is read, the
shortest prefix argparse takes), the short aliases, every single-dash option, the choices argparse allows, and the
flags that change the KV cache in ways the predictor does not model. Data only: harness.predict.serve_flags reads a
command with them as the release would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Version = tuple[int, int, int]


@dataclass(frozen=True)
class Grammar:
    """FlexibleArgumentParser.parse_args's rewrite of argv, from the release that changed it."""

    since: Version
    #: `--a.b v` → `--a '{"b": v}'`: "none" (before 0.9.0), "long" (`--` flags only, 0.9.0), "any" (`-sc.b` too, 0.9.2)
    dotted: Literal["none", "long", "any"]
    #: a dotted value: "str" as written (0.9.0), "json" else the string (0.9.2), "json+human" then 32k (0.20.0)
    dotted_values: Literal["str", "json", "json+human"]
    #: underscores become dashes in the whole key, dotted part included (before 0.9.1: `.num-speculative-tokens`)
    whole_key: bool
    #: human_readable_int knows `t`/`T` (0.13.0 on; before, `1T` is refused)
    tera: bool


GRAMMARS = (
    Grammar((0, 8, 0), "none", "str", whole_key=True, tera=False),
    Grammar((0, 9, 0), "long", "str", whole_key=True, tera=False),
    Grammar((0, 9, 1), "long", "str", whole_key=False, tera=False),
    Grammar((0, 9, 2), "any", "json", whole_key=False, tera=False),
    Grammar((0, 13, 0), "any", "json", whole_key=False, tera=True),
    Grammar((0, 20, 0), "any", "json+human", whole_key=False, tera=True),
)

#: How a value is read. int: int(); float: float(); human: human_readable_int; len: that or `auto`/-1 (0.14 on);
#: json: json.loads;
#: literal: ast.literal_eval (0.8.2's string); dict|str: JSON when it looks like an object, else the string
#: (union_dict_and_str); str; on/off: a switch that sets True/False. `?`: optional_type / nullable_str, "" and "None"
#: read as None.
Kind = Literal["int", "float", "human", "len", "json", "literal", "dict|str", "str", "on", "off", "?int",
               "?human", "?json",
               "?literal", "?str"]

#: option → its history: (since, dest, kind, the shortest prefix argparse takes for it); dest None: gone from then on.
#: The prefix length is 1 + the longest prefix the option shares with any other option of that release.
LONG: dict[str, tuple[tuple[Version, str | None, Kind, int], ...]] = {
    "--model": (((0, 8, 0), "model", "str", 8),),
    "--max-model-len": (((0, 8, 0), "max_model_len", "int", 7), ((0, 8, 4), "max_model_len", "human", 7),
                        ((0, 14, 0), "max_model_len", "len", 7)),
    "--tensor-parallel-size": (((0, 8, 0), "tensor_parallel_size", "int", 4),),
    "--dtype": (((0, 8, 0), "dtype", "str", 4),),
    "--kv-cache-dtype": (((0, 8, 0), "kv_cache_dtype", "str", 6), ((0, 10, 2), "kv_cache_dtype", "str", 12),
                         ((0, 19, 0), "kv_cache_dtype", "str", 17)),
    "--block-size": (((0, 8, 0), "block_size", "int", 3),),
    "--speculative-config": (((0, 8, 2), "speculative_config", "?literal", 15),
                             ((0, 8, 3), "speculative_config", "json", 4),
                             ((0, 10, 1), "speculative_config", "?json", 4),
                             ((0, 16, 0), "speculative_config", "?json", 7)),
    "--speculative-model": (((0, 8, 0), "speculative_model", "?str", 20), ((0, 8, 3), None, "str", 0)),
    "--num-speculative-tokens": (((0, 8, 0), "num_speculative_tokens", "int", 8), ((0, 8, 3), None, "int", 0)),
    "--spec-method": (((0, 22, 0), "spec_method", "?str", 9),),
    "--spec-model": (((0, 22, 0), "spec_model", "?str", 9),),
    "--spec-tokens": (((0, 22, 0), "spec_tokens", "int", 8),),
    "--enable-prefix-caching": (((0, 8, 0), "enable_prefix_caching", "on", 12),),
    "--no-enable-prefix-caching": (((0, 8, 0), "enable_prefix_caching", "off", 6),
                                   ((0, 8, 5), "enable_prefix_caching", "off", 15)),
    "--disable-prefix-caching": (((0, 33, 0), "enable_prefix_caching", "off", 13),),
    "--max-num-batched-tokens": (((0, 8, 0), "max_num_batched_tokens", "int", 11),
                                 ((0, 9, 1), "max_num_batched_tokens", "human", 11)),
    "--max-num-seqs": (((0, 8, 0), "max_num_seqs", "int", 11), ((0, 26, 0), "max_num_seqs", "int", 12)),
    "--kv-cache-memory-bytes": (((0, 10, 2), "kv_cache_memory_bytes", "?human", 12),
                                ((0, 12, 0), "kv_cache_memory_bytes", "?human", 14)),
    "--mamba-cache-mode": (((0, 15, 0), "mamba_cache_mode", "str", 15),),
    "--mamba-cache-dtype": (((0, 10, 1), "mamba_cache_dtype", "str", 9), ((0, 15, 0), "mamba_cache_dtype", "str", 15)),
    "--mamba-ssm-cache-dtype": (((0, 10, 1), "mamba_ssm_cache_dtype", "str", 9),
                                ((0, 27, 0), "mamba_ssm_cache_dtype", "str", 11)),
    # no torch.compile and no CUDA graphs: the boot skips those phases (and, on a GPU, their memory). A switch of the
    # model config since 0.9.0 (`--no-…` from then, as `--no-disable-sliding-window`); no other option starts `--enf`
    "--enforce-eager": (((0, 8, 0), "enforce_eager", "on", 5),),
    "--gpu-memory-utilization": (((0, 8, 0), "gpu_memory_utilization", "float", 4),),
    "--no-enforce-eager": (((0, 9, 0), "enforce_eager", "off", 8),),
    "--async-scheduling": (((0, 10, 0), "async_scheduling", "on", 4),),
    "--no-async-scheduling": (((0, 10, 0), "async_scheduling", "off", 7),),
    # they change the KV cache and are not modelled: refused when set (UNMODELLED)
    "--pipeline-parallel-size": (((0, 8, 0), "pipeline_parallel_size", "int", 4),),
    # read for the config refusals only (predict/refusals.py); the whole name: a prefix is not resolved for these
    "--data-parallel-size": (((0, 8, 3), "data_parallel_size", "int", 20),),
    "--enable-chunked-prefill": (((0, 8, 0), "enable_chunked_prefill", "on", 24),),
    "--no-enable-chunked-prefill": (((0, 9, 0), "enable_chunked_prefill", "off", 27),),
    "--decode-context-parallel-size": (((0, 10, 2), "decode_context_parallel_size", "int", 5),),
    "--prefill-context-parallel-size": (((0, 12, 0), "prefill_context_parallel_size", "int", 8),
                                        ((0, 24, 0), "prefill_context_parallel_size", "int", 11)),
    "--num-gpu-blocks-override": (((0, 8, 0), "num_gpu_blocks_override", "int", 7),
                                  ((0, 8, 5), "num_gpu_blocks_override", "?int", 7),
                                  ((0, 12, 0), "num_gpu_blocks_override", "?int", 4),
                                  ((0, 20, 0), "num_gpu_blocks_override", "?int", 6)),
    "--kv-cache-dtype-skip-layers": (((0, 19, 0), "kv_cache_dtype_skip_layers", "str", 17),),
    "--disable-sliding-window": (((0, 8, 0), "disable_sliding_window", "on", 11),
                                 ((0, 33, 0), "disable_sliding_window", "on", 13)),
    "--no-disable-sliding-window": (((0, 9, 0), "disable_sliding_window", "off", 14),),
    "--enable-sliding-window": (((0, 33, 0), "disable_sliding_window", "off", 12),),
    "--disable-hybrid-kv-cache-manager": (((0, 9, 1), "disable_hybrid_kv_cache_manager", "on", 11),
                                          ((0, 33, 0), "disable_hybrid_kv_cache_manager", "on", 12)),
    "--no-disable-hybrid-kv-cache-manager": (((0, 9, 1), "disable_hybrid_kv_cache_manager", "off", 14),),
    "--enable-hybrid-kv-cache-manager": (((0, 33, 0), "disable_hybrid_kv_cache_manager", "off", 11),),
    "--hf-overrides": (((0, 8, 0), "hf_overrides", "json", 6), ((0, 9, 0), "hf_overrides", "dict|str", 6)),
    "--config": (((0, 8, 0), "config", "str", 9),),  # `vllm serve`'s own until 0.10.0, the API server's too since
}
#: the short aliases of KV flags, from the release that added them
ALIASES: dict[str, tuple[Version, str]] = {
    "-tp": ((0, 8, 0), "--tensor-parallel-size"), "-pp": ((0, 8, 0), "--pipeline-parallel-size"),
    "-dp": ((0, 8, 3), "--data-parallel-size"),
    "-dcp": ((0, 10, 2), "--decode-context-parallel-size"), "-pcp": ((0, 12, 0), "--prefill-context-parallel-size"),
    "-sc": ((0, 19, 0), "--speculative-config"),
}
#: every single-dash option of the serve parser (few enough to resolve `-t` and refuse `-tp2` exactly as argparse)
SINGLE: tuple[tuple[Version, frozenset[str]], ...] = tuple((v, frozenset(s.split())) for v, s in (
    ((0, 8, 0), "-O -h -pp -q -spec-draft-tp -tp"),
    ((0, 8, 3), "-O -dp -h -pp -q -tp"),
    ((0, 9, 0), "-O -dp -dpa -dpl -dpp -dpr -h -pp -q -tp"),
    ((0, 9, 1), "-O -asc -dp -dpa -dpb -dpl -dpp -dpr -h -pp -q -tp"),
    ((0, 9, 2), "-O -asc -dp -dpa -dpb -dpl -dpn -dpp -dpr -h -pp -q -tp"),
    ((0, 10, 2), "-O -asc -dcp -dp -dpa -dpb -dpl -dpn -dpp -dpr -h -pp -q -tp"),
    ((0, 11, 1), "-O -asc -dcp -dp -dpa -dpb -dpe -dph -dpl -dpn -dpp -dpr -h -n -pp -q -r -tp"),
    ((0, 12, 0), "-asc -cc -dcp -dp -dpa -dpb -dpe -dph -dpl -dpn -dpp -dpr -h -n -pcp -pp -q -r -tp"),
    ((0, 13, 0), "-ac -asc -cc -dcp -dp -dpa -dpb -dpe -dph -dpl -dpn -dpp -dpr -h -n -pcp -pp -q -r -tp"),
    ((0, 14, 0), "-ac -asc -cc -dcp -dp -dpa -dpb -dpe -dph -dpl -dpn -dpp -dpr -ep -h -n -pcp -pp -q -r -tp"),
    ((0, 19, 0), "-ac -asc -cc -dcp -dp -dpa -dpb -dpe -dph -dpl -dpn -dpp -dpr -ep -h -n -pcp -pp -q -r -sc -tp"),
    ((0, 22, 0), "-ac -asc -cc -dcp -dp -dpa -dpb -dpe -dph -dpl -dpm -dpn -dpp -dpr -ep -h -n -pcp -pp -q -r -sc -tp"),
    ((0, 24, 0), "-ac -asc -cc -dc -dcp -dp -dpa -dpb -dpe -dph -dpl -dpm -dpn -dpp -dpr -ep -h -n -pcp -pp -q -r -sc "
                 "-tp"),
))


def _grow(*steps: tuple[Version, tuple[Any, ...] | None]) -> tuple[tuple[Version, tuple[Any, ...] | None], ...]:
    """Choices that only grow: each step adds to the last; None: any value from then on."""
    out: list[tuple[Version, tuple[Any, ...] | None]] = []
    acc: tuple[Any, ...] | None = ()
    for since, added in steps:
        acc = None if added is None else (acc or ()) + added
        out.append((since, acc))
    return tuple(out)


_MAMBA_DTYPES = _grow(((0, 10, 1), ("auto", "float32")), ((0, 13, 0), ("float16",)), ((0, 22, 0), ("bfloat16",)))
#: argparse's choices per dest and release; a dest not here takes any value of its kind
CHOICES: dict[str, tuple[tuple[Version, tuple[Any, ...] | None], ...]] = {
    "dtype": (((0, 8, 0), ("auto", "half", "float16", "bfloat16", "float", "float32")),),
    "kv_cache_dtype": _grow(((0, 8, 0), ("auto", "fp8", "fp8_e5m2", "fp8_e4m3")), ((0, 10, 0), ("fp8_inc",)),
                            ((0, 11, 0), ("bfloat16",)), ((0, 11, 1), ("fp8_ds_mla",)), ((0, 18, 0), ("float16",)),
                            ((0, 20, 0), ("fp8_per_token_head", "int8_per_token_head", "nvfp4", "turboquant_3bit_nc",
                                          "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_k8v4")),
                            ((0, 25, 0), ("int4_per_token_head",)), ((0, 28, 0), ("nvfp4_4over6",)),
                            ((0, 30, 0), ("nvfp4_ds_mla",)), ((0, 32, 0), ("ultraquant_4bit",)), ((0, 33, 0), None)),
    "block_size": _grow(((0, 8, 0), (8, 16, 32, 64, 128)), ((0, 8, 5), (1,)), ((0, 11, 1), (256,)), ((0, 18, 0), None)),
    "mamba_cache_mode": (((0, 15, 0), ("align", "all", "none")), ((0, 32, 0), ("align", "none"))),
    "mamba_cache_dtype": _MAMBA_DTYPES,
    "mamba_ssm_cache_dtype": _MAMBA_DTYPES,
}
#: dests that change the KV cache in ways the predictor does not model: refused unless left at what vLLM does anyway
UNMODELLED: dict[str, tuple[str, tuple[Any, ...]]] = {
    "pipeline_parallel_size": ("each pipeline stage holds the KV cache of its own layers only", (None, 1)),
    "decode_context_parallel_size": ("it splits each sequence's KV cache across ranks", (None, 1)),
    "prefill_context_parallel_size": ("it splits each sequence's KV cache across ranks", (None, 1)),
    "num_gpu_blocks_override": ("it replaces the number of KV blocks vLLM sizes", (None,)),
    "kv_cache_dtype_skip_layers": ("those layers keep their KV cache in the model's dtype", (None, "")),
    "disable_sliding_window": ("sliding-window layers then keep the whole context", (None, False)),
    "disable_hybrid_kv_cache_manager": ("every layer then gets blocks for the whole context", (None, False)),
    "config": ("the flags in a YAML config file are not read here; pass them on the command line", (None,)),
}
