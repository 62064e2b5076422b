"""The pytest plugin's old option spellings, read for one release without being registered. The plugin is loaded into
every pytest session of a project that installs the package (the pytest11 entry point), so a registered `--select`
would be listed in that project's `--help` and clash with its own `--select`; instead the old spelling is rewritten
to the `--boot-*` one in the arguments pytest is about to parse, and the plugin warns that it is deprecated."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

import pytest

#: old spelling -> the one the plugin registers
OLD: dict[str, str] = {
    "--matrix": "--boot-matrix",
    "--results-dir": "--boot-results-dir",
    "--select": "--boot-select",
    "--shard": "--boot-shard",
}


def rewrite(args: Sequence[str], keep: Collection[str] = ()) -> list[str]:
    """`args` with each old spelling (`--matrix X` or `--matrix=X`) written the new way, up to a `--` (after it every
    word is a path); the spellings in `keep` are someone else's options and stay."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + list(args[i:])
        name, eq, value = arg.partition("=")
        out.append(OLD[name] + eq + value if name in OLD and name not in keep else arg)
    return out


def used(before: Sequence[str], after: Sequence[str]) -> Iterator[tuple[str, str]]:
    """Each (old, new) spelling that `rewrite` changed between `before` and `after`, once, in order."""
    seen: set[str] = set()
    for a, b in zip(before, after, strict=True):
        old = a.partition("=")[0]
        if a != b and old not in seen:
            seen.add(old)
            yield old, OLD[old]


def claimed(parser: pytest.Parser) -> set[str]:
    """The old spellings that another plugin or a conftest registered as its own option."""
    out = set()
    for old in OLD:
        try:
            _, unknown = parser.parse_known_and_unknown_args([f"{old}=x"])
        except pytest.UsageError:  # registered, but "x" is not a value it takes (a flag, a number): still theirs
            out.add(old)
            continue
        if not unknown:
            out.add(old)
    return out
