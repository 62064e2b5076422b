#!/usr/bin/env bash
# Everything the container example and the container tests need: a running Docker engine and the local vLLM CPU image
# (built once, cached by a tag derived from its pinned inputs). Writes VLLM_CPU_IMAGE to an env file and prints its
# path on the last line:  . "$(bash scripts/setup-container-example.sh | tail -1)"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache="${BOOT_HARNESS_CACHE:-$HOME/.cache/boot-harness}"
bash "$here/setup-docker.sh" >&2
tag=$(bash "$here/build-vllm-cpu-image.sh" | tail -1)
mkdir -p "$cache"
envfile="$cache/container-example.env"
echo "export VLLM_CPU_IMAGE=$tag" > "$envfile"
echo "$envfile"
