"""The GPU rehearsal's stand-ins (tests/rehearsal/conftest.py says what they are): where they are, and the run
directories a rehearsal step made."""

from __future__ import annotations

import subprocess
from pathlib import Path

STUB_HOOK = Path("/usr/local/lib/boot-harness/gpu-stubs/bin/nvidia-container-runtime-hook")
STUB_HOOK_LOG = Path("/var/log/boot-harness-stub-nvidia-hook.log")


#: The stand-in GPU's scripted memory curve for a server (tests/standins/nvml/pynvml.py): weights, KV, graphs.
STANDIN_CURVE = "0:1,2:40,4:90,6:118"
HOW_REHEARSAL = "run scripts/test.sh, or `. \"$(bash scripts/setup-rehearsal.sh | tail -1)\"` first"


def image_present(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def new_run_dirs(results: Path, before: set[Path]) -> list[Path]:
    return sorted(p for p in results.glob("*/results.json") if p.parent not in before)
