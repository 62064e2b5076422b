#!/usr/bin/env bash
# Sets up everything the tests need (harness venv, real vLLM for the CPU, tiny models, Docker engine, local vLLM CPU
# image, podman's API, stub GPU hooks and the stand-in fork image for the GPU rehearsal, Slurm's packages) and runs
# the whole suite. This is what CI runs. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
bash scripts/setup-dev.sh
. "$(bash scripts/setup-cpu-example.sh | tail -1)"
bash scripts/setup-gpu-stubs.sh >&2     # before dockerd starts: it looks for the (stub) nvidia hook only then
. "$(bash scripts/setup-container-example.sh | tail -1)"
. "$(bash scripts/setup-podman.sh | tail -1)"
. "$(bash scripts/setup-rehearsal.sh | tail -1)"
. "$(bash scripts/setup-slurm.sh | tail -1)"     # installed only: the Slurm tests start the cluster and stop it
bash scripts/setup-browser.sh
echo "setup took $(( $(date +%s) - t0 )) s" >&2
# mypy's cache (the lint gate, tests/integration/test_gate.py) outlives a clean checkout: a warm check takes ~2 s, a
# cold one ~12 s
export MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-$HOME/.cache/boot-harness/mypy}"
# Paths among the arguments (`bash scripts/test.sh tests/reliability`) replace the default `tests`.
paths=(tests)
for a in "$@"; do [[ $a != -* && -e $a ]] && paths=() && break; done
# Both cores: two xdist workers; the tests that share a container engine, and those that share real-vLLM boots, each
# keep to one worker (tests/helpers/lanes.py, LANES; docs/testing.md). `-n 0` or `-p no:xdist` runs in one process.
workers=(-n 2 --dist loadgroup)
for a in "$@"; do [[ $a == -n* || $a == --numprocesses* || $a == --dist* || $a == no:xdist ]] && workers=() && break; done
exec .venv/bin/python -m pytest "${paths[@]}" "${workers[@]}" "$@"
