"""What the reliability suite shares: fake-server matrices, a `boot-harness` child process to signal, what is left of
a run's servers (process groups, containers), and `figure` for what the suite measured (tests/figures.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests import builders
from tests.cli import boot_harness as cli  # noqa: F401 - the suite's modules take it from here
from tests.cli import start_boot_harness
from tests.conftest import ROOT, docker_env, lane_of, vllm_cpu_env
from tests.conftest import VLLM_CPU_IMAGE as IMAGE
from tests.figures import figure  # noqa: F401 - the suite's modules take it from here

FAKE = ROOT / "tests" / "fakes" / "fake_vllm.py"
OWNER_LABEL = "boot-harness.owner-pid"

# ---------------------------------------------------------------------------------------------------- matrices


def fake_matrix(path: Path, cases: dict[str, dict[str, str]], runtime: str = "process",
                extra_mounts: list[dict] | None = None, **top) -> Path:
    """One named axis `case`, each value a fake-server scenario given by its env (FAKE_VLLM_*); in a container, the
    fake is mounted into the local vLLM CPU image and run by its venv's Python."""
    return builders.fake_matrix(path, cases, axis="case", runtime=runtime, image=IMAGE, extra_mounts=extra_mounts,
                                python="/opt/venv/bin/python", **{"timeout_s": 20, **top})


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def run_dirs(results: Path) -> list[Path]:
    return sorted(p for p in results.iterdir() if (p / "results.json").exists()) if results.exists() else []


def only_run(results: Path) -> Path:
    runs = run_dirs(results)
    assert len(runs) == 1, runs
    return runs[0]


# ---------------------------------------------------------------------------------------------------- the harness


class Harness:
    """`boot-harness ARGS` as a child process we can signal; its output goes to a file, so it never blocks on a pipe."""

    def __init__(self, *args: str, env: dict | None = None, log: Path):
        self.log = log
        self._out = log.open("w")
        self.proc = start_boot_harness(*args, env=env, stdout=self._out, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid

    def signal(self, sig: int) -> float:
        self.proc.send_signal(sig)
        return time.monotonic()

    def stacks(self) -> str:
        """Every thread's stack of a harness still running (SIGUSR2, see harness.cli), for a failure message."""
        if self.proc.poll() is not None:
            return ""
        before = len(self.output)
        self.proc.send_signal(signal.SIGUSR2)
        time.sleep(1)
        return self.output[before:]

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._out.close()

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._out.close()


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


def wait_for(what: str, pred: Callable[[], object], timeout: float, every: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


# ---------------------------------------------------------------------------------------------------- what is left


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


#: Every process this session starts inherits it (the process runtime passes its environment on), so a pid that was
#: ours and has been reused since is never counted, nor killed, by these tests: the host's pid_max may be 32768.
SESSION_VAR = "BOOT_HARNESS_RELIABILITY_SESSION"
os.environ.setdefault(SESSION_VAR, uuid.uuid4().hex)
_SESSION_MARK = f"{SESSION_VAR}={os.environ[SESSION_VAR]}".encode()


def _ours(pid: int) -> bool:
    try:
        return _SESSION_MARK in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def live(pid: int) -> bool:
    """One of this session's processes, running and not a zombie (a zombie holds no memory and no GPU; it waits for
    its parent to read its status)."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X") and _ours(pid)


def group_members(pgid: int) -> list[int]:
    """This session's live processes whose process group is `pgid`."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None and int(st[2]) == pgid and st[0] not in ("Z", "X") and _ours(int(entry.name)):
                found.append(int(entry.name))
    return found


def marks(d: Path, phase: str) -> list[int]:
    """PIDs that reached `phase` (the fake's FAKE_VLLM_MARKS files)."""
    return [int(p.name.split(".", 1)[1]) for p in d.glob(f"{phase}.*")]


def server_pids(mark_dir: Path) -> set[int]:
    """Every fake server (and engine-core child) that a run started, from its marks."""
    return {int(p.name.split(".", 1)[1]) for p in mark_dir.glob("*.*")}


def containers(label: str = OWNER_LABEL, value: str | None = None) -> list[str]:
    flt = f"label={label}" if value is None else f"label={label}={value}"
    out = subprocess.run(["docker", "ps", "-a", "--filter", flt, "--format", "{{.Names}}"], capture_output=True,
                         text=True, timeout=60).stdout
    return [n for n in out.split() if n]


def remove_containers(names: list[str]) -> None:
    if names:
        subprocess.run(["docker", "rm", "-f", *names], capture_output=True, timeout=120)


def kill_pids(pids) -> None:
    """Clean-up after a test: SIGKILL those of `pids` that are still this session's processes."""
    for pid in pids:
        if live(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


# ---------------------------------------------------------------------------------------------------- components


def check_run_dir(run_dir: Path, killed: bool = False) -> dict:
    """A run directory a reader can trust: results.json valid against its schema and equal to cells/*.json (after a
    SIGKILL it may lack the one cell whose record was being written), no half-written files."""
    import jsonschema

    run = read_json(run_dir / "results.json")
    schema = read_json(ROOT / "harness" / "schemas" / "results.schema.json")
    jsonschema.validate(run, schema)
    on_disk = {p.stem: read_json(p) for p in (run_dir / "cells").glob("*.json")}
    listed = {c["cell_id"] for c in run["cells"]}
    if killed:
        assert listed <= set(on_disk) and len(set(on_disk) - listed) <= 1, "results.json lists cells not on disk"
    else:
        assert listed == set(on_disk), "results.json and cells/ disagree"
    for c in run["cells"]:
        assert c == on_disk[c["cell_id"]]
    if not killed:
        assert not list(run_dir.rglob(".*.tmp")), "a half-written file was left"
    assert run["summary"]["cells"] == len(run["cells"])
    return run


#: Runs that sweep containers (every `run` of a container matrix, `gc`) remove any container of ours whose harness is
#: dead, host-wide: tests that SIGKILL a container run and then count what is left take this lock.
DOCKER_LOCK = threading.RLock()


# ---------------------------------------------------------------------------------------------------- background

#: name -> Future of a background job's result: the real-vLLM kill chains, and the container scenarios.
BACKGROUND: dict[str, Future] = {}
#: name -> (test module, whether it needs docker, job(tmp_path_factory) -> result); test modules register their
#: expensive module-level work here at import, in the order the docker lane runs it.
BACKGROUND_JOBS: dict[str, tuple[str, bool, Callable]] = {}
_HERE = Path(__file__).resolve().parent


def in_background(name: str, module: str, needs_docker: bool):
    """Decorator: run `job(tmp_path_factory)` in the background from the start of the session when a test of `module`
    is selected; the fixture that needs it calls `background_result(name)`."""
    def register(job: Callable) -> Callable:
        BACKGROUND_JOBS[name] = (module, needs_docker, job)
        return job
    return register


def background_result(name: str, tmp_path_factory):
    """The job's result: waited for when it was started in the background, else computed here and now."""
    future = BACKGROUND.get(name)
    if future is not None:
        return future.result(timeout=1800)
    return BACKGROUND_JOBS[name][2](tmp_path_factory)


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
    (tests/conftest.py, FREE) may run on the other worker, which must not boot the chains a second time."""
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
