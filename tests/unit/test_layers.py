"""The import graph of harness/ points one way: down a declared order of layers, from the entry points (CLI, pytest
plugin) to the foundations (errors, names, units). A module may import its own layer and any layer below; an arrow
up is a cycle in waiting (a lazy import inside a function is an arrow too). Importing `harness.a.b` runs
`harness/a/__init__.py` first, so that package's module is imported as well and counts.

A new module must be placed in a layer (the test names it); `KNOWN` lists the arrows up that are there today, each
with why, and only shrinks: an entry no longer in the code fails the test until it is removed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "harness"

#: Lowest first. A module belongs to the layer of the longest prefix that names it (`harness.verdict.policy` before
#: `harness.verdict`): the verdict package is two layers, its catalogue (the package exports only that), which the log
#: facts name their refusals by, and the policy that decides from those facts. The matrix loader sits above the cells
#: (a loaded matrix carries its cells, expanded once); the matrix's model, below them; the selection (`--select`,
#: `--shard`) above the loader.
LAYERS: list[tuple[str, ...]] = [
    ("harness", "harness.names", "harness.exitcodes", "harness.errors", "harness.units", "harness.clock",
     "harness.files", "harness.masking", "harness.shell", "harness.escape", "harness.jsonout"),
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
]

#: Arrows up that exist today: (importer, imported) -> why it is still there. Remove an entry with its arrow.
KNOWN: dict[tuple[str, str], str] = {}

#: The root package is also the public facade (docs/api.md): its `_EXPORTS` table names modules of every layer by
#: string, imported only when a name is first used (PEP 562), and its `if TYPE_CHECKING:` block repeats the table for
#: type checkers. Neither runs when `harness` is imported, so exactly that block is exempt, and only in the root; it
#: must equal the table, and every other import of the root is held to layer 0 like any module's.
FACADE = "harness"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def facade_split(source: str) -> tuple[ast.Module, list[ast.ImportFrom]]:
    """The root's module without its top-level `if TYPE_CHECKING:` block, and that block's imports."""
    tree = ast.parse(source, FACADE)
    block = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    tree.body = [n for n in tree.body if n not in block]
    return tree, [i for b in block for i in ast.walk(b) if isinstance(i, ast.ImportFrom)]


def imported(source: str | ast.Module, name: str, is_package: bool = False) -> set[str]:
    """The harness modules the module `name` (its `source`, or its parsed tree) imports, anywhere in it (function
    bodies included), with their parent packages."""
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(source if isinstance(source, ast.Module) else ast.parse(source, name)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        for t in targets:
            parts = t.split(".")
            out.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    return {m for m in out if m in MODULES and m != name}


MODULES = {module_name(p) for p in HARNESS.rglob("*.py")}


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for i, names in enumerate(LAYERS):
        for prefix in names:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), i)
    return None if best is None else best[1]


def arrows_up() -> dict[tuple[str, str], tuple[int, int]]:
    out = {}
    for path in sorted(HARNESS.rglob("*.py")):
        name = module_name(path)
        source = facade_split(path.read_text())[0] if name == FACADE else path.read_text()
        for target in imported(source, name, path.name == "__init__.py"):
            src, dst = layer_of(name), layer_of(target)
            if src is not None and dst is not None and dst > src:
                out[(name, target)] = (src, dst)
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


def _exports(source: str) -> dict[str, tuple[str, str]]:
    (table,) = [n.value for n in ast.parse(source).body
                if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "_EXPORTS"]
    return ast.literal_eval(table)


def test_the_facade_s_type_checking_block_is_its_export_table():
    """The exempt block says nothing the lazy table does not: the same public names, from the same modules."""
    source = (HARNESS / "__init__.py").read_text()
    block = {a.asname or a.name: (i.module, a.name) for i in facade_split(source)[1] for a in i.names}
    assert block == _exports(source)


@pytest.mark.parametrize("source,expected", [
    ("if TYPE_CHECKING:\n    from harness.boot.session import RunSession\n", set()),
    ("from harness.boot.session import RunSession\n", {"harness.boot", "harness.boot.session"}),
    ("def __getattr__(name):\n    from harness.boot import session\n", {"harness.boot", "harness.boot.session"}),
    ("if not TYPE_CHECKING:\n    from harness.boot.session import RunSession\n",
     {"harness.boot", "harness.boot.session"}),
], ids=["type-checking-block-exempt", "eager-import-counts", "import-in-a-function-counts", "other-block-counts"])
def test_only_the_root_s_type_checking_block_is_exempt(source, expected):
    assert imported(facade_split(source)[0], FACADE, is_package=True) == expected
    assert imported(source, "harness.names") >= expected, "outside the root the block counts like any import"
