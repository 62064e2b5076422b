"""The files under deploy/ run as their engine runs them, on this machine, over a small matrix of fake vLLM servers
(tests/builders.py fake_matrix, the process runtime: each boots in about a second), with `boot-harness` from this
checkout on PATH and only the engine itself stood in:

- **Buildkite**: this test is the agent. It reads deploy/buildkite/pipeline.yml, undoes the upload-time `$$`
  escaping, and runs each job's commands as one `bash -e -c` script in its own checkout with the pipeline's and the
  step's env and the job's BUILDKITE_* variables (BUILDKITE_PARALLEL_JOB 0..N-1 for the `parallelism` step), then
  uploads its `artifact_paths`. `buildkite-agent` (artifact upload/download, annotate) is a stand-in on PATH that
  copies files into and out of a folder playing the artifact store and keeps each annotation.
- **Kubernetes**: deploy/kubernetes/submit.sh runs with a stand-in `kubectl` that plays the Job controller: `create`
  runs the Job's pods to the end (each index at once, JOB_COMPLETION_INDEX and the pod's hostname set, the
  container's env from the manifest, its command and args expanded as the kubelet does, a claim a folder, the
  image's workingDir the checkout, retries per index as backoffLimitPerIndex and podFailurePolicy say); `get`
  reports the Job's condition, `logs` its pods' output. One pod is stopped by SIGTERM to its PID 1 halfway through,
  as an eviction stops it: the retried index resumes its run.
- **Slurm**: deploy/slurm/submit.sh runs with a stand-in `sbatch` that records each submission and prints a job id;
  this test is then the cluster: each array task of the recorded `--array` runs boot-array.sbatch with the
  SLURM_ARRAY_* variables, CUDA_VISIBLE_DEVICES as `--gres` hands it out and the submitter's environment, then
  merge.sbatch runs as the `afterany` dependency lets it: after every task, cancelled ones included.

Each time the merged run must hold every cell of the matrix and `boot-harness check` must pass.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.builders import fake_matrix
from tests.helpers.env import ROOT

DEPLOY = ROOT / "deploy"
#: The fake matrix's axis values: with 2 shards, scenario_a hashes into shard 1 and the rest into shard 2, so both
#: shards boot something.
CELLS = ("a", "b", "c", "d")
#: What the calling environment must not leak into a stood-in job: another scheduler's variables, the files' settings.
LEAKS = re.compile(r"^(BUILDKITE_|SLURM_|STUB_)|^(JOB_COMPLETION_INDEX|BOOT_HARNESS_SHARD_COUNT|BOOT_HARNESS_RESULTS|"
                   r"CUDA_VISIBLE_DEVICES|RUN_NAME|MATRIX|PARALLEL|SELECT|NIGHTS|NIGHTS_DIR|SHARDS|HOSTNAME)$")


def clean_env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not LEAKS.match(k)}, **extra}


def opts(argv: list[str], with_value: set[str], flags: set[str] = frozenset()) -> tuple[dict, list[str]]:
    """(options, positionals) of a stood-in command line: `--key value`, `--key=value`, bare flags."""
    found, pos, it = {}, [], iter(argv)
    for a in it:
        key, eq, value = a.partition("=")
        if key in with_value:
            found[key] = value if eq else next(it)
        elif a in flags:
            found[a] = True
        else:
            pos.append(a)
    return found, pos


# ---------------------------------------------------------------------------------------- the stood-in engine parts

def buildkite_agent(argv: list[str]) -> int:
    """`buildkite-agent artifact upload PATHS` / `artifact download QUERY DEST [--step KEY]` / `annotate [BODY]
    --style S --context C`: artifacts are files under $STUB_BUILDKITE/artifacts/<step key>/<job id>/<path as
    uploaded>; an annotation is $STUB_BUILDKITE/annotations/<context>.json."""
    store = Path(os.environ["STUB_BUILDKITE"])
    o, pos = opts(argv, {"--step", "--build", "--style", "--context", "--priority"}, {"--append"})
    if pos[:2] == ["artifact", "upload"]:
        job = store / "artifacts" / os.environ["BUILDKITE_STEP_KEY"] / os.environ["BUILDKITE_JOB_ID"]
        n = 0
        for pattern in pos[2].split(";"):  # the agent's separator for several paths
            for f in glob.glob(pattern, recursive=True, include_hidden=True):
                if os.path.isfile(f):
                    (job / f).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, job / f)
                    n += 1
        print(f"uploaded {n} artifacts")
        return 0
    if pos[:2] == ["artifact", "download"]:
        query, dest = pos[2], Path(pos[3])
        rx = re.compile(re.escape(query).replace(r"\*\*/", "(?:.*/)?").replace(r"\*", "[^/]*").replace(r"\?", "[^/]"))
        n = 0
        for job in (store / "artifacts").glob(f"{o.get('--step', '*')}/*"):
            for f in job.rglob("*"):
                rel = f.relative_to(job)
                if f.is_file() and rx.fullmatch(rel.as_posix()):
                    (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, dest / rel)
                    n += 1
        if not n:
            print(f"no artifacts found for {query}", file=sys.stderr)
            return 1
        return 0
    if pos[:1] == ["annotate"]:
        body = pos[1] if len(pos) > 1 else sys.stdin.read()
        path = store / "annotations" / f"{o.get('--context', 'default')}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        if o.get("--append") and path.exists():
            body = json.loads(path.read_text())["body"] + body
        path.write_text(json.dumps({"style": o.get("--style", "default"), "body": body}))
        return 0
    print(f"buildkite-agent stand-in: unsupported: {argv}", file=sys.stderr)
    return 1


def kubectl(argv: list[str]) -> int:
    """`kubectl [--namespace N] create -f -` (runs the Job to its end), `get job NAME -o jsonpath=...` (its
    condition), `logs job/NAME` (its pods' output). State under $STUB_KUBE: jobs/<name>/{manifest.yaml,status,log},
    claims/<claim name>/ (a claim's folder)."""
    state = Path(os.environ["STUB_KUBE"])
    o, pos = opts(argv, {"--namespace", "-n", "-o", "-f"})
    if pos[:1] == ["create"] and o.get("-f") == "-":
        doc = yaml.safe_load(sys.stdin.read())
        name = doc["metadata"]["name"]
        job = state / "jobs" / name
        if job.exists():
            print(f'Error from server (AlreadyExists): jobs.batch "{name}" already exists', file=sys.stderr)
            return 1
        job.mkdir(parents=True)
        (job / "manifest.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        print(f"job.batch/{name} created")
        status, log = run_job(doc, state)
        (job / "log").write_text(log)
        (job / "status").write_text(status)
        return 0
    if pos[:2] == ["get", "job"]:
        assert "status.conditions" in o["-o"], o
        print((state / "jobs" / pos[2] / "status").read_text() + " ", end="")
        return 0
    if pos[:1] == ["logs"]:
        print((state / "jobs" / pos[1].removeprefix("job/") / "log").read_text(), end="")
        return 0
    print(f"kubectl stand-in: unsupported: {argv}", file=sys.stderr)
    return 1


def run_job(doc: dict, state: Path) -> tuple[str, str]:
    """A Job run to its end as its controller and the kubelet would: ("Complete" | "Failed", every pod's output)."""
    from tests.helpers.deploy import kube_expand

    name, spec = doc["metadata"]["name"], doc["spec"]
    pod = spec["template"]["spec"]
    (c,) = pod["containers"]
    claims = {v["name"]: state / "claims" / v["persistentVolumeClaim"]["claimName"]
              for v in pod.get("volumes", []) if "persistentVolumeClaim" in v}
    mounts = {m["mountPath"]: claims[m["name"]] for m in c.get("volumeMounts", []) if m["name"] in claims}
    for folder in mounts.values():
        folder.mkdir(parents=True, exist_ok=True)

    def local(value: str) -> str:  # a path under a claim's mount, as the folder standing in for it
        for mount, folder in mounts.items():
            if value == mount or value.startswith(mount + "/"):
                return str(folder) + value[len(mount):]
        return value

    env = {e["name"]: local(e.get("value", "")) for e in c.get("env", [])}
    argv = [kube_expand(a, env) for a in c["command"] + c.get("args", [])]
    fail_index = {code for r in spec.get("podFailurePolicy", {}).get("rules", []) if r["action"] == "FailIndex"
                  for code in r["onExitCodes"]["values"]}
    indexed = spec.get("completionMode") == "Indexed"
    indexes = list(range(spec["completions"])) if indexed else [None]
    retries = spec.get("backoffLimitPerIndex", 0) if indexed else spec.get("backoffLimit", 6)
    stop = os.environ.get("STUB_KUBE_STOP_INDEX")  # this index's first pod is stopped when its first cell is done
    logs: dict = {}
    codes: dict = {}

    def index(i):
        for attempt in range(retries + 1):
            pod_env = {**clean_env(), **env, "HOSTNAME": f"{name}-{i}" if indexed else f"{name}-x7k2p"}
            if indexed:
                pod_env["JOB_COMPLETION_INDEX"] = str(i)
            p = subprocess.Popen(argv, cwd=os.environ["STUB_KUBE_WORKDIR"], env=pod_env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, start_new_session=True)
            if stop is not None and str(i) == stop and attempt == 0:
                threading.Thread(target=evict_after_first_cell, args=(p, list(mounts.values()), i)).start()
            out, _ = p.communicate(timeout=120)
            logs.setdefault(i, []).append(f"--- pod {name}-{i} attempt {attempt + 1}: exit {p.returncode}\n{out}")
            codes[i] = p.returncode
            if p.returncode == 0 or p.returncode in fail_index:
                return

    threads = [threading.Thread(target=index, args=(i,)) for i in indexes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log = "".join(line for i in indexes for line in logs[i])
    return ("Complete" if all(codes[i] == 0 for i in indexes) else "Failed"), log


def evict_after_first_cell(p: subprocess.Popen, claims: list[Path], i: int) -> None:
    """SIGTERM to the pod's PID 1 (its shell, not the harness) once its shard has recorded a cell: an eviction."""
    deadline = time.monotonic() + 60
    while p.poll() is None and time.monotonic() < deadline:
        if any(next(c.glob(f"*/shards/shard-{i}/*/cells/*.json"), None) for c in claims):
            p.send_signal(signal.SIGTERM)
            return
        time.sleep(0.05)


def sbatch(argv: list[str]) -> int:
    """`sbatch --parsable ... SCRIPT`: records the call (its options and the environment it would pass on) in
    $STUB_SLURM/submitted.jsonl and prints the next job id, as `--parsable` does."""
    state = Path(os.environ["STUB_SLURM"])
    log = state / "submitted.jsonl"
    job_id = 4242 + (len(log.read_text().splitlines()) if log.exists() else 0)
    with log.open("a") as f:
        f.write(json.dumps({"id": job_id, "argv": argv, "env": dict(os.environ)}) + "\n")
    print(job_id)
    return 0


STANDINS = {"buildkite-agent": buildkite_agent, "kubectl": kubectl, "sbatch": sbatch}


# --------------------------------------------------------------------------------------------------------- the site

class Site:
    """A checkout holding the fake matrix as `matrix.yaml`, and a bin folder first on PATH with `boot-harness` (this
    checkout's, as .venv/bin/boot-harness runs it) and the engine stand-ins."""

    def __init__(self, base: Path):
        self.base = base
        self.bin = base / "bin"
        self.bin.mkdir(parents=True)
        self.repo = base / "repo"
        fake_matrix(self.repo / "matrix.yaml", {v: {"FAKE_VLLM_SCENARIO": "boot"} for v in CELLS}, linger_s=0.2,
                    expect=[{"outcome": "booted"}])
        self._script("boot-harness", f'exec "{sys.executable}" -m harness.cli "$@"')
        for tool in STANDINS:
            self._script(tool, f'exec "{sys.executable}" "{__file__}" {tool} "$@"')
        self.env = clean_env(PATH=f"{self.bin}:{os.environ['PATH']}", PYTHONPATH=str(ROOT), NO_COLOR="1")

    def _script(self, name: str, body: str) -> None:
        (self.bin / name).write_text(f"#!/bin/sh\n{body}\n")
        (self.bin / name).chmod(0o755)

    def checkout(self, name: str) -> Path:
        """A fresh copy of the repository, as an agent or a node has it."""
        d = self.base / name
        shutil.copytree(self.repo, d)
        return d

    def cells(self) -> list[str]:
        out = subprocess.run([str(self.bin / "boot-harness"), "cells", "--matrix", str(self.repo / "matrix.yaml")],
                             env=self.env, capture_output=True, text=True, check=True)
        return out.stdout.split()

    def check(self, run_dir: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bin / "boot-harness"), "check", str(run_dir)], env=self.env,
                              capture_output=True, text=True)


@pytest.fixture
def site(tmp_path) -> Site:
    return Site(tmp_path)


def read_run(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def assert_whole_and_green(site: Site, merged: Path, n: int) -> dict:
    run = read_run(merged)
    assert sorted(c["cell_id"] for c in run["cells"]) == sorted(site.cells())
    assert run["status"] == "complete" and all(c["matched"] for c in run["cells"])
    assert sorted(m["shard"] for m in run["merged_from"]) == [f"{i}/{n}" for i in range(1, n + 1)]
    check = site.check(merged)
    assert check.returncode == 0, check.stdout + check.stderr
    return run


def run_file(script: Path | str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """`bash SCRIPT` in `cwd` with exactly `env`, to the end."""
    return subprocess.run(["bash", str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def both(p: subprocess.CompletedProcess) -> str:
    return p.stdout + p.stderr


# ---------------------------------------------------------------------------------------------------------- Buildkite

class Agent:
    """The Buildkite agent, for one build of deploy/buildkite/pipeline.yml."""

    BUILD = {"BUILDKITE": "true", "CI": "true", "BUILDKITE_BUILD_NUMBER": "57",
             "BUILDKITE_BUILD_ID": "0190b6a4-0000-4000-8000-00000000b057"}

    def __init__(self, site: Site, pipeline: dict, **pipeline_env: str):
        self.site, self.pipeline = site, pipeline
        self.store = site.base / "buildkite"
        self.env = {**site.env, **self.BUILD, "STUB_BUILDKITE": str(self.store),
                    **{k: str(v) for k, v in pipeline.get("env", {}).items()}, **pipeline_env}

    def start(self, step: dict, job: int | None = None) -> tuple[subprocess.Popen, Path, dict]:
        """One job of `step` on a fresh agent: its commands as one script, as the agent runs them."""
        key = step["key"]
        job_id = f"job-{key}-{'' if job is None else job}-{self.BUILD['BUILDKITE_BUILD_NUMBER']}"
        env = {**self.env, **{k: str(v) for k, v in step.get("env", {}).items()},
               "BUILDKITE_STEP_KEY": key, "BUILDKITE_JOB_ID": job_id, "BUILDKITE_LABEL": step["label"]}
        if job is not None:
            env |= {"BUILDKITE_PARALLEL_JOB": str(job), "BUILDKITE_PARALLEL_JOB_COUNT": str(step["parallelism"])}
        checkout = self.site.checkout(f"agent-{key}{'' if job is None else f'-{job}'}")
        script = "\n".join(c.replace("$$", "$") for c in step["commands"])  # what upload-time interpolation leaves
        p = subprocess.Popen(["bash", "-e", "-c", script], cwd=checkout, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        return p, checkout, env

    def finish(self, step: dict, started: tuple[subprocess.Popen, Path, dict]) -> tuple[int, str, Path]:
        """Wait for the job, then upload its artifact_paths as the agent does whatever the exit."""
        p, checkout, env = started
        out, _ = p.communicate(timeout=300)
        up = subprocess.run([str(self.site.bin / "buildkite-agent"), "artifact", "upload", step["artifact_paths"]],
                            cwd=checkout, env=env, capture_output=True, text=True)
        assert up.returncode == 0, both(up)
        return p.returncode, out, checkout

    def annotation(self, context: str) -> dict:
        return json.loads((self.store / "annotations" / f"{context}.json").read_text())


def test_the_buildkite_pipeline_boots_each_parallel_job_and_merges_checks_and_annotates(site):
    pipeline = yaml.safe_load((DEPLOY / "buildkite" / "pipeline.yml").read_text())
    boot, wait, merge = pipeline["steps"]
    assert wait["continue_on_failure"] is True
    nights = site.base / "kept-nights"
    agent = Agent(site, pipeline, NIGHTS_DIR=str(nights))
    n = boot["parallelism"]
    jobs = [agent.start(boot, i) for i in range(n)]
    for i, job in enumerate(jobs):
        rc, out, _ = agent.finish(boot, job)
        assert rc == 0, out
        assert f"shard {i + 1}/{n}" in out, out  # --shard auto read BUILDKITE_PARALLEL_JOB
    rc, out, where = agent.finish(merge, agent.start(merge))
    assert rc == 0, out
    run = assert_whole_and_green(site, where / "merged" / "nightly-57", n)
    assert {m["scheduler"]["kind"] for m in run["merged_from"]} == {"buildkite"}
    note = agent.annotation("boot-harness")
    assert note["style"] == "success" and "## Expectations" in note["body"]
    assert all(c in note["body"] for c in site.cells())  # the report's grid
    # the night is kept for tomorrow's comparison and the history, and marked green
    assert (nights / "nightly-57" / "green").exists() and (nights / "nightly-57" / "merged" / "results.json").exists()
    assert (where / "history.html").exists() and "nothing to compare with" in out
    uploaded = agent.store / "artifacts" / merge["key"]
    assert next(uploaded.glob("*/merged/nightly-57/results.json")) and next(uploaded.glob("*/report.html"))


def test_a_buildkite_shard_that_stops_fails_its_job_annotated_and_the_merge_names_the_missing_shard(site):
    pipeline = yaml.safe_load((DEPLOY / "buildkite" / "pipeline.yml").read_text())
    boot, _, merge = pipeline["steps"]
    n = boot["parallelism"]
    agent = Agent(site, pipeline, MATRIX="missing.yaml")
    rc, out, _ = agent.finish(boot, agent.start(boot, 0))
    assert rc == 2, out  # a bad input stops the shard: its job fails
    stopped = agent.annotation("boot-shard-0")
    assert stopped["style"] == "error" and f"Shard 1/{n} stopped (exit 2)" in stopped["body"]
    assert "missing.yaml" in stopped["body"]  # its last words
    agent = Agent(site, pipeline)
    rc, out, _ = agent.finish(boot, agent.start(boot, 1))
    assert rc == 0, out
    rc, out, _ = agent.finish(merge, agent.start(merge))
    assert rc == 1, out  # the night is red: shard 1 never came
    note = agent.annotation("boot-harness")
    assert note["style"] == "error"
    assert re.search(r"missing shard\(s\) 1/2 \(Buildkite build \S+ parallel job 0\)", out), out
    # a merge that refuses its input (here: a matrix it cannot read) fails the step, and says why in the annotation
    shutil.rmtree(site.base / "agent-merge")  # the retried merge job's fresh checkout
    agent = Agent(site, pipeline, MATRIX="missing.yaml")
    rc, out, _ = agent.finish(merge, agent.start(merge))
    assert rc == 2, out
    note = agent.annotation("boot-harness")
    assert note["style"] == "error" and "merge failed (exit 2)" in note["body"] and "missing.yaml" in note["body"]


# --------------------------------------------------------------------------------------------------------- Kubernetes

def test_the_kubernetes_jobs_boot_each_index_resume_an_evicted_one_and_merge(site):
    state = site.base / "kube"
    # the pod boots the matrix its manifest names (deploy/kubernetes/matrix.yaml, a process-runtime matrix): here the
    # fake servers' matrix stands at that path, as the GPU matrix does in the pod's image
    shipped = yaml.safe_load((DEPLOY / "kubernetes" / "boot-job.yaml").read_text())
    (container,) = shipped["spec"]["template"]["spec"]["containers"]
    named = {e["name"]: e["value"] for e in container["env"]}["MATRIX"]
    (site.repo / named).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(site.repo / "matrix.yaml", site.repo / named)
    # the shard count set in one place, submit.sh's SHARDS: three pods here, where the manifest ships two
    env = {**site.env, "STUB_KUBE": str(state), "STUB_KUBE_WORKDIR": str(site.repo), "STUB_KUBE_STOP_INDEX": "2",
           "RUN_NAME": "night-1", "POLL_S": "0", "SHARDS": "3"}
    p = run_file(DEPLOY / "kubernetes" / "submit.sh", site.base, env)
    assert p.returncode == 0, both(p)
    assert "boot Job night-1-boot: Complete" in p.stdout and "merge Job night-1-merge: Complete" in p.stdout
    boot = yaml.safe_load((state / "jobs" / "night-1-boot" / "manifest.yaml").read_text())
    spec = boot["spec"]
    (pod,) = spec["template"]["spec"]["containers"]
    count = {e["name"]: e["value"] for e in pod["env"]}["BOOT_HARNESS_SHARD_COUNT"]
    assert spec["completions"] == spec["parallelism"] == spec["maxFailedIndexes"] == int(count) == 3
    n = spec["completions"]
    log = (state / "jobs" / "night-1-boot" / "log").read_text()
    # index 2's first pod (two cells in its shard) was stopped by SIGTERM to its shell: the harness was told, stopped
    # (130), and the retried pod resumed the same run instead of booting every cell again
    assert re.search(r"pod night-1-boot-2 attempt 1: exit 130", log), log
    assert re.search(r"pod night-1-boot-2 attempt 2: exit 0", log) and "--resume" in log.split("attempt 2")[1], log
    claim = state / "claims" / "boot-harness-results"
    assert [len(list((claim / "night-1" / "shards" / f"shard-{i}").iterdir())) for i in range(n)] == [1] * n
    merged = claim / "night-1" / "merged"
    run = assert_whole_and_green(site, merged, n)
    assert {m["scheduler"]["job_id"] for m in run["merged_from"]} == {f"night-1-boot-{i}" for i in range(n)}
    assert (claim / "night-1" / "green").exists() and (claim / "night-1" / "report.html").exists()
    assert "## " in p.stdout  # the merge pod's log: the report's markdown


# ------------------------------------------------------------------------------------------------------------- Slurm

class Cluster:
    """Slurm, for what deploy/slurm/submit.sh submitted: runs the array's tasks, then the dependent merge."""

    def __init__(self, site: Site):
        self.site = site
        self.state = site.base / "slurm"
        self.state.mkdir(exist_ok=True)
        self.submit_dir = site.checkout("cluster-home")  # the shared folder the jobs start in
        self.env = {**site.env, "STUB_SLURM": str(self.state)}

    def submit(self, **env: str) -> tuple[subprocess.CompletedProcess, dict, dict]:
        log = self.state / "submitted.jsonl"
        before = len(log.read_text().splitlines()) if log.exists() else 0
        p = run_file(DEPLOY / "slurm" / "submit.sh", self.submit_dir, {**self.env, **env})
        assert p.returncode == 0, both(p)
        array, merge = [json.loads(line) for line in log.read_text().splitlines()[before:]]
        return p, array, merge

    def task_env(self, array: dict, task: int) -> dict:
        o, _ = opts(array["argv"], {"--array", "--gres", "--export", "--dependency"}, {"--parsable"})
        low, high = map(int, o["--array"].split("-"))
        gpus = int(o["--gres"].rsplit(":", 1)[1])
        return {**array["env"], "SLURM_ARRAY_JOB_ID": str(array["id"]), "SLURM_ARRAY_TASK_ID": str(task),
                "SLURM_ARRAY_TASK_MIN": str(low), "SLURM_ARRAY_TASK_MAX": str(high),
                "SLURM_ARRAY_TASK_COUNT": str(high - low + 1), "SLURM_ARRAY_TASK_STEP": "1",
                "SLURM_JOB_ID": str(array["id"] + 100 + task), "SLURM_SUBMIT_DIR": str(self.submit_dir),
                "CUDA_VISIBLE_DEVICES": ",".join(str(task * gpus + g) for g in range(gpus))}

    def tasks(self, array: dict) -> range:
        o, _ = opts(array["argv"], {"--array"})
        low, high = map(int, o["--array"].split("-"))
        return range(low, high + 1)

    def run_tasks(self, array: dict, only=None) -> dict[int, subprocess.CompletedProcess]:
        script = array["argv"][-1]
        procs = {t: subprocess.Popen(["bash", script], cwd=self.submit_dir, env=self.task_env(array, t),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for t in self.tasks(array) if only is None or t in only}
        return {t: subprocess.CompletedProcess(p.args, p.wait(timeout=300), p.stdout.read(), "")
                for t, p in procs.items()}

    def run_merge(self, merge: dict, array: dict) -> subprocess.CompletedProcess:
        o, _ = opts(merge["argv"], {"--dependency", "--export"}, {"--parsable"})
        assert o["--dependency"] == f"afterany:{array['id']}"
        exported = dict(kv.split("=", 1) for kv in o["--export"].split(",")[1:])  # ALL,NAME=value,...
        assert o["--export"].startswith("ALL,")
        env = {**merge["env"], **exported, "SLURM_JOB_ID": str(merge["id"]), "SLURM_SUBMIT_DIR": str(self.submit_dir)}
        return run_file(merge["argv"][-1], self.submit_dir, env)


def test_the_slurm_array_and_its_merge_make_green_nights_and_a_lost_task_a_red_one(site):
    cluster = Cluster(site)
    results = cluster.submit_dir / "boot-results"
    # night 1: every task runs; a requeued task resumes its own run
    p, array, merge = cluster.submit()
    assert f"array job {array['id']}" in p.stdout and f"merge job {merge['id']}" in p.stdout
    n = len(cluster.tasks(array))
    for t, task in cluster.run_tasks(array).items():
        assert task.returncode == 0, task.stdout
        assert f"shard {t + 1}/{n}" in task.stdout, task.stdout
    (requeued,) = cluster.run_tasks(array, only={0}).values()
    assert requeued.returncode == 0 and "--resume" in requeued.stdout, requeued.stdout
    night1 = results / f"array-{array['id']}"
    assert len(list((night1 / "shards" / "shard-0").iterdir())) == 1
    m = cluster.run_merge(merge, array)
    assert m.returncode == 0, both(m)
    run = assert_whole_and_green(site, night1 / "merged", n)
    assert {x["scheduler"]["job_id"] for x in run["merged_from"]} == {f"{array['id']}_{t}" for t in range(n)}
    assert (night1 / "green").exists() and "nothing to compare with" in m.stdout

    # night 2: compared with night 1 (no regression), both nights in the history
    _, array2, merge2 = cluster.submit()
    assert all(t.returncode == 0 for t in cluster.run_tasks(array2).values())
    m = cluster.run_merge(merge2, array2)
    assert m.returncode == 0, both(m)
    night2 = results / f"array-{array2['id']}"
    assert (night2 / "green").exists() and (night2 / "compare.txt").exists()
    assert (night2 / "history.html").exists() and "night" in (night2 / "history.md").read_text().lower()

    # night 3: task 0 was cancelled before it started (no record at all): the merge runs anyway (afterany), names
    # the missing shard by its Slurm job, and the night is red and never a baseline
    _, array3, merge3 = cluster.submit(RUN_NAME="night-3")
    assert all(t.returncode == 0 for t in cluster.run_tasks(array3, only={1}).values())
    m = cluster.run_merge(merge3, array3)
    assert m.returncode == 1, both(m)
    assert f"missing shard(s) 1/{n} (Slurm job {array3['id']}_0)" in both(m)
    assert not (results / "night-3" / "green").exists()
    assert read_run(results / "night-3" / "merged")["status"] == "interrupted"


def test_the_slurm_time_limits_warning_stops_the_harness_and_its_server_and_a_requeue_resumes(site):
    """`--signal=B:USR1@300`: Slurm signals the batch script alone before the time limit; the script passes it on as
    SIGTERM, the harness stops the booting server and exits 130 (FAILED 130:0), and the requeued task resumes."""
    fake_matrix(site.repo / "matrix.yaml", {"slow": {"FAKE_VLLM_SCENARIO": "hang"}}, timeout_s=120, linger_s=0.2)
    cluster = Cluster(site)
    _, array, _ = cluster.submit(SHARDS="1")
    assert "--signal=B:USR1@300" in (DEPLOY / "slurm" / "boot-array.sbatch").read_text()
    shard = cluster.submit_dir / "boot-results" / f"array-{array['id']}" / "shards" / "shard-0"
    task = subprocess.Popen(["bash", array["argv"][-1]], cwd=cluster.submit_dir, env=cluster.task_env(array, 0),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    record = None
    for _ in range(600):  # the server's start is recorded within a few seconds; a bound, not a clock
        record = next(shard.glob("*/active/*.json"), None)
        if record is not None or task.poll() is not None:
            break
        time.sleep(0.1)
    assert record is not None, task.communicate(timeout=60)[0]
    pgid = json.loads(record.read_text())["pgid"]
    task.send_signal(signal.SIGUSR1)  # to the batch shell only, as `B:` does
    out, _ = task.communicate(timeout=120)
    assert task.returncode == 130 and "the time limit is near" in out, out
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)  # the booting server's group is gone
    (run,) = shard.glob("*/results.json")
    assert read_run(run.parent)["status"] == "interrupted"


def test_the_shipped_scripts_parse_and_the_submit_scripts_pass_on_their_settings(site):
    for script in [*(DEPLOY / "slurm").iterdir(), DEPLOY / "kubernetes" / "submit.sh"]:
        p = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert p.returncode == 0, f"{script.name}: {p.stderr}"
    cluster = Cluster(site)
    _, array, merge = cluster.submit(SHARDS="4", GPUS_PER_TASK="2", SBATCH_ARGS="--partition=gpu --account=ml",
                                     MEM_PER_TASK="200G")
    assert {"--array=0-3", "--gres=gpu:2", "--partition=gpu", "--account=ml", "--mem=200G"} <= set(array["argv"])
    assert "--partition=gpu" in merge["argv"] and "--gres" not in " ".join(merge["argv"])
    assert cluster.task_env(array, 3)["CUDA_VISIBLE_DEVICES"] == "6,7"
    _, array, _ = cluster.submit()  # no SBATCH_ARGS: the empty array expands to nothing (guarded for bash < 4.4)
    assert "--mem=64G" in array["argv"] and "" not in array["argv"]
    bad = run_file(DEPLOY / "slurm" / "submit.sh", cluster.submit_dir, {**cluster.env, "SHARDS": "0"})
    assert bad.returncode == 2 and "SHARDS" in bad.stderr
    bad = run_file(DEPLOY / "slurm" / "submit.sh", cluster.submit_dir, {**cluster.env, "MEM_PER_TASK": "lots"})
    assert bad.returncode == 2 and "MEM_PER_TASK" in bad.stderr
    bad = run_file(DEPLOY / "kubernetes" / "submit.sh", site.base, {**site.env, "SHARDS": "two"})
    assert bad.returncode == 2 and "SHARDS=two" in bad.stderr
    bad = run_file(DEPLOY / "kubernetes" / "submit.sh", site.base, {**site.env, "RUN_NAME": "Night_1"})
    assert bad.returncode == 2 and "RUN_NAME=Night_1" in bad.stderr


if __name__ == "__main__":  # the stand-ins on PATH run this file: `python test_deploy_files.py kubectl ARGS...`
    sys.exit(STANDINS[sys.argv[1]](sys.argv[2:]))
