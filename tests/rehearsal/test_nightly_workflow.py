"""The nightly workflow's own steps (.github/workflows/nightly-gpu.yml, read from the file), run as a runner runs them
(tests/rehearsal/actions.py) against real shard runs on the stand-in fork image, with stand-in GITHUB_* variables and
a stand-in `gh` that serves the last successful scheduled night's merged run:

1. a first night (no previous one) of matrix.yaml, two shards at once: every expectation met → green; its merged run
   becomes "the previous night"; a re-run of the merge job overwrites its artifacts;
2. a first night on which every cell errors → red, with no previous night to compare with;
3. a night whose model changed so that a cell that booted last night is refused → red: a missed expectation and a
   regression against night 1.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from tests.helpers.env import ROOT
from tests.rehearsal.actions import JobResult, Runner

WORKFLOW = ROOT / ".github" / "workflows" / "nightly-gpu.yml"
GH_STUB = """#!/usr/bin/env bash
# Stand-in for the GitHub CLI's two calls in the workflow: the last successful scheduled run, and its artifact.
# $STUB_GH_RUNS/last-success holds that run's id; $STUB_GH_RUNS/<id>/<artifact>/ its artifacts.
set -euo pipefail
if [ "$1 $2" = "run list" ]; then
  [ -f "$STUB_GH_RUNS/last-success" ] && cat "$STUB_GH_RUNS/last-success"
  exit 0
fi
if [ "$1 $2" = "run download" ]; then
  id=$3; shift 3; name=""; dir="."
  while [ $# -gt 0 ]; do case "$1" in --name) name=$2; shift 2 ;; --dir) dir=$2; shift 2 ;; *) shift ;; esac; done
  [ -d "$STUB_GH_RUNS/$id/$name" ] || { echo "no artifact $name in run $id" >&2; exit 1; }
  mkdir -p "$dir" && cp -r "$STUB_GH_RUNS/$id/$name/." "$dir/"
  exit 0
fi
echo "gh stub: unsupported call: $*" >&2; exit 1
"""


class Night:
    """One workflow run: plan, the boot shards at once, merge; what each job did."""

    def __init__(self, base: Path, run_id: int, inputs: dict, env: dict, gh_runs: Path, attempt: int = 1):
        base.mkdir(parents=True, exist_ok=True)
        stub = base / "gh-bin"
        stub.mkdir(exist_ok=True)
        (stub / "gh").write_text(GH_STUB)
        (stub / "gh").chmod(0o755)
        github = {"run_id": run_id, "run_attempt": attempt, "repository": "example/boot-harness",
                  "ref": "refs/heads/main", "token": "ghs_not_a_real_token", "event_name": "schedule"}
        path = f"{stub}:{env.get('PATH', os.environ['PATH'])}"
        self.runner = Runner(WORKFLOW, ROOT, base, github, inputs,
                             {**env, "PATH": path, "STUB_GH_RUNS": str(gh_runs)}, ROOT / ".venv" / "bin")
        self.gh_runs, self.run_id = gh_runs, run_id
        self.plan = self.runner.run_job("plan")
        shards = __import__("json").loads(self.plan.outputs["shards"])
        self.boots: dict[int, JobResult] = {}
        self.errors: list[BaseException] = []
        threads = [threading.Thread(target=self._boot, args=(s,)) for s in shards]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.errors:
            raise self.errors[0]
        boot = JobResult("boot", "success" if all(b.result == "success" for b in self.boots.values()) else "failure",
                         [], {}, "")
        self.needs = {"plan": self.plan, "boot": boot}
        self.merge = self.runner.run_job("merge", needs=self.needs)

    def _boot(self, shard: int) -> None:
        try:
            self.boots[shard] = self.runner.run_job("boot", needs={"plan": self.plan}, matrix={"shard": shard},
                                                    label=f"boot-{shard}")
        except BaseException as exc:  # noqa: BLE001 - raised in the main thread
            self.errors.append(exc)

    @property
    def green(self) -> bool:
        return self.merge.result == "success"

    def gate(self) -> str:
        return self.merge.step("fail on a missed expectation, a regression or a lost shard").stdout

    def publish_as_last_success(self) -> None:
        """What GitHub keeps of a green scheduled night: its artifacts, found by `gh run list --status success`."""
        shutil.copytree(self.runner.artifacts, self.gh_runs / str(self.run_id), dirs_exist_ok=True)
        (self.gh_runs / "last-success").write_text(f"{self.run_id}\n")

    def log(self) -> str:
        return "\n".join(j.log() for j in [self.plan, *self.boots.values(), self.merge])


@pytest.fixture(scope="module")
def nights(standin, short_model, tmp_path_factory):
    base = tmp_path_factory.mktemp("nightly")
    gh_runs = base / "github-runs"
    gh_runs.mkdir()
    env = {**standin}
    # 1. a first night of the shipped matrix: four cells (the workflow's `select` input), two shards at once
    first = Night(base / "night1", 1001, {"select": "max_model_len=131072,image=unpatched", "shards": "2"}, env,
                  gh_runs)
    rerun = None
    if first.green:
        first.publish_as_last_success()
        rerun = first.runner.run_job("merge", needs=first.needs, label="merge-attempt-2")
    # 2. a first night (nothing published) on which every cell errors
    errors = Night(base / "night2", 2002, {"matrix": "tests/rehearsal/data/error-night.yaml", "shards": "1"}, env,
                   base / "no-runs-yet")
    # 3. the model changed: the cell that booted on night 1 is refused now
    changed = Night(base / "night3", 3003, {"select": "max_model_len=131072,mtp=off", "shards": "1"},
                    {**env, "GLM_MODEL_DIR": short_model}, gh_runs)
    return first, rerun, errors, changed


def test_a_first_night_that_meets_its_expectations_is_green(nights):
    first = nights[0]
    assert all(b.result == "success" for b in first.boots.values()), first.log()
    assert first.green, first.log()
    s = first.merge.summary
    # check's lines wrap at the width through a pipe (at spaces): read as words
    words = " ".join(s.split())
    assert "## Expectations" in s and " ok — 4 cells, 4 matched, 0 mismatched, 0 errors (complete)" in words
    assert "no previous night to compare with" in s
    # where the night's boot time went: the report's timeline table, one row per cell, and the dominant phases
    assert "### Boot timeline" in s and "s of boot time in 4 cells: " in s
    assert sum(line.startswith("| mml131072-") for line in s.splitlines()) >= 4
    assert {"boot-run-shard-1", "boot-run-shard-2", "nightly-merged", "nightly-report"} <= {
        p.name for p in first.runner.artifacts.iterdir()}


def test_the_shards_booted_from_the_workspace_root_with_its_relative_results_dir(nights):
    first = nights[0]
    cells = []
    for shard, job in first.boots.items():
        out = job.step("boot the shard").stdout
        assert "run directory: " in out and "/ws/boot-" in out, out[-2000:]
        cells += [line.split()[0] for line in out.splitlines() if line.endswith(" booting")]
        assert (first.runner.base / "ws" / f"boot-{shard}" / "boot-results").is_dir()
    assert sorted(cells) == sorted(["mml131072-mtp_off-floor_none-image_unpatched",
                                    "mml131072-mtp4-floor_none-image_unpatched",
                                    "mml131072-mtp4-floor_env-image_unpatched",
                                    "mml131072-mtp4-floor_bytes-image_unpatched"]), cells


def test_a_rerun_of_the_merge_job_overwrites_its_artifacts(nights):
    rerun = nights[1]
    assert rerun is not None and rerun.result == "success", rerun and rerun.log()
    assert "Conflict" not in rerun.log()


def test_a_first_night_on_which_every_cell_errors_is_red(nights):
    errors = nights[2]
    assert errors.boots[1].result == "success", "the shard recorded its cells (exit 1); the merge job judges them"
    assert not errors.green, errors.log()
    assert errors.merge.step("compare with the previous night").outputs.get("rc") == "0", "there is no previous night"
    assert "missed its expectations or a cell errored" in errors.gate()
    assert "mml2048: error (start_failed), expected booted" in errors.merge.summary
    assert "0 matched, 2 mismatched, 2 errors (complete)" in " ".join(errors.merge.summary.split())


def test_a_night_whose_booted_cell_now_refuses_is_red_with_the_regression_named(nights):
    changed = nights[3]
    assert not changed.green, changed.log()
    gate = changed.gate()
    assert "missed its expectations" in gate and "regressions against the previous night" in gate
    s = changed.merge.summary
    assert "## Compared with the previous night" in s and "mml131072-mtp_off-floor_none-image_unpatched" in s
    assert "time regression(s) beyond 25% and 30 s" in s, "compare's boot-time check, in the job summary"
    assert "max_len_exceeds_model" in s
