#!/usr/bin/env bash
# The main job on the bundled CPU example: set everything up, then boot every cell of examples/cpu-tiny.yaml for real.
# Extra arguments go to `boot-harness run` (e.g. --select 'spec=draft').
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-dev.sh
. "$(bash scripts/setup-cpu-example.sh | tail -1)"
exec .venv/bin/boot-harness run --matrix examples/cpu-tiny.yaml "$@"
