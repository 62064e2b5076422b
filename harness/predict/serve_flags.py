"""The `vllm serve` flags that size the KV cache, read the way the given release's own parser reads them.

A command is pasted from an issue as vLLM took it: `--max_model_len=32k`, `-tp 2`, `--tensor_parallel 2`,
`--speculative-config.num_speculative_tokens 4`. vLLM's FlexibleArgumentParser rewrites argv first (underscores to
dashes, dotted JSON keys; vllm/utils/argparse_utils.py, vllm/utils.py before 0.9.2), then argparse takes any
unambiguous prefix (allow_abbrev is on in every release). Reading a spelling differently from vLLM predicts another
configuration than the one that boots, so every spelling of a KV flag lands on vLLM's value, what that release refuses
is refused (UsageError, exit 2), and a flag that changes the KV cache but is not modelled is refused rather than
skipped. Flags that do not touch the KV cache are skipped: forks add their own. The tables were read off each
release's parser, 0.8.0-0.34.0 (docs/kv-model.md, "Flag spellings"). Suffixes as vLLM reads them: `k`/`m`/`g`/`t`
powers of 1000, `K`/`M`/`G`/`T` powers of 1024 (`128k` is 128,000 tokens, `128K` 131,072).
"""

from __future__ import annotations

import ast
import difflib
import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.errors import UsageError
from harness.predict.versions import DEFAULT_VERSION, parse_version, rules_version
from harness.units import read_human_int

Version = tuple[int, int, int]


@dataclass(frozen=True)
class ServeFlags:
    model: str | None = None
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    block_size: int | None = None
    speculative: dict[str, Any] = field(default_factory=dict)
    enable_prefix_caching: bool | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    kv_cache_memory_bytes: int | None = None
    mamba_cache_mode: str | None = None
    mamba_cache_dtype: str | None = None
    mamba_ssm_cache_dtype: str | None = None
    #: --async-scheduling / --no-async-scheduling; None: vLLM's default (on, unless a draft model is used)
    async_scheduling: bool | None = None
    #: --enforce-eager / --no-enforce-eager: no compile, no graphs (the boot's phases, not its KV sizing on a CPU)
    enforce_eager: bool | None = None
    #: --hf-overrides: merged into config.json by the predictor (predictor.py), as that release merges it
    hf_overrides: dict[str, Any] = field(default_factory=dict)
    #: --gpu-memory-utilization: the share of each GPU vLLM may use (the memory curve's headroom line); None: 0.9
    gpu_memory_utilization: float | None = None
    #: --data-parallel-size / -dp: engine replicas, each with its own tensor × pipeline GPUs (config refusals only)
    data_parallel_size: int = 1
    #: --enable-chunked-prefill / --no-enable-chunked-prefill; None: vLLM's default (on in V1)
    enable_chunked_prefill: bool | None = None


# --- what each release's parser does (read off the 0.8.0-0.34.0 wheels) -------------------------------------------

@dataclass(frozen=True)
class Grammar:
    """FlexibleArgumentParser.parse_args's rewrite of argv, from the release that changed it."""

    since: Version
    #: `--a.b v` → `--a '{"b": v}'`: "none" (before 0.9.0), "long" (`--` flags only, 0.9.0), "any" (`-sc.b` too, 0.9.2)
    dotted: Literal["none", "long", "any"]
    #: a dotted value: "str" as written (0.9.0), "json" else the string (0.9.2), "json+human" then 32k (0.20.0)
    dotted_values: Literal["str", "json", "json+human"]
    #: underscores become dashes in the whole key, dotted part included (before 0.9.1: `.num-speculative-tokens`)
    whole_key: bool
    #: human_readable_int knows `t`/`T` (0.13.0 on; before, `1T` is refused)
    tera: bool


_GRAMMARS = (
    Grammar((0, 8, 0), "none", "str", whole_key=True, tera=False),
    Grammar((0, 9, 0), "long", "str", whole_key=True, tera=False),
    Grammar((0, 9, 1), "long", "str", whole_key=False, tera=False),
    Grammar((0, 9, 2), "any", "json", whole_key=False, tera=False),
    Grammar((0, 13, 0), "any", "json", whole_key=False, tera=True),
    Grammar((0, 20, 0), "any", "json+human", whole_key=False, tera=True),
)

#: How a value is read. int: int(); float: float(); human: human_readable_int; len: that or `auto`/-1 (0.14 on);
#: json: json.loads;
#: literal: ast.literal_eval (0.8.2's string); dict|str: JSON when it looks like an object, else the string
#: (union_dict_and_str); str; on/off: a switch that sets True/False. `?`: optional_type / nullable_str, "" and "None"
#: read as None.
Kind = Literal["int", "float", "human", "len", "json", "literal", "dict|str", "str", "on", "off", "?int",
               "?human", "?json",
               "?literal", "?str"]

#: option → its history: (since, dest, kind, the shortest prefix argparse takes for it); dest None: gone from then on.
#: The prefix length is 1 + the longest prefix the option shares with any other option of that release.
_LONG: dict[str, tuple[tuple[Version, str | None, Kind, int], ...]] = {
    "--model": (((0, 8, 0), "model", "str", 8),),
    "--max-model-len": (((0, 8, 0), "max_model_len", "int", 7), ((0, 8, 4), "max_model_len", "human", 7),
                        ((0, 14, 0), "max_model_len", "len", 7)),
    "--tensor-parallel-size": (((0, 8, 0), "tensor_parallel_size", "int", 4),),
    "--dtype": (((0, 8, 0), "dtype", "str", 4),),
    "--kv-cache-dtype": (((0, 8, 0), "kv_cache_dtype", "str", 6), ((0, 10, 2), "kv_cache_dtype", "str", 12),
                         ((0, 19, 0), "kv_cache_dtype", "str", 17)),
    "--block-size": (((0, 8, 0), "block_size", "int", 3),),
    "--speculative-config": (((0, 8, 2), "speculative_config", "?literal", 15),
                             ((0, 8, 3), "speculative_config", "json", 4),
                             ((0, 10, 1), "speculative_config", "?json", 4),
                             ((0, 16, 0), "speculative_config", "?json", 7)),
    "--speculative-model": (((0, 8, 0), "speculative_model", "?str", 20), ((0, 8, 3), None, "str", 0)),
    "--num-speculative-tokens": (((0, 8, 0), "num_speculative_tokens", "int", 8), ((0, 8, 3), None, "int", 0)),
    "--spec-method": (((0, 22, 0), "spec_method", "?str", 9),),
    "--spec-model": (((0, 22, 0), "spec_model", "?str", 9),),
    "--spec-tokens": (((0, 22, 0), "spec_tokens", "int", 8),),
    "--enable-prefix-caching": (((0, 8, 0), "enable_prefix_caching", "on", 12),),
    "--no-enable-prefix-caching": (((0, 8, 0), "enable_prefix_caching", "off", 6),
                                   ((0, 8, 5), "enable_prefix_caching", "off", 15)),
    "--disable-prefix-caching": (((0, 33, 0), "enable_prefix_caching", "off", 13),),
    "--max-num-batched-tokens": (((0, 8, 0), "max_num_batched_tokens", "int", 11),
                                 ((0, 9, 1), "max_num_batched_tokens", "human", 11)),
    "--max-num-seqs": (((0, 8, 0), "max_num_seqs", "int", 11), ((0, 26, 0), "max_num_seqs", "int", 12)),
    "--kv-cache-memory-bytes": (((0, 10, 2), "kv_cache_memory_bytes", "?human", 12),
                                ((0, 12, 0), "kv_cache_memory_bytes", "?human", 14)),
    "--mamba-cache-mode": (((0, 15, 0), "mamba_cache_mode", "str", 15),),
    "--mamba-cache-dtype": (((0, 10, 1), "mamba_cache_dtype", "str", 9), ((0, 15, 0), "mamba_cache_dtype", "str", 15)),
    "--mamba-ssm-cache-dtype": (((0, 10, 1), "mamba_ssm_cache_dtype", "str", 9),
                                ((0, 27, 0), "mamba_ssm_cache_dtype", "str", 11)),
    # no torch.compile and no CUDA graphs: the boot skips those phases (and, on a GPU, their memory). A switch of the
    # model config since 0.9.0 (`--no-…` from then, as `--no-disable-sliding-window`); no other option starts `--enf`
    "--enforce-eager": (((0, 8, 0), "enforce_eager", "on", 5),),
    "--gpu-memory-utilization": (((0, 8, 0), "gpu_memory_utilization", "float", 4),),
    "--no-enforce-eager": (((0, 9, 0), "enforce_eager", "off", 8),),
    "--async-scheduling": (((0, 10, 0), "async_scheduling", "on", 4),),
    "--no-async-scheduling": (((0, 10, 0), "async_scheduling", "off", 7),),
    # they change the KV cache and are not modelled: refused when set (_UNMODELLED)
    "--pipeline-parallel-size": (((0, 8, 0), "pipeline_parallel_size", "int", 4),),
    # read for the config refusals only (predict/refusals.py); the whole name: a prefix is not resolved for these
    "--data-parallel-size": (((0, 8, 3), "data_parallel_size", "int", 20),),
    "--enable-chunked-prefill": (((0, 8, 0), "enable_chunked_prefill", "on", 24),),
    "--no-enable-chunked-prefill": (((0, 9, 0), "enable_chunked_prefill", "off", 27),),
    "--decode-context-parallel-size": (((0, 10, 2), "decode_context_parallel_size", "int", 5),),
    "--prefill-context-parallel-size": (((0, 12, 0), "prefill_context_parallel_size", "int", 8),
                                        ((0, 24, 0), "prefill_context_parallel_size", "int", 11)),
    "--num-gpu-blocks-override": (((0, 8, 0), "num_gpu_blocks_override", "int", 7),
                                  ((0, 8, 5), "num_gpu_blocks_override", "?int", 7),
                                  ((0, 12, 0), "num_gpu_blocks_override", "?int", 4),
                                  ((0, 20, 0), "num_gpu_blocks_override", "?int", 6)),
    "--kv-cache-dtype-skip-layers": (((0, 19, 0), "kv_cache_dtype_skip_layers", "str", 17),),
    "--disable-sliding-window": (((0, 8, 0), "disable_sliding_window", "on", 11),
                                 ((0, 33, 0), "disable_sliding_window", "on", 13)),
    "--no-disable-sliding-window": (((0, 9, 0), "disable_sliding_window", "off", 14),),
    "--enable-sliding-window": (((0, 33, 0), "disable_sliding_window", "off", 12),),
    "--disable-hybrid-kv-cache-manager": (((0, 9, 1), "disable_hybrid_kv_cache_manager", "on", 11),
                                          ((0, 33, 0), "disable_hybrid_kv_cache_manager", "on", 12)),
    "--no-disable-hybrid-kv-cache-manager": (((0, 9, 1), "disable_hybrid_kv_cache_manager", "off", 14),),
    "--enable-hybrid-kv-cache-manager": (((0, 33, 0), "disable_hybrid_kv_cache_manager", "off", 11),),
    "--hf-overrides": (((0, 8, 0), "hf_overrides", "json", 6), ((0, 9, 0), "hf_overrides", "dict|str", 6)),
    "--config": (((0, 8, 0), "config", "str", 9),),  # `vllm serve`'s own until 0.10.0, the API server's too since
}
#: the short aliases of KV flags, from the release that added them
_ALIASES: dict[str, tuple[Version, str]] = {
    "-tp": ((0, 8, 0), "--tensor-parallel-size"), "-pp": ((0, 8, 0), "--pipeline-parallel-size"),
    "-dp": ((0, 8, 3), "--data-parallel-size"),
    "-dcp": ((0, 10, 2), "--decode-context-parallel-size"), "-pcp": ((0, 12, 0), "--prefill-context-parallel-size"),
    "-sc": ((0, 19, 0), "--speculative-config"),
}
#: every single-dash option of the serve parser (few enough to resolve `-t` and refuse `-tp2` exactly as argparse)
_SINGLE: tuple[tuple[Version, frozenset[str]], ...] = tuple((v, frozenset(s.split())) for v, s in (
    ((0, 8, 0), "-O -h -pp -q -spec-draft-tp -tp"),
    ((0, 8, 3), "-O -dp -h -pp -q -tp"),
    ((0, 9, 0), "-O -dp -dpa -dpl -dpp -dpr -h -pp -q -tp"),
    ((0, 9, 1), "-O -asc -dp -dpa -dpb -dpl -dpp -dpr -h -pp -q -tp"),
    ((0, 9, 2), "-O -asc -dp -dpa -dpb -dpl -dpn -dpp -dpr -h -pp -q -tp"),
    ((0, 10, 2), "-O -asc -dcp -dp -dpa -dpb -dpl -dpn -dpp -dpr -h -pp -q -tp"),
    ((0, 11, 1), "-O -asc -dcp -dp -dpa -dpb -dpe -dph -dpl -dpn -dpp -dpr -h -n -pp -q -r -tp"),
    ((0, 12, 0), "-asc -cc -dcp -dp -dpa -dpb -dpe -dph -dpl -dpn -dpp -dpr -h -n -pcp -pp -q -r -tp"),
    ((0, 13, 0), "-ac -asc -cc -dcp -dp -dpa -dpb -dpe -dph -dpl -dpn -dpp -dpr -h -n -pcp -pp -q -r -tp"),
    ((0, 14, 0), "-ac -asc -cc -dcp -dp -dpa -dpb -dpe -dph -dpl -dpn -dpp -dpr -ep -h -n -pcp -pp -q -r -tp"),
    ((0, 19, 0), "-ac -asc -cc -dcp -dp -dpa -dpb -dpe -dph -dpl -dpn -dpp -dpr -ep -h -n -pcp -pp -q -r -sc -tp"),
    ((0, 22, 0), "-ac -asc -cc -dcp -dp -dpa -dpb -dpe -dph -dpl -dpm -dpn -dpp -dpr -ep -h -n -pcp -pp -q -r -sc -tp"),
    ((0, 24, 0), "-ac -asc -cc -dc -dcp -dp -dpa -dpb -dpe -dph -dpl -dpm -dpn -dpp -dpr -ep -h -n -pcp -pp -q -r -sc "
                 "-tp"),
))


def _grow(*steps: tuple[Version, tuple[Any, ...] | None]) -> tuple[tuple[Version, tuple[Any, ...] | None], ...]:
    """Choices that only grow: each step adds to the last; None: any value from then on."""
    out: list[tuple[Version, tuple[Any, ...] | None]] = []
    acc: tuple[Any, ...] | None = ()
    for since, added in steps:
        acc = None if added is None else (acc or ()) + added
        out.append((since, acc))
    return tuple(out)


_MAMBA_DTYPES = _grow(((0, 10, 1), ("auto", "float32")), ((0, 13, 0), ("float16",)), ((0, 22, 0), ("bfloat16",)))
#: argparse's choices per dest and release; a dest not here takes any value of its kind
_CHOICES: dict[str, tuple[tuple[Version, tuple[Any, ...] | None], ...]] = {
    "dtype": (((0, 8, 0), ("auto", "half", "float16", "bfloat16", "float", "float32")),),
    "kv_cache_dtype": _grow(((0, 8, 0), ("auto", "fp8", "fp8_e5m2", "fp8_e4m3")), ((0, 10, 0), ("fp8_inc",)),
                            ((0, 11, 0), ("bfloat16",)), ((0, 11, 1), ("fp8_ds_mla",)), ((0, 18, 0), ("float16",)),
                            ((0, 20, 0), ("fp8_per_token_head", "int8_per_token_head", "nvfp4", "turboquant_3bit_nc",
                                          "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_k8v4")),
                            ((0, 25, 0), ("int4_per_token_head",)), ((0, 28, 0), ("nvfp4_4over6",)),
                            ((0, 30, 0), ("nvfp4_ds_mla",)), ((0, 32, 0), ("ultraquant_4bit",)), ((0, 33, 0), None)),
    "block_size": _grow(((0, 8, 0), (8, 16, 32, 64, 128)), ((0, 8, 5), (1,)), ((0, 11, 1), (256,)), ((0, 18, 0), None)),
    "mamba_cache_mode": (((0, 15, 0), ("align", "all", "none")), ((0, 32, 0), ("align", "none"))),
    "mamba_cache_dtype": _MAMBA_DTYPES,
    "mamba_ssm_cache_dtype": _MAMBA_DTYPES,
}
#: dests that change the KV cache in ways the predictor does not model: refused unless left at what vLLM does anyway
_UNMODELLED: dict[str, tuple[str, tuple[Any, ...]]] = {
    "pipeline_parallel_size": ("each pipeline stage holds the KV cache of its own layers only", (None, 1)),
    "decode_context_parallel_size": ("it splits each sequence's KV cache across ranks", (None, 1)),
    "prefill_context_parallel_size": ("it splits each sequence's KV cache across ranks", (None, 1)),
    "num_gpu_blocks_override": ("it replaces the number of KV blocks vLLM sizes", (None,)),
    "kv_cache_dtype_skip_layers": ("those layers keep their KV cache in the model's dtype", (None, "")),
    "disable_sliding_window": ("sliding-window layers then keep the whole context", (None, False)),
    "disable_hybrid_kv_cache_manager": ("every layer then gets blocks for the whole context", (None, False)),
    "config": ("the flags in a YAML config file are not read here; pass them on the command line", (None,)),
}
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's: such an argument is a value, not a flag


def _newest(table, v: Version, since=lambda entry: entry[0]):
    """The entry in force at `v`: the newest at or below it, the first for anything older (as versions.py's)."""
    chosen = table[0]
    for entry in table:
        if since(entry) <= v:
            chosen = entry
    return chosen


@dataclass(frozen=True)
class _Option:
    name: str
    dest: str
    kind: Kind
    shortest: int


def _dotted(v: Version) -> str:
    return ".".join(map(str, v))


class _Release:
    """The serve parser of one release, as far as the KV flags go."""

    def __init__(self, version: str):
        try:
            self.v = parse_version(version)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        self.name = _dotted(self.v)
        self.grammar: Grammar = _newest(_GRAMMARS, self.v, lambda g: g.since)
        self.options: dict[str, _Option] = {}
        for name, history in _LONG.items():
            since, dest, kind, shortest = _newest(history, self.v)
            if since <= self.v and dest is not None:
                self.options[name] = _Option(name, dest, kind, shortest)
        self.aliases = {a: self.options[long] for a, (since, long) in _ALIASES.items()
                        if since <= self.v and long in self.options}
        self.single = _newest(_SINGLE, self.v)[1]

    def absent(self, name: str) -> str:
        """Why a KV flag (or alias) of some release is not one of this release's."""
        first = _ALIASES[name][0] if name in _ALIASES else _LONG[name][0][0]
        if self.v < first:
            return f"vLLM {self.name} has no {name} (it came in {_dotted(first)})"
        gone = next(since for since, dest, _, _ in _LONG[name] if dest is None and since <= self.v)
        hint = "; write --speculative-config" if "speculative" in name else ""
        return f"vLLM {self.name} has no {name} (gone in {_dotted(gone)}{hint})"

    def resolve(self, arg: str) -> tuple[str, _Option | None, str | None] | None:
        """argparse's reading of one argument: None for a value; else (its spelling, the KV option it selects or None
        for any other flag, the value given with `=`)."""
        if not arg.startswith("-") or arg == "-":
            return None
        if arg == "--":  # argparse's end of the flags
            return arg, None, None
        if arg.startswith("--"):
            return self._resolve_long(arg)
        if arg.startswith("-O"):  # -O3, -O.mode, -O 3: the optimization level, rewritten or an option in every release
            return arg, None, None
        return self._resolve_short(arg)

    def _resolve_long(self, arg: str) -> tuple[str, _Option | None, str | None] | None:
        name, eq, explicit = arg.partition("=")
        value = explicit if eq else None
        if name in self.options:
            return name, self.options[name], value
        candidates = sorted(o for o in self.options if o.startswith(name))
        if candidates:
            chosen = [o for o in candidates if len(name) >= self.options[o].shortest]
            if chosen:
                return name, self.options[chosen[0]], value
            raise UsageError(f"{name}: ambiguous in vLLM {self.name}, which reads it as the start of "
                             f"{', '.join(candidates)} or another flag; write the whole flag")
        if "." in name:  # a dotted key left for argparse: this release has no dotted keys
            head = self._resolve_long(name.split(".")[0])
            if head is not None and head[1] is not None:
                raise UsageError(f"{name}: vLLM {self.name} reads no dotted keys (0.9.0 on); write {head[1].name} "
                                 "with a JSON object")
        if " " in name:  # argparse takes it for a positional argument
            head = self._resolve_long(name.split(" ")[0])
            if head is not None and head[1] is not None:
                raise UsageError(f"{arg!r}: one argument with a space; vLLM takes it for a positional argument")
            return None
        elsewhere = sorted(o for o in _LONG if o.startswith(name))  # a KV flag (or its prefix) of other releases
        if elsewhere:
            raise UsageError(f"{name}: {self.absent(elsewhere[0])}")
        if name[1:] in self.aliases:
            raise UsageError(f"{name}: not a flag of vLLM {self.name} (did you mean {name[1:]}?)")
        close = difflib.get_close_matches(name, list(self.options), n=1, cutoff=0.85)
        if close:
            raise UsageError(f"{name}: not a flag of vLLM {self.name} (did you mean {close[0]}?)")
        return name, None, value

    def _resolve_short(self, arg: str) -> tuple[str, _Option | None, str | None] | None:
        single = self.single
        found: list[tuple[str, str | None]] = []
        if arg in single:
            found = [(arg, None)]
        elif "=" in arg and arg.split("=", 1)[0] in single:
            flag, given = arg.split("=", 1)
            found = [(flag, given)]
        else:
            if arg[:2] in single:
                found.append((arg[:2], arg[2:]))
            found += [(o, None) for o in sorted(single) if o.startswith(arg)]
        if len(found) > 1:
            raise UsageError(f"{arg}: ambiguous in vLLM {self.name} (it could be {', '.join(o for o, _ in found)})")
        if not found:
            if _NEGATIVE_NUMBER.match(arg) or " " in arg:
                return None
            hint = next((f" (write {a} {arg[len(a):].lstrip('=')})" for a in self.aliases if arg.startswith(a)), "")
            if arg in _ALIASES and not hint:
                raise UsageError(f"{arg}: {self.absent(arg)}")
            raise UsageError(f"{arg}: not a flag of vLLM {self.name}{hint}")
        option, value = found[0]
        return option, self.aliases.get(option), value


def _convert(option: _Option, raw: str, spelling: str, release: _Release) -> Any:
    kind: str = option.kind  # a Kind, "?" and all; what follows "?" is read as a Kind of its own
    flag = option.name
    if kind.startswith("?"):
        if raw in ("", "None"):
            return None
        kind = kind[1:]
    try:
        if kind == "int":
            value: Any = int(raw)
        elif kind == "float":
            value = float(raw)
        elif kind in ("human", "len"):
            if kind == "len" and (raw.strip() == "-1" or raw.strip().lower() == "auto"):
                value = -1
            else:
                value = read_human_int(raw, tera=release.grammar.tera)
        elif kind == "json":
            value = json.loads(raw)
        elif kind == "literal":
            value = ast.literal_eval(raw)
        elif kind == "dict|str":
            looks = r"^{.*}$" if release.v < (0, 10, 0) else r"(?s)^\s*{.*}\s*$"
            value = json.loads(raw) if re.match(looks, raw) else raw
        else:
            value = raw
    except (ValueError, SyntaxError) as exc:
        given = "" if spelling == flag else f" (given as {spelling})"
        if kind in ("json", "literal", "dict|str"):
            why = f"not JSON ({exc.msg})" if isinstance(exc, json.JSONDecodeError) else "not a Python literal"
        elif kind == "int":
            why = f"not an integer (vLLM {release.name} reads no suffixes here)"
        elif str(exc).startswith("no decimals"):
            why = str(exc)
        else:
            why = (f"not a number vLLM {release.name} reads (131072, 128k, 128K"
                   + (", 1T" if release.grammar.tera else "") + (", auto" if kind == "len" else "") + ")")
        raise UsageError(f"{flag} {raw!r}{given}: {why}") from None
    choices = _CHOICES.get(option.dest)
    allowed = _newest(choices, release.v)[1] if choices else None
    if allowed is not None and value not in allowed:
        raise UsageError(f"{flag} {raw!r}: not one of {', '.join(map(str, allowed))} (vLLM {release.name})")
    return value


def _dotted_value(raw: str, grammar: Grammar) -> Any:
    if grammar.dotted_values == "str":
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        if grammar.dotted_values == "json+human":
            try:
                return read_human_int(raw, tera=grammar.tera)
            except ValueError:
                pass
        return raw


def _merge(into: dict[str, Any], update: dict[str, Any], lists: bool) -> None:
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v, lists)
        elif lists and isinstance(v, list) and isinstance(into.get(k), list):
            into[k] += v
        else:
            into[k] = v


def _rewrite(argv: list[str], grammar: Grammar) -> list[str]:
    """FlexibleArgumentParser.parse_args before argparse: `--a_b` → `--a-b`, then every dotted `--a.b v` (and `-sc.b
    v` from 0.9.2) taken out and appended as `--a '{"b": v}'` — after the rest, so it wins over `--a JSON`."""
    out = []
    for arg in argv:
        if arg.startswith("--"):
            key, eq, given = arg.partition("=")
            head, dot, tail = (key[2:], "", "") if grammar.whole_key else key[2:].partition(".")
            out.append("--" + head.replace("_", "-") + dot + tail + eq + given)
        else:
            out.append(arg)
    if grammar.dotted == "none":
        return out
    dicts: dict[str, dict[str, Any]] = {}
    kept, skip = [], set()
    for i, arg in enumerate(out):
        if i in skip:
            continue
        if arg.startswith("--" if grammar.dotted == "long" else "-") and "." in arg and not arg.startswith("-O"):
            if "=" in arg:
                key, raw = arg.split("=", 1)
                if "." not in key:
                    kept.append(arg)
                    continue
            else:
                if i + 1 >= len(out):
                    raise UsageError(f"{arg}: expects a value")
                key, raw = arg, out[i + 1]
                skip.add(i + 1)
            value: Any
            if grammar.dotted == "any" and key.endswith("+"):
                key, value = key[:-1], raw.split(",")
            else:
                value = _dotted_value(raw, grammar)
            name, *path = key.split(".")
            for part in reversed(path):
                value = {part: value}
            _merge(dicts.setdefault(name, {}), value, lists=grammar.dotted == "any")
            continue
        kept.append(arg)
    for name, value in dicts.items():
        kept += [name, json.dumps(value)]
    return kept


def parse_serve_flags(argv: list[str], version: str | None = None) -> ServeFlags:
    """The KV-sizing flags of `vllm serve … FLAGS` (or a cell's argv) as vLLM `version` (default 0.32.0) reads them."""
    release = _Release(version or DEFAULT_VERSION)
    return _flags(_read(argv, release, recorded=False), release)


def _read(argv: list[str], release: _Release, recorded: bool) -> dict[str, Any]:
    """Each KV dest's value as `release`'s parser reads argv, the last one given winning. `recorded`: argv a server
    already got (a record, a matrix's cell): what this reader would refuse is passed over rather than raised (the
    record says how vLLM took it; a fork's or another release's flag must not stop an analysis), and a value it
    cannot convert leaves its dest unknown."""
    try:
        args = _rewrite(list(argv), release.grammar)
    except UsageError:  # a dotted flag without its value, last
        if not recorded:
            raise
        args = _rewrite(list(argv)[:-1], release.grammar)
    values: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            if recorded:  # a recorded argv has the runtime's command before vLLM's: its `--` is not vLLM's
                i += 1
                continue
            raise UsageError("`--` among the serve flags: vLLM takes whatever follows it as positional arguments "
                             "and refuses them")
        try:
            resolved = release.resolve(arg)
        except UsageError:
            if not recorded:
                raise
            resolved = None
        spelling, option, explicit = resolved or ("", None, None)
        if option is None:
            i += 1
            continue
        try:
            if option.kind in ("on", "off"):
                if explicit is not None:
                    raise UsageError(f"{spelling}={explicit}: {option.name} takes no value in vLLM {release.name}")
                values[option.dest] = option.kind == "on"
            else:
                if explicit is None:
                    if i + 1 >= len(args) or _takes_as_option(release, args[i + 1], recorded):
                        raise UsageError(f"{option.name}: expects a value")
                    explicit = args[i + 1]
                    i += 1
                values[option.dest] = _convert(option, explicit, spelling, release)
        except UsageError:
            if not recorded:
                raise
            values.pop(option.dest, None)
        i += 1
    return values


def _takes_as_option(release: _Release, arg: str, recorded: bool) -> bool:
    """Whether argparse takes `arg` for an option (so not for the value before it); in a recorded argv, one this
    reader would refuse is an option too."""
    try:
        return release.resolve(arg) is not None
    except UsageError:
        if not recorded:
            raise
        return True


# --- the one reader of a flag in an argv the harness did not parse for a prediction ---------------------------------

@functools.lru_cache(maxsize=64)
def _recorded_release(version: str | None) -> _Release:
    """The release a recorded argv is read as: its logged version, else (none logged, or no X.Y in it) the default.
    Cached: an analysis reads every cell's flags, a probe every token's."""
    return _Release(rules_version(version))


def flag_value(argv: list[str], dest: str, version: str | None = None) -> Any:
    """What vLLM `version` read for `dest` (`max_model_len`, `block_size`, `kv_cache_memory_bytes`, ...) from argv a
    server got: every spelling it takes (`--max_model_len`, `--max-model=8k`, a unique prefix, `-tp`), the last given
    winning, converted as that release converts it (`8k` 8000, `8K` 8192, `auto` -1). None when it is not given or its
    value is one vLLM refuses. Every reader of a cell's flags (analysis, report, frontier) reads through this, so no
    spelling vLLM reads identically is read differently here."""
    return _read(argv, _recorded_release(version), recorded=True).get(dest)


def flag_dest(flag: str, version: str | None = None) -> str | None:
    """The KV dest vLLM `version` reads `flag` as (`--max_model_len`, `--max-model`: max_model_len), None for any
    other flag: how a matrix's flag axis is told to be the length axis, whatever its spelling."""
    release = _recorded_release(version)
    args = _rewrite([flag.partition("=")[0]], release.grammar)
    try:
        resolved = release.resolve(args[0]) if len(args) == 1 else None
    except UsageError:
        return None
    return resolved[1].dest if resolved is not None and resolved[1] is not None else None


def spelling_of(argv: list[str], dest: str, version: str | None = None) -> str | None:
    """The flag as written in argv (`--max_model_len`) that gives `dest` its value (the last such), so that a probe
    can set that same argument; None when no argument gives it."""
    names = [token.partition("=")[0] for token in argv if token.startswith("-")]
    return next((n for n in reversed(names) if flag_dest(n, version) == dest), None)


def eager(argv: list[str], version: str | None = None) -> bool:
    """Whether the server runs eager (`--enforce-eager`, `--enforce_eager`, `--enf`, the last of it and
    `--no-enforce-eager` winning): its boot then has no compile and no graph phases."""
    return bool(flag_value(argv, "enforce_eager", version))


def option_name(dest: str) -> str:
    """The long option vLLM documents for `dest` (`max_model_len`: `--max-model-len`): how the harness writes it."""
    return next(name for name, history in _LONG.items() if any(d == dest for _, d, _, _ in history))


def _flags(values: dict[str, Any], release: _Release) -> ServeFlags:
    for dest, (why, harmless) in _UNMODELLED.items():
        value = values.pop(dest, None)
        if not any(value is h or (type(value) is type(h) and value == h) for h in harmless):
            flag = next(o.name for o in release.options.values() if o.dest == dest)
            raise UsageError(f"{flag}{'' if value is True else f' {value}'}: not predicted ({why})")
    spec = values.pop("speculative_config", None)
    old_model, old_tokens = values.pop("speculative_model", None), values.pop("num_speculative_tokens", None)
    if spec is None and (old_model is not None or old_tokens is not None):  # 0.8.0-0.8.2's flags
        spec = {"model": old_model, "num_speculative_tokens": old_tokens}
        if old_model == "[ngram]":
            spec = {"method": "ngram", "num_speculative_tokens": old_tokens}
        spec = {k: v for k, v in spec.items() if v is not None}
    named = (("--spec-method", "method", "spec_method"), ("--spec-model", "model", "spec_model"),
             ("--spec-tokens", "num_speculative_tokens", "spec_tokens"))
    shortcuts = [(f, k, values.pop(d, None)) for f, k, d in named]
    for flag, key, value in shortcuts:  # EngineArgs.create_speculative_config (0.22 on)
        if value is None:
            continue
        if spec is None:
            spec = {}
        if not isinstance(spec, dict):
            break
        if key in spec:
            raise UsageError(f"{flag} and --speculative-config['{key}'] are mutually exclusive (vLLM {release.name})")
        spec[key] = value
    if spec is not None and not isinstance(spec, dict):
        raise UsageError("--speculative-config: must be a JSON object")
    if "hf_overrides" in values and not isinstance(values["hf_overrides"], dict):
        raise UsageError(f"--hf-overrides {values['hf_overrides']!r}: not predicted (only a JSON object is read)")
    if values.get("hf_overrides") is None:
        values.pop("hf_overrides", None)
    if spec:
        values["speculative"] = spec
    mml = values.get("max_model_len")
    if mml is not None and mml <= 0:
        if mml == -1 and _newest(_LONG["--max-model-len"], release.v)[2] == "len":
            raise UsageError("--max-model-len auto: auto-fit is not predicted; give a length")
        raise UsageError(f"--max-model-len {mml}: not a length")
    for dest in ("tensor_parallel_size", "block_size"):
        if dest in values and values[dest] < 1:
            raise UsageError(f"{option_name(dest)} {values[dest]}: must be 1 or more")
    for dest in ("max_model_len", "tensor_parallel_size", "block_size", "max_num_batched_tokens", "max_num_seqs",
                 "kv_cache_memory_bytes"):
        _within(option_name(dest), values.get(dest), _LIMITS[dest])
    n = spec.get("num_speculative_tokens") if isinstance(spec, dict) else None
    if isinstance(n, int) and not isinstance(n, bool):  # a string is kept as the parser read it: see speculative_tokens
        speculative_tokens({"num_speculative_tokens": n})
    return ServeFlags(**values)


#: Far beyond any machine or model, so the arithmetic stays exact and bounded: a value above is a typo, refused in
#: one line rather than sized (a 10**30-token block, a 10**400-byte pool: floats overflow, lists never end).
_LIMITS = {"max_model_len": 1 << 40, "tensor_parallel_size": 1 << 16, "block_size": 1 << 20,
           "max_num_batched_tokens": 1 << 40, "max_num_seqs": 1 << 32, "kv_cache_memory_bytes": 1 << 62,
           "num_speculative_tokens": 1 << 16}


def speculative_tokens(spec: dict[str, Any], default: int = 0) -> int:
    """`num_speculative_tokens` as vLLM's SpeculativeConfig validates it: a count (a dotted flag's value may have
    stayed the string "4"), 0 or more, bounded; anything else is one line, not a traceback."""
    n = spec.get("num_speculative_tokens")
    if n is None:
        return default
    try:
        count = None if isinstance(n, (bool, float)) else int(n)
    except ValueError:
        count = None
    if count is None or count < 0:
        raise UsageError(f"--speculative-config: num_speculative_tokens {n!r}: not a count (0, 1, 4, ...)")
    _within("--speculative-config num_speculative_tokens", count, _LIMITS["num_speculative_tokens"])
    return count


def _within(flag: str, value: Any, limit: int) -> None:
    if isinstance(value, int) and value > limit:
        raise UsageError(f"{flag} {value}: beyond any machine (at most {limit:,}); not sized")
