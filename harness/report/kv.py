"""A prediction in words: each layer group, what its blocks cost, and where the need comes from."""

from __future__ import annotations

from harness.predict.prediction import KvPrediction
from harness.units import fmt_bytes, fmt_tokens, plural
from harness.verdict.catalogue import Reason

_KIND = {"full": "full attention", "mla": "MLA (one latent per token)", "sliding": "sliding window", "state": "state"}


def render_prediction(p: KvPrediction) -> str:
    lines = [f"{p.model}: vLLM {p.vllm_version} rules, max_model_len {fmt_tokens(p.max_model_len)}, "
             f"tp {p.tensor_parallel_size}, {p.dtype}, KV {p.kv_cache_dtype}, block {p.block_size} tokens"]
    for i, g in enumerate(p.groups):
        window = f", window {fmt_tokens(g.sliding_window)}" if g.sliding_window else ""
        pad = f" + {g.padding_layers} padding" if g.padding_layers else ""
        lines.append(f"  group {i}: {g.layers} {_KIND[g.kind]} layer{'s' if g.layers != 1 else ''}{pad} "
                     f"({', '.join(g.origins)}{window}) — {fmt_bytes(g.bytes_per_block)} per block, "
                     f"{fmt_tokens(g.blocks_per_request)} blocks per request")
    lines.append(f"  per token {fmt_bytes(p.bytes_per_token)} ({p.bytes_per_token:,} B) per rank; fixed state per "
                 f"sequence {fmt_bytes(p.state_bytes_per_seq)}")
    lines.append(f"  need: {fmt_bytes(p.bytes_per_block)} per block × {fmt_tokens(p.blocks_per_request)} blocks = "
                 f"{fmt_bytes(p.need_bytes)} ({p.need_bytes:,} B) for one request of {fmt_tokens(p.max_model_len)} "
                 "tokens" + (f": {fmt_bytes(p.need_bytes - p.state_bytes_per_seq)} grows with the length, "
                             f"{fmt_bytes(p.state_bytes_per_seq)} is the state, whatever the length"
                             if p.state_bytes_per_seq else ""))
    if p.refused_by is not None and p.refused_by != Reason.max_len_exceeds_model:
        lines.append(f"  does NOT boot ({p.refused_by}): {p.refused_why}")
        if p.refused_hint:
            lines.append(f"  hint: {p.refused_hint}")
    elif p.refused_by is not None:
        lines.append(f"  does NOT boot: vLLM refuses --max-model-len {p.max_model_len:,} ({p.refused_by}): above the "
                     f"model's derived max_model_len {p.model_max_model_len:,} ({p.model_max_model_len_source}); "
                     "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 overrides it (the KV sizing below is what it would need)")
    elif p.model_max_model_len is not None:
        lines.append(f"  the model allows max_model_len up to {p.model_max_model_len:,} "
                     f"({p.model_max_model_len_source})")
    if p.available_bytes is not None:
        lines.append(f"  available {fmt_bytes(p.available_bytes)} ({p.available_source}): {fmt_tokens(p.num_blocks)} "
                     f"blocks (one held back as the null block) → KV cache size {fmt_tokens(p.kv_tokens)} tokens, "
                     f"maximum concurrency {p.max_concurrency:.2f}x")
        if p.fits:
            most = (f"; the largest max_model_len that fits: {p.max_len_that_fits:,}"
                    + (" (the model's own limit)" if p.max_len_that_fits == p.model_max_model_len else "")
                    if p.max_len_that_fits else "")
            lines.append(f"  KV fits one request of max_model_len, but the configuration is refused first{most}"
                         if p.refused_by else f"  fits: one request of max_model_len can be served{most}")
        else:
            est = (f"; vLLM's estimated maximum model length: {fmt_tokens(p.estimated_max_model_len)}"
                   if p.estimated_max_model_len else "")
            lines.append(f"  does NOT fit: vLLM refuses ('To serve at least one request …'){est}")
    for note in p.notes:
        lines.append(f"  note: {note}")
    for gap in p.unmodelled:
        lines.append(f"  not modelled: {gap}")
    return "\n".join(lines)


def render_plan(planned, platform: str | None = None) -> str:
    """One line per cell, whole ids (pipes and CI logs): predicted outcome (and reason), the expectation, why; first
    the platform whose rules apply and why (`platform`), so a CPU matrix is never silently planned on GPU rules."""
    lines = [f"platform: {platform}"] if platform else []
    gaps: dict[str, int] = {}  # what is not modelled, said once under the cells and named by number on each line
    for p in planned:
        mark = {True: "=", False: "≠", None: " "}[p.agrees]
        want = p.cell.expected.reason if p.cell.expected and p.cell.expected.reason else None
        expected = f" {mark} expected {p.expected}" + (f" ({want})" if want else "") if p.expected else ""
        got = f"{p.outcome} ({p.reason})" if p.outcome and p.reason else (p.outcome or "unknown")
        why, tail = p.why, "; not modelled: " + "; ".join(p.not_modelled)
        if p.not_modelled and why.endswith(tail):
            refs = " ".join(f"[{gaps.setdefault(g, len(gaps) + 1)}]" for g in p.not_modelled)
            why = why[:-len(tail)] + f"; not modelled: {refs}"
        lines.append(f"{p.cell.id}: predicted {got}{expected} — {why}")
    known = [p for p in planned if p.agrees is not None]
    lines.append(f"{plural(len(planned), 'cell')}: {sum(p.outcome is not None for p in planned)} predicted, "
                 f"{sum(bool(p.agrees) for p in known)} of {len(known)} as the matrix expects")
    lines += [f"not modelled [{n}]: {gap}" for gap, n in gaps.items()]
    return "\n".join(lines)
