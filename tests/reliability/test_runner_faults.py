"""The faults a shared GPU runner meets that are not the harness's own kills (docs/reliability.md, "Runner faults").

A server that eats host memory must be the one the kernel's OOM killer takes: a process server's oom_score_adj is
raised, a container runs under the matrix's `memory:` limit and its OOM kill is recorded as such. Tried inside a
memory-limited container, never by exhausting this machine."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from harness.runtime.process import SERVER_OOM_SCORE_ADJ
from tests import builders
from tests.reliability.conftest import cli, figure, only_run, read_json

#: Writes 256 MiB, touching every page (a zero-filled buffer costs no memory until written), then waits.
HOG = "import time; b = b'x' * (256 * 2**20); time.sleep(60)"


@pytest.mark.docker
def test_a_container_that_eats_its_memory_limit_is_oom_killed_and_recorded_so(docker_image, tmp_path):
    m = builders.write_matrix(tmp_path / "m.yaml", {
        "name": "hog", "runtime": "docker", "image": docker_image["VLLM_CPU_IMAGE"], "pull": "never", "model": "m",
        "memory": "64m", "entrypoint": ["/opt/venv/bin/python", "-c", HOG], "timeout_s": 60,
        "axes": {"case": {"hog": {}}}, "expect": [{"outcome": "crashed", "reason": "oom_killed"}]})
    t0 = time.monotonic()
    proc = cli("run", "--matrix", str(m), "--results-dir", str(tmp_path / "r"))
    figure("an OOM-killed container: verdict, s", round(time.monotonic() - t0, 2))
    assert proc.returncode == 0, proc.stderr  # matched: crashed (oom_killed), the harness itself untouched
    (cell,) = read_json(only_run(tmp_path / "r") / "results.json")["cells"]
    assert (cell["outcome"], cell["reason"], cell["container"]["oom_killed"]) == ("crashed", "oom_killed", True)
    assert cell["exit_code"] == 137


def test_a_process_server_is_the_oom_killers_first_choice_not_the_harness(tmp_path):
    """The server and what it forks carry oom_score_adj 1000; the harness keeps its own."""
    marks = tmp_path / "adj"
    code = (f"import os, pathlib, sys, time; p = pathlib.Path({str(marks)!r}); "
            "p.write_text(open('/proc/self/oom_score_adj').read().strip()); "
            "child = os.fork()\n"
            "if child == 0:\n"
            "    (p.parent / 'child').write_text(open('/proc/self/oom_score_adj').read().strip()); os._exit(0)\n"
            "os.waitpid(child, 0); time.sleep(60)")
    m = builders.write_matrix(tmp_path / "m.yaml", {
        "name": "adj", "command": [sys.executable, "-c", code], "model": "m", "timeout_s": 4,
        "axes": {"case": {"one": {}}}})
    proc = cli("run", "--matrix", str(m), "--results-dir", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr  # no expectation: a timeout is what it is
    assert marks.read_text() == str(SERVER_OOM_SCORE_ADJ) == (tmp_path / "child").read_text()
    with open("/proc/self/oom_score_adj") as f:
        assert int(f.read()) < SERVER_OOM_SCORE_ADJ, "the harness's own score is not raised"
