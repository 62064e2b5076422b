"""The code's own contracts, read from its source: states are compared as enums, callers trust the Protocols, and
each layer imports only what it may (matrix → cells → runtime → watch → log facts → results → analysis/report)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from harness.verdict import Outcome, Reason
from tests.helpers.env import ROOT

HARNESS = ROOT / "harness"
SOURCES = sorted(HARNESS.rglob("*.py"))
NAMES = "|".join(sorted({*(o.value for o in Outcome), *(r.value for r in Reason), *Reason.__members__}, key=len,
                          reverse=True))
#: `outcome == "booted"`, `reason != "kv_insufficient"`, `kind in ("refused", ...)`, either way round, and dicts keyed
#: by outcomes (`{"booted": "green"}`). The left side names what it holds: a container's "exited" status is no reason.
_HOLDER = r"(?:outcome|reason|kind|severity|expected|want|got)\w*\)?"
COMPARED = re.compile(rf"""(?:{_HOLDER}\s*(?:[=!]=|\bnot in\b|\bin\b)\s*[(\[{{]?\s*["']({NAMES})["']"""
                      rf"""|["']({NAMES})["']\s*[=!]=\s*[\w.]*(?:outcome|reason|kind)"""
                      rf"""|{{\s*["'](booted|refused|crashed|timeout)["']\s*:)""", re.I)
#: Where the names are defined, and where they are written as data (the text a matrix or a log holds).
DEFINED_HERE = {"harness/verdict/catalogue.py"}


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_outcome_or_reason_is_compared_as_a_string():
    hits = []
    for path in SOURCES:
        if _rel(path) in DEFINED_HERE:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if COMPARED.search(code):
                hits.append(f"{_rel(path)}:{n}: {line.strip()}")
    assert not hits, "compare with harness.verdict's Outcome/Reason, not strings:\n" + "\n".join(hits)


def test_the_grep_finds_what_it_is_for():
    for bad in ('if r.outcome == "booted":', 'x = r.reason != "kv_insufficient"',
                'if c.outcome in ("refused", "crashed")',
                'colour = {"booted": "green", "refused": "red"}', 'if "booted" == cell.outcome:',
                'ok = refusal.kind == "gpu_memory_busy"'):
        assert COMPARED.search(bad), bad
    for fine in ('if r.outcome == Outcome.booted:', 'print("booted")', 'label = "booted cells"',
                 'if container.status in ("exited", "dead"):', 'send(503, {"error": "not ready"})'):
        assert not COMPARED.search(fine), fine


def _probes(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and node.args:
            target = ast.unparse(node.args[0])
            if re.search(r"runtime|inventory|server|_inner", target, re.I):
                out.append((node.lineno, ast.unparse(node)))
    return out


def test_callers_trust_the_runtime_and_inventory_protocols():
    """Every member a caller uses is in the Protocol (harness.runtime.base, harness.gpu.inventory): no probing."""
    hits = [f"{_rel(p)}:{n}: {call}" for p in SOURCES for n, call in _probes(ast.parse(p.read_text()))]
    assert not hits, "\n".join(hits)


def test_no_proxy_forwards_by_getattr():
    """A proxy that forwards unknown attributes hides which members a caller relies on. A package's module
    `__getattr__` (PEP 562: the root's, harness.verdict's) is no proxy: it resolves the fixed names of its `_EXPORTS`
    (tests/unit/test_api.py)."""
    lazy = {HARNESS / "__init__.py", HARNESS / "verdict" / "__init__.py"}
    hits = [f"{_rel(p)}:{node.lineno}" for p in SOURCES for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
            and not (p in lazy and node.col_offset == 0)]
    assert not hits, hits


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


@pytest.mark.parametrize("layer, forbidden", [
    ("runtime", "harness.results"), ("gpu", "harness.results"), ("predict", "harness.results"),
    ("logfacts", "harness.results"), ("watch", "harness.results"), ("matrix", "harness.results"),
    ("analysis", "harness.boot"), ("analysis", "harness.runtime"), ("analysis", "harness.logfacts.parser"),
    ("report", "harness.boot"), ("report", "harness.runtime"),
])
def test_each_layer_imports_only_what_it_may(layer: str, forbidden: str):
    hits = [f"{_rel(p)} imports {m}" for p in sorted((HARNESS / layer).rglob("*.py")) for m in _imports(p)
            if m == forbidden or m.startswith(forbidden + ".")]
    assert not hits, "\n".join(hits)


def test_the_analysis_reads_records_never_log_files():
    """Parsing is the log parser's job (harness.logfacts); the analysis reads what the records hold."""
    hits = []
    for path in sorted((HARNESS / "analysis").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func)
                if name in ("open", "io.open") or name.endswith((".read_text", ".read_bytes", ".open", ".write_text")):
                    hits.append(f"{_rel(path)}:{node.lineno}: {name}")
    assert not hits, "\n".join(hits)


def test_every_error_the_harness_raises_on_purpose_is_a_harness_error():
    import harness.errors as errors

    defined = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b) in ("Exception", "BaseException", "RuntimeError",
                                                                         "ValueError") for b in node.bases):
                defined.append(f"{_rel(path)}: {node.name}")
    assert defined == ["harness/errors.py: HarnessError"], defined
    assert errors.UsageError.exit_code == 2 and errors.Interrupted.exit_code == 130
