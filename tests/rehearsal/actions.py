"""Just enough of a GitHub Actions runner to run a workflow's own `run:` steps here, as a runner would run them.

Read from the workflow file, not copied: each job's steps, their `if:`, `env:` and `${{ }}` expressions (the subset
the nightly workflow uses: contexts, string literals, `||`, `&&`, `==`, `!=`, `!`, always(), success(), failure(),
fromJSON()), `$GITHUB_OUTPUT`, `$GITHUB_STEP_SUMMARY`, `$GITHUB_PATH`, `$GITHUB_ENV`, steps.<id>.outputs/outcome,
needs.<job>.result and matrix values. `run:` is executed by `bash --noprofile --norc -eo pipefail`, GitHub's default
shell on Linux.

`uses:` steps are stood in, each by what the action does for these steps: checkout (the workspace is already a copy
of the repository), setup-python (this Python 3.11 is on PATH), upload-artifact (copied into an artifact store; a
second upload of a name fails unless `overwrite: true`, as v4 does), download-artifact (a `pattern` downloads each
match into `path/<name>/`). A step named "install the harness" is stood in by putting this venv's bin on PATH:
`pip install -e .` into this venv would repoint its editable install at a throw-away workspace.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d+)?)|(?P<op>\|\||&&|==|!=|!|\(|\)|,)"
                    r"|(?P<name>[A-Za-z_][\w\-]*(?:\.[A-Za-z_*][\w\-]*)*))")


def load_workflow(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the bare key `on` as true
    return doc


class Expr:
    """A recursive-descent evaluator over `context` (nested dicts); a missing value is ''."""

    def __init__(self, text: str, context: dict, status: dict):
        self.tokens = [m for m in _TOKEN.finditer(text) if m.group(0).strip()]
        if "".join(m.group(0).strip() for m in self.tokens) != re.sub(r"\s+", "", text):
            raise ValueError(f"unsupported expression: {text!r}")
        self.i, self.context, self.status = 0, context, status

    def value(self) -> Any:
        v = self._or()
        if self.i != len(self.tokens):
            raise ValueError("trailing tokens")
        return v

    def _peek(self) -> str | None:
        return self.tokens[self.i].group(0).strip() if self.i < len(self.tokens) else None

    def _take(self) -> re.Match:
        self.i += 1
        return self.tokens[self.i - 1]

    def _or(self) -> Any:
        v = self._and()
        while self._peek() == "||":
            self._take()
            w = self._and()
            v = v if v else w
        return v

    def _and(self) -> Any:
        v = self._cmp()
        while self._peek() == "&&":
            self._take()
            w = self._cmp()
            v = w if v else v
        return v

    def _cmp(self) -> Any:
        v = self._unary()
        if self._peek() in ("==", "!="):
            op = self._take().group(0).strip()
            w = self._unary()
            same = str(v).lower() == str(w).lower() if isinstance(v, str) and isinstance(w, str) else v == w
            return same if op == "==" else not same
        return v

    def _unary(self) -> Any:
        if self._peek() == "!":
            self._take()
            return not self._unary()
        return self._primary()

    def _primary(self) -> Any:
        tok = self._take()
        if tok.group("str") is not None:
            return tok.group("str")[1:-1].replace("''", "'")
        if tok.group("num") is not None:
            return float(tok.group("num"))
        if tok.group(0).strip() == "(":
            v = self._or()
            self._take()
            return v
        name = tok.group("name")
        if self._peek() == "(":
            self._take()
            args = []
            while self._peek() != ")":
                args.append(self._or())
                if self._peek() == ",":
                    self._take()
            self._take()
            return self._call(name, args)
        node: Any = self.context
        for part in name.split("."):
            node = node.get(part, "") if isinstance(node, dict) else ""
        return node

    def _call(self, name: str, args: list) -> Any:
        if name == "always":
            return True
        if name == "success":
            return not self.status.get("failed")
        if name == "failure":
            return bool(self.status.get("failed"))
        if name == "fromJSON":
            return json.loads(args[0])
        raise ValueError(f"unsupported function {name}()")


def interpolate(text: Any, context: dict, status: dict | None = None) -> Any:
    """`${{ expr }}` in a string; a string that is one whole expression keeps the expression's type."""
    if not isinstance(text, str):
        return text
    whole = re.fullmatch(r"\s*\$\{\{((?:(?!\}\}).)*)\}\}\s*", text, re.S)
    if whole:
        return Expr(whole.group(1), context, status or {}).value()

    def sub(m: re.Match) -> str:
        v = Expr(m.group(1), context, status or {}).value()
        return "" if v is None else (json.dumps(v) if isinstance(v, (list, dict)) else str(v))
    return re.sub(r"\$\{\{(.*?)\}\}", sub, text, flags=re.S)


def _read_outputs(path: Path) -> dict[str, str]:
    """key=value lines, and the `key<<DELIM` ... `DELIM` form."""
    out, lines = {}, path.read_text().splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and "=" not in line.split("<<", 1)[0]:
            key, delim = line.split("<<", 1)
            body = []
            i += 1
            while i < len(lines) and lines[i] != delim:
                body.append(lines[i])
                i += 1
            out[key] = "\n".join(body)
        elif "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
        i += 1
    return out


@dataclass
class StepResult:
    name: str
    outcome: str  # success | failure | skipped
    stdout: str = ""
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass
class JobResult:
    name: str
    result: str
    steps: list[StepResult]
    outputs: dict[str, str]
    summary: str

    def step(self, name: str) -> StepResult:
        return next(s for s in self.steps if s.name == name)

    def log(self) -> str:
        return "\n".join(f"--- {s.name}: {s.outcome}\n{s.stdout}" for s in self.steps)


class Runner:
    """Runs jobs of one workflow run: one workspace per job (a copy of `repo`), one artifact store per run."""

    def __init__(self, workflow: Path, repo: Path, base: Path, github: dict, inputs: dict, env: dict[str, str],
                 harness_bin: Path, artifacts: Path | None = None):
        self.wf = load_workflow(workflow)
        self.repo, self.base, self.harness_bin = repo, base, harness_bin
        self.github, self.inputs, self.env = github, inputs, env
        self.artifacts = artifacts or base / "artifacts"
        self.artifacts.mkdir(parents=True, exist_ok=True)

    def workspace(self, name: str) -> Path:
        ws = self.base / "ws" / name
        shutil.rmtree(ws, ignore_errors=True)
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=self.repo,
                               capture_output=True, check=True).stdout.decode().split("\0")
        for rel in filter(None, files):
            src = self.repo / rel
            if src.is_file():
                (ws / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, ws / rel)
        return ws

    def run_job(self, job_id: str, needs: dict[str, JobResult] | None = None, matrix: dict | None = None,
                label: str | None = None) -> JobResult:
        job = self.wf["jobs"][job_id]
        label = label or job_id
        ws = self.workspace(label)
        temp = Path(tempfile.mkdtemp(dir=self.base, prefix=f"runner-temp-{label}-"))
        summary = temp / "step_summary.md"
        summary.touch()
        path_file, env_file = temp / "path", temp / "env"
        extra_path: list[str] = []
        ctx: dict[str, Any] = {
            "github": self.github, "inputs": self.inputs, "matrix": matrix or {}, "steps": {}, "env": {},
            "needs": {k: {"result": v.result, "outputs": v.outputs} for k, v in (needs or {}).items()},
        }
        env: dict[str, str] = {}
        for scope in (self.wf.get("env") or {}, job.get("env") or {}):
            for k, v in scope.items():
                env[k] = str(interpolate(v, {**ctx, "env": env}))
        status = {"failed": False}
        results = []
        for n, step in enumerate(job["steps"]):
            name = step.get("name") or step.get("uses") or f"step {n}"
            ctx["env"] = env
            cond = step.get("if", "success()")
            if not interpolate("${{ " + cond + " }}" if "${{" not in str(cond) else cond, ctx, status):
                results.append(StepResult(name, "skipped"))
                self._record(ctx, step, "skipped", {})
                continue
            step_env = {**env, **{k: str(interpolate(v, ctx, status)) for k, v in (step.get("env") or {}).items()}}
            out_file = temp / f"output-{n}"
            out_file.touch()
            if "uses" in step:
                outcome, text = self._uses(step, ctx, status, ws)
            elif name == "install the harness":
                assert step["run"].strip().startswith("python -m pip install") or "pip install" in step["run"]
                extra_path.insert(0, str(self.harness_bin))
                outcome, text = "success", f"(stood in: {self.harness_bin} on PATH)"
            else:
                script = temp / f"step-{n}.sh"
                script.write_text(interpolate(step["run"], ctx, status))
                full_env = {**os.environ, **self.env, **step_env,
                            "PATH": ":".join([*extra_path, self.env.get("PATH", os.environ["PATH"])]),
                            "GITHUB_OUTPUT": str(out_file), "GITHUB_STEP_SUMMARY": str(summary),
                            "GITHUB_PATH": str(path_file), "GITHUB_ENV": str(env_file), "RUNNER_TEMP": str(temp),
                            "GITHUB_WORKSPACE": str(ws), "CI": "true",
                            **{f"GITHUB_{k.upper()}": str(v) for k, v in self.github.items() if k != "token"}}
                proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=ws,
                                      env=full_env, capture_output=True, text=True, timeout=3600)
                outcome, text = ("success" if proc.returncode == 0 else "failure"), proc.stdout + proc.stderr
                if path_file.exists():
                    extra_path[:0] = [p for p in path_file.read_text().splitlines() if p]
                    path_file.unlink()
                if env_file.exists():
                    env.update(_read_outputs(env_file))
                    env_file.unlink()
            outputs = _read_outputs(out_file)
            if outcome == "failure":
                status["failed"] = True
            results.append(StepResult(name, outcome, text, outputs))
            self._record(ctx, step, outcome, outputs)
        job_outputs = {k: str(interpolate(v, ctx, status)) for k, v in (job.get("outputs") or {}).items()}
        return JobResult(label, "failure" if status["failed"] else "success", results, job_outputs,
                         summary.read_text())

    @staticmethod
    def _record(ctx: dict, step: dict, outcome: str, outputs: dict) -> None:
        if step.get("id"):
            ctx["steps"][step["id"]] = {"outcome": outcome, "conclusion": outcome, "outputs": outputs}

    def _uses(self, step: dict, ctx: dict, status: dict, ws: Path) -> tuple[str, str]:
        action = step["uses"].split("@")[0]
        with_ = {k: interpolate(v, ctx, status) for k, v in (step.get("with") or {}).items()}
        if action == "actions/checkout":
            return "success", "(stood in: the workspace is a copy of the repository)"
        if action == "actions/setup-python":
            return "success", f"(stood in: Python {with_.get('python-version')} is this venv's)"
        if action == "actions/upload-artifact":
            src = ws / str(with_["path"])
            dest = self.artifacts / str(with_["name"])
            if not src.exists():
                return ("success", "no files found (warn)") if with_.get("if-no-files-found") == "warn" else (
                    "failure", f"no files at {src}")
            if dest.exists() and with_.get("overwrite") is not True:
                return "failure", f"Conflict: an artifact with the name '{with_['name']}' already exists"
            shutil.rmtree(dest, ignore_errors=True)
            if src.is_dir():
                shutil.copytree(src, dest)
            else:
                dest.mkdir(parents=True)
                shutil.copy2(src, dest / src.name)
            return "success", f"uploaded {with_['name']}"
        if action == "actions/download-artifact":
            target = ws / str(with_.get("path", "."))
            names = sorted(p.name for p in self.artifacts.iterdir())
            picked = [n for n in names if fnmatch.fnmatchcase(n, str(with_.get("pattern") or with_.get("name")))]
            for n in picked:
                shutil.copytree(self.artifacts / n, target / n if with_.get("pattern") else target,
                                dirs_exist_ok=True)
            return "success", f"downloaded {picked}"
        return "failure", f"no stand-in for {action}"
