"""The files under deploy/ that a user copies into a cluster engine, held against what each engine accepts, offline:

- Buildkite: deploy/buildkite/pipeline.yml against Buildkite's published pipeline schema (vendored with its commit:
  tests/data/schemas/README.md), and the shape the night needs (a `parallelism` boot step on GPU agents running
  `--shard auto`, a `wait` that lets red shards through, a merge step), every `$` escaped from upload-time
  interpolation;
- Kubernetes: deploy/kubernetes/*.yaml read into the API's own models by the `kubernetes` client (unknown or
  misspelt fields, missing required ones and wrong types are errors; the document round-trips unchanged), and the
  Indexed Job's settings agreeing with each other and with the merge Job;
- Slurm: the `#SBATCH` lines of deploy/slurm/ and what submit.sh passes to sbatch.

tests/integration/test_deploy_files.py runs the files' commands the way the agent, the pod or the batch job would."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.helpers.deploy import kube_expand
from tests.helpers.env import ROOT

DEPLOY = ROOT / "deploy"
BUILDKITE_SCHEMA = ROOT / "tests" / "data" / "schemas" / "buildkite-pipeline.schema.json"
K8S = DEPLOY / "kubernetes"
SLURM = DEPLOY / "slurm"


# ---------------------------------------------------------------------------------------------------------- Buildkite

def pipeline() -> dict:
    return yaml.safe_load((DEPLOY / "buildkite" / "pipeline.yml").read_text())


def schema_errors(doc: dict) -> list[str]:
    """The schema's complaints about `doc`, each with where it is (a step's own definition first, for a readable
    message: the pipeline's `anyOf` over step kinds otherwise says only that no kind fits)."""
    schema = json.loads(BUILDKITE_SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(doc)]
    for i, step in enumerate(doc.get("steps", [])):
        kind = "waitStep" if "wait" in step else "commandStep"
        sub = jsonschema.Draft7Validator({**schema, "$ref": f"#/definitions/{kind}"})
        errors += [f"steps/{i} ({kind}) {'/'.join(map(str, e.path))}: {e.message}" for e in sub.iter_errors(step)]
    return errors


def steps() -> tuple[dict, dict, dict]:
    boot, wait, merge = pipeline()["steps"]
    return boot, wait, merge


def commands(step: dict) -> list[str]:
    return step.get("commands") or [step["command"]]


def test_the_buildkite_pipeline_is_valid_against_buildkites_published_schema():
    assert schema_errors(pipeline()) == []


def test_the_schema_check_is_live_it_rejects_a_misspelt_key_and_a_string_count():
    for bad_step in ({"parallelsim": 2}, {"parallelism": "2"}, {"artifact_path": "x"}):
        doc = pipeline()
        doc["steps"][0].update(bad_step)
        assert schema_errors(doc), bad_step


def test_the_boot_step_runs_every_shard_on_gpu_agents_with_shard_auto():
    boot, _, _ = steps()
    assert isinstance(boot["parallelism"], int) and boot["parallelism"] >= 2
    assert boot["agents"] == {"queue": "gpu"}
    script = "\n".join(commands(boot))
    assert "--shard auto" in script and "--shard \"" not in script
    assert re.search(r"run --matrix \"\$\$MATRIX\" --shard auto .*--results-dir \"boot-results/", script)
    # the agent uploads the shard's run dir whatever the command's exit, and the merge downloads the same paths
    assert boot["artifact_paths"] == "boot-results/**/*"
    _, _, merge = steps()
    assert 'artifact download "boot-results/**/*" . --step boot' in "\n".join(commands(merge))


def test_a_red_shard_still_lets_the_merge_step_run():
    _, wait, merge = steps()
    assert "wait" in wait and wait["continue_on_failure"] is True
    script = "\n".join(commands(merge))
    for sub in ("merge", "check", "report"):
        assert f"boot-harness {sub} " in script
    assert "buildkite-agent annotate" in script and "--markdown report.md" in script
    assert "gpu" not in json.dumps(merge.get("agents", {}))


def test_every_dollar_in_a_command_is_escaped_from_upload_time_interpolation():
    """`buildkite-agent pipeline upload` replaces `$VAR` when the pipeline is uploaded; `$$` is a literal `$`."""
    for step in steps():
        for command in step.get("commands", []):
            assert "$" not in command.replace("$$", ""), command


# --------------------------------------------------------------------------------------------------------- Kubernetes

def manifest(name: str) -> dict:
    (doc,) = list(yaml.safe_load_all((K8S / name).read_text()))
    return doc


def as_model(doc: dict, kind: str):
    """`doc` read by the kubernetes client into its model `kind` (V1Job, ...): strictly (an unknown or misspelt field,
    a missing required one, a wrong type is an error), through ApiClient as a response from the API server is read,
    and back to the same document (so no field was dropped or coerced on the way)."""
    pytest.importorskip("kubernetes", reason="the `test` extra pins the kubernetes client")
    from kubernetes import client as k8s
    from kubernetes.client import ApiClient

    getattr(k8s, kind).model_validate(doc)  # extra="forbid", strict types
    api = ApiClient()
    obj = api.deserialize(json.dumps(doc), kind, None)
    assert api.sanitize_for_serialization(obj) == doc, f"{kind} does not round-trip"
    return obj


def env_of(container) -> dict[str, str]:
    return {e.name: e.value for e in container.env or []}


@pytest.fixture(scope="module")
def jobs():
    return as_model(manifest("boot-job.yaml"), "V1Job"), as_model(manifest("merge-job.yaml"), "V1Job")


def test_each_kubernetes_manifest_is_a_valid_api_object():
    as_model(manifest("boot-job.yaml"), "V1Job")
    as_model(manifest("merge-job.yaml"), "V1Job")
    as_model(manifest("pvc.yaml"), "V1PersistentVolumeClaim")


def test_the_model_check_is_live_it_rejects_a_misspelt_field_a_missing_name_and_a_string_count():
    def broken(change) -> dict:
        doc = manifest("boot-job.yaml")
        change(doc)
        return doc

    for doc in (broken(lambda d: d["spec"].update(completionsMode="Indexed")),
                broken(lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("name")),
                broken(lambda d: d["spec"].update(completions="2"))):
        with pytest.raises(Exception):  # noqa: B017 - pydantic's ValidationError, or the round trip's assert
            as_model(doc, "V1Job")


def test_the_boot_job_is_indexed_one_shard_a_pod_and_passes_its_count(jobs):
    boot, _ = jobs
    spec = boot.spec
    (container,) = spec.template.spec.containers
    env = env_of(container)
    assert spec.completion_mode == "Indexed"
    assert spec.completions == spec.parallelism == int(env["BOOT_HARNESS_SHARD_COUNT"]) >= 2
    assert spec.backoff_limit_per_index >= 1 and 1 <= spec.max_failed_indexes <= spec.completions
    assert spec.template.spec.restart_policy == "Never"  # what podFailurePolicy requires
    fail_index = [r for r in spec.pod_failure_policy.rules if r.action == "FailIndex"]
    assert fail_index and fail_index[0].on_exit_codes.container_name == container.name
    assert fail_index[0].on_exit_codes.values == [2]  # bad input is not retried
    assert int(container.resources.limits["nvidia.com/gpu"]) >= 1
    script = " ".join(container.command + container.args)
    assert "--shard auto" in script and "JOB_COMPLETION_INDEX" in script


def test_the_scripts_mean_the_same_after_the_kubelets_variable_expansion(jobs):
    """The kubelet expands `$(VAR)` and `$$` in command and args before bash sees them: the scripts use neither."""
    for job in jobs:
        (container,) = job.spec.template.spec.containers
        for arg in container.command + container.args:
            assert kube_expand(arg, env_of(container)) == arg


def test_kube_expand_does_what_the_kubelet_does():
    env = {"A": "x"}
    assert kube_expand("$(A)-$(B)-$$(A)-$$-$((1 + 1))-$x-$", env) == "x-$(B)-$(A)-$-$((1 + 1))-$x-$"


def test_both_jobs_share_the_claim_the_night_and_the_matrix(jobs):
    boot, merge = jobs
    claim = manifest("pvc.yaml")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # shard pods on several nodes write at once
    for job in jobs:
        pod = job.spec.template.spec
        (container,) = pod.containers
        env = env_of(container)
        volumes = {v.name: v for v in pod.volumes}
        mounts = {m.name: m for m in container.volume_mounts}
        assert set(mounts) <= set(volumes)
        results = [n for n, v in volumes.items()
                   if v.persistent_volume_claim and v.persistent_volume_claim.claim_name == claim["metadata"]["name"]]
        assert len(results) == 1, "the results claim is mounted once"
        assert mounts[results[0]].mount_path == env["BOOT_HARNESS_RESULTS"] and not mounts[results[0]].read_only
    a, b = (env_of(j.spec.template.spec.containers[0]) for j in jobs)
    assert {k: a[k] for k in ("RUN_NAME", "BOOT_HARNESS_RESULTS", "MATRIX")} == \
           {k: b[k] for k in ("RUN_NAME", "BOOT_HARNESS_RESULTS", "MATRIX")}
    assert boot.spec.template.spec.containers[0].image == merge.spec.template.spec.containers[0].image
    assert merge.spec.completion_mode is None and merge.spec.template.spec.containers[0].resources.limits is None
    # submit.sh names the Jobs and the night by replacing the shipped name everywhere
    assert boot.metadata.name.startswith(a["RUN_NAME"]) and merge.metadata.name.startswith(a["RUN_NAME"])


# ------------------------------------------------------------------------------------------------------------- Slurm

def sbatch_options(path: Path) -> dict[str, str]:
    """The `#SBATCH --key=value` lines before the first command, as sbatch reads them."""
    out = {}
    for line in path.read_text().splitlines():
        if line.startswith("#SBATCH"):
            key, _, value = line.split(None, 1)[1].partition("=")
            out[key] = value
        elif line.strip() and not line.startswith("#"):
            break
    return out


def test_the_array_script_asks_for_a_consecutive_array_and_gpus():
    opts = sbatch_options(SLURM / "boot-array.sbatch")
    low, high = map(int, re.fullmatch(r"(\d+)-(\d+)", opts["--array"]).groups())
    assert low == 0 and high >= 1  # --shard auto needs consecutive ids: N tasks 0..N-1
    assert re.fullmatch(r"gpu(:[A-Za-z0-9_]+)?:\d+", opts["--gres"])
    assert "--shard auto" in (SLURM / "boot-array.sbatch").read_text()


def test_every_sbatch_line_comes_before_the_first_command():
    """sbatch stops reading #SBATCH at the first command: a directive after it would be silently ignored."""
    for script in (SLURM / "boot-array.sbatch", SLURM / "merge.sbatch"):
        text = script.read_text()
        assert text.count("#SBATCH") == len(sbatch_options(script)), script.name


def test_submit_chains_the_merge_after_every_task_whatever_it_ended_as():
    """The two `$("$SBATCH" ...)` calls as written (tests/integration/test_deploy_files.py records them made)."""
    text = (SLURM / "submit.sh").read_text()
    calls = [shlex.split(c.replace("\\\n", " "))
             for c in re.findall(r'\$\("\$SBATCH" (.*?)\)\n', text, re.S)]
    array, merge = calls
    assert "--parsable" in array and any(a.startswith("--array=0-") for a in array)
    assert array[-1].endswith("boot-array.sbatch") and merge[-1].endswith("merge.sbatch")
    assert "--dependency=afterany:$array" in merge and "--parsable" in merge


# ------------------------------------------------------------------------------------------- Kubernetes, as shipped

#: The Job fields the boot Job may use that older API servers drop or refuse, and the release from which each is on by
#: default: KEP-3850 (backoffLimitPerIndex, maxFailedIndexes, the FailIndex action) beta in 1.29, GA in 1.33; KEP-3329
#: (podFailurePolicy, the DisruptionTarget pod condition) beta in 1.26, GA in 1.31; the Indexed completion mode GA in
#: 1.24; ttlSecondsAfterFinished GA in 1.23.
FIELD_SINCE = {"backoffLimitPerIndex": (1, 29), "maxFailedIndexes": (1, 29), "FailIndex": (1, 29),
               "podFailurePolicy": (1, 26), "DisruptionTarget": (1, 26), "completionMode": (1, 24),
               "ttlSecondsAfterFinished": (1, 23)}


def stated_version(text: str) -> tuple[int, int]:
    found = re.findall(r"Kubernetes >= (\d+)\.(\d+)", text)
    assert found, "no minimum Kubernetes version stated"
    return tuple(map(int, found[0]))


def test_the_stated_kubernetes_version_is_the_newest_any_field_of_the_jobs_needs():
    used = set()
    for name in ("boot-job.yaml", "merge-job.yaml"):
        body = "\n".join(line for line in (K8S / name).read_text().splitlines() if not line.lstrip().startswith("#"))
        used |= {field for field in FIELD_SINCE if re.search(rf"\b{field}\b", body)}
    assert {"backoffLimitPerIndex", "FailIndex"} <= used  # the check reads the manifests' fields
    needed = max(FIELD_SINCE[f] for f in used)
    assert stated_version((K8S / "boot-job.yaml").read_text()) == needed
    assert stated_version((K8S / "submit.sh").read_text()) == needed


def test_the_shard_count_is_one_number_on_the_lines_submit_sh_rewrites():
    marked = [line for line in (K8S / "boot-job.yaml").read_text().splitlines() if line.endswith("# shards")
              and not line.lstrip().startswith("#")]
    keys = sorted(line.split(":")[0].strip() for line in marked)
    assert keys == ["completions", "maxFailedIndexes", "parallelism", "value"]
    assert len({re.search(r"(\d+)", line.split(":", 1)[1]).group(1) for line in marked}) == 1
    env = env_of(as_model(manifest("boot-job.yaml"), "V1Job").spec.template.spec.containers[0])
    assert f'value: "{env["BOOT_HARNESS_SHARD_COUNT"]}"  # shards' in "\n".join(marked)


def test_the_pods_matrix_is_matrix_yaml_for_the_process_runtime_with_the_same_cells_and_expectations(monkeypatch):
    """The Job names deploy/kubernetes/matrix.yaml: `runtime: process` (a pod has no container engine), the seed's
    cells of matrix.yaml on the image the pod runs (unpatched), expecting what matrix.yaml expects of them."""
    from harness.matrix.load import load_matrix

    boot = manifest("boot-job.yaml")
    named = {e["name"]: e.get("value") for e in boot["spec"]["template"]["spec"]["containers"][0]["env"]}["MATRIX"]
    for var in ("CONTAINER_RUNTIME", "FORK_IMAGE", "GLM_MODEL_DIR", "VLLM_SERVE"):
        monkeypatch.delenv(var, raising=False)
    pod, gpu = load_matrix(ROOT / named), load_matrix(ROOT / "matrix.yaml")
    assert pod.matrix.runtime == "process" and gpu.matrix.runtime == "docker"
    unpatched = {c.id.removesuffix("-image_unpatched"): c for c in gpu.cells if c.axes["image"] == "unpatched"}
    assert {c.id for c in pod.cells} == set(unpatched)
    for c in pod.cells:
        mine, theirs = c.expected, unpatched[c.id].expected
        assert (mine and (mine.outcome, mine.reason)) == (theirs and (theirs.outcome, theirs.reason)), c.id
        assert [a for a in c.server_args if a != "/models/GLM-5.3-Flash"] == \
               [a for a in unpatched[c.id].server_args if a != "/models/glm"]
