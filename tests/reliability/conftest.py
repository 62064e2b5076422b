"""The reliability suite's fixtures and hooks: harness processes killed at the end of a test, this directory's block
ordered (fake servers, docker, real vLLM), and the background lanes; what its modules share is
tests/helpers/reliability.py."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cli import boot_harness as cli  # noqa: F401 - the suite's modules take it from here
from tests.figures import figure  # noqa: F401 - the suite's modules take it from here
from tests.helpers.env import docker_env, vllm_cpu_env
from tests.helpers.lanes import lane_of
from tests.helpers.reliability import BACKGROUND, BACKGROUND_JOBS, DOCKER_LOCK, Harness


@pytest.fixture
def harnesses():
    """Start harness processes through this; any still running when the test ends is killed (and said so)."""
    started: list[Harness] = []

    def start(*args: str, env: dict | None = None, log: Path) -> Harness:
        h = Harness(*args, env=env, log=log)
        started.append(h)
        return h

    yield start
    for h in started:
        h.kill()


# ---------------------------------------------------------------------------------------------------- background

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(session, config, items):
    """Within this directory's block: fake-server tests first, then the docker ones, then the real-vLLM tests, which
    wait for what runs in the background."""
    mine = [i for i in items if Path(str(i.fspath)).resolve().parent == _HERE]
    if not mine:
        return
    first = items.index(mine[0])
    real = [i for i in mine if Path(str(i.fspath)).name == "test_kills_real.py"]
    docker = [i for i in mine if i not in real and i.get_closest_marker("docker")]
    rest = [i for i in mine if i not in real and i not in docker]
    others = [i for i in items if Path(str(i.fspath)).resolve().parent != _HERE]
    items[:] = others[:first] + rest + docker + real + others[first:]


@pytest.fixture(autouse=True)
def _background_on_the_engines_worker(request):
    """The background lanes start with this directory's first test on the engines lane's worker: a file free of lanes
    (tests/helpers/lanes.py, FREE) may run on the other worker, which must not boot the chains a second time."""
    if lane_of(request.node.nodeid) == "engines":
        request.getfixturevalue("_work_in_background")


@pytest.fixture(scope="session")
def _work_in_background(request, tmp_path_factory):
    """Two lanes start with the session, while the fake-server tests run in the main thread: a real vLLM boot is ~50 s
    of mostly one core, and much of a container scenario is waiting. The process lane runs the real vLLM process chain;
    the docker lane runs, one after the other and holding DOCKER_LOCK, the real container chain and then the container
    scenarios the test modules registered. A job whose component is missing is not started; its tests then fail (CI)
    or skip through the usual fixtures."""
    from tests.reliability import real_chains

    # pytest creates its base temp dir lazily and not thread-safely: two lanes' first mktemp at once can each make one,
    # and a mktemp that sees the other's then fails ("... is not a normalized and relative path"). Make it here, once.
    tmp_path_factory.getbasetemp()
    selected: dict[str, list] = defaultdict(list)
    for item in request.session.items:
        selected[Path(str(item.fspath)).name].append(item)
    real = {"process" if "process" in i.name else "docker" for i in selected.get("test_kills_real.py", [])}
    wants_docker = "docker" in real or any(
        needs and any(i.get_closest_marker("docker") for i in selected.get(module, []))
        for module, needs, _ in BACKGROUND_JOBS.values())
    has_docker = wants_docker and bool(docker_env())
    process_lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bg-process")
    docker_lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bg-docker")

    def locked(job: Callable, *args):
        with DOCKER_LOCK:
            return job(*args)

    if "process" in real and vllm_cpu_env():
        BACKGROUND["real:process"] = process_lane.submit(real_chains.chain_in_background, "process",
                                                         tmp_path_factory.mktemp("real-process"))
    if "docker" in real and has_docker:
        BACKGROUND["real:docker"] = docker_lane.submit(locked, real_chains.chain_in_background, "docker",
                                                       tmp_path_factory.mktemp("real-docker"))
    for name, (module, needs_docker, job) in BACKGROUND_JOBS.items():
        wanted = [i for i in selected.get(module, []) if not needs_docker or i.get_closest_marker("docker")]
        if wanted and needs_docker and has_docker:
            BACKGROUND[name] = docker_lane.submit(locked, job, tmp_path_factory)
    yield
    process_lane.shutdown(wait=True)
    docker_lane.shutdown(wait=True)
