#!/usr/bin/env bash
# Records the runs shipped in examples/runs/ again: the CPU example booted for real, night after night (NIGHTS,
# default 3), so `report`, `analyze`, `compare`, `check`, `history` and `facts` have something real to read on a fresh
# clone before anything is set up (the README's "Try it in a minute"). Each takes ~4 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-dev.sh
. "$(bash scripts/setup-cpu-example.sh | tail -1)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nights=${NIGHTS:-3}
for n in $(seq 1 "$nights"); do
  rc=0
  .venv/bin/boot-harness run --matrix examples/cpu-tiny.yaml --results-dir "$tmp/night$n" || rc=$?
  [ "$rc" -le 1 ] || exit "$rc"   # 1: a cell missed its expectation, still a night worth keeping
done
rm -rf examples/runs
mkdir -p examples/runs
for n in $(seq 1 "$nights"); do
  mv "$tmp/night$n"/*/ "examples/runs/cpu-tiny-night$n"
done
du -sh examples/runs
