"""`repro` prints; only `--exec` boots. Printing asks no engine (the engine here is a socket that does not exist), pulls
nothing and writes no file: a patched cell's `docker run` comes after the shell steps that make its patched file under
results/repro/patches/<cell>/ (the real path, the cell's id once in it, never `<run-id>`), GNU patch run as
harness.runtime.patching runs it. And `run --resume DIR --dry-run` lists the cells the resume would boot, not every
cell. (That the printed steps make the harness's file byte for byte: tests/integration/test_repro_steps.py, which runs
them.)"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from harness.boot.session import RunOptions, RunSession
from harness.cli import main
from harness.runtime.fake import FakeRuntime
from harness.runtime.patching import PATCH_ARGS
from tests.builders import fake_cells, fake_matrix, variant_of

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "matrix.yaml"
PATCHED = "mml131072-mtp4-floor_env-image_patched"
UNPATCHED = "mml131072-mtp4-floor_none-image_unpatched"
IMAGE = "registry.invalid/fork/vllm:standin"
TARGET = "/opt/vllm/lib/python3.14/site-packages/vllm/v1/worker/gpu_worker.py"
BASE, RESULT = "b" * 64, "c" * 64
#: No engine answers: any question to one would be exit 2 ("the docker engine does not answer").
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock", "CONTAINER_HOST": "unix:///nonexistent/podman.sock"}


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """matrix.yaml's variables as a user sets them, an image no registry has, and no engine."""
    for k, v in {**NO_ENGINE, "GLM_MODEL_DIR": str(tmp_path / "glm"), "FORK_IMAGE": IMAGE,
                 "KV_CAP_BASE_SHA256": BASE, "KV_CAP_PATCHED_SHA256": RESULT}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("CONTAINER_RUNTIME", raising=False)
    return monkeypatch


def repro(capsys, tmp_path, *argv: str, matrix: Path = MATRIX) -> tuple[int, list[list[str]], str]:
    """(exit code, the printed commands split into words, stderr)."""
    code = main(["repro", "--matrix", str(matrix), *argv, "--results-dir", str(tmp_path / "r")])
    out = capsys.readouterr()
    return code, [shlex.split(c) for c in out.out.strip().split(" &&\n") if c], out.err


def kept(tmp_path: Path, cell: str) -> str:
    """Where the printed steps keep the cell's patched file: under repro/patches/<cell>/ (a run's layout, the id once
    in the path), as an absolute path (a bind mount's source must be one)."""
    return f"{tmp_path}/r/repro/patches/{cell}/0-gpu_worker.py/gpu_worker.py"


@pytest.mark.parametrize("engine", ["docker", "podman"])
@pytest.mark.parametrize("cell", [UNPATCHED, PATCHED], ids=["unpatched", "patched"])
def test_printing_asks_no_engine_pulls_nothing_and_writes_nothing(offline, capsys, tmp_path, engine, cell):
    offline.setenv("CONTAINER_RUNTIME", engine)
    code, commands, err = repro(capsys, tmp_path, cell)
    assert (code, err) == (0, ""), err
    *steps, run = commands
    assert run[:3] == [engine, "run", "--rm"] and IMAGE in run
    assert all(c[0] in (engine, "mkdir", "printf", "cp", "(", "mv", "chmod", "rm") for c in steps), steps
    assert not (tmp_path / "r").exists() and not (tmp_path / "glm").exists()
    assert not any("<run-id>" in word for c in commands for word in c)


def test_an_unpatched_cell_is_its_run_line_alone(offline, capsys, tmp_path):
    """`docker run` pulls a missing image itself (the matrix's `pull: missing`): nothing to do first."""
    code, commands, _ = repro(capsys, tmp_path, UNPATCHED)
    assert code == 0 and len(commands) == 1 and commands[0][:2] == ["docker", "run"]


def test_a_patched_cell_prints_the_steps_that_make_its_file_then_the_run_that_mounts_it(offline, capsys, tmp_path):
    code, commands, _ = repro(capsys, tmp_path, PATCHED)
    assert code == 0
    paths = [t for c in commands for t in c if str(tmp_path / "r") in t]
    assert paths and [p for p in paths if p.count(PATCHED) != 1] == [], "a path names the cell once"
    d = kept(tmp_path, PATCHED)
    tree = f"{d}.tree"
    in_tree = f"{tree}/vllm/v1/worker/gpu_worker.py"
    name = f"bh-repro-{PATCHED}-copy0"
    assert commands == [
        ["docker", "image", "inspect", IMAGE, ">/dev/null", "2>&1", "||", "docker", "pull", IMAGE],
        ["mkdir", "-p", f"{tree}/vllm/v1/worker"],
        ["docker", "rm", "-f", name, ">/dev/null", "2>&1", "||", "true"],
        ["docker", "create", "--name", name, "--entrypoint", "/bin/true", IMAGE, ">/dev/null"],
        ["docker", "cp", f"{name}:{TARGET}", f"{d}.orig"],
        ["docker", "rm", name, ">/dev/null"],
        ["printf", "%s  %s\\n", BASE, f"{d}.orig", "|", "sha256sum", "-c", "-"],
        ["cp", f"{d}.orig", in_tree],
        ["(", "cd", tree, "&&", "LC_ALL=C", "patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "-i",
         str(ROOT / "patches" / "gpu_worker-kv-cap.patch"), ")"],
        ["printf", "%s  %s\\n", RESULT, in_tree, "|", "sha256sum", "-c", "-"],
        ["mv", "-f", in_tree, d],
        ["chmod", "444", d],
        ["rm", "-r", tree],
        commands[-1],
    ]
    assert PATCH_ARGS == ("-p1", "--batch", "--forward", "--no-backup-if-mismatch"), "the harness's own flags"
    run = commands[-1]
    assert run[:2] == ["docker", "run"] and f"{d}:{TARGET}:ro" in run and "--gpus" in run


@pytest.mark.parametrize(("pull", "cell", "first"), [
    ("always", UNPATCHED, ["docker", "pull", IMAGE]),
    ("always", PATCHED, ["docker", "pull", IMAGE]),
    ("never", PATCHED, ["mkdir", "-p"]),
    ("never", UNPATCHED, ["docker", "run"]),
], ids=["always-unpatched", "always-patched", "never-patched", "never-unpatched"])
def test_the_pull_step_follows_the_matrix_pull_policy(offline, capsys, tmp_path, pull, cell, first):
    """`pull: always` pulls again, which a pasted `docker run` would not; `never` uses what the engine has."""
    shutil.copytree(ROOT / "patches", tmp_path / "patches")
    m = variant_of(MATRIX, tmp_path / "m.yaml", pull=pull)
    code, commands, _ = repro(capsys, tmp_path, cell, matrix=m)
    assert code == 0 and commands[0][:len(first)] == first, commands[0]
    assert sum(c[:2] == ["docker", "pull"] for c in commands) == (pull == "always")


def test_a_patch_that_names_another_file_is_one_line_exit_2_before_anything_is_printed(offline, capsys, tmp_path):
    shutil.copytree(ROOT / "patches", tmp_path / "patches")
    (tmp_path / "patches" / "gpu_worker-kv-cap.patch").write_text(
        (ROOT / "patches" / "cpu_worker-kv-floor.patch").read_text())
    m = variant_of(MATRIX, tmp_path / "m.yaml")
    code, commands, err = repro(capsys, tmp_path, PATCHED, matrix=m)
    lines = err.strip().splitlines()
    assert code == 2 and commands == [] and len(lines) == 1, err
    assert lines[0].startswith(f"{tmp_path / 'm.yaml'}: patches: ") and "must patch exactly its target" in lines[0]


def test_exec_still_asks_the_engine(offline, capsys, tmp_path):
    """Only `--exec` boots, so only it needs an engine: here none answers, exit 2 in one line."""
    m = fake_matrix(tmp_path / "m.yaml", ["boot"], runtime="docker", image=IMAGE)
    code = main(["repro", "--matrix", str(m), "scenario_boot", "--exec", "--results-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("runtime: the docker engine does not answer"), err


# ---- run --resume DIR --dry-run


@pytest.fixture
def half_done(tmp_path) -> tuple[Path, Path]:
    """(matrix, run directory) of a run of c_a, c_b, c_d killed after c_a."""
    loaded, cells = fake_cells(tmp_path, values=("a", "b", "d"))
    first = RunSession.open(loaded, cells[:1], RunOptions(results_dir=tmp_path / "r"), runtime=FakeRuntime())
    first.run()
    first.close()
    return loaded.path, first.run_dir


def dry_run(capsys, *argv) -> tuple[int, str, str]:
    code = main(["run", "--dry-run", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_resumed_dry_run_lists_only_the_cells_the_resume_would_boot(capsys, half_done):
    matrix, run_dir = half_done
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    code, out, err = dry_run(capsys, "--matrix", matrix, "--resume", run_dir)
    assert code == 0, err
    assert out.splitlines()[0] == f"# resume of {run_dir}: 1 of 3 cells already recorded, 2 to boot"
    assert [ln for ln in out.splitlines() if ln.startswith("# c_")] == ["# c_b", "# c_d"]
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before, "a dry run wrote nothing"


def test_a_new_dry_run_lists_every_cell_and_says_nothing_of_a_resume(capsys, half_done, tmp_path):
    code, out, _ = dry_run(capsys, "--matrix", half_done[0], "--results-dir", tmp_path / "new")
    assert code == 0 and [ln for ln in out.splitlines() if ln.startswith("# ")] == ["# c_a", "# c_b", "# c_d"]


def test_a_resumed_dry_run_is_refused_as_the_resume_would_be(capsys, half_done):
    """Another shard than the run's: the resume is refused, so is its dry run (one line, exit 2)."""
    matrix, run_dir = half_done
    code, out, err = dry_run(capsys, "--matrix", matrix, "--resume", run_dir, "--shard", "1/2")
    assert (code, out) == (2, "") and len(err.strip().splitlines()) == 1 and "this run is shard none" in err, err
