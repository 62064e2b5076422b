#!/usr/bin/env python3
"""Make the two tiny models that the CPU tests and the CPU example boot real vLLM with.

    python scripts/make_tiny_model.py OUT_DIR      # prints OUT_DIR/tiny-llama and OUT_DIR/tiny-draft

Why generate instead of download: nothing here may reach a model hub, and a boot test only needs a model that vLLM
loads and serves, not one that says anything sensible. Why these shapes:

- tiny-llama is a LlamaForCausalLM with hidden 128, 4 attention heads (head_dim 32, the smallest head size the CPU
  attention backend supports: head_dim 16 boots but kills the engine on the first request), 2 KV heads and 2 layers in
  fp32, so one token of KV cache costs exactly 2 layers x 2 (K, V) x 2 heads x 32 x 4 B = 1024 B. Round KV sizes then
  turn into round token counts, which is what the feasibility tests reason about.
- max_position_embeddings is 32768 so tests can ask for max_model_len up to 16384 (and anything above 32768 hits
  vLLM's "User-specified max_model_len" refusal).
- tiny-draft has the same tokenizer and vocabulary (required by `"method": "draft_model"` speculation) and the same
  attention shape, so its KV pages match the target's in vLLM's single KV pool: with it every token costs 2048 B and
  the KV capacity halves. That is what tips a tight boot into the "To serve at least one request" refusal.
- The tokenizer is a byte-level BPE over the 256 bytes plus three special tokens and no merges: every string
  tokenizes and decodes back, and vLLM and transformers load it from tokenizer.json offline.

The output is deterministic (fixed seeds, weights drawn with a seeded torch.Generator, JSON with sorted keys), so two
runs give byte-identical files. A model directory whose .complete file holds this script's sha256 is reused as it is,
so callers can cache OUT_DIR; any change to this script regenerates.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

# torch, safetensors and tokenizers are imported where they are used, so a cached call (both models already complete)
# returns in well under a second instead of paying for torch's import.

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2; the 256 byte tokens follow
MAX_POSITIONS = 32768

# Only the feed-forward size and the seed tell the two models apart: the attention shape (and so KV bytes per token)
# and the vocabulary must be the same for draft-model speculation.
MODELS = {
    "tiny-llama": {"seed": 1234, "intermediate_size": 512},
    "tiny-draft": {"seed": 5678, "intermediate_size": 256},
}
HIDDEN = 128
HEADS = 4
KV_HEADS = 2
LAYERS = 2


def script_hash() -> str:
    """The sha256 of this file: the cache key written into each model's .complete."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def build_tokenizer():
    """A byte-level BPE with no merges: one token per byte, so any text round-trips, plus <unk>, <s> and </s>.

    The byte alphabet is the GPT-2 byte-to-unicode map (what pre_tokenizers.ByteLevel emits), sorted by byte value so
    the ids never depend on set iteration order.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet(), key=_byte_of)
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in alphabet:
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    # Prepend <s> like Llama's tokenizer does; vLLM counts it in the prompt like any other token.
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    tok.add_special_tokens(SPECIAL_TOKENS)
    return tok


def _byte_of(ch: str) -> int:
    """The byte that a GPT-2 byte-level character stands for (printable bytes map to themselves, others to 256+)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    cp = ord(ch)
    if cp in printable:
        return cp
    others = [b for b in range(256) if b not in printable]
    return others[cp - 256]


def tokenizer_config() -> dict:
    """tokenizer_config.json for transformers' fast-tokenizer loader; the chat template lets /v1/chat/completions
    work."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "</s>",
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_POSITIONS,
        "chat_template": (
            "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant: {% endif %}"
        ),
    }


def model_config(vocab_size: int, intermediate_size: int) -> dict:
    """config.json of a LlamaForCausalLM; written by hand so no transformers version string lands in the file."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 2,
        "torch_dtype": "float32",
        "use_cache": True,
    }


def make_weights(cfg: dict, seed: int) -> dict:
    """Random fp32 weights under the names LlamaForCausalLM uses, drawn in a fixed order from a seeded generator."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    std = cfg["initializer_range"]
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    head_dim = cfg["head_dim"]
    q_out, kv_out = cfg["num_attention_heads"] * head_dim, cfg["num_key_value_heads"] * head_dim

    def normal(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, dtype=torch.float32) * std).contiguous()

    w = {"model.embed_tokens.weight": normal(vocab, h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = normal(q_out, h)
        w[p + "self_attn.k_proj.weight"] = normal(kv_out, h)
        w[p + "self_attn.v_proj.weight"] = normal(kv_out, h)
        w[p + "self_attn.o_proj.weight"] = normal(h, q_out)
        w[p + "mlp.gate_proj.weight"] = normal(inter, h)
        w[p + "mlp.up_proj.weight"] = normal(inter, h)
        w[p + "mlp.down_proj.weight"] = normal(h, inter)
        w[p + "input_layernorm.weight"] = torch.ones(h, dtype=torch.float32)
        w[p + "post_attention_layernorm.weight"] = torch.ones(h, dtype=torch.float32)
    w["model.norm.weight"] = torch.ones(h, dtype=torch.float32)
    w["lm_head.weight"] = normal(vocab, h)
    return w


def write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_model(out: Path, name: str, key: str, config_for: Callable[[int], dict], weights_for: Callable[[dict], dict],
                max_positions: int = MAX_POSITIONS) -> Path:
    """Write one model into OUT/name — the tokenizer, `config_for(vocab size)`, `weights_for(config)` — via a
    temporary sibling directory, so a half-written model is never reused. A model whose .complete holds `key` is
    kept."""
    final = out / name
    marker = final / ".complete"
    if marker.is_file() and marker.read_text().strip() == key:
        return final
    tmp = out / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    tok = build_tokenizer()
    tok.save(str(tmp / "tokenizer.json"))
    write_json(tmp / "tokenizer_config.json", {**tokenizer_config(), "model_max_length": max_positions})
    write_json(tmp / "special_tokens_map.json", {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                                                "pad_token": "</s>"})
    cfg = config_for(tok.get_vocab_size())
    write_json(tmp / "config.json", cfg)
    write_json(tmp / "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2})
    from safetensors.torch import save_file

    save_file(weights_for(cfg), str(tmp / "model.safetensors"), metadata={"format": "pt"})
    # safetensors creates the file 0600; a server in a container may run as another user and must read it.
    for f in tmp.iterdir():
        f.chmod(0o644)
    (tmp / ".complete").write_text(key + "\n")

    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def make_model(out: Path, name: str, spec: dict, key: str) -> Path:
    return write_model(out, name, key, lambda vocab: model_config(vocab, spec["intermediate_size"]),
                       lambda cfg: make_weights(cfg, spec["seed"]))


def run(argv: list[str], doc: str, make: Callable[[Path], list[Path]]) -> int:
    """The command line both model scripts share: OUT_DIR, one model path printed per line."""
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(doc.strip().splitlines()[0], f"\nusage: {argv[0]} OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for path in make(out):
        print(path)
    return 0


def main(argv: list[str]) -> int:
    key = script_hash()
    return run(argv, __doc__, lambda out: [make_model(out, name, spec, key) for name, spec in MODELS.items()])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
