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

from dataclasses import dataclass

from harness.predict.kinds import LayerKind
from harness.errors import UsageError
from harness.predict.groups import Grouping, group_layers
from harness.predict.hybrid import plan_states
from harness.predict.model import Layer, ModelShape
from harness.predict.pages import Page, kv_element_bytes, model_dtype, page_for
from harness.predict.platforms import is_cpu, resolve
from harness.predict.prediction import KvPrediction, LayerGroup
from harness.predict.serve_flags import ServeFlags
from harness.predict.versions import DEFAULT_VERSION, Rules, rules_for

GPU_BLOCK, CPU_BLOCK, CPU_MLA_BLOCK = 16, 128, 16
#: the speculative methods whose draft is the checkpoint's own MTP layers
_NO_LAYERS = {"ngram", "ngram_gpu", "suffix", "medusa", "mlp_speculator"}


def is_mtp(method: str | None) -> bool:
    return bool(method) and (method == "mtp" or method.endswith("_mtp"))


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
        return [Layer(shape.mtp_layer.kind, "mtp", shape.mtp_layer.kv_heads, shape.mtp_layer.head_size,
                      shape.mtp_layer.head_size_v) for _ in range(n)]
    if draft_model_path(flags) is None:
        return []
    if draft is None:
        unmodelled.append(f"the draft model {spec.get('model')!r}: its config.json is not readable here")
        return []
    notes.append(f"draft model: its {len(draft.layers)} layers join the target's KV pool")
    return [Layer(layer.kind, "draft", layer.kv_heads, layer.head_size, layer.head_size_v, layer.sliding_window,
                  layer.state) for layer in draft.layers]


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


def predict(shape: ModelShape, flags: ServeFlags, *, version: str = DEFAULT_VERSION, platform: str = "gpu",
            available_bytes: int | None = None, available_source: str | None = None,
            draft: ModelShape | None = None) -> KvPrediction:
    """The KV sizing of `shape` served with `flags` by vLLM `version` on `platform` (platforms.py: gpu, cpu,
    cpu-bf16, cpu-amx, cpu-local)."""
    platform = resolve(platform)
    cpu = is_cpu(platform)
    rules = rules_for(version)
    notes: list[str] = []
    unmodelled = list(shape.unmodelled)
    mml = flags.max_model_len or shape.max_position_embeddings
    if not mml:
        raise UsageError("--max-model-len: not given, and the config names no max_position_embeddings")
    if flags.max_model_len is None:
        notes.append(f"--max-model-len not given: the model's {mml} is used")
    dtype, dtype_notes = model_dtype(shape, flags.dtype)
    notes += dtype_notes
    kv_bytes = kv_element_bytes(flags.kv_cache_dtype, dtype)
    kv_dtype = dtype if (flags.kv_cache_dtype or "auto") == "auto" else flags.kv_cache_dtype
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
    state_layers = [layer for layer in shape.layers if layer.kind == LayerKind.state]
    tp = flags.tensor_parallel_size
    state_pages: list[Page] = []
    states = None
    if state_layers:
        attn = next((layer for layer in shape.layers if layer.kind in (LayerKind.full, LayerKind.mla, LayerKind.sliding)), None)
        attn_token = page_for(attn, 1, tp, kv_bytes, flags.kv_cache_dtype).token_bytes if attn else None
        states = plan_states(state_layers, attn_token, block, flags=flags, platform=platform, model_dtype=dtype,
                             uses_mla=shape.uses_mla, version=version, notes=notes, unmodelled=unmodelled)
        block, state_pages = states.block_size, states.pages
    pages: list[Page] = [page_for(layer, block, tp, kv_bytes, flags.kv_cache_dtype) for layer in layers]
    if not pages and not state_pages:
        raise UsageError(f"{shape.path}: no attention or state layer to size (this model keeps no KV cache)")
    pages += state_pages
    if any(p.layer.kind in (LayerKind.full, LayerKind.sliding) and tp > p.layer.kv_heads for p in pages):
        notes.append(f"tensor_parallel_size {tp} exceeds the KV heads: each rank keeps one head (replicated)")
    grouping = group_layers(pages)
    if grouping.approximate:
        unmodelled.append(grouping.approximate)
    windowed = any(p.layer.kind == LayerKind.sliding for p in pages)
    extra = 0
    if is_mtp(flags.speculative.get("method")) and shape.mtp_layers > 1:
        extra = max(0, int(flags.speculative.get("num_speculative_tokens") or 1) - 1)
    sizing = Sizing(grouping, _in_flight(flags, cpu, rules, notes, windowed) if windowed else 0, extra,
                    per_layer_need=rules.need_formula == "layers")
    need = sizing.need(mml)
    bpb = grouping.bytes_per_block
    per_request = sizing.blocks_per_request(mml)
    result = dict(
        vllm_version=version, model=shape.path, max_model_len=mml, tensor_parallel_size=tp, dtype=dtype,
        kv_cache_dtype=kv_dtype, block_size=block,
        bytes_per_token=sum(p.token_bytes for p in pages),
        state_bytes_per_seq=bpb * sum(g.page.state_blocks for g in grouping.groups if g.page.layer.kind == LayerKind.state
                                      and not g.page.state_per_block),
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
    return KvPrediction(**result)

