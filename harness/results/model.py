"""The results schema: one cell record per boot, one run record per run. `SCHEMA_VERSION` moves with any change."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from harness.gpu.records import GpuInfo
from harness.logfacts import KvFacts, Refusal
from harness.logfacts.timeline import Timeline
from harness.matrix.scheduler import SchedulerRef
from harness.memory.model import MemoryCurve
from harness.predict.prediction import PredictionRecord
from harness.runtime.records import AppliedPatch, CompileCacheUse, ContainerInfo, ServerStop
from harness.units import fmt_seconds
from harness.verdict.catalogue import REASONS, OutcomeMember, ReasonMember
from harness.verdict.causes import Finding
from harness.verdict.outcome import OUTCOME_MEANINGS, Outcome
from harness.watch.records import LogCut

#: The catalogue, as the schema's descriptions say it.
_OUTCOMES_DOC = "; ".join(f"{o.value}: {m}" for o, m in OUTCOME_MEANINGS.items())
_REASONS_DOC = "; ".join(f"{r.value} ({i.outcome.value}): {i.meaning}" for r, i in REASONS.items())

SCHEMA_VERSION: Final = 1


class RunStatus(StrEnum):
    running = "running"
    complete = "complete"
    interrupted = "interrupted"


if TYPE_CHECKING:  # what the field holds: mypy cannot read a Literal built at run time
    RunStatusName: TypeAlias = RunStatus
else:
    RunStatusName = Literal[tuple(RunStatus)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Expected(_Record):
    outcome: OutcomeMember
    reason: ReasonMember | None = None
    within_s: float | None = Field(None, description="the verdict had to come within this many seconds")

    def describe(self) -> str:
        """`booted`, `refused (kv_insufficient)`, `booted within 900 s`."""
        return self.outcome + (f" ({self.reason})" if self.reason else "") + \
            (f" within {fmt_seconds(self.within_s)}" if self.within_s is not None else "")


class Timings(_Record):
    """Seconds from the cell's start. `event_s` is when the decisive signal was observed (health 200, refusal line,
    exit, deadline); `verdict_s` when the harness decided; `total_s` includes teardown."""

    ready_s: float | None = None
    ready_line_s: float | None = Field(None, description="when the server last logged a readiness line")
    event_s: float | None = None
    verdict_s: float | None = None
    total_s: float | None = None






class CellResult(_Record):
    cell_id: str
    axes: dict[str, str]
    runtime: str
    argv: list[str]
    env: dict[str, str] = Field(description="the cell's own env (matrix + fragments), secrets masked")
    outcome: OutcomeMember = Field(description=_OUTCOMES_DOC)
    reason: ReasonMember | None = Field(None, description=_REASONS_DOC)
    detail: str | None = Field(None, description="a human sentence behind the reason")
    expected: Expected | None = None
    matched: bool | None = Field(None, description="null when the cell has no expectation")
    exit_code: int | None = None
    stop: ServerStop | None = Field(None, description="how the harness's teardown ended the server: gone before it, "
                                    "SIGTERM honoured within the grace, SIGKILLed after it, processes left for `gc`, "
                                    "or unknown (a container engine that cannot tell), with the grace and the seconds "
                                    "until it was gone (docs/results.md); null when no server started, and in older "
                                    "records")
    timings: Timings = Timings()
    timeline: Timeline = Field(default_factory=Timeline, description="where the boot's time went: milestones on the "
                               "harness's clock (seconds since the cell started), the durations vLLM logged, and the "
                               "phase the verdict came in (docs/results.md)")
    kv: KvFacts = KvFacts()
    memory: MemoryCurve | None = Field(None, description="how close the boot came to its memory limit: a curve sampled "
                                       "from the server's start to the verdict (docs/memory.md); null when "
                                       "`memory_interval_s: null` or the server never started")
    refusal: Refusal | None = None
    cause: Finding | None = Field(None, description="the log's root cause when it decided the verdict: the catalogue's "
                                  "id (the reason), its kind and outcome, the decisive line, the numbers it states and "
                                  "a hint (docs/results.md); null when the reason is not a cause, and in older records")
    prediction: PredictionRecord | None = Field(
        None, description="the KV sizing predicted from the model's config.json and the cell's flags, and each logged "
                          "KV number held against it (docs/kv-model.md)")
    vllm_version: str | None = None
    log_path: str | None = Field(None, description="the full server log, relative to the run directory")
    log_tail: list[str] = []
    log_cut: LogCut | None = Field(None, description="how the saved log differs from what the server wrote: held to "
                                   "its cap (head and tail kept), cut by a full disk, or read past the parser's bound "
                                   "only for what decides; null when it is whole and every line was read")
    started_at: datetime | None = None
    finished_at: datetime | None = None
    port: int | None = None
    container: ContainerInfo | None = None
    patches: list[AppliedPatch] = []
    compile_cache: CompileCacheUse | None = Field(None, description="the run's shared torch.compile cache as this cell "
                                                  "used it; null with `compile_cache: none`")
    gpus: list[GpuInfo] = []
    attempts: int = 1
    contaminated: bool = Field(
        False, description="an earlier attempt was refused with gpu_memory_busy while memory was still held (not the "
                           "configuration's verdict); it was discarded, its log kept as logs/<cell_id>.attempt1.log, "
                           "and the cell booted once more after the idle wait")

    def verdict(self) -> str:
        """`refused (kv_insufficient)`."""
        return self.outcome + (f" ({self.reason})" if self.reason else "")

    def cause_hint(self) -> str | None:
        """What the log's cause says to do, in one line (by how much, what would boot); for a crash no cause names,
        the exception that ended the boot; None without a cause (a boot, a record older than the catalogue). Every
        view of a cell (run's table and summary, report, check) shows this one line, so they never disagree."""
        if self.cause is None:
            return None
        return " ".join((self.cause.hint or self.cause.line).split())[:300] or None

    def exception(self) -> str | None:
        """For a crash the catalogue names only in general (uncaught_exception, model_code_error): the exception
        type that ended the boot ("KeyError"); None otherwise. Two such crashes of another type are another cause."""
        if self.cause is None or self.cause.id not in ("uncaught_exception", "model_code_error"):
            return None
        exc = self.cause.numbers.get("exception")
        return str(exc)[:120] if exc else None

    def errored_unexpected(self) -> bool:
        """The harness could not boot it and nothing said it would: an `error` cell fails a run and `check`, unless
        its expectation names `outcome: error` and it matched (a fault the matrix sets up on purpose: a missing
        model, a port taken, a tiny /dev/shm), which is a verdict that came out as written."""
        if self.outcome != Outcome.error:
            return False
        return not (self.matched and self.expected is not None and self.expected.outcome == Outcome.error)

    def miss(self) -> str | None:
        """Why the cell missed its expectation, in one line; None when it matched or had none. A verdict that came
        too late names the phase that took longest."""
        if self.matched is not False or self.expected is None:
            return None
        want = self.expected
        if self.outcome != want.outcome or (want.reason is not None and self.reason != want.reason):
            return f"{self.verdict()}, expected {want.describe()}"
        took = self.timings.verdict_s
        slow = self.timeline.longest()
        return (f"{self.verdict()} after {fmt_seconds(took)}, expected within {fmt_seconds(want.within_s)}"
                + (f": longest phase {slow.name} ({fmt_seconds(slow.seconds)})" if slow else ""))


class MatrixRef(_Record):
    path: str
    sha256: str
    name: str


class HostInfo(_Record):
    hostname: str
    platform: str
    python: str
    cpu_count: int | None = None


class MergeSource(_Record):
    """One run that `boot-harness merge` took cells from."""

    run_id: str
    shard: str | None = None
    scheduler: SchedulerRef | None = Field(None, description="the scheduler job that ran it (`--shard auto`)")
    status: RunStatusName
    host: HostInfo
    started_at: datetime
    finished_at: datetime | None = None
    harness_version: str
    cells: list[str] = Field([], description="the ids of the cells this run contributed")


class RunResult(_Record):
    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    matrix: MatrixRef
    runtime: str
    started_at: datetime
    finished_at: datetime | None = None
    status: RunStatusName = RunStatus.running
    host: HostInfo
    harness_version: str
    selection: list[str] = []
    shard: str | None = None
    scheduler: SchedulerRef | None = Field(
        None, description="the scheduler job that ran this shard (`--shard auto`): Buildkite, Kubernetes or Slurm")
    merged_from: list[MergeSource] = Field(
        [], description="the runs `boot-harness merge` combined into this one; empty for a run that booted its cells")
    cells: list[CellResult] = []
    summary: dict[str, int] = Field(default_factory=dict, description="count per outcome, plus matched/mismatched")
