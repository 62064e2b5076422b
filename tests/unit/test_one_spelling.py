"""One thing, one spelling in harness/: every named state is an `enum.StrEnum` (no home-made `str, Enum` base whose
str() and format() would have to be kept equal to the value by hand), and `GIB` is assigned once (harness/units.py)."""

from __future__ import annotations

import ast
import enum
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "harness").rglob("*.py"))


def classes_mixing_str_and_enum(source: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            bases = {ast.unparse(b) for b in node.bases}
            if "str" in bases and bases & {"Enum", "enum.Enum"}:
                out.append(node.name)
    return out


def assigned_at_top(source: str, name: str) -> bool:
    return any(isinstance(n, ast.Assign | ast.AnnAssign) and name in {ast.unparse(t) for t in
               (n.targets if isinstance(n, ast.Assign) else [n.target])}
               | {ast.unparse(e) for t in (n.targets if isinstance(n, ast.Assign) else []) if isinstance(t, ast.Tuple)
                  for e in t.elts}
               for n in ast.parse(source).body)


def test_no_home_made_str_enum():
    found = [f"{p.relative_to(ROOT)}: {c}" for p in SOURCES for c in classes_mixing_str_and_enum(p.read_text())]
    assert not found, f"use enum.StrEnum: {found}"


def test_gib_is_assigned_once():
    found = [str(p.relative_to(ROOT)) for p in SOURCES if assigned_at_top(p.read_text(), "GIB")]
    assert found == ["harness/units.py"], found


@pytest.mark.parametrize("source,expected", [
    ("import enum\nclass A(str, enum.Enum):\n    x = 'x'\n", ["A"]),
    ("from enum import Enum\nclass B(str, Enum):\n    x = 'x'\n", ["B"]),
    ("from enum import StrEnum\nclass C(StrEnum):\n    x = 'x'\n", []),
], ids=["enum.Enum", "Enum", "StrEnum"])
def test_the_checks_can_fail(source, expected):
    assert classes_mixing_str_and_enum(source) == expected
    assert assigned_at_top("KIB, MIB, GIB = 1, 2, 3\n", "GIB") and assigned_at_top("GIB = 1 << 30\n", "GIB")
    assert not assigned_at_top("def f():\n    GIB = 1\n", "GIB")


@pytest.mark.parametrize("module,name", [("harness.verdict.outcome", "Outcome"), ("harness.files", "FileKind"),
                                         ("harness.results.model", "RunStatus")])
def test_a_state_prints_formats_and_serialises_as_its_value(module, name):
    """What the records and the CLI show: str(), format() and JSON are the value, as they were with the old base."""
    import json

    from pydantic import TypeAdapter

    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, enum.StrEnum)
    for member in cls:
        assert str(member) == f"{member}" == f"{member:}" == member.value == json.loads(json.dumps(member))
        assert TypeAdapter(cls).dump_python(member, mode="json") == member.value and member == member.value
