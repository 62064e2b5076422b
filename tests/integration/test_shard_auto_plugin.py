"""`--boot-shard auto` under the pytest plugin, in a pytest of its own as CI starts it: the shard read from a
Kubernetes Indexed Job's variables and recorded with its pod, and their absence refused in pytest's one line (the
CLI's `--shard auto` and every scheduler's variables: tests/unit/test_shard_auto.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from harness.matrix.load import load_matrix
from harness.matrix.scheduler import K8S_COUNT
from harness.matrix.shard import shard_of
from tests.helpers.env import ROOT
from tests.helpers.shard_auto import SCHEDULER_VARIABLES, fake_matrix


def test_the_pytest_plugin_takes_shard_auto_and_refuses_it_in_one_line(tmp_path):
    path = fake_matrix(tmp_path, ["boot"])
    (cell,) = load_matrix(path).cells
    empty = next(i for i in (1, 2) if shard_of(cell.id, 2) != i)
    base = [sys.executable, "-m", "pytest", str(ROOT / "tests" / "test_boot_matrix.py"), "--boot-matrix", str(path),
            "--boot-shard", "auto", "--boot-results-dir", str(tmp_path / "results"), "-p", "no:cacheprovider", "-q",
            f"--rootdir={ROOT}"]
    env = {k: v for k, v in os.environ.items() if k not in SCHEDULER_VARIABLES}
    env.update({"JOB_COMPLETION_INDEX": str(empty - 1), K8S_COUNT: "2", "HOSTNAME": f"boot-nightly-{empty - 1}"})
    proc = subprocess.run(base, capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    (run_dir,) = (tmp_path / "results").iterdir()
    run = json.loads((run_dir / "results.json").read_text())
    assert run["shard"] == f"{empty}/2" and run["cells"] == [], proc.stdout[-2000:]
    assert run["scheduler"]["kind"] == "kubernetes" and run["scheduler"]["job_id"] == f"boot-nightly-{empty - 1}"
    del env["JOB_COMPLETION_INDEX"]
    proc = subprocess.run(base, capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 4 and len(lines) == 1 and "JOB_COMPLETION_INDEX is not" in lines[0], proc.stderr
