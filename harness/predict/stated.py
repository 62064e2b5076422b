"""What a saved log states about its KV memory in bytes, where its GiB figures are rounded (`boot-harness facts`).

vLLM prints its KV figures in GiB to one or two decimals, so a tiny model's refusal reads "0.0 GiB KV cache is
needed, which is larger than the available KV cache memory (0.0 GiB)". The same log states the cap in bytes (the
non-default args' `kv_cache_memory_bytes`, read as `kv --log` reads it, or a KV floor's raised size), and the refusal
names the longest length that fits: the blocks that fit in the cap bound the bytes of one block, and with them the
need of the length it refused. Nothing here reads the model: only what the log itself states.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import UsageError
from harness.logfacts import LogFacts
from harness.logfacts.engine_config import EngineConfig
from harness.predict.versions import DEFAULT_VERSION, rules_for, rules_version
from harness.units import GIB, fmt_bytes
from harness.verdict.catalogue import Reason

#: vLLM's block when the log sets none: the CPU backend's 128 tokens, the GPU's 16
DEFAULT_BLOCK = {"cpu": 128, "gpu": 16}


class Bytes(BaseModel):
    """A figure in bytes as a range: equal ends when the log states it exactly."""

    model_config = ConfigDict(extra="forbid")

    low: int
    high: int

    def show(self) -> str:
        if self.low == self.high:
            return fmt_bytes(self.low)
        lo, hi = fmt_bytes(self.low), fmt_bytes(self.high)
        if lo == hi:
            return f"about {hi}"
        unit = hi.rsplit(" ", 1)[-1]
        return f"{lo.removesuffix(' ' + unit)}–{hi}" if lo.endswith(" " + unit) else f"{lo}–{hi}"


class Stated(BaseModel):
    """The log's KV memory in bytes: the cap it states, and the refusal's need and available derived from it."""

    model_config = ConfigDict(extra="forbid")

    cap_bytes: int | None = Field(None, description="the KV size the server was given: a KV floor's raised size "
                                                    "(logged in bytes), else the args' kv_cache_memory_bytes")
    cap_key: str | None = Field(None, description="the key the log states it under: floor_raised_bytes or "
                                                  "kv_cache_memory_bytes")
    cap_source: str | None = None
    block_size: int | None = Field(None, description="the block the derivation counts in: the logged one, else the "
                                                     "device's default (CPU 128, GPU 16)")
    need_bytes: Bytes | None = Field(None, description="the refused length's need: its blocks at the bytes of one "
                                                       "block the cap bounds (the blocks of the estimated length fit, "
                                                       "one more does not)")
    available_bytes: Bytes | None = Field(None, description="the refusal's available: the cap, less the null block "
                                                            "from 0.29 on")
    bytes_per_block: Bytes | None = None
    how: str | None = Field(None, description="how the need was derived, or why it could not be")


def cap_of(cfg: EngineConfig, facts: LogFacts) -> tuple[int | None, str | None, str | None]:
    """The KV cap the log states in bytes, its key and where: the floor's raised size, else `--kv-cache-memory-bytes`
    as the log's release read the non-default args (what `kv --log` holds a prediction against)."""
    if facts.kv.floor_raised_bytes:
        return facts.kv.floor_raised_bytes, "floor_raised_bytes", "the KV floor's log line"
    raw = (cfg.args or {}).get("kv_cache_memory_bytes")
    if raw is None or isinstance(raw, bool):
        return None, None, None
    if isinstance(raw, int):
        value: int | None = raw
    else:
        from harness.predict.serve_flags import parse_serve_flags

        try:
            value = parse_serve_flags(["--kv-cache-memory-bytes", str(raw)],
                                      rules_version(facts.vllm_version)).kv_cache_memory_bytes
        except (UsageError, ValueError):
            value = None
    if not value or value <= 0:
        return None, None, None
    return value, "kv_cache_memory_bytes", "the server's arguments"


def stated(facts: LogFacts, cfg: EngineConfig) -> Stated:
    """The cap, and for a KV refusal whose length estimate the log names, its need and available derived in bytes."""
    cap, key, source = cap_of(cfg, facts)
    out = Stated(cap_bytes=cap, cap_key=key, cap_source=source)
    r = facts.refusal
    if r is None or r.kind != Reason.kv_cache_too_small or r.max_seq_len is None:
        return out
    if cap is None:
        return out.model_copy(update={"how": "the log states no KV cap in bytes: its GiB figures stand as printed"})
    estimate = r.estimated_max_model_len
    block = facts.kv.block_size or DEFAULT_BLOCK.get(facts.kv.device or "gpu", 16)
    if not estimate or estimate >= r.max_seq_len or estimate < block:
        return out.model_copy(update={"block_size": block, "how": "the refusal names no length that fits in the cap: "
                                                                   "its need is not derived"})
    null = 1 if rules_for(rules_version(facts.vllm_version or DEFAULT_VERSION)).null_block_in_check else 0
    fit = estimate // block  # the blocks of the estimated length fit in the cap (less the null block); one more not
    per = Bytes(low=cap // (fit + 1 + null) + 1, high=cap // (fit + null))
    blocks = -(-r.max_seq_len // block)
    need = Bytes(low=blocks * per.low, high=blocks * per.high)
    available = Bytes(low=cap - null * per.high, high=cap - null * per.low)
    less = " and the null block" if null else ""
    how = (f"{r.max_seq_len:,} tokens are {blocks} blocks of {block}; {fit} blocks{less} fit in the "
           f"{fmt_bytes(cap)} cap and {fit + 1} do not: {per.low:,}–{per.high:,} B a block")
    return out.model_copy(update={"block_size": block, "need_bytes": need, "available_bytes": available,
                                  "bytes_per_block": per, "how": how})


def gib_shown(value: float, derived: Bytes | None = None, what: str = "derived") -> str:
    """A logged GiB figure as facts prints it: as is from 0.1 GiB up; below, what it is in MiB, or that vLLM rounded
    it to zero, and the bytes derived for it when there are any."""
    if value >= 0.1:
        text = f"{value} GiB"
    elif value > 0:  # printed to as many decimals as it shows: 0.01 is 0.005-0.015 GiB
        half = 0.5 * 10 ** -len(repr(value).partition(".")[2])
        rounded = Bytes(low=int((value - half) * GIB), high=int((value + half) * GIB))
        text = f"{value} GiB as logged (rounded: {rounded.show()})"
    else:
        text = f"{value} GiB as logged (rounded to zero)"
    return text + (f"; {what}: {derived.show()}" if derived is not None else "")
