"""Where vLLM changed how it sizes or reports the KV cache, keyed by the release that changed it (docs/kv-model.md).

A prediction for version X uses the newest entry at or below X; a version older than the first entry uses the first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal


@dataclass(frozen=True)
class Rules:
    since: tuple[int, int, int]
    #: the check (and the estimated maximum length) plan against `available - one block`: the BlockPool's null block
    #: (0.29.0 on; kv_cache_utils.get_kv_cache_configs)
    null_block_in_check: bool
    #: "KV cache size: N tokens": `concurrency` = int(num_blocks / blocks_per_request × max_model_len) (0.20.1 on);
    #: `blocks` = num_blocks // groups × block_size (before)
    tokens_formula: Literal["concurrency", "blocks"]
    #: "Maximum concurrency": `blocks` = num_blocks / blocks_per_request (0.9 on); `tokens` = tokens / max_model_len
    concurrency_formula: Literal["blocks", "tokens"]
    #: the refusal's need: `groups` = bytes_per_block × Σ_groups blocks (0.14 on, padding layers count);
    #: `layers` = Σ_layers max_memory_usage_bytes (before)
    need_formula: Literal["groups", "layers"]
    #: the sliding window's in-flight term: `batches` = max_concurrent_batches × max_num_batched_tokens (0.26.0 on;
    #: 2 batches under async scheduling); `batched` = max_num_batched_tokens
    window_in_flight: Literal["batches", "batched"]


_BASE = Rules((0, 8, 0), null_block_in_check=False, tokens_formula="blocks", concurrency_formula="tokens",
              need_formula="layers", window_in_flight="batched")
RULES: tuple[Rules, ...] = (
    _BASE,
    replace(_BASE, since=(0, 9, 0), concurrency_formula="blocks"),
    replace(_BASE, since=(0, 14, 0), concurrency_formula="blocks", need_formula="groups"),
    replace(_BASE, since=(0, 20, 1), concurrency_formula="blocks", need_formula="groups", tokens_formula="concurrency"),
    replace(_BASE, since=(0, 26, 0), concurrency_formula="blocks", need_formula="groups", tokens_formula="concurrency",
            window_in_flight="batches"),
    Rules((0, 29, 0), null_block_in_check=True, tokens_formula="concurrency", concurrency_formula="blocks",
          need_formula="groups", window_in_flight="batches"),
)
DEFAULT_VERSION = "0.32.0"
#: the releases the rule and flag tables were read off (serve_flags.py: the 0.8.0-0.34.0 wheels), as (major, minor)
KNOWN_RELEASES = ((0, 8), (0, 34))


def outside_known(version: str) -> str | None:
    """Why the predictor may be wrong for `version` (a release outside those it was read off), or None."""
    v = parse_version(version)[:2]
    first, newest = KNOWN_RELEASES
    known = f"the releases the predictor knows ({first[0]}.{first[1]}-{newest[0]}.{newest[1]})"
    if v > newest:
        return f"newer than {known}: the newest rules apply"
    if v < first:
        return f"older than {known}: the oldest rules apply"
    return None


#: X.Y[.Z] at the start (a suffix — rc2, .dev12+g…, +cu128 — is not read); each part at most 9 digits, so no text
#: reaches int()'s 4,300-digit bound.
_VERSION = re.compile(r"v?(\d{1,9})\.(\d{1,9})(?:\.(\d{1,9}))?(?!\d)")


def parse_version(text: str) -> tuple[int, int, int]:
    """X.Y.Z of a version the user gave (--vllm-version): a ValueError when it is none."""
    m = _VERSION.match(text.strip())
    if not m:
        shown = repr(text) if len(text) <= 40 else f"{text[:40]!r}… ({len(text):,} characters)"
        raise ValueError(f"not a vLLM version: {shown} (write X.Y.Z, e.g. {DEFAULT_VERSION})")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def release_of(version: str) -> tuple[int, int, int]:
    """X.Y.Z of `version`; the default's for one that names none (a nightly's tag)."""
    try:
        return parse_version(version)
    except ValueError:
        return parse_version(DEFAULT_VERSION)


def rules_version(logged: str | None) -> str:
    """The version whose rules read what a server logged or a record holds: itself when it reads as X.Y[.Z], else
    (none, a bare `1`, a nightly's `2024_nightly`) DEFAULT_VERSION. What a server says it is, is shown as written
    and never fails a command: only a version the user gives is refused (parse_version)."""
    if logged and _VERSION.match(logged.strip()):
        return logged
    return DEFAULT_VERSION


def _newest(table, version: str):
    """The newest entry at or below `version`; the first entry for anything older."""
    v = parse_version(version)
    chosen = table[0]
    for r in table:
        if r.since <= v:
            chosen = r
    return chosen


def rules_for(version: str) -> Rules:
    return _newest(RULES, version)


@dataclass(frozen=True)
class HybridRules:
    """How vLLM sized state layers and aligned hybrids, from the release that changed it (docs/kv-model.md)."""

    since: tuple[int, int, int]
    #: prefix caching for hybrid models: "off" (forced off, ≤0.11.0), "opt-in" (off by default), "on" (0.26 on)
    prefix_caching: Literal["off", "opt-in", "on"]
    #: blocks per request and state layer: "one" (≤0.14: one page, draft blocks not counted), "modes" (0.15 on:
    #: align = 2 + drafts [+ checkpoint], none = 1 + drafts)
    blocks: Literal["one", "modes"]
    #: with prefix caching, models whose family supports mamba prefix caching (mamba1 / mamba2) ran "all" mode
    #: (one state per block of the sequence) instead of "align" (0.15–0.27)
    all_mode: bool
    #: the prefill checkpoint block of mamba2's mixer and FlashKDA (0.32 on)
    checkpoint_blocks: bool
    #: the attention kernel alignment of an MLA hybrid on a GPU
    mla_align: int
    #: the alignment also takes the configured block size (0.20 on: `max(kernel block, block_size)`)
    align_with_block_size: bool
    #: which CPUs reset the SSM state to float32: none, "amx" (0.26), "bf16" (AVX-512 BF16, 0.29 on)
    cpu_ssm_reset: Literal["none", "amx", "bf16"]
    #: NemotronH's SSM dtype when the flag is auto: the model's (≤0.12), float16 (0.13–0.19), float32 (0.20 on)
    nemotron_ssm: str | None
    #: the families whose conv state widens by the draft tokens
    conv_spec: frozenset[str]


_HYBRID_BASE = HybridRules((0, 10, 2), prefix_caching="off", blocks="one", all_mode=False, checkpoint_blocks=False,
                           mla_align=16, align_with_block_size=False, cpu_ssm_reset="none", nemotron_ssm=None,
                           conv_spec=frozenset({"gdn"}))
_H_0111 = replace(_HYBRID_BASE, since=(0, 11, 1), prefix_caching="opt-in", mla_align=64,
                  conv_spec=frozenset({"gdn", "kda"}))
_H_013 = replace(_H_0111, since=(0, 13, 0), nemotron_ssm="float16")
_H_015 = replace(_H_013, since=(0, 15, 0), blocks="modes", all_mode=True)
_H_017 = replace(_H_015, since=(0, 17, 0), conv_spec=frozenset({"gdn", "kda", "mamba2"}))
_H_020 = replace(_H_017, since=(0, 20, 0), align_with_block_size=True, nemotron_ssm="float32")
_H_026 = replace(_H_020, since=(0, 26, 0), prefix_caching="on", cpu_ssm_reset="amx")
_H_027 = replace(_H_026, since=(0, 27, 0), mla_align=128)
_H_028 = replace(_H_027, since=(0, 28, 0), all_mode=False)
_H_029 = replace(_H_028, since=(0, 29, 0), cpu_ssm_reset="bf16", conv_spec=frozenset({"gdn", "kda", "mamba2",
                                                                                       "short_conv"}))
_H_032 = replace(_H_029, since=(0, 32, 0), checkpoint_blocks=True)
HYBRID_RULES: tuple[HybridRules, ...] = (_HYBRID_BASE, _H_0111, _H_013, _H_015, _H_017, _H_020, _H_026, _H_027,
                                         _H_028, _H_029, _H_032)


def hybrid_rules_for(version: str) -> HybridRules:
    return _newest(HYBRID_RULES, version)


@dataclass(frozen=True)
class ConfigRules:
    """Where vLLM takes a cache-sizing value from the model's own config.json rather than from the flags, from the
    release that changed it (docs/kv-model.md "Values vLLM takes from the model's config")."""

    since: tuple[int, int, int]
    #: architectures whose auto `--mamba-ssm-cache-dtype` becomes the text config's `mamba_ssm_dtype`
    #: (model_executor/models/config.py `Qwen3_5ForConditionalGenerationConfig`, from 0.17; its 0.16.1 dev builds)
    text_ssm_dtype_archs: frozenset[str]
    #: architectures whose auto SSM dtype becomes `mamba_ssm_cache_dtype` of the top-level config (NemotronH, 0.13
    #: on), and those that read it from `text_config` (the Nano VL wrapper, 0.20 on); the fallback is
    #: HybridRules.nemotron_ssm
    nemotron_ssm_archs: frozenset[str]
    nemotron_text_ssm_archs: frozenset[str]
    #: a ModelOpt checkpoint's `kv_cache_quant_algo` / `kv_cache_scheme` resolves `--kv-cache-dtype auto` for every
    #: attention layer, MLA included (utils/torch_utils.py `resolve_kv_cache_dtype_string`, 0.14 on); `nvfp4` from 0.20
    modelopt_kv: frozenset[str]
    #: a compressed-tensors `kv_cache_scheme` makes each (non-MLA) attention layer fp8: "none" (≤0.14), "always" (0.15
    #: to 0.21: even over an explicit --kv-cache-dtype), "auto" (0.22 on: only when the flag is auto)
    compressed_tensors_kv: Literal["none", "always", "auto"]
    #: the default max_model_len: a `yarn` rope scaling multiplies `original_max_position_embeddings` by its factor
    #: (≤0.29); from 0.30 yarn's max_position_embeddings is taken as already scaled
    yarn_scales_original: bool
    #: `--hf-overrides` merges a dict into a nested config (`text_config`) instead of replacing it (0.11.1 on)
    hf_overrides_nested: bool
    #: sliding-window layers next to full ones are cached as full attention: no hybrid KV cache manager (≤0.9.0)
    mixed_window_as_full: bool
    #: Llama 4's chunked local attention (`attention_chunk_size`): "full" where the hybrid manager is off for it
    #: (before 0.10, and 0.10.1-0.13 by default: VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0), else "chunk"
    chunked_local: Literal["full", "chunk"]


_NEMOTRON = frozenset({"NemotronHForCausalLM"})
_QWEN35 = frozenset({"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"})
_C_BASE = ConfigRules((0, 8, 0), text_ssm_dtype_archs=frozenset(), nemotron_ssm_archs=frozenset(),
                      nemotron_text_ssm_archs=frozenset(), modelopt_kv=frozenset(), compressed_tensors_kv="none",
                      yarn_scales_original=True, hf_overrides_nested=False, mixed_window_as_full=True,
                      chunked_local="full")
_C_091 = replace(_C_BASE, since=(0, 9, 1), mixed_window_as_full=False)
_C_0100 = replace(_C_091, since=(0, 10, 0), chunked_local="chunk")
_C_0101 = replace(_C_0100, since=(0, 10, 1), chunked_local="full")
_C_0111 = replace(_C_0101, since=(0, 11, 1), hf_overrides_nested=True)
_C_013 = replace(_C_0111, since=(0, 13, 0), nemotron_ssm_archs=_NEMOTRON)
_C_014 = replace(_C_013, since=(0, 14, 0), modelopt_kv=frozenset({"fp8"}), chunked_local="chunk")
_C_015 = replace(_C_014, since=(0, 15, 0), compressed_tensors_kv="always")
_C_016 = replace(_C_015, since=(0, 16, 0), nemotron_ssm_archs=_NEMOTRON | {"NemotronHPuzzleForCausalLM"})
#: 0.16.0 has no Qwen3.5; the 0.16.1 dev builds that added it already read its mamba_ssm_dtype (no 0.16.1 release)
_C_017 = replace(_C_016, since=(0, 16, 1), text_ssm_dtype_archs=_QWEN35)
_C_019 = replace(_C_017, since=(0, 19, 0), text_ssm_dtype_archs=_QWEN35 | {"ColQwen3_5"})
_C_020 = replace(_C_019, since=(0, 20, 0), nemotron_text_ssm_archs=frozenset({"NemotronH_Nano_VL_V2"}),
                 modelopt_kv=frozenset({"fp8", "nvfp4"}))
_C_022 = replace(_C_020, since=(0, 22, 0), compressed_tensors_kv="auto")
_C_027 = replace(_C_022, since=(0, 27, 0), text_ssm_dtype_archs=_C_022.text_ssm_dtype_archs
                 | {"Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"})
_C_029 = replace(_C_027, since=(0, 29, 0), text_ssm_dtype_archs=_C_027.text_ssm_dtype_archs
                 | {"Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration", "Qwen4ExpMTP"})
_C_030 = replace(_C_029, since=(0, 30, 0), yarn_scales_original=False)
CONFIG_RULES: tuple[ConfigRules, ...] = (_C_BASE, _C_091, _C_0100, _C_0101, _C_0111, _C_013, _C_014, _C_015, _C_016,
                                         _C_017, _C_019, _C_020, _C_022, _C_027, _C_029, _C_030)


def config_rules_for(version: str) -> ConfigRules:
    return _newest(CONFIG_RULES, version)
