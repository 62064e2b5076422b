#!/usr/bin/env python3
"""The lint gate, as the suite runs it (tests/integration/test_gate.py) and as a developer runs it before stopping:

    python scripts/lint.py                 # ruff, mypy and the suppressions' reasons; exit 1 on any finding
    python scripts/lint.py ruff --fix      # one check; what follows its name goes to the tool

ruff and mypy run from this interpreter's environment (the `test` extra pins them) with pyproject.toml's settings:
ruff over harness/, tests/, benchmarks/ and scripts/, mypy over harness/. `reasons` holds every suppression to its
form, so none can be added without saying why on its line: `# noqa: CODE - why` and `# type: ignore[code]  # why`.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("harness", "tests", "benchmarks", "scripts")

NOQA = re.compile(r"#\s*noqa\b(?P<rest>.*)", re.I)
#: after the hash and `noqa`: the codes (`: E731, B018`), then ` - ` and the reason (words, not another code)
NOQA_FORM = re.compile(r":\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*\s+-\s+\w")
IGNORE = re.compile(r"#\s*type:\s*ignore\b(?P<rest>.*)")
#: `# type: ignore[code]  # why`, the form mypy reads (it takes nothing but another comment after the codes)
IGNORE_FORM = re.compile(r"\[[a-z-]+(?:\s*,\s*[a-z-]+)*\]\s+#\s*\w")


def tool(name: str, *args: str) -> int:
    return subprocess.run([sys.executable, "-m", name, *args], cwd=ROOT).returncode


def unexplained(path: Path) -> list[str]:
    """The suppressions in `path`'s comments that name no rule or give no reason, as `path:line: the comment`."""
    text = path.read_text(encoding="utf-8")
    if "noqa" not in text.lower() and "type:" not in text:
        return []
    bad = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type != tokenize.COMMENT:
            continue
        noqa, ignore = NOQA.search(tok.string), IGNORE.search(tok.string)
        if (noqa and not NOQA_FORM.match(noqa["rest"])) or (ignore and not IGNORE_FORM.match(ignore["rest"])):
            bad.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{tok.start[0]}: "
                       f"{tok.string}")
    return bad


def reasons(paths: list[str]) -> int:
    files = [Path(p).resolve() for p in paths] or sorted(f for d in FOLDERS for f in (ROOT / d).rglob("*.py"))
    bad = [line for f in files for line in unexplained(f)]
    for line in bad:
        print(line)
    if bad:
        print(f"{len(bad)} suppression(s) without a rule and a reason: write `# noqa: CODE - why` or "
              "`# type: ignore[code]  # why` (or fix the finding)")
    return 1 if bad else 0


CHECKS = {
    "ruff": lambda args: tool("ruff", "check", "--output-format", "concise", *args),
    "mypy": lambda args: tool("mypy", *args),
    "reasons": reasons,
}


def main(argv: list[str]) -> int:
    if argv and argv[0] in CHECKS:
        return CHECKS[argv[0]](argv[1:])
    if argv:
        print(f"lint.py: unknown check {argv[0]!r} (one of: {', '.join(CHECKS)})", file=sys.stderr)
        return 2
    return max(check([]) for check in [CHECKS["ruff"], CHECKS["mypy"], CHECKS["reasons"]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
