"""The xdist lanes of the suite, by file (tests/conftest.py's scheduler and the reliability suite's background lanes
read them)."""

from __future__ import annotations

import pytest

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
             "tests/integration/test_real_faults.py", "tests/integration/test_bisect_vllm.py"),
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
        "tests/reliability/test_hostile_links.py", "tests/reliability/test_hostile_json.py",
        "tests/reliability/test_kills_bisect.py")


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
