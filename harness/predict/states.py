"""Per-sequence state layers (mamba1, mamba2, GDN, KDA, linear attention, short conv): what one of them keeps per
request, per rank, as vLLM's `MambaStateShapeCalculator` and `MambaStateDtypeCalculator` size it
(vllm/model_executor/layers/mamba/mamba_utils.py; docs/kv-model.md "State layers").

A state layer's page is one request's whole state, whatever the sequence length: conv state plus recurrent (SSM)
state. Under speculative decoding the conv state of GDN, KDA, mamba2 and short conv widens by the draft tokens, and the
pool holds one more block per draft token (`MambaSpec.num_speculative_blocks`).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any, Literal

from harness.errors import UsageError
from harness.predict.dtypes import DTYPE_BYTES
from harness.predict.kinds import LayerKind

Family = Literal["mamba1", "mamba2", "gdn", "kda", "linear", "short_conv"]
#: which cache dtype each tensor follows: `conv` = --mamba-cache-dtype (auto: the model's), `ssm` =
#: --mamba-ssm-cache-dtype (auto: the conv dtype; KDA: float32)
Role = Literal["conv", "ssm"]


@dataclass(frozen=True)
class StateSpec:
    """A state layer's dimensions before TP, and the family rule that turns them into tensors."""

    family: Family
    dims: tuple[tuple[str, int], ...]
    #: mamba2's mixer exports a block-boundary checkpoint: one more block in "align" mode
    #: (mamba_mixer2.py `get_kv_cache_spec`: num_prefill_checkpoint_blocks=1)
    checkpoint_blocks: int = 0
    #: KDA that can run the FlashKDA prefill kernel (head_dim 128, a bounded gate): on SM90/SM10x/SM12x GPUs in
    #: bfloat16 it checkpoints every 16 tokens and keeps one more block (glm5next/common/kda.py, kda_checkpoint.py)
    flashkda: bool = False

    def dim(self, name: str) -> int:
        return dict(self.dims)[name]

    def tensors(self, tp: int, num_spec: int) -> list[tuple[tuple[int, ...], Role]]:
        d = dict(self.dims)
        if self.family == "mamba1":
            inner = _div(d["intermediate"], tp)
            return [((d["conv_kernel"] - 1, inner), "conv"), ((inner, d["state"]), "ssm")]
        if self.family == "mamba2":
            groups = d["n_groups"] + (0 if d["n_groups"] % tp == 0 else tp - d["n_groups"])
            conv_dim = d["intermediate"] + 2 * groups * d["state"]
            return [((d["conv_kernel"] - 1 + num_spec, _div(conv_dim, tp)), "conv"),
                    ((_div(d["heads"], tp), d["head_dim"], d["state"]), "ssm")]
        if self.family == "gdn":
            conv_dim = 2 * d["k_heads"] * d["k_dim"] + d["v_heads"] * d["v_dim"]
            return [((d["conv_kernel"] - 1 + num_spec, _div(conv_dim, tp)), "conv"),
                    ((_div(d["v_heads"], tp), d["v_dim"], d["k_dim"]), "ssm")]
        if self.family == "kda":
            conv_dim = d["heads"] * d["head_dim"] + 2 * d["heads"] * d["head_dim"]
            return [((d["conv_kernel"] - 1 + num_spec, _div(conv_dim, tp)), "conv"),
                    ((_div(d["heads"], tp), d["head_dim"], d["head_dim"]), "ssm")]
        if self.family == "short_conv":
            return [((d["conv_kernel"] - 1 + num_spec, _div(d["intermediate"], tp)), "conv")]
        return [((d["heads"] // tp, d["head_dim"], d["head_dim"]), "conv")]  # linear attention: one state

    def dtypes(self, model_dtype: str, cache_dtype: str, ssm_dtype: str) -> dict[Role, str]:
        """`ssm_dtype`: --mamba-ssm-cache-dtype once the model's config hook has resolved an auto one
        (hybrid.config_ssm_dtype: NemotronH, Qwen3.5)."""
        conv = model_dtype if cache_dtype == "auto" else cache_dtype
        if ssm_dtype != "auto":
            ssm = ssm_dtype
        elif self.family == "kda":
            ssm = "float32"  # kda_state_dtype: the recurrent state is float32 unless asked otherwise
        else:
            ssm = conv
        return {"conv": conv, "ssm": ssm}

    def page_bytes(self, tp: int, num_spec: int, dtypes: dict[Role, str]) -> int:
        """`MambaSpec.page_size_bytes` before padding: every tensor of one request's state."""
        unknown = sorted({d for d in dtypes.values() if d not in DTYPE_BYTES})
        if unknown:  # a config's mamba_ssm_dtype / mamba_ssm_cache_dtype vLLM would not take either
            raise UsageError(f"state dtype {', '.join(map(repr, unknown))}: "
                             f"not one of {', '.join(sorted(DTYPE_BYTES))}")
        return sum(prod(shape) * DTYPE_BYTES[dtypes[role]] for shape, role in self.tensors(tp, num_spec))


def _div(n: int, tp: int) -> int:
    if n % tp:
        raise UsageError(f"--tensor-parallel-size {tp}: a state dimension ({n}) does not divide by it, and vLLM "
                         "refuses such a split")
    return n // tp


def _i(cfg: dict[str, Any], key: str) -> int:
    v = cfg.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise ValueError(f"{key} = {v!r}, an integer is needed for the state shape")
    return v


def state_spec(cfg: dict[str, Any]) -> StateSpec | None:
    """The state layers' spec for the model family `cfg` describes, as that family's vLLM model file reads it; None
    for a family whose state the predictor does not know."""
    model_type = str(cfg.get("model_type") or "")
    if model_type in ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "olmo_hybrid"):
        return StateSpec("gdn", (("k_heads", _i(cfg, "linear_num_key_heads")),
                                 ("v_heads", _i(cfg, "linear_num_value_heads")),
                                 ("k_dim", _i(cfg, "linear_key_head_dim")),
                                 ("v_dim", _i(cfg, "linear_value_head_dim")),
                                 ("conv_kernel", _i(cfg, "linear_conv_kernel_dim"))))
    if model_type in ("glm5next", "glm5next_text", "glm5_next", "glm5_next_text"):
        return StateSpec("kda", (("heads", _i(cfg, "linear_num_heads")), ("head_dim", _i(cfg, "linear_head_dim")),
                                 ("conv_kernel", _i(cfg, "linear_conv_kernel_dim"))),
                         flashkda=cfg.get("linear_head_dim") == 128 and cfg.get("linear_lower_bound") is not None)
    if model_type == "kimi_linear":
        la = cfg.get("linear_attn_config") or {}
        return StateSpec("kda", (("heads", _i(la, "num_heads")), ("head_dim", _i(la, "head_dim")),
                                 ("conv_kernel", _i(la, "short_conv_kernel_size"))))
    if model_type == "jamba":
        return StateSpec("mamba1", (("intermediate", _i(cfg, "mamba_expand") * _i(cfg, "hidden_size")),
                                    ("state", _i(cfg, "mamba_d_state")), ("conv_kernel", _i(cfg, "mamba_d_conv"))))
    if model_type == "nemotron_h":
        return StateSpec("mamba2", (("intermediate", _i(cfg, "mamba_num_heads") * _i(cfg, "mamba_head_dim")),
                                    ("n_groups", _i(cfg, "n_groups")), ("heads", _i(cfg, "mamba_num_heads")),
                                    ("head_dim", _i(cfg, "mamba_head_dim")), ("state", _i(cfg, "ssm_state_size")),
                                    ("conv_kernel", _i(cfg, "conv_kernel"))),
                         checkpoint_blocks=1)
    if model_type == "falcon_h1":
        inner = cfg.get("mamba_d_ssm") or int(float(cfg.get("mamba_expand") or 0) * _i(cfg, "hidden_size"))
        return StateSpec("mamba2", (("intermediate", int(inner)), ("n_groups", _i(cfg, "mamba_n_groups")),
                                    ("heads", _i(cfg, "mamba_n_heads")), ("head_dim", _i(cfg, "mamba_d_head")),
                                    ("state", _i(cfg, "mamba_d_state")), ("conv_kernel", _i(cfg, "mamba_d_conv"))),
                         checkpoint_blocks=1)
    if model_type == "granitemoehybrid":
        return StateSpec("mamba2", (("intermediate", _i(cfg, "mamba_expand") * _i(cfg, "hidden_size")),
                                    ("n_groups", _i(cfg, "mamba_n_groups")), ("heads", _i(cfg, "mamba_n_heads")),
                                    ("head_dim", _i(cfg, "mamba_d_head")), ("state", _i(cfg, "mamba_d_state")),
                                    ("conv_kernel", _i(cfg, "mamba_d_conv"))), checkpoint_blocks=1)
    if model_type in ("lfm2", "lfm2_moe"):
        inner = cfg.get("conv_dim") if model_type == "lfm2" else cfg.get("hidden_size")
        return StateSpec("short_conv", (("intermediate", int(inner or 0)), ("conv_kernel", _i(cfg, "conv_L_cache"))))
    return None


def state_layer_kinds(cfg: dict[str, Any], n_layers: int) -> list[LayerKind] | None:
    """Which decoder layers keep state, for families that do not spell it out in `layer_types`; None: not such a
    family (the caller reads `layer_types` or the attention rules)."""
    model_type = cfg.get("model_type")
    if model_type == "jamba":
        period, offset = _i(cfg, "attn_layer_period"), _i(cfg, "attn_layer_offset")
        return [LayerKind.full if i % period == offset else LayerKind.state for i in range(n_layers)]
    if model_type == "nemotron_h":
        pattern = cfg.get("hybrid_override_pattern")
        if isinstance(pattern, str) and pattern:
            # M: mamba2, *: attention, - and E: MLP / MoE (no cache)
            return [{"M": LayerKind.state, "*": LayerKind.full}.get(ch, LayerKind.none) for ch in pattern]
        types = cfg.get("layers_block_type")  # newer transformers spell the pattern out
        if isinstance(types, list):
            kinds = {"mamba": LayerKind.state, "linear_attention": LayerKind.state, "attention": LayerKind.full,
                     "full_attention": LayerKind.full}
            return [kinds.get(str(t), LayerKind.none) for t in types]
    if model_type == "kimi_linear":
        kda = set((cfg.get("linear_attn_config") or {}).get("kda_layers") or ())
        # kda_layers counts from 1
        return [LayerKind.state if i + 1 in kda else LayerKind.full for i in range(n_layers)]
    if model_type == "qwen3_next" and not isinstance(cfg.get("layer_types"), list):
        interval = _i(cfg, "full_attention_interval")
        return [LayerKind.full if (i + 1) % interval == 0 else LayerKind.state for i in range(n_layers)]
    return None
