"""Every boot held against its prediction: a cell's model and flags → the prediction → each logged KV number next
to it, with the rounding vLLM printed it with.

The KV memory the prediction is sized against is the best the cell offers: a KV floor's raised size (logged in
bytes), then `--kv-cache-memory-bytes` (exact), then the fork's offload cap, then the log's "Available KV cache
memory" or the CPU worker's "set (X/Y) GiB" — those are printed to two decimals, so the predicted numbers become a
range (lowest to highest possible pool) and a logged number agrees when it falls inside.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from harness.errors import UsageError
from harness.files import parse_json
from harness.logfacts import KvFacts, Refusal
from harness.predict.model import ModelShape, shape_from_config
from harness.predict.prediction import FactCheck, KvPrediction, PredictionRecord
from harness.predict.predictor import allows_long_max_model_len, draft_model_path, predict
from harness.predict.refusals import MACHINE_FREE, Machine
from harness.predict.serve_flags import parse_serve_flags
from harness.predict.versions import rules_for, rules_version
from harness.units import GIB
from harness.verdict.catalogue import Reason
from harness.verdict.outcome import Outcome

#: reads a file as the server sees it; None when it cannot
Reader = Callable[[str], "bytes | None"]

HALF_CENT_GIB = GIB // 200  # ±0.005 GiB: half the unit vLLM prints GiB in


def config_of(path: str, read: Reader) -> ModelShape | None:
    """The model the server loads from `path` (its config.json, read the way the server would see it)."""
    file = path if path.endswith(".json") else path.rstrip("/") + "/config.json"
    data = read(file)
    if data is None:
        return None
    raw = parse_json(data, file, strict=False)  # bounded nesting; Infinity read as vLLM's Python reads it
    if not isinstance(raw, dict):
        raise UsageError(f"{file}: not a JSON object")
    if "quantization_config" not in raw:  # ModelOpt ≤0.29's file beside config.json, merged in as load_config does
        legacy = read(file.rsplit("/", 1)[0] + "/hf_quant_config.json") if "/" in file else None
        quant = (parse_json(legacy, f"{file.rsplit('/', 1)[0]}/hf_quant_config.json", strict=False)
                 if legacy is not None else None)
        if isinstance(quant, dict):
            raw["quantization_config"] = quant
    return shape_from_config(raw, file)


def kv_pool(kv: KvFacts, flag_bytes: int | None, refusal: Refusal | None,
            null_block: int) -> tuple[int, int, str] | None:
    """(low, high, source) of the KV pool: equal ends when exact. `null_block`: what the refusal's "available" is
    short of the pool (one block from 0.29 on, else 0)."""
    if kv.floor_raised_bytes:
        return kv.floor_raised_bytes, kv.floor_raised_bytes, "the KV floor's raised size (logged in bytes)"
    if flag_bytes:
        return flag_bytes, flag_bytes, "--kv-cache-memory-bytes"
    for value, what in ((kv.offload_cap_gib, "the fork's offload cap"), (kv.available_gib, "Available KV cache "
                        "memory"), (kv.reserved_gib, "the CPU worker's KV size")):
        if value is not None and value > 0:
            mid = int(value * GIB)
            return max(1, mid - HALF_CENT_GIB), mid + HALF_CENT_GIB, f"{what} ({value} GiB, ±0.005)"
    if refusal is not None and refusal.kind == Reason.kv_insufficient and refusal.available_gib:
        mid = int(refusal.available_gib * GIB) + null_block
        return (max(1, mid - HALF_CENT_GIB), mid + HALF_CENT_GIB,
                f"the refusal's available ({refusal.available_gib} GiB, ±0.005)")
    return None


def _check(fact: str, lo, hi, logged, rounder=lambda v: v) -> FactCheck:
    """`logged` against a predicted value that may be a range [lo, hi] (equal ends when exact)."""
    a, b = rounder(lo), rounder(hi)
    agrees = a <= logged <= b if a != b else a == logged
    pred = a if a == b else None
    rel = None if pred is None or not logged else round((pred - logged) / logged, 6)
    if pred is None and logged and not agrees:
        nearest = a if abs(a - logged) < abs(b - logged) else b
        rel = round((nearest - logged) / logged, 6)
    return FactCheck(fact=fact, predicted=pred if pred is not None else f"{a}..{b}", logged=logged,
                     rel_error=0.0 if agrees else rel, agrees=agrees)


def _gib2(b: int) -> float:
    return round(b / GIB, 2)  # vLLM's format_gib


def checks(low: KvPrediction, high: KvPrediction, kv: KvFacts, refusal: Refusal | None,
           outcome: Outcome | None, reason: Reason | None) -> list[FactCheck]:
    out: list[FactCheck] = []
    if kv.kv_tokens is not None and low.kv_tokens is not None:
        out.append(_check("kv_tokens", low.kv_tokens, high.kv_tokens, kv.kv_tokens))
    if kv.max_concurrency is not None and low.max_concurrency is not None:
        out.append(_check("max_concurrency", low.max_concurrency, high.max_concurrency, kv.max_concurrency,
                          lambda v: round(v, 2)))
    if refusal is not None and refusal.kind == Reason.kv_insufficient:
        if refusal.needed_gib is not None:
            out.append(_check("need_gib", low.need_bytes, low.need_bytes, refusal.needed_gib, _gib2))
        if (refusal.available_gib is not None and low.available_bytes is not None
                and high.available_bytes is not None):
            out.append(_check("available_gib", low.available_bytes - low.bytes_per_block,
                              high.available_bytes - high.bytes_per_block, refusal.available_gib, _gib2))
        if refusal.estimated_max_model_len is not None and low.fits is not None:
            # a prediction that fits says the whole max_model_len can be served
            lo = low.max_model_len if low.fits else low.estimated_max_model_len
            hi = high.max_model_len if high.fits else high.estimated_max_model_len
            out.append(_check("estimated_max_model_len", lo, hi, refusal.estimated_max_model_len))
    if kv.block_size is not None:
        out.append(_check("block_size", low.block_size, low.block_size, kv.block_size))
    if kv.mamba_padding_pct is not None and low.state_page_padding_pct is not None:
        out.append(_check("mamba_padding_pct", low.state_page_padding_pct, low.state_page_padding_pct,
                          kv.mamba_padding_pct))
    if kv.padding_layers is not None:
        # vLLM logs one line per padded bucket: the padding of all that bucket's groups together
        first = next((g for g in low.groups if g.padding_layers), None)
        padded = sum(g.padding_layers for g in low.groups if first and (g.kind, g.page_bytes, g.sliding_window) ==
                     (first.kind, first.page_bytes, first.sliding_window))
        out.append(_check("padding_layers", padded, padded, kv.padding_layers))
    logged_max_len = outcome == Outcome.refused and reason == Reason.max_len_exceeds_model
    predicted_max_len = low.refused_by == Reason.max_len_exceeds_model
    if predicted_max_len or logged_max_len:
        # vLLM's length check runs before any KV sizing: whether it refused is one check, the limit it named another
        out.append(FactCheck(fact="max_len_refusal", predicted=predicted_max_len, logged=logged_max_len,
                             agrees=predicted_max_len == logged_max_len))
        if logged_max_len and refusal is not None and refusal.derived_max_model_len is not None \
                and low.model_max_model_len is not None:
            out.append(_check("derived_max_model_len", low.model_max_model_len, low.model_max_model_len,
                              refusal.derived_max_model_len))
        return out
    if (said := _config_refusal(low, outcome, reason)) is not None:
        out.append(said)
        if not said.agrees or low.refused_by is not None:  # refused before any KV sizing: nothing else to hold
            return out
    decided = outcome == Outcome.booted or (outcome == Outcome.refused and reason == Reason.kv_insufficient)
    if decided and low.fits is not None:
        want = Outcome.booted if outcome == Outcome.booted else Outcome.refused
        if low.fits == high.fits:
            got = Outcome.booted if low.fits else Outcome.refused
            out.append(FactCheck(fact="outcome", predicted=got, logged=want, agrees=got == want))
        else:
            out.append(FactCheck(fact="outcome", predicted="either (the pool's rounding decides)", logged=want,
                                 agrees=True))
    return out


def _config_refusal(low: KvPrediction, outcome: Outcome | None, reason: Reason | None) -> FactCheck | None:
    """The refusal predicted from the model and the flags alone (tp_not_divisible, config_invalid_batched_tokens)
    against the boot's verdict: the same cause, or none where none was predicted. A machine's failure (error) or a
    deadline says nothing of it."""
    predicted = low.refused_by if low.refused_by in MACHINE_FREE else None
    logged = reason if outcome == Outcome.refused and reason in MACHINE_FREE else None
    if outcome is None or outcome in (Outcome.error, Outcome.timeout) or (predicted is None and logged is None):
        return None
    if predicted is None and low.refused_by is not None:  # refused first for another cause (its own check)
        return None
    return FactCheck(fact="config_refusal", predicted=predicted, logged=logged if logged else str(outcome),
                     agrees=predicted == logged)


def hint(record: PredictionRecord) -> str | None:
    """Which term a mismatch points at, from the one cell (across cells `analyze` fits slope and intercept)."""
    bad = {c.fact: c for c in record.checks if not c.agrees}
    if not bad:
        return None
    if "max_len_refusal" in bad or "derived_max_model_len" in bad:
        return ("the model's own maximum length: how vLLM derives it from the config (its max-length keys, rope "
                "scaling, the tokenizer's model_max_length) or VLLM_ALLOW_LONG_MAX_MODEL_LEN in the server's env")
    if "need_gib" in bad or "kv_tokens" in bad or "estimated_max_model_len" in bad or "max_concurrency" in bad:
        c = bad.get("need_gib") or bad.get("kv_tokens") or bad.get("estimated_max_model_len") or bad["max_concurrency"]
        logged = c.logged if isinstance(c.logged, (int, float)) else 0
        under = c.fact == "need_gib" and isinstance(c.predicted, (int, float)) and c.predicted < logged
        over_capacity = c.fact != "need_gib" and (c.rel_error or 0) > 0
        if under or over_capacity:
            return ("the server needs more KV than predicted: a per-token term under-modelled if the gap grows with "
                    "max_model_len (slope), a per-sequence state missing if it does not (intercept); `boot-harness "
                    "analyze` fits both across cells")
        return "the server needs less KV than predicted: a layer or term counted that vLLM does not allocate"
    return "the predicted outcome differs from the boot's"


def platform_of(kv: KvFacts) -> str:
    """The platform a boot ran on, as far as its log tells: the KV device; on a CPU, AMX from the MLA kernel it
    chose, AVX-512 BF16 from the SSM state reset."""
    if kv.device != "cpu":
        return "gpu"
    if kv.mla_backend == "AMX_MLA":
        return "cpu-amx"
    return "cpu-bf16" if kv.cpu_ssm_dtype else "cpu"


def predict_cell(server_args: list[str], read: Reader, kv: KvFacts, refusal: Refusal | None,
                 outcome: Outcome | None, reason: Reason | None, vllm_version: str | None, platform: str | None = None,
                 env: Mapping[str, str] | None = None, machine: Machine | None = None) -> PredictionRecord:
    """The cell's prediction and its checks; a record that says why when no prediction can be made. `read` reads a
    file as the server sees it (the runtime's `read_server_file`); `platform` overrides what the log tells; `env`:
    the cell's environment (VLLM_ALLOW_LONG_MAX_MODEL_LEN lets a length above the model's through)."""
    version = rules_version(vllm_version)  # a nightly's `2024_nightly`: the default's rules, never a failure
    try:
        flags = parse_serve_flags(server_args, version)  # as that release's parser read them
        if not flags.model:
            return PredictionRecord(skipped="no --model in the server's arguments")
        shape = config_of(flags.model, read)
        if shape is None:
            return PredictionRecord(skipped=f"{flags.model}: no config.json the harness can read (a hub id, or a "
                                            "path the runtime cannot reach)")
        dp = draft_model_path(flags)
        draft = config_of(dp, read) if dp else None
        platform = platform or platform_of(kv)
        long_ok = allows_long_max_model_len(env)
        bare = predict(shape, flags, version=version, platform=platform, draft=draft, allow_long_max_model_len=long_ok,
                       machine=machine)
        null_block = bare.bytes_per_block if rules_for(version).null_block_in_check else 0
        pool = kv_pool(kv, flags.kv_cache_memory_bytes, refusal, null_block)
        if pool is None:
            found = checks(bare, bare, kv, refusal, outcome, reason)
            record = PredictionRecord(prediction=bare, checks=found,
                                      agrees=all(c.agrees for c in found) if found else None)
            return record.model_copy(update={"hint": hint(record)})
        lo_b, hi_b, source = pool
        low = predict(shape, flags, version=version, platform=platform, draft=draft, available_bytes=lo_b,
                      available_source=source, allow_long_max_model_len=long_ok, machine=machine)
        high = low if hi_b == lo_b else predict(shape, flags, version=version, platform=platform, draft=draft,
                                                available_bytes=hi_b, available_source=source,
                                                allow_long_max_model_len=long_ok, machine=machine)
    except (UsageError, ValueError, OSError) as exc:
        return PredictionRecord(skipped=f"not predicted: {exc}")
    found = checks(low, high, kv, refusal, outcome, reason)
    record = PredictionRecord(prediction=low, checks=found, agrees=all(c.agrees for c in found) if found else None)
    return record.model_copy(update={"hint": hint(record)})
