"""A model's KV-relevant shape, read from its config.json the way vLLM reads it: per layer, what that layer caches.

Only what changes the KV cache is kept. Layers are described before tensor parallelism and before the KV dtype is
known (the flags decide those); `layers.py` turns them into vLLM's per-rank page sizes. What the reader recognises but
cannot model (a state layer's shape it does not know, an unknown layer type) goes into `unmodelled`, so a prediction
says it is incomplete instead of being silently wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.errors import UsageError
from harness.predict.kinds import LayerKind
from harness.predict.states import StateSpec, state_layer_kinds, state_spec

Origin = Literal["decoder", "mtp", "draft"]



@dataclass(frozen=True)
class Layer:
    """One layer's cache, before TP. `kv_heads` is the model's KV head count (MLA: 1 latent, never sharded)."""

    kind: LayerKind
    origin: Origin = "decoder"
    kv_heads: int = 0
    head_size: int = 0
    head_size_v: int = 0
    sliding_window: int | None = None
    #: a state layer's dimensions (mamba / GDN / KDA / linear attention), None for attention layers
    state: StateSpec | None = None


@dataclass(frozen=True)
class ModelShape:
    path: str
    model_type: str
    architectures: tuple[str, ...]
    #: the config's own dtype ("bfloat16", "float32"), or None when it names none (vLLM then assumes float32)
    config_dtype: str | None
    max_position_embeddings: int | None
    layers: tuple[Layer, ...]
    #: MTP layers the checkpoint carries (`num_nextn_predict_layers` / `mtp_num_hidden_layers`); they join the KV
    #: cache only when speculative decoding uses them (`"method": "mtp"`).
    mtp_layers: int = 0
    #: the layer an MTP module caches like (the last full-attention or MLA decoder layer's shape)
    mtp_layer: Layer | None = None
    uses_mla: bool = False
    unmodelled: tuple[str, ...] = field(default=())


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """vLLM reads a multimodal model's language part (`hf_text_config`): `text_config` when there is one."""
    text = config.get("text_config")
    if isinstance(text, dict) and text.get("num_hidden_layers"):
        return {**{k: v for k, v in config.items() if k != "text_config"}, **text}
    return config


def _int(cfg: dict[str, Any], *keys: str) -> int | None:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def load_config(path: str | Path) -> tuple[Path, dict[str, Any]]:
    p = Path(path)
    file = p / "config.json" if p.is_dir() else p
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise UsageError(f"{file}: no such file (give a model directory with config.json, or the file)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{file}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{file}: not JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{file}: not a JSON object")
    return file, data


def read_model(path: str | Path) -> ModelShape:
    """The model at `path` (a directory with config.json, or the file itself)."""
    file, raw = load_config(path)
    return shape_from_config(raw, str(file))


def shape_from_config(raw: dict[str, Any], where: str) -> ModelShape:
    """The model a parsed config.json describes; `where` names it in messages and in the prediction."""
    try:
        return _read(where, raw)
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise UsageError(f"{where}: a KV-relevant value is not what vLLM expects: {exc}") from None


def _read(where: str, raw: dict[str, Any]) -> ModelShape:
    cfg = _text_config(raw)
    pattern = cfg.get("hybrid_override_pattern") or cfg.get("layers_block_type")
    n_layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers") or (len(pattern) if pattern else None)
    heads = _int(cfg, "num_attention_heads", "n_head")
    if not n_layers or not heads:
        raise UsageError(f"{where}: num_hidden_layers and num_attention_heads: both are needed to size the KV cache")
    hidden = _int(cfg, "hidden_size", "n_embd", "d_model")
    kv_heads = _int(cfg, "num_key_value_heads", "multi_query_group_num", "num_kv_heads")
    if kv_heads is None:
        kv_heads = 1 if cfg.get("multi_query") else heads
    head = _int(cfg, "head_dim")
    if head is None:
        if not hidden:
            raise UsageError(f"{where}: head_dim or hidden_size: one is needed to size the KV cache")
        head = hidden // heads
    head_v = _int(cfg, "v_head_dim") if cfg.get("model_type") not in ("deepseek_v2", "deepseek_v3") else None

    unmodelled: list[str] = []
    uses_mla = cfg.get("kv_lora_rank") is not None and cfg.get("qk_rope_head_dim") is not None
    if uses_mla:
        # MLA caches one latent per token: kv_lora_rank + the decoupled rope dims, shared by all heads (vLLM's
        # MLAAttentionSpec: num_kv_heads 1, head_size kv_lora_rank + qk_rope_head_dim, no separate V).
        attn = Layer(LayerKind.mla, kv_heads=1, head_size=int(cfg["kv_lora_rank"]) + int(cfg["qk_rope_head_dim"]))
        if cfg.get("index_topk") is not None:
            # DSA (DeepSeek-V3.2, GLM-5): each MLA layer also caches the indexer's keys, pooled per index_kpool tokens,
            # and GLM-5-next a ring of the open pool; their specs differ from the latent's and group apart
            unmodelled.append("the DSA indexer's key cache and its pooling tail (index_topk): a few per cent of the "
                              "per-token bytes, not modelled")
    else:
        attn = Layer(LayerKind.full, kv_heads=kv_heads, head_size=head, head_size_v=head_v or head)

    kinds = _layer_kinds(cfg, n_layers, unmodelled)
    window = _int(cfg, "sliding_window")
    spec = state_spec(cfg) if LayerKind.state in kinds else None
    if LayerKind.state in kinds and spec is None:
        unmodelled.append(f"state layers of model type {cfg.get('model_type')!r}: their per-sequence state is not "
                          "modelled (mamba1, mamba2, GDN, KDA, short conv families are)")
    layers: list[Layer] = []
    for kind in kinds:
        if kind == LayerKind.sliding and window:
            layers.append(Layer(LayerKind.sliding, kv_heads=attn.kv_heads, head_size=attn.head_size,
                                head_size_v=attn.head_size_v, sliding_window=window))
        elif kind == LayerKind.state:
            if spec is not None:
                layers.append(Layer(LayerKind.state, state=spec))
        elif kind != LayerKind.none:
            layers.append(attn)

    mtp = _int(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers") or 0
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    return ModelShape(
        path=where, model_type=str(cfg.get("model_type") or ""),
        architectures=tuple(raw.get("architectures") or ()), config_dtype=str(dtype) if dtype else None,
        max_position_embeddings=_int(cfg, "max_position_embeddings", "n_positions", "max_sequence_length"),
        layers=tuple(layers), mtp_layers=mtp, mtp_layer=attn if mtp else None, uses_mla=uses_mla,
        unmodelled=tuple(unmodelled),
    )


_STATE_TYPES = {"linear_attention", "mamba", "mamba2", "conv", "gdn", "kda"}
#: layers with no cache at all (NemotronH's MLP and MoE blocks)
_NO_CACHE_TYPES = {"mlp", "moe"}
_SLIDING_TYPES = {"sliding_attention", "sliding_window", "local_attention", "chunked_attention"}


def _layer_kinds(cfg: dict[str, Any], n_layers: int, unmodelled: list[str]) -> list[LayerKind]:
    """Each decoder layer's cache type, from the config's own description where it has one (`layer_types`), else from
    the model family's rule as vLLM's model file applies it."""
    hybrid = state_layer_kinds(cfg, n_layers)
    if hybrid is not None:
        return hybrid
    types = cfg.get("layer_types") or cfg.get("layers_block_type")
    if isinstance(types, list) and len(types) >= n_layers:
        kinds = []
        for t in types[:n_layers]:
            t = str(t)
            if t in _SLIDING_TYPES:
                kinds.append(LayerKind.sliding)
            elif t in _STATE_TYPES:
                kinds.append(LayerKind.state)
            elif t in _NO_CACHE_TYPES:
                kinds.append(LayerKind.none)
            else:
                if t not in ("full_attention", "attention", "global", "full", "indexed_attention"):
                    unmodelled.append(f"layer type {t!r} is taken as full attention")
                kinds.append(LayerKind.full)
        return kinds
    model_type = cfg.get("model_type")
    window = cfg.get("sliding_window")
    if not window:
        return [LayerKind.full] * n_layers
    if model_type == "gemma2":
        # vLLM gemma2.py: layers with an even index use the sliding window
        return [LayerKind.sliding if i % 2 == 0 else LayerKind.full for i in range(n_layers)]
    if model_type in ("gemma3", "gemma3_text"):
        pattern = _int(cfg, "sliding_window_pattern") or 6
        return [LayerKind.full if (i + 1) % pattern == 0 else LayerKind.sliding for i in range(n_layers)]
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe") and not cfg.get("use_sliding_window"):
        return [LayerKind.full] * n_layers
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        first_full = _int(cfg, "max_window_layers") or n_layers
        return [LayerKind.full if i < first_full else LayerKind.sliding for i in range(n_layers)]
    return [LayerKind.sliding] * n_layers
