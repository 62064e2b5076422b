"""The prediction: vLLM's KV sizing for a model and its serve flags, number for number (docs/kv-model.md).

    need     = bytes_per_block × Σ_groups blocks_per_request          ("X GiB KV cache is needed")
    check    = available − bytes_per_block   (0.32: the BlockPool's null block is held back first)
    fits     = need ≤ check
    blocks   = available // bytes_per_block
    conc.    = blocks / Σ_groups blocks_per_request                    ("Maximum concurrency … Nx")
    tokens   = int(conc. × max_model_len)                              ("KV cache size: N tokens", ≥0.22)
    est. max = the largest L with need(L) ≤ check (binary search, as vLLM does)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from harness.errors import UsageError
from harness.predict.groups import Grouping, group_layers
from harness.predict.hybrid import config_ssm_dtype, plan_states
from harness.predict.kinds import LayerKind
from harness.predict.model import Layer, ModelShape, apply_hf_overrides, shape_from_config
from harness.predict.pages import Page, kv_element_bytes, model_dtype, page_for
from harness.predict.platforms import is_cpu, resolve
from harness.predict.prediction import KvPrediction, LayerGroup
from harness.predict.refusals import Machine, config_refusals
from harness.predict.serve_flags import ServeFlags, speculative_tokens
from harness.predict.versions import (
    DEFAULT_VERSION,
    ConfigRules,
    Rules,
    config_rules_for,
    hybrid_rules_for,
    outside_known,
    release_of,
    rules_for,
)
from harness.verdict.catalogue import Reason

#: vLLM's default attention block on GPU, the CPU backend's (docs/cpu-calibration.md) and the CPU MLA kernel's: the one
#: home of these sizes (analysis.kv and the frontier import them).
GPU_BLOCK, CPU_BLOCK, CPU_MLA_BLOCK = 16, 128, 16
#: the longest length "the largest that fits" searches when the model names no limit (as cli/values.MAX_TOKENS)
MAX_SEARCH_LEN = 1 << 40
#: the speculative methods whose draft is the checkpoint's own MTP layers
_NO_LAYERS = {"ngram", "ngram_gpu", "suffix", "medusa", "mlp_speculator"}


def is_mtp(method: str | None) -> bool:
    return method is not None and (method == "mtp" or method.endswith("_mtp"))


def draft_model_path(flags: ServeFlags) -> str | None:
    """The separate draft model's path of `--speculative-config`, when its layers join the KV cache."""
    spec = flags.speculative
    method = spec.get("method")
    if not spec or is_mtp(method) or method in _NO_LAYERS:
        return None
    model = spec.get("model")
    return str(model) if model else None


@dataclass(frozen=True)
class Sizing:
    """The group arithmetic, reusable for any max_model_len (the estimated maximum searches over it)."""

    grouping: Grouping
    in_flight_tokens: int
    extra_retained: int
    per_layer_need: bool = False

    def blocks_per_request(self, max_model_len: int) -> int:
        return sum(g.page.blocks_per_request(max_model_len, self.in_flight_tokens, self.extra_retained)
                   for g in self.grouping.groups)

    def need(self, max_model_len: int) -> int:
        if self.per_layer_need:  # ≤0.13: the sum over layers, padding layers not counted
            return sum(p.page_bytes * p.blocks_per_request(max_model_len, self.in_flight_tokens, self.extra_retained)
                       for g in self.grouping.groups for p in g.pages)
        return self.grouping.bytes_per_block * self.blocks_per_request(max_model_len)

    def estimated_max_model_len(self, check_bytes: int, upper: int) -> int:
        if self.need(1) > check_bytes:
            return 0
        lo, hi, best = 1, upper, 1
        while lo <= hi:
            mid = (lo + hi) // 2
            if self.need(mid) <= check_bytes:
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        return best


def _speculative_layers(shape: ModelShape, flags: ServeFlags, draft: ModelShape | None,
                        notes: list[str], unmodelled: list[str]) -> list[Layer]:
    spec = flags.speculative
    if not spec:
        return []
    method = spec.get("method")
    if is_mtp(method):
        if not shape.mtp_layers or shape.mtp_layer is None:
            unmodelled.append(f"speculative method {method!r}: the config names no MTP layers "
                              "(num_nextn_predict_layers / mtp_num_hidden_layers)")
            return []
        n = shape.mtp_layers
        layers = f"{n} layers of the decoder's shape join" if n > 1 else "1 layer of the decoder's shape joins"
        notes.append(f"MTP: {layers} the KV cache (num_speculative_tokens does not add layers)")
        return [replace(shape.mtp_layer, origin="mtp") for _ in range(n)]
    if draft_model_path(flags) is None:
        return []
    if draft is None:
        unmodelled.append(f"the draft model {spec.get('model')!r}: its config.json is not readable here")
        return []
    notes.append(f"draft model: its {len(draft.layers)} layers join the target's KV pool")
    return [replace(layer, origin="draft") for layer in draft.layers]


def _in_flight(flags: ServeFlags, cpu: bool, rules: Rules, notes: list[str], windowed: bool) -> int:
    tp = flags.tensor_parallel_size
    batched = flags.max_num_batched_tokens
    if batched is None:
        batched = 2048 * tp if cpu else 2048
        if windowed:
            notes.append(f"--max-num-batched-tokens not given: {batched} assumed (vLLM's default for the API server"
                         + ("" if cpu else "; 8192 on ≥70 GiB GPUs but A100, 16384 on ≥160 GiB")
                         + "); it sizes the sliding-window layers' in-flight tokens")
    if rules.window_in_flight == "batched":
        return batched
    # async scheduling keeps two batches in flight; vLLM turns it off on the CPU and for a separate draft model
    sync = cpu or flags.async_scheduling is False or draft_model_path(flags) is not None
    return batched * (1 if sync else 2)


def with_overrides(shape: ModelShape, flags: ServeFlags, crules: ConfigRules, notes: list[str]) -> ModelShape:
    """The model as vLLM sees it once `--hf-overrides` is applied to its config (when the flags carry it)."""
    overrides = flags.hf_overrides
    if not overrides or shape.raw is None:
        return shape
    notes.append(f"--hf-overrides {sorted(overrides)} applied to the config"
                 + ("" if crules.hf_overrides_nested else " (this release replaces a nested config it names)"))
    return shape_from_config(apply_hf_overrides(shape.raw, overrides, crules.hf_overrides_nested), shape.path)


@dataclass(frozen=True)
class ModelLimit:
    """The model's own maximum length as `_get_and_verify_max_len` derives it: the smallest max-length key of the
    text config (`model_max_length` winning), times the rope scaling factor; a `--max-model-len` above it is refused
    unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set (vllm/config/model.py)."""

    length: int
    #: how it was derived, in the refusal's words ("max_position_embeddings=32768 × rope factor 4")
    source: str
    #: the text config's `model_max_length`: a user length up to it is allowed even above `length`
    model_max_length: int | None = None


def model_limit(shape: ModelShape, crules: ConfigRules) -> ModelLimit | None:
    """The derived maximum length, scaled by rope as the release scales it (not su/longrope/llama3, nor from 0.30
    yarn; ≤0.29 yarn scales its original_max_position_embeddings; Gemma 3 is already scaled); None when the config
    names no max-length key (vLLM then takes the user's length as it is)."""
    values = shape.config_values
    derived = values.derived_max_len or shape.max_position_embeddings
    if not derived:
        return None
    raw = shape.raw or {}
    nested = raw.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else raw
    mml_key = text.get("model_max_length")
    source = (f"model_max_length={derived}" if isinstance(mml_key, int) and mml_key == derived
              else f"max_position_embeddings={derived}" if derived == shape.max_position_embeddings
              else f"the config's max length {derived}")
    factor = 1.0
    if values.rope and "gemma3" not in shape.model_type:
        for rope_type, f, original in values.rope:
            skip = ("su", "longrope", "llama3") + (() if crules.yarn_scales_original else
                                                    ("yarn", "deepseek_yarn", "deepseek_llama_scaling"))
            if rope_type in skip:
                continue
            try:
                factor = float(f) if f else factor
            except (TypeError, ValueError):
                raise UsageError(f"{shape.path}: rope_scaling.factor: {f!r} is not a number") from None
            if rope_type == "yarn" and crules.yarn_scales_original and original:
                derived = original
                source = f"original_max_position_embeddings={original}"
        if factor != 1.0:
            source += f" × rope factor {factor:g}"
    scaled = derived * factor
    if not math.isfinite(scaled):  # vLLM's own comparison against inf or nan lets every length through
        return None
    return ModelLimit(int(scaled), source,
                      mml_key if isinstance(mml_key, int) and not isinstance(mml_key, bool) and mml_key else None)


def default_max_model_len(shape: ModelShape, crules: ConfigRules, notes: list[str]) -> int | None:
    """`_get_and_verify_max_len` without --max-model-len: the model's derived limit (`model_limit`); LongRoPE
    defaults to its original_max_position_embeddings. The tokenizer's model_max_length can lower it."""
    limit = model_limit(shape, crules)
    if limit is None:
        return None
    if "rope factor" in limit.source:
        notes.append(f"default max_model_len: {limit.source}")
    if any(t == "longrope" for t, _, _ in shape.config_values.rope):
        original = (shape.raw or {}).get("original_max_position_embeddings")
        if isinstance(original, int):
            return original
    return limit.length


def allows_long_max_model_len(env: Mapping[str, str] | None) -> bool:
    """VLLM_ALLOW_LONG_MAX_MODEL_LEN as vllm/envs.py reads it ("1" or "true", any case, spaces stripped)."""
    return str((env or {}).get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0")).strip().lower() in ("1", "true")


def _length_refusal(asked: int | None, limit: ModelLimit | None, allow_long: bool,
                    notes: list[str]) -> Reason | None:
    """vLLM's check of a user-given length against the model's (before any KV sizing): max_len_exceeds_model when
    it refuses, None when it lets the length through (VLLM_ALLOW_LONG_MAX_MODEL_LEN only warns)."""
    if asked is None or asked == -1 or limit is None or asked <= limit.length:
        return None
    if limit.model_max_length is not None and asked <= limit.model_max_length:
        return None
    if allow_long:
        notes.append(f"--max-model-len {asked} exceeds the model's {limit.length} ({limit.source}): "
                     "VLLM_ALLOW_LONG_MAX_MODEL_LEN is set, so vLLM only warns")
        return None
    return Reason.max_len_exceeds_model


def _kv_flags(shape: ModelShape, flags: ServeFlags, crules: ConfigRules, notes: list[str]) -> tuple[str, str]:
    """(--kv-cache-dtype as the cache config holds it at start, what the non-MLA attention layers use): a ModelOpt
    checkpoint's KV algorithm resolves an auto flag for every layer (0.14 on); a compressed-tensors kv_cache_scheme
    makes each attention layer fp8 when it is built (0.15 on; from 0.22 only for an auto flag), MLA layers aside."""
    flag = (flags.kv_cache_dtype or "auto").lower()
    values = shape.config_values
    if flag == "auto" and values.modelopt_kv and values.modelopt_kv != "auto":
        if values.modelopt_kv in crules.modelopt_kv:
            flag = "fp8_e4m3" if values.modelopt_kv == "fp8" else "nvfp4"
            notes.append(f"--kv-cache-dtype auto: the ModelOpt checkpoint's KV algorithm makes it {flag}")
        else:
            notes.append(f"the ModelOpt checkpoint names a {values.modelopt_kv} KV cache this release does not map: "
                         "the model dtype is kept")
    attention = flag
    if values.compressed_tensors_kv and (crules.compressed_tensors_kv == "always" or
                                         (crules.compressed_tensors_kv == "auto" and flag == "auto")):
        attention = "fp8"
        notes.append("the compressed-tensors kv_cache_scheme makes the attention layers' KV cache fp8"
                     + (" (this release overrides --kv-cache-dtype with it)" if flag != "auto" else ""))
        if shape.uses_mla:
            notes.append("MLA layers do not take the compressed-tensors kv_cache_scheme: they keep "
                         f"--kv-cache-dtype {flag}")
    return flag, attention


def _windows_as_vllm_keeps_them(layers: list[Layer], flags: ServeFlags, crules: ConfigRules,
                                notes: list[str]) -> list[Layer]:
    """Windowed layers the release caches as full attention: chunked local attention where the hybrid KV cache
    manager is off for it (and under EAGLE, which turns it off), sliding windows next to full layers before 0.9.1."""
    eagle = str(flags.speculative.get("method") or "").startswith("eagle") if flags.speculative else False
    chunked = [layer for layer in layers if layer.attention_chunk]
    out = layers
    if chunked and (crules.chunked_local == "full" or eagle):
        notes.append(f"chunked local attention ({chunked[0].attention_chunk} tokens) is cached as full attention: "
                     + ("EAGLE turns the hybrid KV cache manager off" if eagle else "this release turns the hybrid "
                        "KV cache manager off for it (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0)"))
        out = [replace(layer, kind=LayerKind.full, attention_chunk=None) if layer.attention_chunk else layer
               for layer in out]
        if eagle:
            out = [replace(layer, kind=LayerKind.full, sliding_window=None) if layer.kind == LayerKind.sliding
                   else layer for layer in out]
    kinds = {layer.kind for layer in out}
    if crules.mixed_window_as_full and LayerKind.sliding in kinds and kinds & {LayerKind.full, LayerKind.mla}:
        notes.append("sliding-window layers next to full ones are cached as full attention (no hybrid KV cache "
                     "manager before 0.9.1)")
        out = [replace(layer, kind=LayerKind.full, sliding_window=None, attention_chunk=None)
               if layer.kind == LayerKind.sliding else layer for layer in out]
    return out


def predict(shape: ModelShape, flags: ServeFlags, *, version: str = DEFAULT_VERSION, platform: str = "gpu",
            available_bytes: int | None = None, available_source: str | None = None,
            draft: ModelShape | None = None, allow_long_max_model_len: bool = False,
            machine: Machine | None = None) -> KvPrediction:
    """The KV sizing of `shape` served with `flags` by vLLM `version` on `platform` (platforms.py: gpu, cpu,
    cpu-bf16, cpu-amx, cpu-local); `refused_by` when vLLM refuses the flags before it sizes anything.
    `allow_long_max_model_len`: the server's VLLM_ALLOW_LONG_MAX_MODEL_LEN (`allows_long_max_model_len(env)`).
    `machine`: the GPUs the server gets and their name, for the refusals they decide (refusals.py)."""
    platform = resolve(platform)
    cpu = is_cpu(platform)
    rules, crules = rules_for(version), config_rules_for(version)
    notes: list[str] = []
    shape = with_overrides(shape, flags, crules, notes)
    if flags.speculative:
        speculative_tokens(flags.speculative)  # a count vLLM would refuse is refused here, whether or not it sizes
    unmodelled = list(shape.unmodelled)
    if why := outside_known(version):
        unmodelled.append(f"vLLM {version}: {why}")
    limit = model_limit(shape, crules)
    refused_by = _length_refusal(flags.max_model_len, limit, allow_long_max_model_len, notes)
    mml = flags.max_model_len or default_max_model_len(shape, crules, notes)
    if not mml:
        raise UsageError("--max-model-len: not given, and the config names no max_position_embeddings")
    if flags.max_model_len is None:
        notes.append(f"--max-model-len not given: the model's {mml} is used (a tokenizer's model_max_length can "
                     "lower it)")
    refusals = config_refusals(shape.raw, flags, max_model_len=mml, machine=machine, version=release_of(version),
                               notes=notes)
    first = refusals[0] if refused_by is None and refusals else None
    if first is not None:
        refused_by = Reason(first.cause)
    notes += [f"refused ({r.cause}): {r.why}" for r in refusals if r is not first]
    dtype, dtype_notes = model_dtype(shape, flags.dtype)
    notes += dtype_notes
    start_flag, attn_flag = _kv_flags(shape, flags, crules, notes)
    kv_bytes = kv_element_bytes(start_flag, dtype)
    attn_bytes = kv_element_bytes(attn_flag, dtype)
    kv_dtype = dtype if attn_flag == "auto" else attn_flag
    # The CPU's reference MLA kernel only runs 16-token blocks and overrides the user's; the AMX kernel (x86 with
    # AMX tiles, "Using AMX_MLA backend.") does not (vllm/platforms/cpu.py l.235-293).
    reference_mla = cpu and platform != "cpu-amx" and shape.uses_mla
    if flags.block_size:
        block = flags.block_size
        if reference_mla and block != CPU_MLA_BLOCK:
            notes.append(f"--block-size {block}: the CPU MLA backend overrides it to {CPU_MLA_BLOCK}")
            block = CPU_MLA_BLOCK
    elif cpu:
        block = CPU_MLA_BLOCK if reference_mla else CPU_BLOCK
    else:
        block = GPU_BLOCK
    layers = [layer for layer in shape.layers if layer.kind != LayerKind.state]
    layers += _speculative_layers(shape, flags, draft, notes, unmodelled)
    layers = _windows_as_vllm_keeps_them(layers, flags, crules, notes)
    state_layers = [layer for layer in shape.layers if layer.kind == LayerKind.state]
    tp = flags.tensor_parallel_size
    state_pages: list[Page] = []
    states = None
    if state_layers:
        attention = (LayerKind.full, LayerKind.mla, LayerKind.sliding)
        attn = next((layer for layer in shape.layers if layer.kind in attention), None)
        # the alignment sizes the attention page with the cache dtype it sees: from 0.20 it runs after the model is
        # built, when a compressed-tensors scheme has already made it fp8; before, at config time
        late = hybrid_rules_for(version).align_with_block_size
        align_flag = attn_flag if late and attn is not None and attn.kind != LayerKind.mla else start_flag
        attn_token = page_for(attn, 1, tp, kv_element_bytes(align_flag, dtype), align_flag).token_bytes \
            if attn else None
        states = plan_states(state_layers, attn_token, block, flags=flags, platform=platform, model_dtype=dtype,
                             uses_mla=shape.uses_mla, version=version, notes=notes, unmodelled=unmodelled,
                             config_ssm=config_ssm_dtype(shape, version, notes))
        block, state_pages = states.block_size, states.pages
    pages: list[Page] = [page_for(layer, block, tp, kv_bytes, start_flag) if layer.kind == LayerKind.mla
                         else page_for(layer, block, tp, attn_bytes, attn_flag) for layer in layers]
    if not pages and not state_pages:
        raise UsageError(f"{shape.path}: no attention or state layer to size (this model keeps no KV cache)")
    pages += state_pages
    if any(p.layer.kind in (LayerKind.full, LayerKind.sliding) and tp > p.layer.kv_heads for p in pages):
        notes.append(f"tensor_parallel_size {tp} exceeds the KV heads: each rank keeps one head (replicated)")
    grouping = group_layers(pages)
    if grouping.approximate:
        unmodelled.append(grouping.approximate)
    windowed = any(p.layer.kind == LayerKind.sliding for p in pages)  # chunked local attention included
    extra = 0
    if is_mtp(flags.speculative.get("method")) and shape.mtp_layers > 1:
        extra = max(0, (speculative_tokens(flags.speculative) or 1) - 1)
    sizing = Sizing(grouping, _in_flight(flags, cpu, rules, notes, windowed) if windowed else 0, extra,
                    per_layer_need=rules.need_formula == "layers")
    need = sizing.need(mml)
    bpb = grouping.bytes_per_block
    if bpb < 1:  # every layer's page is empty: no block to count, and the sizing below divides by it
        raise UsageError(f"{shape.path}: its layers cache 0 bytes per block: nothing to size")
    per_request = sizing.blocks_per_request(mml)
    result = dict(
        vllm_version=version, model=shape.path, max_model_len=mml, tensor_parallel_size=tp, dtype=dtype,
        kv_cache_dtype=kv_dtype, block_size=block,
        bytes_per_token=sum(p.token_bytes for p in pages),
        state_bytes_per_seq=bpb * sum(g.page.state_blocks for g in grouping.groups
                                      if g.page.layer.kind == LayerKind.state and not g.page.state_per_block),
        bytes_per_block=bpb,
        state_content_bytes=states.content_bytes if states else None,
        state_page_padding_pct=states.padding_pct if states else None,
        mamba_cache_mode=states.mode if states else None,
        blocks_per_request=per_request, need_bytes=need,
        groups=[LayerGroup(kind=g.page.layer.kind, origins=sorted({p.layer.origin for p in g.pages}),
                           layers=len(g.pages), padding_layers=g.padding_layers, block_size=g.page.block_size,
                           page_bytes=max(p.page_bytes for p in g.pages), bytes_per_block=g.bytes_per_block,
                           blocks_per_request=g.page.blocks_per_request(mml, sizing.in_flight_tokens, extra),
                           sliding_window=g.page.layer.sliding_window) for g in grouping.groups],
        notes=notes, unmodelled=unmodelled,
        model_max_model_len=limit.length if limit else None, model_max_model_len_source=limit.source if limit else None,
        refused_by=refused_by, refused_why=first.why if first else None, refused_hint=first.hint if first else None,
        refused_numbers=dict(first.numbers) if first else {},
    )
    if available_bytes is not None:
        check = available_bytes - bpb if rules.null_block_in_check else available_bytes
        blocks = max(0, available_bytes // bpb)
        if rules.tokens_formula == "concurrency":
            conc = blocks / per_request
            tokens = int(conc * mml)
        else:
            tokens = blocks // len(grouping.groups) * min(g.page.block_size for g in grouping.groups)
            conc = blocks / per_request if rules.concurrency_formula == "blocks" else tokens / mml
        fits = available_bytes > 0 and need <= check
        result.update(available_bytes=available_bytes, available_source=available_source, num_blocks=blocks,
                      kv_tokens=tokens, max_concurrency=conc, fits=fits,
                      estimated_max_model_len=None if fits else sizing.estimated_max_model_len(check, mml))
        if fits:
            # the largest length this pool serves, as far as the model lets it be asked for
            cap = (max(limit.length, limit.model_max_length or 0) if limit and not allow_long_max_model_len
                   else max(MAX_SEARCH_LEN, mml))
            result["max_len_that_fits"] = sizing.estimated_max_model_len(check, cap)
    return KvPrediction(**result)

