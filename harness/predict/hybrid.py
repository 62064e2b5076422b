"""Hybrid models: state layers next to attention, in one pool whose pages must all be the same size.

vLLM raises the attention block size until one attention page holds a state page, then pads the state page to exactly
that size (vllm/platforms/interface.py `_align_hybrid_block_size`: "Setting attention block size to N tokens", "Padding
mamba page size by X%"). With prefix caching (on by default for hybrid models) the state runs in "align" mode: two
blocks per request, plus one per draft token, plus mamba2's checkpoint block (vllm/v1/kv_cache_interface.py
`MambaSpec.max_memory_usage_bytes`; vllm/model_executor/models/config.py `MambaModelConfig`). docs/kv-model.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.predict.model import Layer, ModelShape
from harness.predict.pages import Page
from harness.predict.platforms import is_cpu
from harness.predict.serve_flags import ServeFlags, speculative_tokens
from harness.predict.versions import HybridRules, config_rules_for, hybrid_rules_for

#: smallest kernel block of the attention backend vLLM picks: FlashAttention MultipleOf(16) on GPUs, the CPU
#: backend MultipleOf(32)
GPU_KERNEL_BLOCK, CPU_KERNEL_BLOCK = 16, 32


@dataclass(frozen=True)
class StatePlan:
    block_size: int  #: the attention block size after alignment
    pages: list[Page]
    mode: str  #: "align", "none", or "all" (0.15-0.27 mamba families)
    content_bytes: int  #: one state layer's page before padding
    padding_pct: float | None  #: as vLLM logs it, two decimals; None when the pages were already equal


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def mamba_mode(flags: ServeFlags, rules: HybridRules, family: str, notes: list[str]) -> str:
    """The state's cache mode: "align" when prefix caching is on (by default for generative hybrids from 0.26),
    "all" where that release kept one state per block for mamba families, else "none"; vLLM overrides a
    --mamba-cache-mode that disagrees with prefix caching."""
    asked = flags.enable_prefix_caching
    if rules.prefix_caching == "off":
        if asked:
            notes.append("--enable-prefix-caching: this vLLM release turns it off for hybrid models")
        prefix = False
    else:
        prefix = asked is True or (asked is None and rules.prefix_caching == "on")
    if not prefix:
        mode = "none"
    elif rules.all_mode and family in ("mamba1", "mamba2"):
        mode = "all"
    else:
        mode = "align"
    if flags.mamba_cache_mode and flags.mamba_cache_mode != mode:
        notes.append(f"--mamba-cache-mode {flags.mamba_cache_mode}: vLLM sets {mode!r} since prefix caching is "
                     + ("on" if prefix else "off"))
    return mode


#: the architecture vLLM resolves for a config without `architectures` (transformers' mapping of its model_type)
_ARCH_OF_TYPE = {"nemotron_h": "NemotronHForCausalLM", "qwen3_5": "Qwen3_5ForConditionalGeneration",
                 "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration", "qwen3_5_text": "Qwen3_5ForCausalLM",
                 "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM"}


def architecture(shape: ModelShape) -> str | None:
    """`model_config.architecture`: the config's first architecture (what vLLM's per-architecture hooks key on)."""
    if shape.architectures:
        return shape.architectures[0]
    raw_type = (shape.raw or {}).get("model_type") or shape.model_type
    return _ARCH_OF_TYPE.get(str(raw_type))


def config_ssm_dtype(shape: ModelShape, version: str, notes: list[str]) -> str | None:
    """What the architecture's config hook (model_executor/models/config.py, `MODELS_CONFIG_MAP`) puts in for an auto
    `--mamba-ssm-cache-dtype`: Qwen3.5's text config `mamba_ssm_dtype` (0.16.1 dev builds on), NemotronH's
    `mamba_ssm_cache_dtype` or that release's default (0.13 on); None where no hook applies (auto then follows the
    conv state's dtype)."""
    rules, hrules = config_rules_for(version), hybrid_rules_for(version)
    arch, values = architecture(shape), shape.config_values
    if arch in rules.text_ssm_dtype_archs and values.text_mamba_ssm_dtype:
        notes.append(f"{arch}: the config's mamba_ssm_dtype {values.text_mamba_ssm_dtype} is the SSM state dtype "
                     "(vLLM reads it for an auto --mamba-ssm-cache-dtype from its first Qwen3.5 builds)")
        return values.text_mamba_ssm_dtype
    nemotron = arch in rules.nemotron_ssm_archs or arch in rules.nemotron_text_ssm_archs
    if nemotron and hrules.nemotron_ssm:
        own = (values.text_mamba_ssm_cache_dtype if arch in rules.nemotron_text_ssm_archs
               else values.top_mamba_ssm_cache_dtype)
        notes.append(f"{arch}: SSM state dtype {own or hrules.nemotron_ssm} "
                     + ("(the config's mamba_ssm_cache_dtype)" if own else "(this release's NemotronH default)"))
        return own or hrules.nemotron_ssm
    return None


def num_speculative_tokens(flags: ServeFlags) -> int:
    """`vllm_config.num_speculative_tokens`: each draft token keeps one more state block (and conv rows)."""
    return speculative_tokens(flags.speculative) if flags.speculative else 0


def plan_states(state_layers: list[Layer], attn_token_bytes: int | None, block: int, *, flags: ServeFlags,
                platform: str, model_dtype: str, uses_mla: bool, version: str, notes: list[str],
                unmodelled: list[str], config_ssm: str | None = None) -> StatePlan:
    """The state layers' pages and the attention block size they force. `attn_token_bytes` is one token of the
    model's attention layer on one rank (None for a model without attention: no alignment, no padding);
    `config_ssm` what the model's config makes an auto SSM dtype (`config_ssm_dtype`)."""
    spec = state_layers[0].state
    assert spec is not None
    rules = hybrid_rules_for(version)
    tp = flags.tensor_parallel_size
    n_spec = num_speculative_tokens(flags)
    ssm_flag = flags.mamba_ssm_cache_dtype or "auto"
    if ssm_flag == "auto" and config_ssm:
        ssm_flag = config_ssm  # the config hook runs before the platform's (vllm/config/vllm.py)
    resets = {"none": (), "amx": ("cpu-amx",), "bf16": ("cpu-bf16", "cpu-amx")}[rules.cpu_ssm_reset]
    if platform in resets and ssm_flag in ("auto", "float32"):
        # vllm/platforms/cpu.py l.300-316: a CPU with AVX-512 BF16 (0.26-0.28: with AMX) resets the SSM state to
        # float32 (its accelerated GDN kernels keep an explicit float16/bfloat16 only for GDN)
        notes.append("this CPU keeps the SSM state in float32 (\"Reset SSM cache type to float32\")")
        ssm_flag = "float32"
    dtypes = spec.dtypes(model_dtype, flags.mamba_cache_dtype or "auto", ssm_flag)
    conv_spec = n_spec if spec.family in rules.conv_spec else 0
    content = spec.page_bytes(tp, conv_spec, dtypes)
    mode = mamba_mode(flags, rules, spec.family, notes)
    page = content
    padding = None
    if attn_token_bytes:
        kernel = CPU_KERNEL_BLOCK if is_cpu(platform) else GPU_KERNEL_BLOCK
        align = max(kernel, block) if rules.align_with_block_size else kernel
        if uses_mla and platform == "gpu":
            align = max(align, rules.mla_align)
        needed = align * cdiv(content, align * attn_token_bytes)
        needed = kernel * cdiv(needed, kernel)
        if block < needed:
            notes.append(f"attention block size raised from {block} to {needed} tokens so one attention page "
                         f"({needed} × {attn_token_bytes} B) holds a state page ({content:,} B)")
            block = needed
        page = block * attn_token_bytes
        if page > content:
            padding = round(100 * (page - content) / content, 2)
            notes.append(f"state page padded by {padding:.2f}% to the attention page")
    checkpoint = spec.checkpoint_blocks if rules.checkpoint_blocks else 0
    if rules.checkpoint_blocks and spec.flashkda and platform == "gpu" and model_dtype == "bfloat16":
        checkpoint = 1
        notes.append("KDA with head_dim 128 and a bounded gate runs FlashKDA on SM90/SM10x/SM12x GPUs: one more state "
                     "block per request in align mode (its prefill checkpoint); older GPUs run Triton, without it")
    if rules.blocks == "one":
        blocks = 1  # one page per request; the draft tokens' blocks were allocated but not counted in the need
    elif mode == "align":
        blocks = 2 + n_spec + checkpoint
    else:
        blocks = 1 + n_spec if mode == "none" else n_spec
    if mode == "all":
        unmodelled.append("mamba cache mode 'all' (one state per block of the sequence): its alignment to the mamba "
                          "chunk size is approximated by the attention block")
    mamba_block = block if mode in ("align", "all") else (flags.max_model_len or 0)
    pages = [Page(layer, mamba_block, 0, 0, state_page=page, state_blocks=blocks, state_per_block=mode == "all")
             for layer in state_layers]
    per_request = f"{blocks} block{'s' if blocks != 1 else ''}" + (" + one per block of the sequence"
                                                                   if mode == "all" else "")
    notes.append(f"state ({spec.family}, mamba cache mode {mode!r}): {len(state_layers)} layers × {content:,} B per "
                 f"sequence ({', '.join(f'{r} {d}' for r, d in dtypes.items())}), {per_request} per request per "
                 "layer")
    return StatePlan(block, pages, mode, content, padding)
