"""The serve configuration a vLLM log states about itself, so that a saved log can be predicted without its command.

Two records carry it, and each release prints them its own way (read off the 0.6.0-0.34.0 wheels):

- the engine's config line, "Initializing a V1 LLM engine (v0.32.0) with config: " (0.7.1+, v1/engine/core.py),
  "Initializing a V0 LLM engine (v…) with config: " (0.7.1-0.10, engine/llm_engine.py) or "Initializing an LLM engine
  (v…) with config: " (0.6.0-0.7.0), then `VllmConfig.__str__` (0.6.5+; before, llm_engine.py's own format of the
  same keys): `key=value, ` pairs whose values are reprs, bare words or nested objects (`speculative_config=
  SpeculativeConfig(method='draft_model', model='/m', num_spec_tokens=2)`, ≤0.8.x `SpeculativeConfig(draft_model=
  '/m', num_spec_tokens=2)`), resolved by vLLM: `max_seq_len` is the length it serves (derived when not given),
  `dtype` a torch dtype. It has no block size and no KV memory size;
- "non-default args: {…}" (0.9+; entrypoints/openai/cli_args.py, then entrypoints/utils.py, serve/utils/api_utils.py,
  common/startup.py): the dict repr of the engine arguments the user set, keyed by their dests (`max_model_len`,
  `kv_cache_memory_bytes`, `speculative_config` as the JSON given), secrets masked from 0.29 on.

Plus "Chunked prefill is enabled with max_num_batched_tokens=N." (config/scheduler.py), the resolved batch budget.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .parser import own_text
from .text import MAX_LINE_CHARS, segments, split_line

_CONFIG_LINE = re.compile(r"\AInitializing (?:a V1 |a V0 |an )LLM engine \(v?([^)\s]{1,80})\) with config: ")
_NON_DEFAULT = re.compile(r"\Anon-default args: (\{.*\})\s*\Z", re.DOTALL)
_BATCHED = re.compile(r"\AChunked prefill is enabled with max_num_batched_tokens=(\d{1,12})\b")
_KEY = re.compile(r"\A\s*([A-Za-z_][\w.]{0,100})\s*=\s*(.*)\Z", re.DOTALL)
_DICT_KEY = re.compile(r"\A\s*(['\"])([^'\"]{1,200})\1\s*:\s*(.*)\Z", re.DOTALL)
_OPEN, _CLOSE = "([{<", ")]}>"
#: a quote opens a string only after one of these (or at the start): an apostrophe inside a bare word does not
_QUOTE_AFTER = frozenset("=([{<,: ")


@dataclass(frozen=True)
class EngineConfig:
    """What a log said about its own configuration; empty where it said nothing."""

    version: str | None = None
    """The release of the config line ("(v0.32.0)")."""
    config: dict[str, str] = field(default_factory=dict)
    """The config line's pairs, each value as printed."""
    args: dict[str, Any] | None = None
    """The non-default args (values as Python literals; one that is not a literal is left out); None: no such line."""
    max_num_batched_tokens: int | None = None
    """From "Chunked prefill is enabled with max_num_batched_tokens=N."."""

    @property
    def found(self) -> bool:
        """Whether the log stated a configuration at all (a config line or the non-default args)."""
        return bool(self.config) or self.args is not None


def split_top(text: str, sep: str = ",") -> list[str]:
    """`text` cut at each `sep` outside quotes and brackets (reprs nest both; `<Enum.X: 0>` is a bracket too)."""
    parts: list[str] = []
    stack: list[str] = []
    quote = ""
    start = i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1  # the escaped character cannot close the string
            elif ch == quote:
                quote = ""
        elif ch in "'\"" and (i == 0 or text[i - 1] in _QUOTE_AFTER):
            quote = ch
        elif ch in "([{" or (ch == "<" and text[i + 1: i + 2].isalpha()):
            stack.append(_CLOSE[_OPEN.index(ch)])
        elif stack and ch == stack[-1]:
            stack.pop()
        elif ch == sep and not stack:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def parse_pairs(text: str) -> dict[str, str]:
    """`a=1, b='x, y', c=Obj(d=2)` → {"a": "1", "b": "'x, y'", "c": "Obj(d=2)"}; a piece without `key=` belongs to the
    value before it (an unquoted value with a comma in it)."""
    out: dict[str, str] = {}
    last = None
    for piece in split_top(text):
        m = _KEY.match(piece)
        if m:
            last = m.group(1)
            out.setdefault(last, m.group(2).strip())
        elif last is not None and piece.strip():
            out[last] = out[last] + "," + piece.rstrip()
    return out


def literal(text: str) -> Any:
    """A printed value as Python reads it (`'x'`, `2`, `True`, `None`, `{…}`); the bare text when it is none."""
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text.strip()


def parse_dict(text: str) -> dict[str, Any]:
    """A dict repr; one whose values are not all literals (an object's repr) keeps the literal ones."""
    try:
        value = ast.literal_eval(text)
        if isinstance(value, dict):
            return {str(k): v for k, v in value.items()}
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    inner = text.strip()
    inner = inner[1:-1] if inner.startswith("{") and inner.endswith("}") else inner
    out: dict[str, Any] = {}
    for piece in split_top(inner):
        m = _DICT_KEY.match(piece)
        if not m:
            continue
        try:
            out[m.group(2)] = ast.literal_eval(m.group(3).strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return out


def speculative_of(value: str | None) -> dict[str, Any] | None:
    """The config line's `SpeculativeConfig(…)` as `--speculative-config` would say it; None for `None`."""
    if not value or not value.startswith("SpeculativeConfig(") or not value.endswith(")"):
        return None
    fields = {k: literal(v) for k, v in parse_pairs(value[len("SpeculativeConfig("):-1]).items()}
    spec: dict[str, Any] = {}
    method = fields.get("method")
    model = fields.get("model", fields.get("draft_model"))
    if method:
        spec["method"] = method
    if model == "[ngram]" and not method:  # ≤0.8.x: the n-gram proposer has no model
        spec["method"] = "ngram"
    elif model and isinstance(model, str):
        spec["model"] = model
    if isinstance(fields.get("num_spec_tokens"), int):
        spec["num_speculative_tokens"] = fields["num_spec_tokens"]
    return spec


def read_engine_config(lines: Iterable[str]) -> EngineConfig:
    """The configuration records of a log (its physical lines); the first of each kind counts (data-parallel
    engines and TP workers repeat them)."""
    version = None
    config: dict[str, str] = {}
    args: dict[str, Any] | None = None
    batched = None
    for line in lines:
        if "LLM engine" not in line and "non-default args" not in line and "max_num_batched_tokens=" not in line:
            continue
        for segment in segments(line[:MAX_LINE_CHARS]):
            parts = split_line(segment)
            msg = own_text(parts.source, parts.message) if parts.source or parts.message else None
            if not msg or msg != parts.message:
                continue  # a client's echo, or a record quoting one
            if not config and (m := _CONFIG_LINE.match(msg)):
                version = m.group(1)
                config = parse_pairs(msg[m.end():])
            elif args is None and (m := _NON_DEFAULT.match(msg)):
                args = parse_dict(m.group(1))
            elif batched is None and (m := _BATCHED.match(msg)):
                batched = int(m.group(1))
    return EngineConfig(version=version, config=config, args=args, max_num_batched_tokens=batched)
