"""`boot-harness kv MODEL --log LOG`: a saved log held against the prediction of the configuration it states.

A log names its release, its serve configuration (harness.logfacts.engine_config) and the KV memory the engine got
(harness.logfacts facts); with the model's config.json that is everything `kv MODEL -- FLAGS` needs. Flags given after
`--` come after the log's, so they win, as the last spelling of a flag does in vLLM. Each logged figure is then held
against the prediction by the same checks a cell's record gets (harness.predict.cell), at the rounding vLLM printed it
with, so `kv --log` and a run's `prediction` never disagree about one log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field

from harness.errors import FileRefused, UsageError
from harness.files import iter_lines
from harness.jsonout import JsonOutput
from harness.logfacts import LogFacts, LogParser
from harness.logfacts.engine_config import EngineConfig, read_engine_config, speculative_of
from harness.logfacts.text import MAX_LINE_BYTES
from harness.predict.cell import checks, hint, kv_pool, platform_of
from harness.predict.log_model import LoggedModel, check_architecture, identify, logged_model
from harness.predict.model import ModelShape, read_model
from harness.predict.prediction import FactCheck, KvPrediction, PredictionRecord
from harness.predict.predictor import draft_model_path, predict
from harness.predict.serve_flags import parse_serve_flags, spelling_of
from harness.predict.stated import stated
from harness.predict.versions import DEFAULT_VERSION, parse_version, rules_for, rules_version
from harness.units import GIB
from harness.verdict.catalogue import Reason
from harness.verdict.outcome import Outcome

#: the engine arguments (non-default args' keys) that size the KV cache, or that the predictor refuses because they
#: change it in a way it does not model; anything else a log lists (host, port, enforce_eager, ...) is not a KV flag
_ARG_FLAGS = ("block_size", "max_num_batched_tokens", "max_num_seqs", "kv_cache_memory_bytes", "mamba_cache_mode",
              "mamba_cache_dtype", "mamba_ssm_cache_dtype", "prefill_context_parallel_size",
              "num_gpu_blocks_override", "kv_cache_dtype_skip_layers")
#: switches among them: True → `--flag` (and async scheduling turned off → `--no-async-scheduling`)
_ARG_SWITCHES = ("async_scheduling", "disable_sliding_window", "disable_hybrid_kv_cache_manager")
#: set by the config line when the log has one (vLLM's resolved value), else by the non-default args
_RESOLVED = (("max_seq_len", "max_model_len", "--max-model-len"),
             ("tensor_parallel_size", "tensor_parallel_size", "--tensor-parallel-size"),
             ("pipeline_parallel_size", "pipeline_parallel_size", "--pipeline-parallel-size"),
             ("decode_context_parallel_size", "decode_context_parallel_size", "--decode-context-parallel-size"),
             ("dtype", "dtype", "--dtype"),
             ("kv_cache_dtype", "kv_cache_dtype", "--kv-cache-dtype"))
#: printed by every config line, worth a flag only when not 1 (the predictor refuses them then)
_DEFAULT_ONE = ("--pipeline-parallel-size", "--decode-context-parallel-size")
#: torch's names as `--dtype` takes them (the config line prints `torch.bfloat16`)
_TORCH_DTYPES = {"half": "float16", "float": "float32"}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _value(dest: str, raw: Any) -> str | None:
    """A config line's or an argument's value as `vllm serve` would have been given it; None for no value."""
    if raw is None or raw == "None":
        return None
    text = str(raw).strip()
    if dest == "dtype":
        return _TORCH_DTYPES.get(text.removeprefix("torch."), text.removeprefix("torch."))
    if dest in ("tensor_parallel_size", "pipeline_parallel_size", "decode_context_parallel_size", "max_model_len",
                "max_seq_len") and not text.lstrip("-").isdigit():
        return None
    return text


def _spec_flags(spec: dict[str, Any], version: tuple[int, int, int]) -> list[str]:
    """The speculative config in the flags `version` has for it."""
    if version < (0, 8, 2):  # --speculative-config came in 0.8.2; before, a model and a token count
        model = "[ngram]" if spec.get("method") == "ngram" else spec.get("model")
        out = ["--speculative-model", str(model)] if model else []
        if spec.get("num_speculative_tokens") is not None:
            out += ["--num-speculative-tokens", str(spec["num_speculative_tokens"])]
        return out
    return ["--speculative-config", json.dumps(spec)]


def serve_argv(cfg: EngineConfig, facts: LogFacts, version: str) -> tuple[list[str], list[str]]:
    """The `vllm serve` flags the log's configuration amounts to, in that release's spellings, and notes on where
    a figure came from. The config line's values are what vLLM resolved (a derived length, the auto dtype); the
    non-default args add what the line does not print (the block size, the KV memory size, the batch budget)."""
    c, a = cfg.config, cfg.args or {}
    argv: list[str] = []
    notes: list[str] = []
    for line_key, arg_key, flag in _RESOLVED:
        value = _value(line_key, c.get(line_key)) if line_key in c else _value(arg_key, a.get(arg_key))
        if value is not None and not (value == "1" and flag in _DEFAULT_ONE):
            argv += [flag, value]
    if facts.kv.autofit_max_model_len:
        argv += ["--max-model-len", str(facts.kv.autofit_max_model_len)]
        notes.append(f"max_model_len {facts.kv.autofit_max_model_len}: what the log's auto-fit settled on")
    elif spelling_of(argv, "max_model_len", version) is None:
        logged = facts.kv.concurrency_tokens or (facts.refusal.max_seq_len if facts.refusal else None)
        if logged:
            argv += ["--max-model-len", str(logged)]
            notes.append(f"max_model_len {logged}: the length the log's KV lines name")
    spec = a.get("speculative_config")
    shortcuts = [k for k in ("spec_method", "spec_model", "spec_tokens") if a.get(k) is not None]
    if isinstance(spec, dict) and spec:
        argv += _spec_flags(spec, parse_version(version))
    elif shortcuts:
        for key in shortcuts:
            argv += [_flag(key), str(a[key])]
    elif spec_line := speculative_of(c.get("speculative_config")):
        argv += _spec_flags(spec_line, parse_version(version))
    caching = a.get("enable_prefix_caching", c.get("enable_prefix_caching"))
    if caching in (True, "True"):
        argv.append("--enable-prefix-caching")
    elif caching in (False, "False"):
        argv.append("--no-enable-prefix-caching")
    for dest in _ARG_FLAGS:
        given = a.get(dest)
        if dest == "max_num_batched_tokens" and given is None and cfg.max_num_batched_tokens:
            given = cfg.max_num_batched_tokens
        if given is not None and given != "":
            argv += [_flag(dest), str(given)]
    for dest in _ARG_SWITCHES:
        if a.get(dest) is True:
            argv.append(_flag(dest))
        elif a.get(dest) is False and dest == "async_scheduling":
            argv.append("--no-async-scheduling")
    return argv, notes


@dataclass
class LogCheck:
    """One log held against its prediction."""

    log: str
    version: str
    version_source: str
    platform: str
    platform_source: str
    from_log: list[str]
    """The serve flags the log stated."""
    given: list[str]
    """The flags given after `--`, which win."""
    record: PredictionRecord
    logged: dict[str, Any]
    unchecked: dict[str, str] = field(default_factory=dict)
    """Figures the log has that could not be held against the prediction, and why."""
    model: LoggedModel | None = None
    """What the log states about the model it served."""
    model_note: str | None = None
    """MODEL taken as the log's model under another name, or by --same-model."""

    @property
    def disagreements(self) -> list[FactCheck]:
        return [c for c in self.record.checks if not c.agrees]

    def output(self) -> KvLogJson:
        """`kv --log --json`: the prediction, plus the log's side: what it logged, the checks, the disagreements."""
        assert self.record.prediction is not None  # check_log always predicts (it raises where it cannot)
        m = self.model
        return KvLogJson(
            **{k: v for k, v in self.record.prediction if k != "model"},
            log=self.log, vllm_version_source=self.version_source, platform=self.platform,
            platform_source=self.platform_source,
            serve_flags=ServeFlagsJson(from_log=self.from_log, given=self.given), logged=self.logged,
            checks=self.record.checks, agrees=self.record.agrees,
            disagreements=[DisagreementJson(**dict(c), points_at=points_at(c)) for c in self.disagreements],
            hint=self.record.hint, unchecked=self.unchecked,
            model=None if m is None else LoggedModelJson(
                served=m.served, architecture=m.architecture,
                bytes_per_token=None if m.bytes_per_token is None else BytesPerTokenJson(
                    low=round(m.bytes_per_token[0], 1), high=round(m.bytes_per_token[1], 1), from_=m.source),
                note=self.model_note))


class ServeFlagsJson(JsonOutput):
    from_log: list[str] = Field(description="the serve flags the log stated")
    given: list[str] = Field(description="the flags given after `--`, which win")


class DisagreementJson(FactCheck):
    points_at: str | None = Field(description="the term of the prediction the differing figure points at")


class BytesPerTokenJson(JsonOutput):
    model_config = ConfigDict(extra="forbid", validate_by_name=True, serialize_by_alias=True)  # `from` is a keyword

    low: float
    high: float
    from_: str | None = Field(alias="from", description="the figures the range was read from")


class LoggedModelJson(JsonOutput):
    served: str | None = Field(description="the model path or id the log served")
    architecture: str | None
    bytes_per_token: BytesPerTokenJson | None = Field(description="the KV bytes a token the log's figures imply")
    note: str | None = Field(description="MODEL taken as the log's model under another name, or by --same-model")


class KvLogJson(KvPrediction):
    """`boot-harness kv MODEL --log LOG --json`: the prediction of the configuration the log states, every figure the
    log printed held against it; a disagreement is exit 1. `model` is what the log states about its model (not the
    prediction's config path)."""

    model: LoggedModelJson | None  # type: ignore[assignment]  # the log's model replaces the prediction's path
    log: str
    vllm_version_source: str
    platform: str
    platform_source: str
    serve_flags: ServeFlagsJson
    logged: dict[str, bool | int | float | str] = Field(description="every KV figure the log printed")
    checks: list[FactCheck]
    agrees: bool | None
    disagreements: list[DisagreementJson]
    hint: str | None
    unchecked: dict[str, str] = Field(description="figures the log has that could not be checked, and why")


def logged_figures(facts: LogFacts) -> dict[str, Any]:
    """Every KV figure the log printed, under the names the checks use (need_bytes: the printed GiB in bytes)."""
    kv, r = facts.kv, facts.refusal
    out: dict[str, Any] = {}
    for key in ("kv_tokens", "max_concurrency"):
        if getattr(kv, key) is not None:
            out[key] = getattr(kv, key)
    if r is not None and r.kind == Reason.kv_insufficient:
        if r.needed_gib is not None:
            out["need_gib"] = r.needed_gib
            out["need_bytes"] = round(r.needed_gib * GIB)
        if r.available_gib is not None:
            out["available_gib"] = r.available_gib
        if r.estimated_max_model_len is not None:
            out["estimated_max_model_len"] = r.estimated_max_model_len
    if r is not None and r.kind == Reason.max_len_exceeds_model:  # refused before any KV sizing
        out["max_len_refusal"] = True
        if r.derived_max_model_len is not None:
            out["derived_max_model_len"] = r.derived_max_model_len
    for key in ("block_size", "mamba_padding_pct", "padding_layers"):
        if getattr(kv, key) is not None:
            out[key] = getattr(kv, key)
    outcome, reason = _outcome(facts)
    if outcome == Outcome.booted or reason == Reason.kv_insufficient:  # the outcomes the KV sizing decides
        out["outcome"] = outcome
    return out


def _outcome(facts: LogFacts) -> tuple[Outcome | None, Reason | None]:
    if facts.refusal is not None:
        return Outcome.refused, facts.refusal.kind
    if facts.ready_lines:
        return Outcome.booted, Reason.ready
    return None, None


#: what a differing figure that is not a capacity points at (capacities: cell.hint's per-token / state reading)
_LAYOUT_TERMS = {
    "block_size": "the attention block: the hybrid alignment of the attention page to the state page, or the "
                  "backend's block",
    "mamba_padding_pct": "the state page: a state tensor's shape or dtype (conv / recurrent state, the SSM dtype)",
    "padding_layers": "the layer groups: how vLLM buckets each layer type into groups",
    "available_gib": "the KV pool the prediction was sized against (the null block held back)",
}


def points_at(check: FactCheck) -> str | None:
    """The term one differing figure points at; None when it agrees."""
    if check.agrees:
        return None
    return _LAYOUT_TERMS.get(check.fact) or hint(PredictionRecord(checks=[check]))


def _draft(path: str | None, given: str | None, model: str, notes: list[str]) -> ModelShape | None:
    """The draft model the log names, read here: --draft, else the path itself, else a directory of that name beside
    MODEL (a log saved on another machine names its own paths)."""
    if given:
        return read_model(given)
    if not path:
        return None
    if (Path(path) / "config.json").is_file() or (path.endswith(".json") and Path(path).is_file()):
        return read_model(path)
    home = Path(model).resolve()
    home = home.parent if home.suffix == ".json" else home  # MODEL may be the config file itself
    beside = home.parent / Path(path.rstrip("/")).name
    if (beside / "config.json").is_file():
        notes.append(f"draft model: {beside} (the log's {path} is not here)")
        return read_model(beside)
    raise UsageError(f"the draft model {path} that the log names is not readable here: pass --draft DIR")


_LONG_LEN_MARK = "User-specified max_model_len"


def check_log(model: str, log: str, given: list[str], *, version: str | None = None, platform: str | None = None,
              draft: str | None = None, available: tuple[int, str] | None = None,
              same_model: bool = False) -> LogCheck:
    """Read `log`, predict the configuration it states (with `given` flags on top) for `model`, and hold every
    figure it logged against the prediction. `available`: (bytes, source) replacing the log's KV memory;
    `same_model`: MODEL is the model the log served, whatever the log states (harness.predict.log_model)."""
    try:
        lines = list(iter_lines(log, MAX_LINE_BYTES))
    except FileRefused as exc:  # missing, a FIFO, a device: harness.files' one reader said which
        raise UsageError(f"{log}: cannot read the log ({exc.message})") from None
    except OSError as exc:
        raise UsageError(f"{log}: cannot read the log ({exc.strerror or exc})") from None
    parser = LogParser()
    for line in lines:
        parser.feed(line)
    facts = parser.facts
    cfg = read_engine_config(lines)
    if not cfg.found and not given:
        raise UsageError(f"{log}: no serve configuration in the log (no \"Initializing a V1 LLM engine (vX) with "
                         "config: …\" line, no \"non-default args: {…}\"): give the serve flags after `--`")
    if version:
        version_source = "--vllm-version"
    elif (logged := cfg.version or facts.vllm_version) and rules_version(logged) == logged:
        version, version_source = logged, "the log"
    elif logged:  # a nightly's `2024_nightly`: what the server says it is never fails the check
        version, version_source = DEFAULT_VERSION, (f"the log's {logged[:40]!r} is no X.Y.Z: {DEFAULT_VERSION}'s rules "
                                                    "(--vllm-version)")
    else:
        version, version_source = DEFAULT_VERSION, f"the log names none: {DEFAULT_VERSION}'s rules (--vllm-version)"
    try:
        parse_version(version)
    except ValueError as exc:
        raise UsageError(f"--vllm-version: {exc}") from None
    kv = facts.kv
    if kv.device is None and cfg.config.get("device_config") == "cpu":
        kv = kv.model_copy(update={"device": "cpu"})
    platform_source = "--platform" if platform else ("the log" if kv.device else "the log names no KV device")
    platform = platform or platform_of(kv)

    from_log, notes = serve_argv(cfg, facts, version)
    try:
        parse_serve_flags(from_log, version)
    except UsageError as exc:
        raise UsageError(f"{log}: the configuration it states: {exc}") from None
    flags = parse_serve_flags(from_log + list(given), version)
    shape = read_model(model)
    logged_model_ = logged_model(lines, facts, cfg, stated(facts, cfg))
    check_architecture(model, shape, logged_model_, log, same_model)
    # a log whose length was let through above the model's says so ("User-specified max_model_len ... is greater"
    # as a warning): VLLM_ALLOW_LONG_MAX_MODEL_LEN was set for that server
    refused_len = facts.refusal is not None and facts.refusal.kind == Reason.max_len_exceeds_model
    long_ok = not refused_len and any(_LONG_LEN_MARK in line for line in lines)
    try:
        draft_shape = _draft(draft_model_path(flags), draft, model, notes)
    except UsageError as exc:
        raise UsageError(f"{log}: {exc}") from None

    bare = predict(shape, flags, version=version, platform=platform, draft=draft_shape,
                   allow_long_max_model_len=long_ok)
    model_note = identify(model, shape, bare, logged_model_, log, same_model)
    null_block = bare.bytes_per_block if rules_for(version).null_block_in_check else 0
    pool: tuple[int, int, str] | None
    if available is not None:
        pool = (available[0], available[0], available[1])
    else:
        pool = kv_pool(kv, flags.kv_cache_memory_bytes, facts.refusal, null_block)
    outcome, reason = _outcome(facts)
    if pool is None:
        low = high = bare
    else:
        low = predict(shape, flags, version=version, platform=platform, draft=draft_shape, available_bytes=pool[0],
                      available_source=pool[2], allow_long_max_model_len=long_ok)
        high = low if pool[1] == pool[0] else predict(shape, flags, version=version, platform=platform,
                                                      draft=draft_shape, available_bytes=pool[1],
                                                      available_source=pool[2], allow_long_max_model_len=long_ok)
    found = checks(low, high, kv, facts.refusal, outcome, reason)
    if notes:
        low = low.model_copy(update={"notes": [*low.notes, *notes]})
    record = PredictionRecord(prediction=low, checks=found, agrees=all(c.agrees for c in found) if found else None)
    record = record.model_copy(update={"hint": hint(record)})
    figures = logged_figures(facts)
    if not figures:
        raise UsageError(f"{log}: no KV figure in the log to hold a prediction against (no \"KV cache size\", "
                         "\"Maximum concurrency\", KV or max-length refusal, block size or mamba padding line)")
    checked = {c.fact for c in found}
    why = "the log gives no KV memory size (pass --available-gib)" if pool is None else "not predicted for this log"
    unchecked = {k: why for k in figures if k not in checked and k != "need_bytes"}  # need_bytes is need_gib
    return LogCheck(log=str(log), version=version, version_source=version_source, platform=platform,
                    platform_source=platform_source, from_log=from_log, given=list(given), record=record,
                    logged=figures, unchecked=unchecked, model=logged_model_, model_note=model_note)


def render_log_check(lc: LogCheck) -> str:
    """One line per logged figure: predicted, logged, and whether they agree or which term a difference points at."""
    lines = [f"{lc.log}: vLLM {lc.version} ({lc.version_source}), platform {lc.platform} ({lc.platform_source})",
             "  serve flags from the log: " + (" ".join(lc.from_log) or "none")]
    if lc.given:
        lines.append("  flags given (they win): " + " ".join(lc.given))
    if lc.model_note:
        lines.append(f"  note: {lc.model_note}")
    p = lc.record.prediction
    if p is not None and p.available_bytes is not None:
        lines.append(f"  KV memory: {p.available_bytes:,} B ({p.available_source})")
    width = max([len(c.fact) for c in lc.record.checks] + [len(k) for k in lc.unchecked] + [4])
    for c in lc.record.checks:
        verdict = "agrees" if c.agrees else f"differs: {points_at(c)}"
        lines.append(f"  {c.fact:<{width}}  predicted {_show(c.predicted):<14} logged {_show(c.logged):<14} {verdict}")
    for fact, why in lc.unchecked.items():
        lines.append(f"  {fact:<{width}}  {'':<24} logged {_show(lc.logged[fact]):<14} not compared: {why}")
    n, bad = len(lc.record.checks), len(lc.disagreements)
    if not n:
        lines.append("  nothing compared")
    elif bad:
        lines.append(f"  {bad} of {n} figures differ{'s' if bad == 1 else ''} beyond the log's printed rounding")
    else:
        lines.append(f"  all {n} figures agree")
    return "\n".join(lines)


def _show(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value.value if isinstance(value, Enum) else value)
