"""Where the tests' real components are (the vLLM for the CPU and its tiny models, the local vLLM CPU image, the
stand-in NVML) and what a test does when one is missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: A stand-in NVML (tests/standins/nvml/pynvml.py): put first on PYTHONPATH for a harness that runs a GPU matrix here.
#: The stand-in NVML, with GPUs of this test process's own (their UUIDs carry its pid): the harness holds a GPU
#: host-wide by UUID while a cell runs on it, and the two xdist lanes are two runners, not two jobs on one.
STANDIN_NVML = {"PYTHONPATH": str(ROOT / "tests" / "standins" / "nvml"), "STANDIN_NVML_NODE": str(os.getpid())}

#: vLLM's worker inside the engine-core process (no Worker process that imports torch and vLLM a third time; the API
#: server still starts its engine core apart): a tiny CPU boot takes ~20 s instead of ~30 s here (docs/testing.md).
#: For fixtures whose assertions are about vLLM's numbers and verdicts; the teardown, kill and orphan tests keep
#: vLLM's real process tree (they do not use this).
LIGHT_BOOT = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(what: str, ok: bool, how: str) -> None:
    """A missing real component fails under CI (it must be there) and skips, saying why, on a dev machine."""
    if ok:
        return
    message = f"{what} is not available: {how}"
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


#: The local vLLM CPU image (scripts/setup-container-example.sh builds it and exports its hash-of-inputs tag).
VLLM_CPU_IMAGE = os.environ.get("VLLM_CPU_IMAGE", "boot-harness/vllm-cpu:latest")
HOW_CPU = "run scripts/test.sh, or `. \"$(bash scripts/setup-cpu-example.sh | tail -1)\"` first"
HOW_DOCKER = "run scripts/setup-container-example.sh"


def vllm_cpu_env() -> dict[str, str] | None:
    """VLLM_CPU_VENV and TINY_MODELS, the env the CPU matrices expand, when vllm-cpu and the tiny models are there."""
    venv, models = os.environ.get("VLLM_CPU_VENV", ""), os.environ.get("TINY_MODELS", "")
    if venv and Path(venv, "bin", "vllm-server").exists() and models and Path(models, "tiny-llama",
                                                                                "config.json").exists():
        env = {"VLLM_CPU_VENV": venv, "TINY_MODELS": models}
        arch = os.environ.get("ARCH_MODELS", "")
        if arch and Path(arch, "tiny-dsv2-mla", "config.json").exists():
            env["ARCH_MODELS"] = arch  # scripts/make_tiny_arch_models.py's, for examples/cpu-architectures.yaml
        return env
    return None


def docker_env() -> dict[str, str] | None:
    """VLLM_CPU_IMAGE when the Docker engine answers and holds the local image."""
    try:
        import docker

        client = docker.from_env()
        client.ping()
        client.images.get(VLLM_CPU_IMAGE)
    except Exception:  # noqa: BLE001 - any failure means: not available here
        return None
    return {"VLLM_CPU_IMAGE": VLLM_CPU_IMAGE}


#: The podman CLI with the settings scripts/setup-podman.sh wrote for this machine.
PODMAN_CLI_ENV = {"CONTAINERS_CONF": str(Path.home() / ".cache" / "boot-harness" / "podman" / "containers.conf")}
