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
    ("import harness.version", {"harness", "harness.version"}),
    ("import harness.errors", {"harness", "harness.errors", "harness.exitcodes"}),
    ("import harness\nharness.__all__; dir(harness)", {"harness"}),
], ids=["root", "version", "errors", "all-and-dir"])
def test_importing_the_root_or_a_foundation_imports_nothing_above_it(code, expected):
    assert harness_modules_after(code) == expected


def test_a_public_name_imports_its_module_when_first_used():
    """The check can fail: the lazy name brings in the run owner, as an eager import in the root would at once."""
    loaded = harness_modules_after("import harness\nharness.RunSession")
    assert {"harness.boot", "harness.boot.session"} <= loaded


def modules_after_cli(*argv: str) -> set[str]:
    """Every module (harness's and third parties') a `boot-harness ARGV` process imported, by its own account."""
    probe = ("import json, sys\nfrom harness.cli.app import main\n"
             f"try:\n    main({list(argv)!r})\nexcept SystemExit:\n    pass\n"  # --help, --version exit
             "print(json.dumps(sorted(sys.modules)), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "GLM_MODEL_DIR": "/models/glm"})
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


#: What a command that boots nothing must not pay for at start-up (issue 33: `--help`, `validate`, `cells` at most
#: 0.3 s; benchmarks/cli_startup.py measures it): the run owner, the runtimes (docker-py, requests), the analysis.
HEAVY = {"harness.boot", "harness.runtime", "harness.analysis", "docker", "requests", "testcontainers"}


@pytest.mark.parametrize("argv,also_not", [
    (["--help"], {"pydantic", "yaml", "harness.matrix"}),
    (["validate", "--matrix", "matrix.yaml"], set()),
    (["cells", "--matrix", "matrix.yaml", "--json"], set()),
], ids=["help", "validate", "cells"])
def test_a_command_that_boots_nothing_imports_only_what_it_needs(argv, also_not):
    loaded = modules_after_cli(*argv)
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY or ".".join(m.split(".")[:2]) in HEAVY
                   or m.split(".")[0] in also_not or ".".join(m.split(".")[:2]) in also_not)
    assert heavy == [], f"boot-harness {' '.join(argv)} imported {heavy[:12]}"
