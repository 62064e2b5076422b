"""No secret in anything the harness writes or prints: the run directory, its console output, `--dry-run`, `repro`
(printed and `--exec`), `cells --json`, and the JUnit XML of the matrix-as-pytest with the plugin.

The secrets: `HF_TOKEN` and `VLLM_API_KEY` come from the harness's environment into the matrix (`${...}`) as a cell env
value and as the value of `--api-key` (both the `--api-key V` and `--api-key=V` forms); `OPENAI_API_KEY` is only in
the harness's environment, which the process runtime passes on to the server. The fake server prints its argv and its
whole environment into the log (vLLM echoes its non-default args), and a crashing cell's last error line quotes the
token (it becomes the cell's `detail`, and a failed test's message). A secret inside another env value (a URL with
credentials) is the last case.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.env import ROOT
from tests.helpers.reliability import cli, fake_matrix, only_run

SECRETS = {"HF_TOKEN": "hf_reliabilitySecretToken42", "VLLM_API_KEY": "sk-reliabilityApiKey4242",
           "OPENAI_API_KEY": "sk-harnessOnlySecret4343"}
#: FAKE_VLLM_ERROR_TEXT comes from the harness's environment too: the crash quotes the token in its last error line.
ENV = {**SECRETS, "FAKE_VLLM_ERROR_TEXT": f"401 Unauthorized for token {SECRETS['HF_TOKEN']}"}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("secrets")
    cases = {
        "boot": {"FAKE_VLLM_SCENARIO": "boot", "FAKE_VLLM_ECHO_ENV": "1"},
        "crash": {"FAKE_VLLM_SCENARIO": "crash", "FAKE_VLLM_ECHO_ENV": "1"},
    }
    path = fake_matrix(d / "secret.yaml", cases, timeout_s=15, env={"HF_TOKEN": "${HF_TOKEN}"},
                       expect=[{"where": {"case": "crash"}, "outcome": "booted"}])  # a mismatch: a failed test
    text = path.read_text().replace("axes:\n", "args:\n- --api-key\n- ${VLLM_API_KEY}\n- --api-key=${VLLM_API_KEY}\n"
                                               "axes:\n", 1)
    path.write_text(text)
    return path


def leaks(text: str) -> list[str]:
    return [name for name, value in SECRETS.items() if value in text]


@pytest.fixture(scope="module")
def run(matrix, tmp_path_factory) -> dict:
    results = tmp_path_factory.mktemp("secret-results")
    proc = cli("run", "--matrix", str(matrix), "--results-dir", str(results), "--keep-work", env=ENV)
    return {"proc": proc, "run_dir": only_run(results)}


def test_the_run_boots_and_its_log_really_carried_the_secrets_masked(run):
    """The fixture is honest: the server did print every secret, and the harness masked each one."""
    assert run["proc"].returncode == 1, run["proc"].stderr  # the crash cell mismatches on purpose
    log = (run["run_dir"] / "logs" / "case_boot.log").read_text()
    assert "environment:" in log and "HF_TOKEN=***" in log and "OPENAI_API_KEY=***" in log
    assert "--api-key *** --api-key=***" in log


def test_no_file_the_run_writes_holds_a_secret(run):
    found = {}
    for path in run["run_dir"].rglob("*"):
        if path.is_file():
            names = leaks(path.read_bytes().decode("utf-8", errors="replace"))
            if names:
                found[str(path.relative_to(run["run_dir"]))] = names
    assert found == {}


def test_the_run_prints_no_secret(run):
    assert leaks(run["proc"].stdout + run["proc"].stderr) == []




def test_dry_run_prints_no_secret(matrix, tmp_path):
    proc = cli("run", "--matrix", str(matrix), "--dry-run", "--results-dir", str(tmp_path), env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "--api-key" in proc.stdout
    assert leaks(proc.stdout + proc.stderr) == []


@pytest.mark.parametrize("cell", ["case_boot", "case_crash"])
def test_repro_prints_no_secret(matrix, cell, tmp_path):
    proc = cli("repro", "--matrix", str(matrix), cell, "--results-dir", str(tmp_path), env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert 'HF_TOKEN="$HF_TOKEN"' in proc.stdout
    assert leaks(proc.stdout + proc.stderr) == []


def test_repro_exec_streams_and_records_no_secret(matrix, tmp_path):
    proc = cli("repro", "--matrix", str(matrix), "case_boot", "--exec", "--results-dir", str(tmp_path / "r"), env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "environment:" in proc.stdout, "the log was streamed"
    assert leaks(proc.stdout + proc.stderr) == []
    files = [p.read_bytes().decode(errors="replace") for p in (tmp_path / "r").rglob("*") if p.is_file()]
    assert leaks("\n".join(files)) == []


def test_cells_json_prints_no_secret(matrix):
    proc = cli("cells", "--matrix", str(matrix), "--json", env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert leaks(proc.stdout + proc.stderr) == []


def test_the_junit_xml_of_the_matrix_as_pytest_holds_no_secret(matrix, tmp_path):
    xml = tmp_path / "junit.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(ROOT / "tests" / "test_boot_matrix.py"),
         "--boot-matrix", str(matrix), "--boot-results-dir", str(tmp_path / "r"), f"--junitxml={xml}",
         "-o", "junit_family=xunit1", "-o", "junit_logging=all", "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, **ENV})
    assert proc.returncode == 1, proc.stdout[-3000:]  # the crash cell fails its test, with the log tail
    report = xml.read_text()
    assert "expected booted, got crashed" in report and "401 Unauthorized for token ***" in report
    assert leaks(report) == []
    assert leaks(proc.stdout + proc.stderr) == []


def test_a_secret_inside_another_env_value_is_masked_in_the_record(tmp_path):
    path = fake_matrix(tmp_path / "m.yaml", {"boot": {"FAKE_VLLM_SCENARIO": "boot"}},
                       env={"HF_ENDPOINT": "https://user:${HF_TOKEN}@hub.example.com"})
    proc = cli("run", "--matrix", str(path), "--results-dir", str(tmp_path / "r"), env=ENV)
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run(tmp_path / "r")
    assert leaks((run_dir / "cells" / "case_boot.json").read_text()) == []
    assert leaks((run_dir / "results.json").read_text()) == []
