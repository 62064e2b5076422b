"""Shared fixtures: where the real vLLM for the CPU, the tiny models and the local vLLM CPU image are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import figures

ROOT = Path(__file__).resolve().parent.parent
#: A stand-in NVML (tests/standins/nvml/pynvml.py): put first on PYTHONPATH for a harness that runs a GPU matrix here.
#: The stand-in NVML, with GPUs of this test process's own (their UUIDs carry its pid): the harness holds a GPU
#: host-wide by UUID while a cell runs on it, and the two xdist lanes are two runners, not two jobs on one.
STANDIN_NVML = {"PYTHONPATH": str(ROOT / "tests" / "standins" / "nvml"), "STANDIN_NVML_NODE": str(os.getpid())}


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
    "own_dockerd": ("docker",),  # a second dockerd of the reliability suite's, to restart and freeze
    "standin": ("docker", "vllm"),  # real vLLM in the stand-in fork image on the Docker engine
}
#: Fixtures that take over 20 s, most of them real vLLM boots: every test that reads one is `slow`, since run alone it
#: pays for them. A test that takes that long by itself carries `@pytest.mark.slow` in its module.
SLOW_FIXTURES = {"cpu_example_shards", "example_run", "container_run", "arch_run", "frontier", "readme", "nights",
                 "docker_kills", "docker_faults", "process_kills"}


@pytest.hookimpl(tryfirst=True)  # before tests/reliability's, which orders its block by these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        _mark_by_fixtures(item)
    wrong = [f"{item.nodeid} ({why})" for item in items for why in [lane_mistake(item)] if why]
    if wrong:
        raise pytest.UsageError("tests in the wrong xdist lane (tests/conftest.py, LANES): " + "; ".join(wrong))


#: The lanes of `scripts/test.sh`'s two xdist workers: each lane's files run on one worker, in collection order; every
#: other test goes to whichever worker is free. Lanes are by file, since xdist's controller sees only node ids.
#: - engines: every test that touches a container engine, and all of tests/reliability. Its kill tests count what a
#:   SIGKILLed harness left on an engine, which any other run's start-up sweep or `gc` would reap first; and its
#:   background lanes (tests/reliability/conftest.py) belong to one process.
#: - vllm: the real-vLLM process boots, whose session fixtures several modules read (booted once, in one process).
LANES = {
    "engines": ("tests/reliability/", "tests/integration/test_containers.py", "tests/integration/test_podman.py",
                "tests/integration/test_pulls.py", "tests/integration/test_container_spec.py",
                "tests/rehearsal/test_readme_gpu_matrix.py",
                "tests/rehearsal/test_nightly_workflow.py", "tests/integration/test_memory_containers.py",
                "tests/rehearsal/test_slurm.py", "tests/integration/test_bisect_docker.py",
                "tests/integration/test_real_faults_docker.py"),
    "vllm": ("tests/integration/test_vllm_cpu.py", "tests/integration/test_scale_cpu.py",
             "tests/integration/test_frontier.py", "tests/integration/test_architectures.py",
             "tests/rehearsal/test_gpu_memory.py",
             "tests/integration/test_compile_cache.py", "tests/integration/test_serve_flags_vllm.py",
             "tests/integration/test_history_real.py", "tests/integration/test_memory_real.py",
             "tests/integration/test_real_faults.py"),
}


#: Files under a lane's folder that belong to no lane: they touch no engine, sweep only the run dirs they make, count
#: only the processes they started, and start no background work, so either worker may take them (the hostile-input
#: suite, bad input, the process-runtime teardowns: minutes that would otherwise all wait on the engines worker, which
#: is the longest lane).
FREE = ("tests/reliability/test_hostile_files.py", "tests/reliability/test_hostile_matrix.py",
        "tests/reliability/test_hostile_secrets.py", "tests/reliability/test_hostile_values.py",
        "tests/reliability/test_hostile_echoes.py",
        "tests/reliability/test_hostile_table.py", "tests/reliability/test_flag_spellings_read.py",
        "tests/reliability/test_bad_input.py", "tests/reliability/test_fuzz.py", "tests/reliability/test_secrets.py",
        "tests/reliability/test_teardown.py", "tests/reliability/test_stacks.py",
        "tests/reliability/test_hostile_output.py", "tests/reliability/test_hostile_watch.py",
        "tests/reliability/test_hostile_procs.py", "tests/reliability/test_hostile_bounds.py",
        "tests/reliability/test_hostile_links.py")


def lane_of(nodeid: str) -> str | None:
    path = nodeid.split("::", 1)[0]
    if path in FREE:
        return None
    return next((lane for lane, prefixes in LANES.items() if path.startswith(prefixes)), None)


def lane_mistake(item: pytest.Item) -> str | None:
    """Why a test's marks do not fit its file's lane (a docker test outside `engines`, a vllm one outside any lane)."""
    lane = lane_of(item.nodeid)
    if (item.get_closest_marker("docker") or item.get_closest_marker("podman")) and lane != "engines":
        return "it uses a container engine: its file belongs in the engines lane"
    if item.get_closest_marker("vllm") and lane is None:
        return "it needs vllm-cpu: its file belongs in the vllm lane (or engines)"
    return None


@pytest.hookimpl(optionalhook=True)  # an xdist hook
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadgroup` by LANES: xdist's own loadgroup reads `xdist_group` marks through an attribute pytest 9
    no longer has (`Item._nodeid`), so it groups nothing here."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return lane_of(nodeid) or nodeid

    return LaneScheduling(config, log)


def _mark_by_fixtures(item: pytest.Item) -> None:
    names = set(getattr(item, "fixturenames", ()))
    for fixture, marks in FIXTURE_MARKS.items():
        if fixture in names:
            for mark in marks:
                item.add_marker(mark)
    if names & SLOW_FIXTURES:
        item.add_marker("slow")


#: vLLM's worker inside the engine-core process (no Worker process that imports torch and vLLM a third time; the API
#: server still starts its engine core apart): a tiny CPU boot takes ~20 s instead of ~30 s here (docs/testing.md).
#: For fixtures whose assertions are about vLLM's numbers and verdicts; the teardown, kill and orphan tests keep vLLM's
#: real process tree (they do not use this).
LIGHT_BOOT = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def pytest_sessionfinish(session: pytest.Session) -> None:
    figures.hand_over(session.config)


#: After the session, pytest must be gone within this. A thread a test left running (a harness call blocked on an
#: engine that never answers) would otherwise hold the interpreter at exit for ever, after the last dot, with nothing
#: in the log: faulthandler then prints every thread's stack and exits 1. (xdist's controller already ends a worker
#: that does not exit: execnet kills it after a timeout.)
EXIT_WITHIN_S = 180


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    import faulthandler
    import sys
    import threading

    left = [t.name for t in threading.enumerate()
            if t is not threading.main_thread() and not t.daemon and not t.name.startswith("ThreadPoolExecutor")]
    if left:  # an idle pool's threads end at exit; these may not
        print(f"pytest (pid {os.getpid()}): threads still running at exit: {', '.join(left)}", file=sys.__stderr__)
    sys.stdout.flush()
    if hasattr(config, "workerinput"):  # an xdist worker serves its gateway until the controller ends it, which
        return                          # kills a worker that does not exit within its own timeout
    faulthandler.dump_traceback_later(EXIT_WITHIN_S, exit=True, file=sys.__stderr__)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent under -p no:xdist
def pytest_testnodedown(node, error) -> None:
    figures.take_over(getattr(node, "workeroutput", {}))


def pytest_terminal_summary(terminalreporter) -> None:
    figures.summary(terminalreporter)


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
