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


def parse_version(text: str) -> tuple[int, int, int]:
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not m:
        raise ValueError(f"not a vLLM version: {text!r} (write X.Y.Z, e.g. 0.32.0)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


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
