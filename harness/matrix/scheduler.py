"""`--shard auto`: which shard this process is, read from the variables of the scheduler that started it.

One concern: an environment (a Mapping, so a test needs no real scheduler) → the scheduler, its job id, and shard I of
N, exactly what `--shard I/N` would have said (1-based I). Each scheduler's own index is kept too, so a missing shard
can be named the way its scheduler names it (`merge`: "Slurm job 4242_3").

- Buildkite (`parallelism: N`): `BUILDKITE_PARALLEL_JOB` (0-based) of `BUILDKITE_PARALLEL_JOB_COUNT`; job
  `BUILDKITE_JOB_ID`, build `BUILDKITE_BUILD_ID`.
- Kubernetes Indexed Job: `JOB_COMPLETION_INDEX` (0-based). Kubernetes exports no count, so the manifest passes
  `spec.completions` as `BOOT_HARNESS_SHARD_COUNT`; job id: the pod's hostname, `<job-name>-<index>` (`HOSTNAME`).
- Slurm array: `SLURM_ARRAY_TASK_ID` counted from `SLURM_ARRAY_TASK_MIN`, of `MAX − MIN + 1` (or
  `SLURM_ARRAY_TASK_COUNT`); the ids must be consecutive (`--array=0-7`, `1-8%2`: a step or a list would leave
  holes). Job id `<SLURM_ARRAY_JOB_ID>_<task id>`, as `squeue`/`scancel` write it.
- GitHub Actions exports no shard variables: its matrix passes `--shard I/N` itself.

No scheduler's variables, half of them, a value that is not a whole number or out of range, or two schedulers that
disagree: a UsageError of one line naming the variables (exit 2) — never a guess, never the whole matrix.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import UsageError

#: The variable a Kubernetes Job manifest sets to its `spec.completions` (Kubernetes does not export the count).
K8S_COUNT = "BOOT_HARNESS_SHARD_COUNT"


class SchedulerKind(StrEnum):
    buildkite = "buildkite"
    kubernetes = "kubernetes"
    slurm = "slurm"

    @property
    def label(self) -> str:
        return {"buildkite": "Buildkite", "kubernetes": "Kubernetes", "slurm": "Slurm"}[self.value]


#: What each scheduler's shard variables are, for the messages.
VARIABLES: dict[SchedulerKind, str] = {
    SchedulerKind.buildkite: "BUILDKITE_PARALLEL_JOB and BUILDKITE_PARALLEL_JOB_COUNT",
    SchedulerKind.kubernetes: f"JOB_COMPLETION_INDEX and {K8S_COUNT}",
    SchedulerKind.slurm: "SLURM_ARRAY_TASK_ID with SLURM_ARRAY_TASK_MIN/MAX or SLURM_ARRAY_TASK_COUNT",
}


class SchedulerRef(BaseModel):
    """The scheduler job that ran a shard (results.json `.scheduler`, and each `.merged_from` entry's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: SchedulerKind
    job_id: str | None = Field(None, description="this process's job: the Buildkite job id, the pod's hostname "
                                                 "(<job-name>-<index>), the Slurm <array job id>_<task id>")
    group_id: str | None = Field(None, description="what all the shards share: the Buildkite build id, the "
                                                   "Kubernetes Job's name, the Slurm array job id")
    index: int = Field(description="the scheduler's own index of this shard (BUILDKITE_PARALLEL_JOB, "
                                   "JOB_COMPLETION_INDEX, SLURM_ARRAY_TASK_ID)")
    count: int = Field(description="how many shards the scheduler started")
    first: int = Field(0, description="the scheduler's index of shard 1: 0, or SLURM_ARRAY_TASK_MIN")

    @property
    def shard(self) -> str:
        """`I/N`, as `--shard I/N` says it (I counts from 1)."""
        return f"{self.index - self.first + 1}/{self.count}"

    def said(self) -> str:
        """This job, for a line on stderr: `Slurm job 4242_3 (shard 4/8)`."""
        noun = "pod" if self.kind == SchedulerKind.kubernetes else "job"
        return f"{self.kind.label} {noun} {self.job_id or '?'} (shard {self.shard})"

    def job_of(self, shard_i: int) -> str:
        """How this scheduler names the job that runs shard `shard_i` of the same split (a sibling of this one)."""
        index = self.first + shard_i - 1
        if self.kind == SchedulerKind.buildkite:
            return f"Buildkite build {self.group_id or '?'} parallel job {index}"
        if self.kind == SchedulerKind.kubernetes:
            return f"Kubernetes pod {self.group_id}-{index}" if self.group_id else f"Kubernetes index {index}"
        return f"Slurm job {self.group_id}_{index}" if self.group_id else f"Slurm array task {index}"


def detect(env: Mapping[str, str]) -> SchedulerRef:
    """The scheduler job `env` belongs to, and its shard. A UsageError (one line) when that cannot be said for sure."""
    found = [ref for ref in (_buildkite(env), _kubernetes(env), _slurm(env)) if ref is not None]
    if not found:
        raise UsageError("--shard auto: no scheduler's shard variables are set (" + "; ".join(
            f"{k.label}: {v}" for k, v in VARIABLES.items())
            + "); GitHub Actions exports none: pass --shard I/N from the job's matrix")
    if len({ref.shard for ref in found}) > 1:
        raise UsageError("--shard auto: the schedulers disagree: " + ", ".join(
            f"{ref.kind.label} says {ref.shard} ({VARIABLES[ref.kind]})" for ref in found) + "; pass --shard I/N")
    return found[0]


#: Digits of an index or count a scheduler may give: no scheduler starts a billion jobs, and int() of 4,300 digits
#: or more is a ValueError of Python's own.
MAX_DIGITS = 9


def _int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or not raw.strip():  # unset, or exported empty: not this scheduler's
        return None
    text = raw.strip()
    shown = repr(raw) if len(raw) <= 40 else f"{raw[:20]!r}… ({len(raw):,} characters)"
    if not text.isdigit() or not text.isascii():
        raise UsageError(f"--shard auto: {name}={shown} is not a whole number ≥ 0")
    if len(text.lstrip("0")) > MAX_DIGITS:
        raise UsageError(f"--shard auto: {name}={shown} is beyond any scheduler's jobs (at most {MAX_DIGITS} digits)")
    return int(text.lstrip("0") or "0")  # leading zeros count against int()'s bound too


def _need(value: int | None, name: str, kind: SchedulerKind, given: str) -> int:
    if value is None:
        raise UsageError(f"--shard auto: {given} is set but {name} is not ({kind.label}: {VARIABLES[kind]})")
    return value


def _shard(kind: SchedulerKind, index: int, first: int, count: int, what: str, job_id: str | None,
           group_id: str | None) -> SchedulerRef:
    if count < 1:
        raise UsageError(f"--shard auto: {what}: the count must be at least 1")
    if not 0 <= index - first < count:
        raise UsageError(f"--shard auto: {what}: out of range (its indexes run {first}..{first + count - 1})")
    return SchedulerRef(kind=kind, job_id=job_id or None, group_id=group_id or None, index=index, count=count,
                        first=first)


def _buildkite(env: Mapping[str, str]) -> SchedulerRef | None:
    index, count = _int(env, "BUILDKITE_PARALLEL_JOB"), _int(env, "BUILDKITE_PARALLEL_JOB_COUNT")
    if index is None and count is None:
        return None
    k = SchedulerKind.buildkite
    index = _need(index, "BUILDKITE_PARALLEL_JOB", k, "BUILDKITE_PARALLEL_JOB_COUNT")
    count = _need(count, "BUILDKITE_PARALLEL_JOB_COUNT", k, "BUILDKITE_PARALLEL_JOB")
    return _shard(k, index, 0, count, f"BUILDKITE_PARALLEL_JOB={index} of BUILDKITE_PARALLEL_JOB_COUNT={count}",
                  env.get("BUILDKITE_JOB_ID"), env.get("BUILDKITE_BUILD_ID"))


def _kubernetes(env: Mapping[str, str]) -> SchedulerRef | None:
    index, count = _int(env, "JOB_COMPLETION_INDEX"), _int(env, K8S_COUNT)
    if index is None and count is None:
        return None
    k = SchedulerKind.kubernetes
    if count is None:
        raise UsageError(f"--shard auto: JOB_COMPLETION_INDEX is set but {K8S_COUNT} is not: Kubernetes does not "
                         f"export the Job's completions, so its manifest must set {K8S_COUNT} to spec.completions")
    index = _need(index, "JOB_COMPLETION_INDEX", k, K8S_COUNT)
    host = env.get("HOSTNAME") or None
    job = host[: -len(f"-{index}")] if host and host.endswith(f"-{index}") else None  # `<job-name>-<index>`
    return _shard(k, index, 0, count, f"JOB_COMPLETION_INDEX={index} of {K8S_COUNT}={count}", host, job)


def _slurm(env: Mapping[str, str]) -> SchedulerRef | None:
    task = _int(env, "SLURM_ARRAY_TASK_ID")
    if task is None:
        return None
    k = SchedulerKind.slurm
    low, high = _int(env, "SLURM_ARRAY_TASK_MIN"), _int(env, "SLURM_ARRAY_TASK_MAX")
    total, step = _int(env, "SLURM_ARRAY_TASK_COUNT"), _int(env, "SLURM_ARRAY_TASK_STEP")
    if step is not None and step != 1:
        raise UsageError(f"--shard auto: SLURM_ARRAY_TASK_STEP={step}: shards need consecutive array ids "
                         "(--array=0-N, not a step)")
    if high is not None:
        low = _need(low, "SLURM_ARRAY_TASK_MIN", k, "SLURM_ARRAY_TASK_MAX")
        count = high - low + 1
        if total is not None and total != count:
            raise UsageError(f"--shard auto: SLURM_ARRAY_TASK_COUNT={total} but SLURM_ARRAY_TASK_MIN..MAX is "
                             f"{low}..{high}: shards need consecutive array ids (--array=0-N, not a list)")
    elif total is not None:
        low, count = low or 0, total
    else:
        raise UsageError(f"--shard auto: SLURM_ARRAY_TASK_ID is set but neither SLURM_ARRAY_TASK_MAX nor "
                         f"SLURM_ARRAY_TASK_COUNT is ({VARIABLES[k]})")
    array = env.get("SLURM_ARRAY_JOB_ID") or None
    job = f"{array}_{task}" if array else env.get("SLURM_JOB_ID")
    return _shard(k, task, low, count, f"SLURM_ARRAY_TASK_ID={task} of {low}..{low + count - 1}", job, array)
