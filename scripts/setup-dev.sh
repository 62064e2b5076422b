#!/usr/bin/env bash
# Sets up (or reuses) .venv: the harness itself, editable, with its pinned test dependencies. Idempotent: the venv is
# rebuilt only when pyproject.toml changes (its sha256 is the stamp).
set -euo pipefail
cd "$(dirname "$0")/.."
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
