"""Per-rank KV pages: what one block of one layer costs on one GPU rank, as vLLM's KV cache specs compute it
(vllm/v1/kv_cache_interface.py: `AttentionSpec.page_size_bytes`, `FullAttentionSpec`, `MLAAttentionSpec`,
`SlidingWindowSpec.max_admission_blocks_per_request`; docs/kv-model.md)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import UsageError
from harness.predict.dtypes import DTYPE_BYTES, config_compute_dtype
from harness.predict.kinds import LayerKind
from harness.predict.model import Layer, ModelShape

#: --kv-cache-dtype values that store one byte per element (the fp8 family and int8 without per-head scales)
_ONE_BYTE = {"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "int8"}
#: fp8_ds_mla (DeepSeek-V3.2): 656 bytes per token per MLA layer (512 fp8 latent + 4 fp32 scales + 64 bf16 rope)
DS_MLA_TOKEN_BYTES = 656


def model_dtype(shape: ModelShape, dtype_flag: str) -> tuple[str, list[str]]:
    """The dtype the server runs the model in: `--dtype`, or for `auto` the config's dtype as vLLM resolves it
    (dtypes.config_compute_dtype: float32 and the dtypes it does not compute in, FP8 / int8, become bfloat16)."""
    notes: list[str] = []
    d = (dtype_flag or "auto").lower()
    if d != "auto":
        if d not in DTYPE_BYTES:
            raise UsageError(f"--dtype {dtype_flag!r}: not one of auto, {', '.join(sorted(DTYPE_BYTES))}")
        return d, notes
    dtype, note = config_compute_dtype(shape.config_dtype)
    if note:
        notes.append(note)
    return dtype, notes


def kv_element_bytes(kv_dtype_flag: str, dtype: str) -> int:
    k = (kv_dtype_flag or "auto").lower()
    if k == "auto":
        return DTYPE_BYTES[dtype]
    if k in DTYPE_BYTES:
        return DTYPE_BYTES[k]
    if k in _ONE_BYTE or k == "fp8_ds_mla" or k == "nvfp4":
        return 1  # nvfp4 packs below (`nvfp4_bytes`), in uint8 elements
    raise UsageError(f"--kv-cache-dtype {kv_dtype_flag!r}: not modelled (auto, bfloat16, float16, float32, fp8, "
                     "fp8_e4m3, fp8_e5m2, fp8_inc, int8, fp8_ds_mla, nvfp4 are)")


def nvfp4_bytes(head_size: int) -> int:
    """One head's K (or V) of one token in NVFP4: fp4 pairs plus an fp8 scale per 16 values
    (utils/torch_utils.py `nvfp4_kv_cache_full_dim`)."""
    return head_size // 2 + head_size // 16


@dataclass(frozen=True)
class Page:
    """One layer's cache on one rank, in vLLM's terms: its kind, block size and the bytes of one block."""

    layer: Layer
    block_size: int
    heads_per_rank: int
    token_bytes: int
    #: a state layer's page: one request's whole state, padded to the attention page (MambaSpec.page_size_padded)
    state_page: int | None = None
    #: a state layer's blocks per request: 1 + draft tokens ("none" mode), 2 + draft tokens + checkpoint ("align")
    state_blocks: int = 0
    #: "all" mode (0.15-0.27, mamba families with prefix caching): one state per block of the sequence besides
    state_per_block: bool = False

    @property
    def page_bytes(self) -> int:
        return self.state_page if self.state_page is not None else self.block_size * self.token_bytes

    @property
    def key(self) -> tuple:
        """What makes two layers' specs equal in vLLM (same type, shape, window): layers with one key share buckets."""
        return (self.layer.kind, self.block_size, self.page_bytes, self.layer.sliding_window,
                self.layer.attention_chunk)

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int, extra_retained: int = 0) -> int:
        """`cdiv(max_memory_usage_bytes, page_size_bytes)` for this layer."""
        if self.state_page is not None:
            return self.state_blocks + (-(-max_model_len // self.block_size) if self.state_per_block else 0)
        if self.layer.kind == LayerKind.sliding and self.layer.attention_chunk:
            # ChunkedLocalAttentionSpec: one chunk plus the in-flight tokens, no window edge block
            return -(-min(self.layer.attention_chunk + in_flight_tokens, max_model_len) // self.block_size)
        if self.layer.kind == LayerKind.sliding and self.layer.sliding_window:
            tokens = min(self.layer.sliding_window - 1 + extra_retained + in_flight_tokens, max_model_len)
            return -(-tokens // self.block_size) + 1
        return -(-max_model_len // self.block_size)


def page_for(layer: Layer, block_size: int, tp: int, kv_bytes: int, kv_dtype_flag: str) -> Page:
    if layer.kind == LayerKind.mla:
        # MLA's latent is replicated on every rank, not split by TP (get_num_kv_heads returns 1 under MLA)
        per_token = DS_MLA_TOKEN_BYTES if (kv_dtype_flag or "").lower() == "fp8_ds_mla" else layer.head_size * kv_bytes
        return Page(layer, block_size, 1, per_token)
    heads = max(1, layer.kv_heads // tp)  # replicated once TP exceeds the KV heads
    if (kv_dtype_flag or "").lower().startswith("nvfp4"):
        return Page(layer, block_size, heads, heads * (nvfp4_bytes(layer.head_size) + nvfp4_bytes(layer.head_size_v)))
    return Page(layer, block_size, heads, heads * (layer.head_size + layer.head_size_v) * kv_bytes)
