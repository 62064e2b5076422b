"""Which model a saved log served, by what its own lines state about it, for `kv MODEL --log LOG`.

A config.json is rarely saved under the folder name it had on the GPU box, so a name tells nothing. What tells is what
the log states about the model: the architecture vLLM resolved ("Resolved architecture: LlamaForCausalLM", 0.9+) and
the KV bytes per token its figures imply (the pool it logged over the tokens it fitted, a refusal's need over the
length it refused, or the bytes of one block the cap bounds, harness.predict.stated). vLLM 0.6-0.34 print no layer or
head count at INFO; the bytes per token are those figures together (layers × KV heads × head size × dtype, a draft's
layers too). A MODEL whose architecture or bytes per token differ is another model (exit 2); one that agrees under
another name is a note; a log that states neither (a refusal before any KV line, a release without the architecture
line) states too little, and `--same-model` says "this is the model".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.logfacts import LogFacts
from harness.logfacts.engine_config import EngineConfig
from harness.logfacts.parser import own_text
from harness.logfacts.text import MAX_LINE_CHARS, segments, split_line
from harness.predict.model import ModelShape
from harness.predict.prediction import KvPrediction
from harness.predict.stated import DEFAULT_BLOCK, Stated
from harness.units import GIB
from harness.verdict.catalogue import Reason

_ARCH = re.compile(r"\AResolved architecture: ([A-Za-z_][\w.]{0,200})\s*\Z")
#: How far the bytes per token a log implies may sit from the prediction's and still be the same model: block
#: rounding, the null block and a printed pool's rounding move it by a few per cent, and a predictor's own small
#: error stays a disagreement `kv --log` reports (exit 1). Another model of the same architecture differs in its
#: layers, KV heads or head size: a factor.
TOLERANCE = 0.2
HALF_CENT = GIB // 200


@dataclass(frozen=True)
class LoggedModel:
    """What a log states about the model it served."""

    served: str | None
    architecture: str | None
    bytes_per_token: tuple[float, float] | None
    """(low, high) KV bytes per token its figures imply; None when they imply none."""
    source: str | None = None


def architecture_of(lines: Iterable[str]) -> str | None:
    """The first "Resolved architecture: X" of a log: the target's (a draft model's comes after it)."""
    for line in lines:
        if "Resolved architecture" not in line:
            continue
        for segment in segments(line[:MAX_LINE_CHARS]):
            parts = split_line(segment)
            msg = own_text(parts.source, parts.message)
            if msg and msg == parts.message and (m := _ARCH.match(msg)):
                return m.group(1)
    return None


def implied_bytes_per_token(facts: LogFacts, said: Stated) -> tuple[tuple[float, float], str] | None:
    """(low, high) KV bytes per token the log's own figures imply, and from what. None for a hybrid model's log
    (its pool holds states too) and a log without KV figures."""
    kv, r = facts.kv, facts.refusal
    if kv.mamba_padding_pct is not None or kv.padding_layers is not None or kv.mamba_cache_mode is not None:
        return None
    block = kv.block_size or DEFAULT_BLOCK.get(kv.device or "gpu", 16)
    if said.bytes_per_block is not None:
        per = said.bytes_per_block
        return (per.low / block, per.high / block), "the blocks its KV cap holds"
    if r is not None and r.kind == Reason.kv_cache_too_small and r.max_seq_len and r.needed_gib and r.needed_gib >= 0.1:
        tokens = -(-r.max_seq_len // block) * block
        return ((r.needed_gib * GIB - HALF_CENT) / tokens, (r.needed_gib * GIB + HALF_CENT) / r.max_seq_len), \
            f"its refusal's need for {r.max_seq_len:,} tokens"
    if kv.kv_tokens:
        if said.cap_bytes:
            low = high = float(said.cap_bytes)
        elif (gib := kv.available_gib or kv.reserved_gib) and gib > 0:
            low, high = gib * GIB - HALF_CENT, gib * GIB + HALF_CENT
        else:
            return None
        return (low / (kv.kv_tokens + 2 * block), high / kv.kv_tokens), f"its {kv.kv_tokens:,} KV tokens in its pool"
    return None


def logged_model(lines: Iterable[str], facts: LogFacts, cfg: EngineConfig, said: Stated) -> LoggedModel:
    served = cfg.config.get("model") or (cfg.args or {}).get("model")
    served = served.strip("'\" ") if isinstance(served, str) and served.strip("'\" ") else None
    implied = implied_bytes_per_token(facts, said)
    return LoggedModel(served=served, architecture=architecture_of(lines),
                       bytes_per_token=implied[0] if implied else None, source=implied[1] if implied else None)


def model_name(path: str) -> str:
    """A model's name from its path or hub id, to tell two models apart across machines: the directory (a
    config.json's parent), a hub cache's `models--org--name`, the id's last part; lower case."""
    text = path.strip().strip("'\"").rstrip("/")
    if text.endswith(".json"):
        text = text.rsplit("/", 1)[0] if "/" in text else ""
    parts = [part for part in text.split("/") if part]
    for part in parts:
        if part.startswith("models--"):
            return part.rsplit("--", 1)[-1].lower()
    return parts[-1].lower() if parts else ""


def check_architecture(model: str, shape: ModelShape, logged: LoggedModel, log: str, same_model: bool) -> None:
    """Exit 2 when the log states another architecture than MODEL's config (unless --same-model says it is it)."""
    if same_model or logged.architecture is None or not shape.architectures:
        return
    if logged.architecture not in shape.architectures:
        raise UsageError(f"{log}: the log serves a {logged.architecture} ({logged.served or 'its model'}), MODEL "
                         f"{model} is a {', '.join(shape.architectures)}: another model, whose KV figures would read "
                         "as the KV model's error; give the model the log served (--same-model if it is this one)")


def identify(model: str, shape: ModelShape, bare: KvPrediction, logged: LoggedModel, log: str,
             same_model: bool) -> str | None:
    """A note when MODEL is taken as the log's model under another name; UsageError (exit 2) when the log states
    another model, or states too little to tell and the names differ."""
    given = model_name(str(Path(model).resolve()))
    name = model_name(logged.served) if logged.served else ""
    what = []
    if logged.architecture:
        what.append(f"a {logged.architecture}")
    agrees = None
    if logged.bytes_per_token is not None:
        low, high = logged.bytes_per_token
        agrees = low * (1 - TOLERANCE) <= bare.bytes_per_token <= high * (1 + TOLERANCE)
        span = f"{low:,.0f}" if round(low) == round(high) else f"{low:,.0f}-{high:,.0f}"
        what.append(f"{span} B of KV a token ({logged.source})")
    stated = " at ".join(what)
    if same_model:
        return (f"MODEL {model} taken as the log's model by --same-model"
                + (f" (the log states {stated}; MODEL's config: {bare.bytes_per_token:,} B a token)" if stated else ""))
    if not name or name == given:
        return None  # the same name: a difference in its figures is the KV model's to explain (exit 1)
    if agrees is False:
        raise UsageError(f"{log}: the log serves {logged.served} ({name!r}): {stated}; MODEL {model} ({given!r}) "
                         f"makes {bare.bytes_per_token:,} B a token, so it is another model (--same-model if it is "
                         "this one: then the difference is the KV model's)")
    if agrees is None:
        raise UsageError(f"{log}: the log serves {logged.served} ({name!r}), not MODEL {model} ({given!r}), and "
                         f"states too little to tell them apart ({stated or 'no architecture, no KV figure'}): "
                         "pass --same-model if MODEL is the model it served")
    return (f"the log serves {logged.served} ({name!r}): MODEL {model} ({given!r}) is taken as it, both {stated} "
            f"(MODEL's config: {bare.bytes_per_token:,} B a token)")
