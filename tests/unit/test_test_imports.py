"""No test module imports another test module: what tests share lives in helper modules (tests/helpers/, tests/cli.py,
tests/builders.py, tests/synthetic.py, tests/fakes/), fixtures and hooks in conftest.py files, which pytest loads
itself. Importing a test module runs it a second time under another name (its module-level work, its registrations)
and ties one test file to another's private helpers; importing a conftest does the same to a file pytest owns."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Where Python files import the suite's modules: the suite itself, and the scripts and benchmarks that reuse it.
SCANNED = ("tests", "benchmarks", "scripts")


def is_test_module(path: Path) -> bool:
    return path.suffix == ".py" and (path.name.startswith("test_") or path.name == "conftest.py")


def imported_files(source: str, path: Path) -> set[Path]:
    """The files under ROOT that the module at `path` imports, anywhere in it (function bodies included, and the code
    of a child script held in a string): each `import a.b`, `from a.b import c` (a module `a/b/c.py` too) and
    relative import, resolved against the tree."""
    package = path.relative_to(ROOT).parent.parts
    out: set[Path] = set()
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "import" in node.value:
            try:
                out |= imported_files(textwrap.dedent(node.value), path)
            except SyntaxError:  # prose, not code
                pass
            continue
        if isinstance(node, ast.Import):
            dotted = [a.name.split(".") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            base = (*base, *(node.module.split(".") if node.module else ()))
            dotted = [list(base)] + [[*base, a.name] for a in node.names]
        else:
            continue
        for parts in dotted:
            for candidate in (ROOT.joinpath(*parts).with_suffix(".py"), ROOT.joinpath(*parts, "__init__.py")):
                if parts and candidate.is_file():
                    out.add(candidate)
    return out


def offences() -> list[str]:
    found = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if path == Path(__file__).resolve():  # its strings are the samples below
                continue
            for target in sorted(imported_files(path.read_text(), path)):
                if is_test_module(target) and target != path:
                    found.append(f"{path.relative_to(ROOT)} imports {target.relative_to(ROOT)}")
    return found


def test_no_module_imports_a_test_module_or_a_conftest():
    found = offences()
    assert not found, "move what is shared into a helper module (tests/helpers/): " + "; ".join(found)


@pytest.mark.parametrize("source,expected", [
    ("from tests.conftest import ROOT\n", "tests/conftest.py"),
    ("def f():\n    from tests.unit.test_predict import held\n", "tests/unit/test_predict.py"),
    ("import tests.integration.conftest\n", "tests/integration/conftest.py"),
    ("from .test_history import night\n", "tests/unit/test_history.py"),
    ("from ..reliability import conftest\n", "tests/reliability/conftest.py"),
    ("from tests.unit import test_compare as tc\n", "tests/unit/test_compare.py"),
    ('S = """\n    import sys\n    from tests.unit.test_history import night\n"""\n', "tests/unit/test_history.py"),
], ids=["from-import", "import-in-a-function", "plain-import", "relative-import", "relative-module", "module-by-name",
        "a-child-script-s-code"])
def test_the_reader_sees_every_kind_of_import_of_a_test_module(source, expected):
    """The check can fail: each way of importing a test module or a conftest is seen (from tests/unit/x.py)."""
    files = imported_files(source, ROOT / "tests" / "unit" / "x.py")
    assert ROOT / expected in files and is_test_module(ROOT / expected)


def test_helpers_are_not_test_modules():
    files = imported_files("from tests.helpers.env import ROOT\nfrom tests.cli import in_process\n",
                           ROOT / "tests" / "unit" / "x.py")
    assert files and not any(is_test_module(f) for f in files)
