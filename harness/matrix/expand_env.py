"""`${VAR}` and `${VAR:-default}` in matrix strings, expanded from the environment before validation.

An unset variable without a default is an error at its key path: a matrix that silently runs with an empty model path
or image is worse than one that refuses to load. `$${` writes a literal `${`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from harness.errors import UnsetVariable

_REF = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-((?:[^}$]|\$(?!\{))*))?\}|\$\{([^}]*)\}?")


def expand_string(text: str, environ: Mapping[str, str], path: str) -> str:
    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name, default = match.group(1), match.group(2)
        if name is None:
            raise UnsetVariable(path, f"malformed variable reference {match.group(0)!r} "
                                      "(write ${NAME} or ${NAME:-default})")
        value = environ.get(name)
        if value is None or (value == "" and default is not None):
            if default is None:
                raise UnsetVariable(path, f"environment variable {name} is not set and has no default", name)
            return default
        return value

    return _REF.sub(substitute, text)


def expand_tree(node: Any, environ: Mapping[str, str], path: str = "", problems: list[UnsetVariable] | None = None,
                placeholders: bool = False) -> Any:
    """Expand every string (values, not keys) in a parsed YAML tree. With `problems`, every unset variable is listed
    there instead of raising at the first; with `placeholders` as well, it reads as `<NAME>` so the rest can still
    be shown (the read-only commands on a matrix whose environment is not set up)."""
    if isinstance(node, str):
        if problems is None:
            return expand_string(node, environ, path)
        env = dict(environ)
        while True:  # every unset variable of the string, each once
            try:
                return expand_string(node, env, path)
            except UnsetVariable as exc:
                problems.append(exc)
                if not exc.name:
                    return node
                env[exc.name] = f"<{exc.name}>" if placeholders else ""
    if isinstance(node, dict):
        return {k: expand_tree(v, environ, f"{path}.{k}" if path else str(k), problems, placeholders)
                for k, v in node.items()}
    if isinstance(node, list):
        return [expand_tree(v, environ, f"{path}[{i}]", problems, placeholders) for i, v in enumerate(node)]
    return node

