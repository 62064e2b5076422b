"""Reading a matrix file: YAML → env expansion → pydantic → cross-checks, every mistake one `FILE:key.path: what` line."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from harness.errors import ConfigError
from harness.matrix.expand_env import UnsetVariable, expand_tree
from harness.matrix.model import Matrix

_AXIS_TAGS = {"flag", "named"}


@dataclass(frozen=True)
class LoadedMatrix:
    """A validated matrix and where it came from (its sha256 identifies the run's input)."""

    matrix: Matrix
    path: Path
    sha256: str

    @property
    def base_dir(self) -> Path:
        return self.path.parent


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys; in a matrix that silently drops an axis value, so it is an error."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, Any] = {}
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
        seen[key] = True
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
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", lambda loader, node: int(loader.construct_scalar(node), 10))


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


def _first_error(err: ValidationError) -> tuple[str, str]:
    e = err.errors(include_url=False)[0]
    loc = format_loc(tuple(e["loc"]))
    msg = e["msg"]
    if e["type"] == "extra_forbidden":
        msg = "unknown key"
    elif e["type"] == "missing":
        msg = "required key is missing"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    inp = e.get("input")
    if e["type"] not in ("extra_forbidden", "missing") and isinstance(inp, (str, int, float, bool)) and len(repr(inp)) < 80:
        msg = f"{msg} (got {inp!r})"
    return loc, msg


def read_yaml(text: str) -> Any:
    """YAML as matrix files mean it (1.2 booleans and integers, no duplicate keys); raises yaml.YAMLError."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass


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


def parse_matrix(raw_text: str, file: str, environ: Mapping[str, str] | None = None) -> Matrix:
    try:
        data = read_yaml(raw_text)
    except RecursionError:
        raise ConfigError(file, "", "the file nests too deep") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"line {mark.line + 1}" if mark else "yaml"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(file, where, f"YAML syntax error: {problem}") from None
    if data is None:
        raise ConfigError(file, "", "the file is empty")
    if not isinstance(data, dict):
        raise ConfigError(file, "", f"must be a mapping of keys, not a {type(data).__name__}")
    if _contains_itself(data):
        raise ConfigError(file, "", "a YAML alias refers to itself")
    if _too_many_values(data):
        raise ConfigError(file, "", f"the file holds more than {MAX_VALUES} values once its YAML aliases are expanded")
    try:
        data = expand_tree(data, os.environ if environ is None else environ)
    except UnsetVariable as exc:
        raise ConfigError(file, exc.path, exc.message) from None
    except RecursionError:
        raise ConfigError(file, "", "the file nests too deep") from None
    try:
        return Matrix.model_validate(data)
    except ValidationError as exc:
        loc, msg = _first_error(exc)
        raise ConfigError(file, loc, msg) from None


def load_matrix(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> LoadedMatrix:
    """Load and fully check a matrix file, cells included, so `validate` and `run` fail the same way."""
    from harness.cells import expand_cells  # the cross-checks live with the cells they are about

    p = Path(path)
    shown = str(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(shown, "", "no such file") from None
    except OSError as exc:
        raise ConfigError(shown, "", f"cannot read: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(shown, "", "is not UTF-8 text") from None
    matrix = parse_matrix(text, shown, environ)
    loaded = LoadedMatrix(matrix=matrix, path=p.resolve(), sha256=hashlib.sha256(raw).hexdigest())
    _check_files(loaded, shown)
    expand_cells(loaded.matrix, file=shown)
    return loaded


def _check_files(loaded: LoadedMatrix, shown: str) -> None:
    """Patch files ship with the matrix, so a missing one is a mistake in the file, found before any cell runs."""
    for axis_name, axis in loaded.matrix.axes.items():
        for value in axis.value_names():
            for i, patch in enumerate(axis.fragment(value).patches):
                f = (loaded.base_dir / patch.patch)
                if not f.is_file():
                    raise ConfigError(shown, f"axes.{axis_name}.{value}.patches[{i}].patch", f"patch file not found: {f}")
