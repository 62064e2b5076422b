"""A model's KV-relevant shape, read from its config.json the way vLLM reads it: per layer, what that layer caches.

Only what changes the KV cache is kept. Layers are described before tensor parallelism and before the KV dtype is
known (the flags decide those); `layers.py` turns them into vLLM's per-rank page sizes. What the reader recognises but
cannot model (a state layer's shape it does not know, an unknown layer type) goes into `unmodelled`, so a prediction
says it is incomplete instead of being silently wrong.
"""

from __future__ import annotations

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
    #: Llama 4's chunked local attention (`attention_chunk_size`): kept as a bounded window (kind sliding) where the
    #: hybrid KV cache manager runs, as full attention where that release turns it off (versions.ConfigRules)
    attention_chunk: int | None = None


@dataclass(frozen=True)
class ConfigValues:
    """Cache-relevant values vLLM reads from the config itself rather than from the flags; which of them a release
    honours is `versions.ConfigRules` (docs/kv-model.md "Values vLLM takes from the model's config")."""

    #: `mamba_ssm_dtype` of the text config (Qwen3.5 / 3.6 set float32 there; vLLM reads `hf_text_config`)
    text_mamba_ssm_dtype: str | None = None
    #: NemotronH's `mamba_ssm_cache_dtype`, of the top-level config and of its `text_config` (the VL wrapper)
    top_mamba_ssm_cache_dtype: str | None = None
    text_mamba_ssm_cache_dtype: str | None = None
    #: what a ModelOpt checkpoint's KV algorithm names (`fp8`, `nvfp4`, or `auto` for one vLLM does not map)
    modelopt_kv: str | None = None
    #: a compressed-tensors `kv_cache_scheme` is present (its KV cache is fp8)
    compressed_tensors_kv: bool = False
    quant_method: str | None = None
    #: the smallest of the max-length keys (`_get_and_verify_max_len`), `model_max_length` winning when set
    derived_max_len: int | None = None
    #: the rope scaling as (rope_type, factor, original_max_position_embeddings), for the default max_model_len
    rope: tuple[tuple[str, float | None, int | None], ...] = ()


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
    config_values: ConfigValues = field(default_factory=ConfigValues)
    #: the parsed config.json, kept so `--hf-overrides` can be applied per release (predictor.py)
    raw: dict[str, Any] | None = field(default=None, compare=False, repr=False)


#: transformers' config-class defaults for KV-relevant keys a checkpoint's text config leaves out: vLLM's
#: `hf_text_config` is the class instance, so it sees them. Gemma 3's text config (transformers
#: configuration_gemma3.py Gemma3TextConfig, unchanged since 4.50) — gemma-3-4b-it / 12b-it name neither their heads
#: nor head_dim, 27b-it no max_position_embeddings. Keyed by the model_type whose text config it is (a multimodal
#: wrapper's) or that is it (a text-only checkpoint's).
_GEMMA3_TEXT = {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131072,
                "sliding_window": 4096, "sliding_window_pattern": 6}
_TEXT_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {"gemma3": _GEMMA3_TEXT, "gemma3_text": _GEMMA3_TEXT}


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """vLLM reads a multimodal model's language part (`hf_text_config`): `text_config` when there is one, with its
    config class's defaults for what it leaves out."""
    text = config.get("text_config")
    if isinstance(text, dict) and any(text.get(k) for k in ("num_hidden_layers", "hybrid_override_pattern",
                                                            "layers_block_type")):
        defaults = _TEXT_CLASS_DEFAULTS.get(str(config.get("model_type")), {})
        return {**{k: v for k, v in config.items() if k != "text_config"}, **defaults, **text}
    if config.get("model_type") == "gemma3_text":
        return {**_TEXT_CLASS_DEFAULTS["gemma3_text"], **config}
    return config


def _int(cfg: dict[str, Any], *keys: str) -> int | None:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


#: sub-configs `--hf-overrides` merges into from 0.11.1 (transformers PretrainedConfig attributes, not plain dicts)
_SUB_CONFIGS = {"text_config", "vision_config", "audio_config", "llm_config", "language_config", "thinker_config",
                "talker_config", "encoder_config", "decoder_config"}


def apply_hf_overrides(raw: dict[str, Any], overrides: dict[str, Any], nested: bool) -> dict[str, Any]:
    """The config vLLM builds from config.json and `--hf-overrides`: flat keys set on the top-level config (so a
    multimodal model's text config does not see them); a dict for a sub-config merged into it from 0.11.1
    (`ModelConfig._apply_dict_overrides`), replacing it before (`config.update`); any other dict replaces the key."""
    out = dict(raw)
    for key, value in overrides.items():
        if nested and isinstance(value, dict) and key in _SUB_CONFIGS and isinstance(out.get(key), dict):
            out[key] = apply_hf_overrides(out[key], value, nested)
        else:
            out[key] = value
    return out


def _quant_config(raw: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint's quantization config where vLLM looks for it (`quantization_config`, the text config's,
    compressed-tensors' `compression_config`); ModelOpt's legacy hf_quant_config.json is merged in by `read_model`."""
    text = raw.get("text_config")
    for cfg in (raw, text if isinstance(text, dict) else {}):
        q = cfg.get("quantization_config")
        if isinstance(q, dict):
            return q
    q = raw.get("compression_config")
    return q if isinstance(q, dict) else None


def _modelopt_kv(q: dict[str, Any]) -> str | None:
    """`get_kv_cache_quant_algo_string`: the KV algorithm a ModelOpt config names; "auto" for a form vLLM does not
    map (it then warns and keeps the model dtype)."""
    nested = q.get("quantization")
    inner: dict[str, Any] = nested if isinstance(nested, dict) else q
    algo = (inner.get("kv_cache_scheme") or q.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo")
            or q.get("kv_cache_quant_algo"))
    if isinstance(algo, dict):
        if algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float":
            return "fp8"
        if algo.get("num_bits") == 4 and algo.get("type") == "float":
            return "nvfp4"
        return "auto"
    if isinstance(algo, str):
        return algo.lower() if algo.lower() in ("fp8", "nvfp4") else "auto"
    return None


_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")


def _config_values(raw: dict[str, Any], cfg: dict[str, Any]) -> ConfigValues:
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else None
    hf_text = text if text is not None else raw
    q = _quant_config(raw)
    method = str(q.get("quant_method") or "").lower().replace("compressed_tensors", "compressed-tensors") if q else ""
    producer = (q.get("producer") or {}).get("name") if q and isinstance(q.get("producer"), dict) else None
    modelopt = method.startswith("modelopt") or producer == "modelopt"
    lens = [v for k in _MAX_LEN_KEYS if isinstance(v := hf_text.get(k), (int, float)) and not isinstance(v, bool)]
    derived = min(lens) if lens else None
    if isinstance(hf_text.get("model_max_length"), int) and hf_text["model_max_length"]:
        derived = hf_text["model_max_length"]
    rope_cfg = raw.get("rope_scaling") or raw.get("rope_parameters")
    if text is not None and not rope_cfg:
        rope_cfg = text.get("rope_scaling") or text.get("rope_parameters")
    ropes = []
    for rp in (rope_cfg.values() if isinstance(rope_cfg, dict) and all(isinstance(v, dict) for v in rope_cfg.values())
               and rope_cfg else [rope_cfg]):
        if isinstance(rp, dict) and (rp.get("rope_type") or rp.get("type")):
            ropes.append((str(rp.get("rope_type") or rp.get("type")), rp.get("factor"),
                          rp.get("original_max_position_embeddings")))

    def s(v):
        return str(v) if v else None
    return ConfigValues(
        text_mamba_ssm_dtype=s(hf_text.get("mamba_ssm_dtype")),
        top_mamba_ssm_cache_dtype=s(raw.get("mamba_ssm_cache_dtype")),
        text_mamba_ssm_cache_dtype=s(text.get("mamba_ssm_cache_dtype")) if text is not None else None,
        modelopt_kv=_modelopt_kv(q) if q and modelopt else None,
        compressed_tensors_kv=bool(q and method == "compressed-tensors" and q.get("kv_cache_scheme")),
        quant_method=method or ("modelopt" if modelopt else None),
        derived_max_len=int(derived) if derived else None, rope=tuple(ropes),
    )


def load_config(path: str | Path) -> tuple[Path, dict[str, Any]]:
    p = Path(path)
    file = p / "config.json" if p.is_dir() else p
    from harness.files import read_json  # the one reader: regular, bounded, each refusal names the file

    if not (file.exists() or file.is_symlink()):
        raise UsageError(f"{file}: no such file (give a model directory with config.json, or the file)")
    data = read_json(file, strict=False)
    legacy = file.parent / "hf_quant_config.json"
    if isinstance(data, dict) and "quantization_config" not in data and legacy.is_file():
        # ModelOpt ≤0.29 writes its quantization config beside config.json; vLLM merges it in
        # (transformers_utils/config.py get_config)
        data["quantization_config"] = read_json(legacy, strict=False)
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


_LENGTH_KEYS = ("sliding_window", "attention_chunk_size", *_MAX_LEN_KEYS)
#: the config.json integers the KV sizing multiplies or iterates over, and the most any real model has by far:
#: a value above is refused in one line naming the file and the key, never sized (a 10**9-layer list eats the
#: machine's memory); counts the sizing divides by must be 1 or more
_SIZE_LIMITS = {**dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "num_nextn_predict_layers",
                                 "mtp_num_hidden_layers"), 1 << 14),
                **dict.fromkeys(("num_attention_heads", "n_head", "num_key_value_heads", "num_kv_heads", "n_head_kv",
                                 "multi_query_group_num", "num_attention_groups"), 1 << 16),
                **dict.fromkeys(("head_dim", "v_head_dim", "hidden_size_per_head", "kv_lora_rank", "qk_rope_head_dim"),
                                1 << 20),
                **dict.fromkeys(("hidden_size", "n_embd", "d_model"), 1 << 24),
                **dict.fromkeys(_LENGTH_KEYS, 1 << 40)}
_DIVISORS = {"num_attention_heads", "n_head", "num_key_value_heads", "num_kv_heads", "n_head_kv",
             "multi_query_group_num", "num_attention_groups"}


def _check_sizes(where: str, raw: dict[str, Any]) -> None:
    text = raw.get("text_config")
    for prefix, cfg in (("", raw), ("text_config.", text if isinstance(text, dict) else {})):
        for key, limit in _SIZE_LIMITS.items():
            v = cfg.get(key)
            if not isinstance(v, int) or isinstance(v, bool):
                continue
            if v > limit:
                raise UsageError(f"{where}:{prefix}{key}: {v}: beyond any model (at most {limit:,}); not sized")
            if key in _LENGTH_KEYS:
                continue  # some configs write -1 or 0 for "none" here; the readers below take those as unset
            if v < 0 or (v == 0 and key in _DIVISORS):
                raise UsageError(f"{where}:{prefix}{key}: {v}: must be {'1' if key in _DIVISORS else '0'} or more")


def _read(where: str, raw: dict[str, Any]) -> ModelShape:
    _check_sizes(where, raw)
    cfg = _text_config(raw)
    pattern = cfg.get("hybrid_override_pattern") or cfg.get("layers_block_type")
    n_layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers") or (len(pattern) if pattern else None)
    heads = _int(cfg, "num_attention_heads", "n_head")
    if not n_layers or not heads:
        raise UsageError(f"{where}: num_hidden_layers and num_attention_heads: both are needed to size the KV cache")
    hidden = _int(cfg, "hidden_size", "n_embd", "d_model")
    kv_heads = _kv_heads(cfg, heads)
    head = _int(cfg, "head_dim")
    if not head or head <= 0:  # some configs write head_dim null, or 0
        head = _int(cfg, "hidden_size_per_head")
    if not head:
        if not hidden:
            raise UsageError(f"{where}: head_dim or hidden_size: one is needed to size the KV cache")
        head = hidden // heads
        if head < 1:
            raise UsageError(f"{where}:hidden_size: {hidden} over {heads} attention heads is a head of 0 dims; give "
                             "head_dim")
    head_v = _int(cfg, "v_head_dim") if cfg.get("model_type") not in ("deepseek_v2", "deepseek_v3") else None

    unmodelled: list[str] = []
    uses_mla = cfg.get("kv_lora_rank") is not None and cfg.get("qk_rope_head_dim") is not None
    if uses_mla:
        # MLA caches one latent per token: kv_lora_rank + the decoupled rope dims, shared by all heads (vLLM's
        # MLAAttentionSpec: num_kv_heads 1, head_size kv_lora_rank + qk_rope_head_dim, no separate V).
        rank = int(cfg["kv_lora_rank"])
        if rank < 1:  # the latent is the cache: of no dims, a token costs 0 bytes and nothing can be sized
            raise UsageError(f"{where}:kv_lora_rank: {rank}: an MLA model caches a latent of kv_lora_rank dims per "
                             "token; must be 1 or more")
        attn = Layer(LayerKind.mla, kv_heads=1, head_size=rank + int(cfg["qk_rope_head_dim"]))
        if cfg.get("index_topk") is not None:
            # DSA (DeepSeek-V3.2, GLM-5): each MLA layer also caches the indexer's keys, pooled per index_kpool tokens,
            # and GLM-5-next a ring of the open pool; their specs differ from the latent's and group apart
            unmodelled.append("the DSA indexer's key cache and its pooling tail (index_topk): a few per cent of the "
                              "per-token bytes, not modelled")
    else:
        attn = Layer(LayerKind.full, kv_heads=kv_heads, head_size=head, head_size_v=head_v or head)

    kinds = _layer_kinds(cfg, n_layers, unmodelled)
    window = _int(cfg, "sliding_window")
    spec = state_spec(cfg) if LayerKind.state in kinds or cfg.get("model_type") == "falcon_h1" else None
    if LayerKind.state in kinds and spec is None:
        unmodelled.append(f"state layers of model type {cfg.get('model_type')!r}: their per-sequence state is not "
                          "modelled (mamba1, mamba2, GDN, KDA, short conv families are)")
    chunk = _int(cfg, "attention_chunk_size")
    layers: list[Layer] = []
    for i, kind in enumerate(kinds):
        if kind == LayerKind.sliding and window:
            layers.append(Layer(LayerKind.sliding, kv_heads=attn.kv_heads, head_size=attn.head_size,
                                head_size_v=attn.head_size_v, sliding_window=window))
        elif kind == LayerKind.state:
            if spec is not None:
                layers.append(Layer(LayerKind.state, state=spec))
        elif kind != LayerKind.none:
            if chunk and not uses_mla and _chunked_layer(cfg, i):
                layers.append(Layer(LayerKind.sliding, kv_heads=attn.kv_heads, head_size=attn.head_size,
                                    head_size_v=attn.head_size_v, attention_chunk=chunk))
            else:
                layers.append(attn)
    if cfg.get("model_type") == "falcon_h1" and spec is not None:
        # every Falcon-H1 decoder layer runs attention and a mamba2 mixer side by side: one page of each
        layers += [Layer(LayerKind.state, state=spec)] * n_layers

    mtp = _int(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers") or 0
    # vLLM takes the top-level dtype first, a multimodal model's text config's only when that names none
    dtype = raw.get("torch_dtype") or raw.get("dtype") or cfg.get("torch_dtype") or cfg.get("dtype")
    return ModelShape(
        path=where, model_type=str(cfg.get("model_type") or ""),
        architectures=tuple(raw.get("architectures") or ()), config_dtype=str(dtype) if dtype else None,
        max_position_embeddings=_int(cfg, "max_position_embeddings", "n_positions", "max_sequence_length"),
        layers=tuple(layers), mtp_layers=mtp, mtp_layer=attn if mtp else None, uses_mla=uses_mla,
        unmodelled=tuple(unmodelled), config_values=_config_values(raw, cfg), raw=raw,
    )


def _kv_heads(cfg: dict[str, Any], heads: int) -> int:
    """`get_total_num_kv_heads`: Falcon / GPTBigCode's multi-query flag (unless Falcon's new decoder architecture),
    MPT / DBRX's attn_config, then the first of n_head_kv, num_kv_heads, num_key_value_heads, multi_query_group_num,
    num_attention_groups; the attention heads when none is set."""
    new_falcon = cfg.get("model_type") in ("falcon", "RefinedWeb", "RefinedWebModel") and \
        cfg.get("new_decoder_architecture")
    if cfg.get("multi_query") and not new_falcon:
        return 1
    attn_config = cfg.get("attn_config")
    if cfg.get("model_type") in ("mpt", "dbrx") and isinstance(attn_config, dict):
        return int(attn_config.get("kv_n_heads") or heads)
    n = _int(cfg, "n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")
    return heads if n is None else n


def _chunked_layer(cfg: dict[str, Any], i: int) -> bool:
    """Llama 4: a layer with RoPE attends locally in chunks; a NoPE layer (`no_rope_layers[i] == 0`, every 4th by
    transformers' default) attends globally (vLLM llama4.py `use_chunked_local_attn`)."""
    nope = cfg.get("no_rope_layers")
    if isinstance(nope, list) and len(nope) > i:
        return nope[i] != 0
    interval = _int(cfg, "no_rope_layer_interval") or 4
    return (i + 1) % interval != 0


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
