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


def rules_for(version: str) -> Rules:
    v = parse_version(version)
    chosen = RULES[0]
    for r in RULES:
        if r.since <= v:
            chosen = r
    return chosen
