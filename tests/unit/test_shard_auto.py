"""`--shard auto`: shard I of N read from the scheduler that started the process — a Buildkite `parallelism` job, a
Kubernetes Indexed Job's pod, a Slurm array task — with the values those schedulers really set (the shared notes:
slurm-one-node.md, history-memory-scale-facts.md). Nothing found, half found, garbage, out of range or two schedulers
that disagree is one line and exit 2; the run records the scheduler job it ran as."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.boot.session import RunOptions, RunSession
from harness.errors import UsageError
from harness.matrix.load import load_matrix
from harness.matrix.scheduler import K8S_COUNT, SchedulerKind, SchedulerRef, detect
from harness.matrix.shard import parse_shard, resolve_shard, shard_cells, shard_of
from harness.results.model import RunResult
from harness.runtime.fake import FakeRuntime
from tests import builders
from tests.helpers.shard_auto import BUILDKITE, KUBERNETES, SCHEDULER_VARIABLES, SLURM, fake_matrix

ROOT = Path(__file__).resolve().parents[2]

#: What a GitHub Actions job exports: nothing about its matrix.
GITHUB = {"GITHUB_ACTIONS": "true", "GITHUB_RUN_ID": "9876543210", "GITHUB_JOB": "boot", "RUNNER_NAME": "gpu-1"}


@pytest.fixture
def clean_env(monkeypatch):
    """This test process's own environment without any scheduler's variables (the suite may run under one)."""
    for name in SCHEDULER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# ---- reading the variables


def test_buildkite_parallel_job_1_of_4_is_shard_2_of_4():
    ref = detect(BUILDKITE)
    assert (ref.kind, ref.shard, ref.index, ref.count) == (SchedulerKind.buildkite, "2/4", 1, 4)
    assert ref.job_id == BUILDKITE["BUILDKITE_JOB_ID"] and ref.group_id == BUILDKITE["BUILDKITE_BUILD_ID"]


def test_a_kubernetes_indexed_pod_takes_its_count_from_the_manifest_and_its_job_from_its_hostname():
    ref = detect(KUBERNETES)
    assert (ref.kind, ref.shard, ref.job_id, ref.group_id) == ("kubernetes", "3/3", "boot-nightly-2", "boot-nightly")
    no_host = detect({k: v for k, v in KUBERNETES.items() if k != "HOSTNAME"})
    assert (no_host.shard, no_host.job_id, no_host.group_id) == ("3/3", None, None)


def test_a_slurm_array_task_counts_from_the_arrays_first_id():
    ref = detect(SLURM)
    assert (ref.kind, ref.shard, ref.job_id, ref.group_id) == ("slurm", "2/4", "4242_1", "4242")
    # --array=1-4: task 1 is shard 1, task 4 shard 4 (MIN/MAX alone, COUNT alone: the same answer)
    one_based = {"SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "4"}
    assert [detect({**one_based, "SLURM_ARRAY_TASK_ID": str(t)}).shard for t in (1, 4)] == ["1/4", "4/4"]
    count_only = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"}
    assert detect(count_only).shard == "3/4"
    assert detect({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_JOB_ID": "9"}).job_id == "9"


def test_auto_is_exactly_the_shard_i_of_n_it_resolves_to():
    for env in (BUILDKITE, KUBERNETES, SLURM):
        i, n = parse_shard("auto", env)
        shard, ref = resolve_shard("auto", env)
        assert shard == f"{i}/{n}" == ref.shard and parse_shard(shard) == (i, n)
    assert resolve_shard("2/3", BUILDKITE) == ("2/3", None), "an explicit I/N ignores the scheduler"
    assert resolve_shard(None, BUILDKITE) == (None, None)


def test_two_schedulers_that_agree_are_one_answer():
    both = {**BUILDKITE, "JOB_COMPLETION_INDEX": "1", K8S_COUNT: "4", "HOSTNAME": "agent-1"}
    ref = detect(both)  # a Buildkite agent on Kubernetes that also exports an index: Buildkite's job is recorded
    assert (ref.kind, ref.shard) == ("buildkite", "2/4")


# ---- refusals: one line, naming the variables


def one_line(env: dict) -> str:
    with pytest.raises(UsageError) as err:
        detect(env)
    text = str(err.value)
    assert "\n" not in text and text.startswith("--shard auto: "), text
    return text


@pytest.mark.parametrize("env", [{}, GITHUB], ids=["nothing", "github-actions"])
def test_no_scheduler_is_refused_naming_every_schedulers_variables_and_github_actions(env):
    text = one_line(env)
    for name in ("BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT", "JOB_COMPLETION_INDEX", K8S_COUNT,
                 "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "GitHub Actions", "--shard I/N"):
        assert name in text


@pytest.mark.parametrize("env,says", [
    ({"BUILDKITE_PARALLEL_JOB": "1"}, "BUILDKITE_PARALLEL_JOB is set but BUILDKITE_PARALLEL_JOB_COUNT is not"),
    ({"BUILDKITE_PARALLEL_JOB_COUNT": "4"}, "BUILDKITE_PARALLEL_JOB_COUNT is set but BUILDKITE_PARALLEL_JOB is not"),
    ({"JOB_COMPLETION_INDEX": "0", "HOSTNAME": "boot-nightly-0"}, f"{K8S_COUNT} is not"),
    ({K8S_COUNT: "3"}, f"{K8S_COUNT} is set but JOB_COMPLETION_INDEX is not"),
    ({"SLURM_ARRAY_TASK_ID": "1"}, "neither SLURM_ARRAY_TASK_MAX nor SLURM_ARRAY_TASK_COUNT"),
    ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MAX": "3"}, "SLURM_ARRAY_TASK_MIN is not"),
], ids=["bk-no-count", "bk-no-index", "k8s-no-count", "k8s-no-index", "slurm-no-count", "slurm-no-min"])
def test_half_of_a_schedulers_variables_is_refused(env, says):
    assert says in one_line(env)


@pytest.mark.parametrize("env,says", [
    ({**BUILDKITE, "BUILDKITE_PARALLEL_JOB": "4"}, "BUILDKITE_PARALLEL_JOB=4 of BUILDKITE_PARALLEL_JOB_COUNT=4: out of "
                                                   "range (its indexes run 0..3)"),
    ({**KUBERNETES, "JOB_COMPLETION_INDEX": "3"}, "JOB_COMPLETION_INDEX=3 of BOOT_HARNESS_SHARD_COUNT=3: out of range"),
    ({**KUBERNETES, K8S_COUNT: "0", "JOB_COMPLETION_INDEX": "0"}, "the count must be at least 1"),
    ({**SLURM, "SLURM_ARRAY_TASK_ID": "7"}, "SLURM_ARRAY_TASK_ID=7 of 0..3: out of range"),
    ({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"}, "out of range"),
], ids=["bk", "k8s", "k8s-zero", "slurm", "slurm-below-min"])
def test_an_index_out_of_range_is_refused(env, says):
    assert says in one_line(env)


@pytest.mark.parametrize("name,value", [("BUILDKITE_PARALLEL_JOB", "one"), ("BUILDKITE_PARALLEL_JOB_COUNT", "4.0"),
                                        ("JOB_COMPLETION_INDEX", "-1"), (K8S_COUNT, "${COMPLETIONS}"),
                                        ("SLURM_ARRAY_TASK_ID", "1_2"), ("SLURM_ARRAY_TASK_MAX", "0x3"),
                                        ("SLURM_ARRAY_TASK_ID", "١")])
def test_a_value_that_is_not_a_whole_number_is_refused_by_name(name, value):
    base = BUILDKITE if name.startswith("BUILDKITE") else KUBERNETES if name in ("JOB_COMPLETION_INDEX", K8S_COUNT) \
        else SLURM
    assert f"{name}={value!r} is not a whole number" in one_line({**base, name: value})


def test_a_slurm_array_with_holes_is_refused():
    stepped = {**SLURM, "SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_MAX": "6", "SLURM_ARRAY_TASK_STEP": "2"}
    assert "SLURM_ARRAY_TASK_STEP=2: shards need consecutive array ids" in one_line(stepped)
    listed = {**SLURM, "SLURM_ARRAY_TASK_MAX": "7", "SLURM_ARRAY_TASK_COUNT": "3"}  # --array=0,1,7
    assert "SLURM_ARRAY_TASK_COUNT=3 but SLURM_ARRAY_TASK_MIN..MAX is 0..7" in one_line(listed)


def test_schedulers_that_disagree_are_refused_naming_both():
    text = one_line({**BUILDKITE, **SLURM, "SLURM_ARRAY_TASK_ID": "2"})
    assert "disagree" in text and "Buildkite says 2/4" in text and "Slurm says 3/4" in text
    assert "BUILDKITE_PARALLEL_JOB" in text and "SLURM_ARRAY_TASK_ID" in text


# ---- the CLI: one line, exit 2; the same cells as I/N


@pytest.mark.parametrize("command", ["cells", "run"])
def test_the_cli_refuses_auto_without_a_scheduler_in_one_line_exit_2(tmp_path, capsys, clean_env, command):
    from harness.cli import main

    path = fake_matrix(tmp_path, ["boot", "crash"])
    clean_env.setenv("BUILDKITE_PARALLEL_JOB", "2")  # half of Buildkite's pair
    argv = [command, "--matrix", str(path), "--shard", "auto", *(["--results-dir", str(tmp_path / "r")]
                                                                  if command == "run" else [])]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "BUILDKITE_PARALLEL_JOB_COUNT is not" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists(), "nothing is written, no whole matrix booted"
    clean_env.delenv("BUILDKITE_PARALLEL_JOB")
    assert main(argv) == 2 and "GitHub Actions exports none" in capsys.readouterr().err


def test_cells_shard_auto_under_buildkite_lists_the_cells_of_shard_i_of_n(tmp_path, capsys, clean_env):
    from harness.cli import main

    path = fake_matrix(tmp_path, ["boot", "crash", "refuse", "slow", "hang", "oom"])
    every = [c.id for c in load_matrix(path, placeholders=True).cells]
    for job in range(3):
        for name, value in {**BUILDKITE, "BUILDKITE_PARALLEL_JOB": str(job),
                            "BUILDKITE_PARALLEL_JOB_COUNT": "3"}.items():
            clean_env.setenv(name, value)
        assert main(["cells", "--matrix", str(path), "--shard", "auto"]) == 0
        auto = capsys.readouterr()
        assert main(["cells", "--matrix", str(path), "--shard", f"{job + 1}/3"]) == 0
        explicit = capsys.readouterr().out
        assert auto.out == explicit and auto.out.split() == shard_cells(every, job + 1, 3)
        assert f"--shard auto: Buildkite job {BUILDKITE['BUILDKITE_JOB_ID']} (shard {job + 1}/3)" in auto.err


def test_run_shard_auto_records_the_scheduler_job_it_ran_as(tmp_path, capsys, clean_env):
    """An empty shard boots nothing, so this is the CLI's whole path to results.json without a server."""
    from harness.cli import main

    path = fake_matrix(tmp_path, ["boot"])
    (cell,) = load_matrix(path).cells
    empty = next(i for i in (1, 2) if shard_of(cell.id, 2) != i)
    for name, value in {**SLURM, "SLURM_ARRAY_TASK_ID": str(empty - 1), "SLURM_ARRAY_TASK_MAX": "1",
                        "SLURM_ARRAY_TASK_COUNT": "2"}.items():
        clean_env.setenv(name, value)
    assert main(["run", "--matrix", str(path), "--shard", "auto", "--results-dir", str(tmp_path / "r")]) == 0
    (run_dir,) = (tmp_path / "r").iterdir()
    run = RunResult.model_validate_json((run_dir / "results.json").read_text())
    assert run.shard == f"{empty}/2" and run.status == "complete"
    assert run.scheduler == SchedulerRef(kind="slurm", job_id=f"4242_{empty - 1}", group_id="4242", index=empty - 1,
                                         count=2)


# ---- the run owner records it; a resume records the job that resumed it


def test_the_run_record_carries_the_scheduler_and_a_resume_the_job_that_resumed_it(tmp_path):
    loaded, cells = builders.fake_cells(tmp_path)
    pod = {**KUBERNETES, "JOB_COMPLETION_INDEX": "1", "HOSTNAME": "boot-nightly-1"}
    shard, ref = resolve_shard("auto", pod)
    mine = shard_cells(cells, *parse_shard(shard))
    assert shard == "2/3" and [c.id for c in mine] == ["c_a", "c_b"]
    options = RunOptions(results_dir=tmp_path / "r", shard=shard, scheduler=ref)
    session = RunSession.open(loaded, mine, options, runtime=FakeRuntime())
    session.boot(mine[0])
    run = session.finish("interrupted")
    on_disk = json.loads((session.run_dir / "results.json").read_text())
    assert [c.cell_id for c in run.cells] == ["c_a"] and run.scheduler == ref and on_disk["scheduler"] == {
        "kind": "kubernetes", "job_id": "boot-nightly-1", "group_id": "boot-nightly", "index": 1, "count": 3,
        "first": 0}
    # the same index in a Job submitted again: the resume records the pod that finished it
    _, again = resolve_shard("auto", {**pod, "HOSTNAME": "boot-nightly-b-1"})
    resumed = RunSession.open(loaded, mine, RunOptions(resume=session.run_dir, shard=shard, scheduler=again),
                              runtime=FakeRuntime())
    assert [c.id for c in resumed.todo] == ["c_b"] and again.group_id == "boot-nightly-b"
    resumed.run()
    assert resumed.finish().scheduler == again
    # a resume by hand (no scheduler) keeps what the run recorded
    by_hand = RunSession.open(loaded, mine, RunOptions(resume=session.run_dir, shard=shard), runtime=FakeRuntime())
    assert by_hand.finish().scheduler == again
