"""Reading a matrix file: YAML → env expansion → pydantic → cross-checks, every mistake one `FILE:key.path: what`
line."""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from harness.errors import ConfigError, ConfigErrors
from harness.matrix.cache_path import refusal
from harness.matrix.cells import Cell, expand
from harness.matrix.expand_env import expand_tree
from harness.matrix.model import Matrix

_AXIS_TAGS = {"flag", "named"}


@dataclass(frozen=True)
class LoadedMatrix:
    """A validated matrix, its cells (expanded once, here: every command reads these) and where it came from (its
    sha256 identifies the run's input)."""

    matrix: Matrix
    path: Path
    sha256: str
    cells: tuple[Cell, ...] = ()
    #: Variables that were not set and read as `<NAME>` (only when loaded with placeholders, for read-only commands).
    unset: tuple[str, ...] = ()

    @property
    def base_dir(self) -> Path:
        return self.path.parent


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys; in a matrix that silently drops an axis value, so it is an error."""


class ValueRefused(yaml.constructor.ConstructorError):
    """A value YAML can write but a matrix cannot hold (a null key, a set, an integer Python will not read): not a
    syntax error, so the line says what is wrong without that prefix."""

    def __init__(self, problem: str, mark: Any):
        super().__init__(None, None, problem, mark)


def key_text(key: Any) -> str:
    """The text a mapping key becomes: every key of a matrix is a name (axis, value, env), so `1` is `'1'`."""
    return str(key)


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, Any] = {}
    texts: dict[str, Any] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise yaml.constructor.ConstructorError(
                None, None, "merge keys (<<) are YAML 1.1, not 1.2: write the keys out", key_node.start_mark
            )
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, f"a {type(key).__name__} cannot be a mapping key", key_node.start_mark
            ) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        if key is None:
            raise ValueRefused("a null key (null, ~ or nothing) names nothing: quote it ('null') if you mean the word",
                               key_node.start_mark)
        text = key_text(key)
        if text in texts:  # 1 and '1', true and 'True', 1.50 and '1.5': one name, so one would vanish
            raise ValueRefused(f"keys {texts[text]!r} and {key!r} are both the name {text!r}: write one of them",
                               key_node.start_mark)
        seen[key] = True
        texts[text] = key
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# YAML 1.1 reads `off`, `on`, `yes`, `no` as booleans, so an axis value named `off` would become False. Matrix files
# follow YAML 1.2 here: only true/false are booleans.
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
# Likewise integers: YAML 1.1 reads `010` as 8 and `1:30` as 90; in 1.2 they are 10 and the string "1:30".
_UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))


def _construct_int(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    try:
        return int(text, 10)
    except ValueError:  # past Python's int_max_str_digits (4,300): no setting in a matrix has that many digits
        digits = sum(c.isdigit() for c in text)
        raise ValueRefused(f"an integer of {digits:,} digits: Python reads at most {sys.get_int_max_str_digits():,} "
                           "(quote it if it is a name)", node.start_mark) from None


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _refuse_tag(what: str) -> Any:
    def construct(loader: _UniqueKeyLoader, node: yaml.Node) -> Any:
        raise ValueRefused(what, node.start_mark)
    return construct


# YAML's other collections and scalars have no place in a matrix: a set has no order (values would be taken in hash
# order, differently each run), and pydantic would read a set as a list, !!binary bytes as text, pairs as lists.
for _tag, _what in {
    "set": "a YAML set (!!set) has no order: write a list, [a, b]",
    "omap": "a YAML !!omap is not used in matrix files: write a mapping",
    "pairs": "a YAML !!pairs is not used in matrix files: write a mapping",
    "binary": "a YAML !!binary is not used in matrix files: write the text",
}.items():
    _UniqueKeyLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse_tag(_what))


def format_loc(loc: tuple[Any, ...]) -> str:
    """('axes', 'mtp', 'named', 'values', 'mtp4', 'args', 0) → 'axes.mtp.mtp4.args[0]'."""
    parts: list[str] = []
    items = list(loc)
    i = 0
    while i < len(items):
        item = items[i]
        if i == 2 and items[0] == "axes" and item in _AXIS_TAGS:
            if item == "named" and i + 1 < len(items) and items[i + 1] == "values":
                i += 1  # the named-axis shorthand has no `values` key in the file
            i += 1
            continue
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        elif isinstance(item, str) and item.startswith("function-"):
            pass  # pydantic's name for a validator step, not a key
        else:
            parts.append(str(item))
        i += 1
    return ".".join(parts)


def _errors(err: ValidationError) -> list[tuple[str, str]]:
    """Every mistake pydantic found, as (key path, what is wrong), in the file's order, each location once."""
    out: list[tuple[str, str]] = []
    for e in err.errors(include_url=False):
        loc = format_loc(tuple(e["loc"]))
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        inp = e.get("input")
        if e["type"] not in ("extra_forbidden", "missing") and isinstance(inp, (str, int, float, bool)) \
                and len(repr(inp)) < 80:
            msg = f"{msg} (got {inp!r})"
        if all(loc != seen for seen, _ in out):
            out.append((loc, msg))
    return _pair_misspelt_keys(out)


def _pair_misspelt_keys(errors: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`value:` written for `values:` is one mistake, not "values is missing" and "value is unknown": keep the
    unknown key, say which missing sibling it must have meant, and drop that sibling's line."""
    def split(loc: str) -> tuple[str, str]:
        parent, _, key = loc.rpartition(".")
        return parent, key

    missing = {loc: msg for loc, msg in errors if msg == "required key is missing"}
    unknown_under = {split(loc)[0] for loc, msg in errors if msg == "unknown key"}
    dropped: set[str] = set()
    out = []
    for loc, msg in errors:
        if msg == "unknown key":
            parent, key = split(loc)
            siblings = [split(m)[1] for m in missing if split(m)[0] == parent and m not in dropped]
            near = difflib.get_close_matches(key, siblings, n=1)
            if near:
                dropped.add(f"{parent}.{near[0]}" if parent else near[0])
                msg = f"unknown key (did you mean {near[0]!r}, which is required?)"
            elif near := difflib.get_close_matches(key, _known_keys(), n=1, cutoff=0.75):
                msg = f"unknown key (did you mean {near[0]!r}?)"
        elif loc in unknown_under and msg.startswith("Input should be a valid dictionary"):
            # `flg:` beside `values:`: pydantic tried the other kind of axis too; the misspelt key is the mistake
            continue
        out.append((loc, msg))
    return [(loc, msg) for loc, msg in out if loc not in dropped]


def _known_keys() -> list[str]:
    """Every key a matrix file may hold somewhere (each strict model's fields and aliases): a misspelt key's nearest
    one is what it meant (`timeout_sec` → `timeout_s`, `flg` → `flag`)."""
    from pydantic import BaseModel

    import harness.matrix.model as models

    keys: set[str] = set()
    for value in vars(models).values():
        if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == models.__name__:
            for name, field in value.model_fields.items():
                keys.update(k for k in (name, field.alias) if k)
    return sorted(keys)


def read_yaml(text: str) -> Any:
    """YAML as matrix files mean it (1.2 booleans and integers, no duplicate keys); raises yaml.YAMLError."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: safe


#: More values than this once YAML aliases are expanded is an alias bomb, not a matrix.
MAX_VALUES = 100_000


def _contains_itself(data: Any) -> bool:
    """A collection reachable from itself (`&a [*a]`): walks each distinct collection once, so aliases cost nothing."""
    on_path: set[int] = set()
    done: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, leaving = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        if leaving:
            on_path.discard(id(node))
            done.add(id(node))
            continue
        if id(node) in on_path:
            return True
        if id(node) in done:
            continue
        on_path.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in (node.values() if isinstance(node, dict) else node))
    return False


def _too_many_values(data: Any, limit: int = MAX_VALUES) -> bool:
    """Counts values (aliases counted every time they are used) and stops at `limit`: bounded work, no recursion."""
    stack, seen = [data], 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def _nul_paths(data: Any) -> Iterator[str]:
    """Key paths of the strings (keys or values, expanded) that hold a NUL: every string of a matrix reaches an argv,
    an env, an id or a record, and exec, the environment and file names all end a string at NUL — found here, at
    `validate`, not when a cell starts after its run directory exists."""
    stack: list[tuple[str, Any, bool]] = [("", data, False)]
    while stack:  # in the file's order; no recursion (the nesting bound is YAML's)
        path, node, is_key = stack.pop()
        if isinstance(node, str) and "\0" in node:
            yield path.replace("\0", "\\0")  # the line names the key, never prints the NUL
        elif isinstance(node, dict) and not is_key:
            for k, v in reversed(node.items()):
                sub = f"{path}.{k}" if path else str(k)
                stack += [(sub, v, False), (sub, k, True)]
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v, False) for i, v in reversed(list(enumerate(node))))


def _parse(raw_text: str, file: str, environ: Mapping[str, str] | None,
           placeholders: bool) -> tuple[Matrix, tuple[str, ...]]:
    try:
        data = read_yaml(raw_text)
    except RecursionError:
        raise ConfigError(file, "", "the file nests too deep") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"line {mark.line + 1}" if mark else "yaml"
        if isinstance(exc, yaml.reader.ReaderError):  # a character YAML refuses (NUL, other controls): no mark
            where = f"line {raw_text.count(chr(10), 0, exc.position) + 1}"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(file, where, problem if isinstance(exc, ValueRefused) else f"YAML syntax error: {problem}") \
            from None
    if data is None:
        raise ConfigError(file, "", "the file is empty")
    if not isinstance(data, dict):
        raise ConfigError(file, "", f"must be a mapping of keys, not a {type(data).__name__}")
    if _contains_itself(data):
        raise ConfigError(file, "", "a YAML alias refers to itself")
    if _too_many_values(data):
        raise ConfigError(file, "", f"the file holds more than {MAX_VALUES} values once its YAML aliases are expanded")
    setup = data.get("setup") if isinstance(data.get("setup"), str) else None  # read as written, never expanded
    unset: list = []
    try:
        expanded = expand_tree({k: v for k, v in data.items() if k != "setup"},
                               os.environ if environ is None else environ, problems=unset, placeholders=placeholders)
    except RecursionError:
        raise ConfigError(file, "", "the file nests too deep") from None
    data = {**expanded, **({"setup": data["setup"]} if "setup" in data else {})}
    names = tuple(dict.fromkeys(u.name for u in unset if u.name))

    def hint(name: str | None) -> str:
        if not name:
            return ""
        return f"; set it up with: {setup}" if setup else f" (write ${{{name}:-default}})"

    missing = [u for u in unset if not (placeholders and u.name)]
    if len({u.name for u in missing if u.name}) > 1 or len([u for u in missing if u.name]) > 1:
        # an environment that is not set up is one mistake, however many keys read it: one line names them all
        named = [u for u in missing if u.name]
        names = tuple(dict.fromkeys(u.name for u in named))
        which = ", ".join(names)
        hint_all = f"; set {'it' if len(names) == 1 else 'them'} up with: {setup}" if setup else \
            " (write " + ", ".join(f"${{{n}:-default}}" for n in names) + ")"
        also = ", ".join(u.path for u in named[1:])
        problems = [ConfigError(file, named[0].path, f"environment variable{'s' if len(names) > 1 else ''} {which} "
                                f"{'are' if len(names) > 1 else 'is'} not set and {'have' if len(names) > 1 else 'has'}"
                                f" no default (read at {also} too){hint_all}")]
        problems += [ConfigError(file, u.path, u.message) for u in missing if not u.name]
    else:
        problems = [ConfigError(file, u.path, u.message + hint(u.name)) for u in missing]
    problems += [ConfigError(file, path, "holds a NUL character (\\0): no argument, environment value, id or file "
                                         "name can") for path in _nul_paths(data)]
    if problems:
        raise ConfigErrors.of(problems)
    # The run's masker reads this environment: a secret-named variable shown as `<NAME>` is a secret there too, so a
    # value it fills gets the same name in `cells` as in `run`.
    masked_env = {**(os.environ if environ is None else environ), **{n: f"<{n}>" for n in names}}
    try:
        return Matrix.model_validate(data, context={"environ": masked_env}), names
    except ValidationError as exc:
        raise ConfigErrors.of([ConfigError(file, loc, msg) for loc, msg in _errors(exc)]) from None


def load_matrix(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None,
                placeholders: bool = False) -> LoadedMatrix:
    """Load and fully check a matrix file, cells included, so `validate` and `run` fail the same way; every mistake
    of a stage is reported at once, one line each. With `placeholders`, an unset variable reads as `<NAME>` (and is
    listed in `unset`) instead of being an error: what the read-only commands show of an environment not set up."""
    p = Path(path)
    shown = str(path)
    from harness.files import read_bytes  # the one reader: a regular file, bounded; a FIFO or a device is refused

    raw = read_bytes(p)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(shown, "", "is not UTF-8 text") from None
    matrix, unset = _parse(text, shown, environ, placeholders)
    cells, cell_problems = expand(matrix, shown)
    loaded = LoadedMatrix(matrix=matrix, path=p.resolve(), sha256=hashlib.sha256(raw).hexdigest(), cells=tuple(cells),
                          unset=unset)
    problems = _file_problems(loaded, shown) + cell_problems
    if problems:
        raise ConfigErrors.of(problems)
    return loaded


def _file_problems(loaded: LoadedMatrix, shown: str) -> list[ConfigError]:
    """Patch files ship with the matrix, so a missing one is a mistake in the file, found before any cell runs; a
    compile cache path that would be `/`, a home or the project itself is one too (the harness writes into it)."""
    out = []
    if (why := refusal(loaded.matrix.compile_cache, loaded.base_dir)) is not None:
        out.append(ConfigError(shown, "compile_cache", why))
    for axis_name, axis in loaded.matrix.axes.items():
        for value in axis.value_names():
            for i, patch in enumerate(axis.fragment(value).patches):
                f = (loaded.base_dir / patch.patch)
                if not f.is_file():
                    out.append(ConfigError(shown, f"axes.{axis_name}.{value}.patches[{i}].patch",
                                           f"patch file not found: {f}"))
    return out
