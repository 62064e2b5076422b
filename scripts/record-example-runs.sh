#!/usr/bin/env bash
# Records the runs shipped in examples/runs/ again: the CPU example booted for real on three nights that differ the way
# nights do, so `report`, `compare`, `check` and `history` have a change to show on a fresh clone before anything is
# set up (the README's "Try it in a minute"). Every cell keeps its memory curve and its server log.
#   night 1  examples/cpu-tiny.yaml as it is: every expectation met
#   night 2  the `raised` KV pool trimmed from 10 MiB to 7 MiB (3,584 tokens with the draft model): the 4096-token
#            draft cell no longer fits and is refused, missing its expectation — a regression, `check` exits 1
#   night 3  night 2 without --enforce-eager: vLLM compiles the model (inductor) before it serves, so each boot is
#            slower in the compile phase (still the missed expectation of night 2)
# Each night's matrix is kept beside its run (matrix.yaml). ~4-6 minutes a night on 2 cores.
# BOOT_HARNESS=... runs another harness than this checkout's .venv (e.g. "python -m harness.cli" with PYTHONPATH).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${BOOT_HARNESS:-}" ]; then
  bash scripts/setup-dev.sh
  BOOT_HARNESS=.venv/bin/boot-harness
fi
. "$(bash scripts/setup-cpu-example.sh | tail -1)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# edit FILE SED-EXPR: the one change a night makes, refused when it changes nothing (the example moved on)
edit() {
  sed "$2" "$1" > "$1.new"
  if cmp -s "$1" "$1.new"; then echo "record-example-runs: '$2' changes nothing in $1" >&2; exit 2; fi
  mv "$1.new" "$1"
}

for n in 1 2 3; do
  mkdir -p "$tmp/night$n"
  m="$tmp/night$n/cpu-tiny.yaml"
  if [ "$n" = 1 ]; then cp examples/cpu-tiny.yaml "$m"; else cp "$tmp/night$((n - 1))/cpu-tiny.yaml" "$m"; fi
  case $n in
    2) edit "$m" 's/--kv-cache-memory-bytes, "10485760"/--kv-cache-memory-bytes, "7340032"/' ;;
    3) edit "$m" 's/^args: \[--enforce-eager, /args: [/' ;;
  esac
  rc=0
  # shellcheck disable=SC2086  # BOOT_HARNESS may be a command with its arguments
  $BOOT_HARNESS run --matrix "$m" --results-dir "$tmp/night$n/results" || rc=$?
  [ "$rc" -le 1 ] || exit "$rc"   # 1: a cell missed its expectation, the night the example is there to show
done
rm -rf examples/runs
mkdir -p examples/runs
for n in 1 2 3; do
  mv "$tmp/night$n/results"/*/ "examples/runs/cpu-tiny-night$n"
  for d in active work; do  # the run's own working folders, empty once it has ended: nothing to ship
    [ ! -d "examples/runs/cpu-tiny-night$n/$d" ] || rmdir "examples/runs/cpu-tiny-night$n/$d"
  done
  cp "$tmp/night$n/cpu-tiny.yaml" "examples/runs/cpu-tiny-night$n/matrix.yaml"
done
du -sh examples/runs
