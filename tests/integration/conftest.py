"""Real components: vLLM for the CPU (scripts/setup-cpu-example.sh) and, for container tests, the Docker engine."""

from __future__ import annotations

import pytest

from tests.helpers.boots import CPU_EXAMPLE, harness_cli, only_run_dir
from tests.helpers.env import LIGHT_BOOT


@pytest.fixture(scope="session")
def cpu_example_shards(vllm_cpu, tmp_path_factory):
    """The whole CPU example, booted the way nightly CI boots a matrix: two shards, each two cells at a time
    (`--parallel 2`), merged into one run. Every assertion about the example reads this one set of real boots.
    Light boots (LIGHT_BOOT): nothing here is about vLLM's process tree."""
    base = tmp_path_factory.mktemp("cpu-example")
    procs = {}
    for i in (1, 2):
        procs[i] = harness_cli("run", "--matrix", str(CPU_EXAMPLE), "--shard", f"{i}/2", "--parallel", "2",
                               "--results-dir", str(base / f"s{i}"), env={**vllm_cpu, **LIGHT_BOOT})
    merge = harness_cli("merge", str(only_run_dir(base / "s1")), str(only_run_dir(base / "s2")),
                        "--out", str(base / "merged"))
    return base, procs, merge


