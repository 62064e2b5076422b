"""The prediction as data: what `boot-harness kv --json` prints and what every cell record carries next to what the
server logged. One schema (results/model.py embeds these)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.predict.kinds import CachedKind
from harness.verdict.catalogue import Reason


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LayerGroup(_Record):
    """One KV cache group: layers sharing a block table."""

    kind: CachedKind
    origins: list[str] = Field(description="where the group's layers come from: decoder, mtp, draft")
    layers: int
    padding_layers: int = 0
    block_size: int = Field(description="tokens per block for this group's layers")
    page_bytes: int = Field(description="one block of one layer, on one rank")
    bytes_per_block: int = Field(description="one block id of this group: its layers' pages together")
    blocks_per_request: int = Field(description="blocks one request of max_model_len takes from this group")
    sliding_window: int | None = None


class KvPrediction(_Record):
    """vLLM's KV sizing for one configuration, per GPU rank, from config.json and the serve flags."""

    vllm_version: str = Field(description="the release whose rules were applied")
    model: str
    max_model_len: int
    tensor_parallel_size: int = 1
    dtype: str
    kv_cache_dtype: str
    block_size: int = Field(description="the attention block size (after hybrid alignment)")
    bytes_per_token: int = Field(description="KV bytes per token of context per rank: every attention layer, MTP and "
                                             "draft layers included (a sliding layer only within its window)")
    state_bytes_per_seq: int = Field(0, description="fixed per-sequence bytes: what the mamba / linear-attention "
                                                    "state takes from the pool per request (padded pages, every "
                                                    "state block incl. the speculative and align-mode ones)")
    state_content_bytes: int | None = Field(None, description="one state layer's state per sequence before padding "
                                                              "(conv + recurrent), per rank")
    state_page_padding_pct: float | None = Field(None, description="the state page padded to the attention page, "
                                                                   "as 'Padding mamba page size by X%' prints it")
    mamba_cache_mode: str | None = Field(None, description="align (prefix caching on) or none")
    bytes_per_block: int = Field(description="what one block id costs in the pool; num_blocks = available // this")
    blocks_per_request: int
    need_bytes: int = Field(description="what one request of max_model_len needs: the refusal's 'X GiB KV cache is "
                                        "needed'")
    groups: list[LayerGroup]
    available_bytes: int | None = Field(None, description="the KV memory the prediction was sized against")
    available_source: str | None = Field(None, description="where available_bytes came from, and how exact it is")
    num_blocks: int | None = None
    kv_tokens: int | None = Field(None, description="the 'KV cache size: N tokens' line")
    max_concurrency: float | None = Field(None, description="the 'Maximum concurrency ... Nx' line, unrounded")
    fits: bool | None = None
    estimated_max_model_len: int | None = Field(None, description="the refusal's estimate, when it does not fit")
    max_len_that_fits: int | None = Field(None, description="when it fits: the largest max_model_len whose one request "
                                                            "this pool serves, at most the model's own limit")
    model_max_model_len: int | None = Field(None, description="the model's own maximum length as vLLM derives it "
                                                              "(max-length keys × rope scaling); None: none named")
    model_max_model_len_source: str | None = Field(None, description="how it was derived, as the refusal names it")
    refused_by: Reason | None = Field(None, description="the cause vLLM refuses the configuration for before sizing "
                                                        "any KV: max_len_exceeds_model (above the model's length, "
                                                        "VLLM_ALLOW_LONG_MAX_MODEL_LEN unset), "
                                                        "config_invalid_batched_tokens, tp_not_divisible, "
                                                        "not_enough_gpus, dtype_unsupported_gpu")
    refused_why: str | None = Field(None, description="what about the configuration decides that refusal")
    refused_hint: str | None = Field(None, description="the catalogue's hint for it: what would boot")
    refused_numbers: dict[str, int | float | str] = Field({}, description="the numbers it states, as the log would")
    notes: list[str] = Field([], description="assumptions made (defaults, dtype resolution)")
    unmodelled: list[str] = Field([], description="what this configuration has that the predictor does not model: "
                                                  "its numbers are then a lower bound")


class FactCheck(_Record):
    """One logged number next to its prediction."""

    fact: Literal["kv_tokens", "max_concurrency", "need_gib", "available_gib", "estimated_max_model_len", "outcome",
                  "block_size", "mamba_padding_pct", "padding_layers", "max_len_refusal", "derived_max_model_len",
                  "config_refusal"]
    predicted: bool | float | int | str | None
    logged: bool | float | int | str | None
    rel_error: float | None = Field(None, description="(predicted - logged) / logged; 0 when equal")
    agrees: bool = Field(description="equal, or equal once rounded the way vLLM prints it")


class PredictionRecord(_Record):
    """A cell's prediction and how it held against the boot."""

    prediction: KvPrediction | None = None
    skipped: str | None = Field(None, description="why no prediction was made (no local config.json, an auto length)")
    checks: list[FactCheck] = []
    agrees: bool | None = Field(None, description="every check agrees; null without checks")
    hint: str | None = Field(None, description="which term a mismatch points at: per-token slope or fixed state")
