"""The root package is a lazy facade (harness/__init__.py, PEP 562): importing a foundation module — which runs the
root first — brings in no other layer, so neither the CLI's start nor a cycle pays for the public names; a public name
imports its module when first used. A fresh interpreter each, so nothing imported earlier hides an import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def harness_modules_after(code: str) -> set[str]:
    probe = (f"{code}\nimport json, sys\n"
             "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'harness')))")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout))


@pytest.mark.parametrize("code,expected", [
    ("import harness", {"harness"}),
    ("import harness.names", {"harness", "harness.names"}),
    ("import harness.errors", {"harness", "harness.errors", "harness.exitcodes"}),
    ("import harness\nharness.__all__; dir(harness)", {"harness"}),
], ids=["root", "names", "errors", "all-and-dir"])
def test_importing_the_root_or_a_foundation_imports_nothing_above_it(code, expected):
    assert harness_modules_after(code) == expected


def test_a_public_name_imports_its_module_when_first_used():
    """The check can fail: the lazy name brings in the run owner, as an eager import in the root would at once."""
    loaded = harness_modules_after("import harness\nharness.RunSession")
    assert {"harness.boot", "harness.boot.session"} <= loaded
