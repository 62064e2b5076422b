#!/usr/bin/env bash
# Headless Chromium for the report's browser test (Debian's package; idempotent, non-interactive).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  echo "setup-browser: chromium is installed" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq </dev/null >/dev/null
apt-get install -y -qq --no-install-recommends chromium </dev/null >/dev/null
echo "setup-browser: installed $(chromium --version 2>/dev/null)" >&2
