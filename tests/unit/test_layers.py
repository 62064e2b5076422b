"""The import graph of harness/ points one way: down a declared order of layers, from the public face (the root
package) and the entry points (CLI, pytest plugin) to the foundations (errors, names, units). A module may import its
own layer and any layer below; an arrow up is a cycle in waiting (a lazy import inside a function is an arrow too).
Importing `harness.a.b` runs `harness/a/__init__.py` first, so that package's module is imported as well and counts.
Inside one layer the graph has no circle either: two modules that need each other are one concern or want a third.

A new module must be placed in a layer (the test names it); `KNOWN` lists the arrows up that are there today, each
with why, and only shrinks: an entry no longer in the code fails the test until it is removed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "harness"

#: The public face (docs/api.md): nothing imports it, it names modules of every layer. It holds only itself, never
#: its subpackages by prefix (each of those is placed on its own).
ROOT_PACKAGE = "harness"

#: Lowest first. A module belongs to the layer of the longest prefix that names it (`harness.verdict.policy` before
#: `harness.verdict`): the verdict package is two layers, its catalogue (the package exports only that), which the log
#: facts name their refusals by, and the policy that decides from those facts. The matrix loader sits above the cells
#: (a loaded matrix carries its cells, expanded once); the matrix's model, below them; the selection (`--select`,
#: `--shard`) above the loader.
LAYERS: list[tuple[str, ...]] = [
    ("harness.version", "harness.exitcodes", "harness.errors", "harness.units", "harness.clock",
     "harness.files", "harness.nofollow", "harness.walk", "harness.masking", "harness.shell", "harness.escape",
     "harness.jsonout", "harness.emit"),
    ("harness.verdict",),
    ("harness.logfacts",),
    ("harness.verdict.policy",),
    ("harness.gpu", "harness.matrix.model", "harness.matrix.expand_env", "harness.matrix"),
    ("harness.memory",),
    ("harness.matrix.cells",),
    ("harness.matrix.load",),
    ("harness.runtime",),
    ("harness.predict", "harness.watch", "harness.sweep"),
    ("harness.results",),
    ("harness.analysis", "harness.scale", "harness.matrix.selection"),
    ("harness.report",),
    ("harness.boot", "harness.bisect"),
    ("harness.cli",),
    ("harness.pytest_plugin", "harness.pytest_spellings"),
    (ROOT_PACKAGE,),
]

#: Arrows up that exist today: (importer, imported) -> why it is still there. Remove an entry with its arrow.
KNOWN: dict[tuple[str, str], str] = {}



def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(source: str, name: str, is_package: bool = False, parents: bool = True) -> set[str]:
    """The harness modules the module `name` (its `source`) imports, anywhere in it (function bodies included), with
    their parent packages (`parents`: each runs first). Without them, an import names the module it reads: the
    submodule `from a import b` names when `a.b` is one, else `a` itself."""
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(source, name)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            if not parents:
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        if not parents:
            out.update(targets)
            continue
        for t in targets:
            parts = t.split(".")
            out.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    return {m for m in out if m in MODULES and m != name}


MODULES = {module_name(p) for p in HARNESS.rglob("*.py")}


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for i, names in enumerate(LAYERS):
        for prefix in names:
            inside = module == prefix or (prefix != ROOT_PACKAGE and module.startswith(prefix + "."))
            if inside and (best is None or len(prefix) > best[0]):
                best = (len(prefix), i)
    return None if best is None else best[1]


def arrows_up() -> dict[tuple[str, str], tuple[int, int]]:
    out = {}
    for path in sorted(HARNESS.rglob("*.py")):
        name = module_name(path)
        for target in imported(path.read_text(), name, path.name == "__init__.py"):
            src, dst = layer_of(name), layer_of(target)
            if src is not None and dst is not None and dst > src:
                out[(name, target)] = (src, dst)
    return out


def graph() -> dict[str, set[str]]:
    """Each module and the modules it imports by name (a submodule's own packages, which run first, are no arrow)."""
    return {module_name(p): imported(p.read_text(), module_name(p), p.name == "__init__.py", parents=False)
            for p in sorted(HARNESS.rglob("*.py"))}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, or of one that imports itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(component) > 1 or v in edges.get(v, ()):
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_module_is_placed_in_a_layer():
    unplaced = sorted(m for m in MODULES if layer_of(m) is None)
    assert not unplaced, f"place these in LAYERS: {unplaced}"


def test_no_import_points_up_the_layers():
    up = {k: v for k, v in arrows_up().items() if k not in KNOWN}
    assert not up, "imports up the layers: " + "; ".join(f"{a} (layer {s}) -> {b} (layer {d})"
                                                         for (a, b), (s, d) in sorted(up.items()))


def test_each_known_arrow_up_is_still_there():
    gone = sorted(set(KNOWN) - set(arrows_up()))
    assert not gone, f"these arrows up are gone: remove them from KNOWN: {gone}"


def test_no_circle_in_the_import_graph():
    """Not across layers (the test above) and not inside one: a circle is a module that cannot be read alone."""
    found = circles(graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("edges,expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set(), "c": {"c"}}, [["c"]]),
    ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, []),
], ids=["three-module-circle", "self-import", "a-diamond-is-no-circle"])
def test_the_circle_check_can_fail(edges, expected):
    assert circles(edges) == expected


@pytest.mark.parametrize("source,parents,expected", [
    ("from harness.gpu import inventory\n", False, {"harness.gpu.inventory"}),
    ("from harness.gpu import GpuInfo\n", False, {"harness.gpu"}),
    ("from harness.gpu.inventory import X\n", True, {"harness.gpu", "harness.gpu.inventory"}),
], ids=["submodule-by-name", "a-package-s-name", "with-parents"])
def test_the_reader_names_the_module_an_import_reads(source, parents, expected):
    assert imported(source, "harness.verdict.policy", parents=parents) == expected


def test_the_root_holds_only_itself():
    """The public face is on top, and a module of the root that no layer names is unplaced, not put there."""
    assert layer_of("harness") == len(LAYERS) - 1
    assert layer_of("harness.not_placed_anywhere") is None
    assert layer_of("harness.version") == 0


@pytest.mark.parametrize("source,expected", [
    ("from harness.verdict.catalogue import Reason\n", {"harness.verdict", "harness.verdict.catalogue"}),
    ("def f():\n    from harness.matrix.cells import expand\n", {"harness.matrix.cells"}),
    ("from .records import GpuInfo\n", {"harness.gpu", "harness.gpu.records"}),
    ("import harness.runtime.compile_cache\n", {"harness.runtime", "harness.runtime.compile_cache"}),
], ids=["parent-package-counts", "lazy-import-counts", "relative-import", "plain-import"])
def test_the_reader_sees_every_kind_of_import(source, expected):
    assert imported(source, "harness.gpu.probe") == expected


def test_an_arrow_up_is_seen():
    """The check can fail: a foundation module that imported the CLI would be an arrow from layer 0 to the top."""
    assert layer_of("harness.errors") < layer_of("harness.cli.common")
    assert layer_of("harness.verdict.policy") > layer_of("harness.logfacts.model") > layer_of("harness.verdict")
    assert "harness.cli.common" in imported("from harness.cli.common import add_timeout\n", "harness.errors")



def top_level_names(source: str) -> tuple[set[str], set[str]]:
    """(names a module defines at its top level, names it only imports there)."""
    defined: set[str] = set()
    imports: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.col_offset == 0:
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.col_offset == 0:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom) and node.col_offset == 0:
            imports |= {a.asname or a.name.split(".")[0] for a in node.names}
    return defined, imports - defined


def borrowed_imports() -> list[str]:
    """`from harness.x import name` where x is a module (no package's face) that does not define `name` but only
    imports it (a second import path: a re-export shim), or where `name` is private to x."""
    paths = {module_name(p): p for p in HARNESS.rglob("*.py")}
    tops = {m: top_level_names(p.read_text()) for m, p in paths.items() if p.name != "__init__.py"}
    out = []
    for path in sorted(HARNESS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in tops:
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        out.append(f"{path.relative_to(ROOT)}: {node.module}.{a.name} is private")
                    elif a.name in tops[node.module][1] and f"{node.module}.{a.name}" not in paths:
                        out.append(f"{path.relative_to(ROOT)}: {a.name} from {node.module}, which only imports it")
    return out


def test_each_name_is_imported_from_where_it_is_defined_and_none_is_private():
    found = borrowed_imports()
    assert not found, "\n".join(found)


def test_a_borrowed_or_private_name_is_seen():
    defined, only_imported = top_level_names("from harness.errors import Interrupted\nX = 1\ndef _p(): pass\n")
    assert defined == {"X", "_p"} and only_imported == {"Interrupted"}
