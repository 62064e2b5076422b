"""The `vllm serve` flags that size the KV cache, read the way the given release's own parser reads them.

A command is pasted from an issue as vLLM took it: `--max_model_len=32k`, `-tp 2`, `--tensor_parallel 2`,
`--speculative-config.num_speculative_tokens 4`. vLLM's FlexibleArgumentParser rewrites argv first (underscores to
dashes, dotted JSON keys; vllm/utils/argparse_utils.py, vllm/utils.py before 0.9.2), then argparse takes any
unambiguous prefix (allow_abbrev is on in every release). Reading a spelling differently from vLLM predicts another
configuration than the one that boots, so every spelling of a KV flag lands on vLLM's value, what that release refuses
is refused (UsageError, exit 2), and a flag that changes the KV cache but is not modelled is refused rather than
skipped. Flags that do not touch the KV cache are skipped: forks add their own. The tables were read off each
release's parser, 0.8.0-0.34.0 (harness.predict.serve_tables; docs/kv-model.md, "Flag spellings"). Suffixes as vLLM
reads them (harness.units.read_human_int): `k`/`m`/`g`/`t` powers of 1000, `K`/`M`/`G`/`T` powers of 1024 (`128k` is
128,000 tokens, `128K` 131,072).
"""

from __future__ import annotations

import ast
import difflib
import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from harness.errors import UsageError
from harness.predict.serve_tables import ALIASES, CHOICES, GRAMMARS, LONG, SINGLE, UNMODELLED, Grammar, Kind, Version
from harness.predict.versions import DEFAULT_VERSION, parse_version, rules_version
from harness.units import read_human_int


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
        self.grammar: Grammar = _newest(GRAMMARS, self.v, lambda g: g.since)
        self.options: dict[str, _Option] = {}
        for name, history in LONG.items():
            since, dest, kind, shortest = _newest(history, self.v)
            if since <= self.v and dest is not None:
                self.options[name] = _Option(name, dest, kind, shortest)
        self.aliases = {a: self.options[long] for a, (since, long) in ALIASES.items()
                        if since <= self.v and long in self.options}
        self.single = _newest(SINGLE, self.v)[1]

    def absent(self, name: str) -> str:
        """Why a KV flag (or alias) of some release is not one of this release's."""
        first = ALIASES[name][0] if name in ALIASES else LONG[name][0][0]
        if self.v < first:
            return f"vLLM {self.name} has no {name} (it came in {_dotted(first)})"
        gone = next(since for since, dest, _, _ in LONG[name] if dest is None and since <= self.v)
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
        elsewhere = sorted(o for o in LONG if o.startswith(name))  # a KV flag (or its prefix) of other releases
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
            if arg in ALIASES and not hint:
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
    choices = CHOICES.get(option.dest)
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
    return next(name for name, history in LONG.items() if any(d == dest for _, d, _, _ in history))


def _flags(values: dict[str, Any], release: _Release) -> ServeFlags:
    for dest, (why, harmless) in UNMODELLED.items():
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
        if mml == -1 and _newest(LONG["--max-model-len"], release.v)[2] == "len":
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
