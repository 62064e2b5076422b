"""The GPU rehearsal: the artifacts a GPU user runs — matrix.yaml, patches/gpu_worker-kv-cap.patch byte for byte, the
README's commands from the repo root with default paths, the nightly workflow's own steps — run for real on this CPU
machine, with only the hardware stood in:

- the fork image: boot-harness/vllm-fork-standin (scripts/build-fork-standin-image.sh): real vLLM (the CPU build) with
  the fork's layout and expert-offload KV cap, the worker at the seed patch's target path;
- the model: a tiny MTP model (scripts/make_tiny_mtp_model.py) as GLM_MODEL_DIR;
- the GPU: a stub nvidia-container-runtime-hook on dockerd and a stub CDI spec for podman (scripts/setup-gpu-stubs.sh),
  and a stand-in NVML (tests/standins/nvml/pynvml.py) that keeps memory "used" for a few seconds after each server.

What the user would override from outside, and nothing else, is handed in: FORK_IMAGE and the worker's two hashes
(the stand-in's gpu_worker.py is not the fork's byte for byte), GLM_MODEL_DIR, and PYTHONPATH for the stand-in NVML.
scripts/setup-rehearsal.sh writes those values as REHEARSAL_* variables.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import STANDIN_NVML, require

STUB_HOOK = Path("/usr/local/lib/boot-harness/gpu-stubs/bin/nvidia-container-runtime-hook")
STUB_HOOK_LOG = Path("/var/log/boot-harness-stub-nvidia-hook.log")
#: The stand-in GPU's scripted memory curve for a server (tests/standins/nvml/pynvml.py): weights, KV, graphs.
STANDIN_CURVE = "0:1,2:40,4:90,6:118"
_HOW = "run scripts/test.sh, or `. \"$(bash scripts/setup-rehearsal.sh | tail -1)\"` first"


def _image_present(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def standin() -> dict[str, str]:
    """The environment matrix.yaml is run with here: the user's overrides, pointed at the stand-ins."""
    names = ("REHEARSAL_FORK_IMAGE", "REHEARSAL_KV_CAP_BASE_SHA256", "REHEARSAL_KV_CAP_PATCHED_SHA256",
             "REHEARSAL_GLM_MODEL_DIR", "REHEARSAL_GLM_MODEL_DIR_SHORT")
    values = {n: os.environ.get(n, "") for n in names}
    ok = all(values.values()) and STUB_HOOK.exists() and _image_present(values["REHEARSAL_FORK_IMAGE"]) \
        and Path(values["REHEARSAL_GLM_MODEL_DIR"], "config.json").exists()
    require("the GPU rehearsal's stand-ins (fork image, MTP model, stub GPU hooks)", ok, _HOW)
    return {
        "FORK_IMAGE": values["REHEARSAL_FORK_IMAGE"],
        "KV_CAP_BASE_SHA256": values["REHEARSAL_KV_CAP_BASE_SHA256"],
        "KV_CAP_PATCHED_SHA256": values["REHEARSAL_KV_CAP_PATCHED_SHA256"],
        "GLM_MODEL_DIR": values["REHEARSAL_GLM_MODEL_DIR"],
        **STANDIN_NVML,
        "STANDIN_NVML_HOLD_S": "3",
        # the server's GPU memory as it boots (GiB at seconds since it appeared), and someone else's process beside it
        "STANDIN_NVML_CURVE": STANDIN_CURVE, "STANDIN_NVML_NEIGHBOUR_GIB": "2",
        "CONTAINER_RUNTIME": "docker",
    }


@pytest.fixture(scope="session")
def short_model() -> str:
    """The stand-in model with max_position_embeddings 65536: a changed model, for a regression night."""
    return os.environ.get("REHEARSAL_GLM_MODEL_DIR_SHORT", "")


def new_run_dirs(results: Path, before: set[Path]) -> list[Path]:
    return sorted(p for p in results.glob("*/results.json") if p.parent not in before)
