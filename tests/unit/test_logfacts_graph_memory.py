"""vLLM's CUDA-graph memory accounting, read as each release logs it (issue 30).

The lines are rendered from the format strings of the released wheels (vllm 0.18.0 … 0.34.0): the V1 model runner's
"Estimated CUDA graph memory: %.2f GiB total" (v1/worker/gpu_model_runner.py, 0.18-0.33), the worker's "CUDA graph
pool memory: %s GiB (actual), %s GiB (estimated), difference: %s GiB (%.1f%%)." with round(x, 2) figures
(v1/worker/gpu_worker.py, 0.18-0.34), and "Graph capturing finished in %.0f secs, took %.2f GiB", which the V2 model
runner (v1/worker/gpu/model_runner.py, 0.29+) also logs for the throwaway capture it profiles before the KV cache is
sized.
"""

from __future__ import annotations

import pytest

from harness.logfacts import KvFacts, LogParser, parse_lines, parse_text
from tests.helpers.wraps import WRAPS

E = "(EngineCore_DP0 pid=123) "  # TP=1: the worker runs in the engine core's process
TP0, TP1 = "(Worker_TP0 pid=131) ", "(Worker_TP1 pid=132) "

# vllm 0.21.0, V1 model runner, one worker: the estimate before the KV size, the capture and the comparison after it.
V021 = [
    E + "INFO 12-04 10:00:20 [gpu_model_runner.py:4210] Model loading took 14.99 GiB memory and 6.2 seconds",
    E + "INFO 12-04 10:00:24 [gpu_model_runner.py:6063] Profiling CUDA graph memory: PIECEWISE=51 (largest=512), "
        "FULL=35 (largest=256)",
    E + "DEBUG 12-04 10:00:27 [gpu_model_runner.py:6115] Estimated PIECEWISE CUDA graph memory: 412.00 MiB "
        "first-capture + (51-1) × 2.50 MiB per-graph",
    E + "DEBUG 12-04 10:00:29 [gpu_model_runner.py:6115] Estimated FULL CUDA graph memory: 96.00 MiB first-capture "
        "+ (35-1) × 1.00 MiB per-graph",
    E + "INFO 12-04 10:00:29 [gpu_model_runner.py:6142] Estimated CUDA graph memory: 0.56 GiB total",
    E + "INFO 12-04 10:00:30 [gpu_worker.py:462] Available KV cache memory: 52.36 GiB",
    E + "INFO 12-04 10:00:30 [gpu_worker.py:477] CUDA graph memory profiling is enabled (default since v0.21.0). The "
        "current --gpu-memory-utilization=0.9000 is equivalent to --gpu-memory-utilization=0.8930 without CUDA graph "
        "memory profiling. To maintain the same effective KV cache size as before, increase --gpu-memory-utilization "
        "to 0.9070. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.",
    E + "INFO 12-04 10:00:31 [kv_cache_utils.py:1287] GPU KV cache size: 428,800 tokens",
    E + "INFO 12-04 10:00:31 [kv_cache_utils.py:1291] Maximum concurrency for 4,096 tokens per request: 104.69x",
    E + "INFO 12-04 10:00:52 [gpu_model_runner.py:6243] Graph capturing finished in 21 secs, took 0.52 GiB",
    E + "INFO 12-04 10:00:52 [gpu_worker.py:621] CUDA graph pool memory: 0.52 GiB (actual), 0.56 GiB (estimated), "
        "difference: 0.04 GiB (7.7%).",
    E + "INFO 12-04 10:00:53 [core.py:303] init engine (profile, create kv cache, warmup model) took 33.10 s",
]

# vllm 0.34.0, V2 model runner: no estimate line; the profiling pass's capture comes before the KV size.
V034 = [
    E + "INFO 12-04 10:00:20 [model_runner.py:512] Model loading took 14.99 GiB memory and 6.2 seconds",
    E + "INFO 12-04 10:00:27 [model_runner.py:1216] Graph capturing finished in 4 secs, took 0.41 GiB",
    E + "INFO 12-04 10:00:28 [gpu_worker.py:795] Available KV cache memory: 51.9 GiB",
    E + "INFO 12-04 10:00:29 [kv_cache_utils.py:1168] GPU KV cache size: 425,024 tokens, Maximum concurrency for "
        "4,096 tokens per request: 103.77x",
    E + "INFO 12-04 10:00:50 [model_runner.py:1216] Graph capturing finished in 19 secs, took 0.62 GiB",
    E + "INFO 12-04 10:00:50 [gpu_worker.py:1112] CUDA graph pool memory: 0.62 GiB (actual), 0.66 GiB (estimated), "
        "difference: 0.04 GiB (6.5%).",
]


def graph_of(facts: KvFacts) -> tuple[float | None, float | None, float | None]:
    return facts.cuda_graph_gib, facts.cuda_graph_estimated_gib, facts.cuda_graph_actual_gib


def test_the_v1_runner_logs_the_estimate_the_measure_and_its_comparison():
    assert graph_of(parse_lines(V021).kv) == (0.52, 0.56, 0.52)


def test_the_v2_runners_profiling_capture_is_not_the_measured_one():
    """0.29+: the first "Graph capturing finished" is the throwaway capture profiling runs before the KV size."""
    assert graph_of(parse_lines(V034).kv) == (0.62, 0.66, 0.62)


def test_before_the_real_capture_the_profiling_capture_only_fills_the_gap():
    """A boot refused or stopped after the KV size: the profiling pass's capture is all there is (as before)."""
    assert graph_of(parse_lines(V034[:4]).kv) == (0.41, None, None)
    # ... and the V1 runner's estimate beats it: it is the figure vLLM sized the KV cache with.
    estimate = E + "INFO 12-04 10:00:29 [gpu_model_runner.py:6475] Estimated CUDA graph memory: 0.58 GiB total"
    assert graph_of(parse_lines([V034[1], estimate, *V034[2:4]]).kv) == (0.58, 0.58, None)


def test_the_extensible_kv_cache_logs_its_size_after_its_only_capture():
    """0.34's default on CUDA: no profiling pass, no estimate, the KV cache sized from what warmup and capture left."""
    log = [V034[0], V034[4], V034[3]]
    assert graph_of(parse_lines(log).kv) == (0.62, None, None)


def test_an_excerpt_without_the_kv_size_counts_its_capture_as_measured():
    assert graph_of(parse_lines(V034[1:2]).kv) == (0.41, None, None)


def test_a_watcher_sees_the_measured_figure_replace_the_profiling_one():
    parser = LogParser()
    for line in V034[:4]:
        parser.feed(line)
    assert parser.facts.kv.cuda_graph_gib == 0.41
    for line in V034[4:]:
        parser.feed(line)
    assert graph_of(parser.facts.kv) == (0.62, 0.66, 0.62)


@pytest.mark.parametrize(
    ("version", "line", "estimated", "actual"),
    [
        ("0.18.0", E + "INFO 12-04 10:00:29 [gpu_model_runner.py:5686] Estimated CUDA graph memory: 1.25 GiB total",
         1.25, None),
        ("0.33.0", "(EngineCore pid=55) INFO 11-01 10:00:29 [gpu_model_runner.py:6409] Estimated CUDA graph memory: "
         "0.00 GiB total", 0.0, None),
        # round(x, 2) prints as few digits as it needs
        ("0.19.0", E + "INFO 12-04 10:00:52 [gpu_worker.py:597] CUDA graph pool memory: 0.5 GiB (actual), 1.0 GiB "
         "(estimated), difference: 0.5 GiB (100.0%).", 1.0, 0.5),
        ("0.32.0", E + "INFO 12-04 10:00:52 [gpu_worker.py:971] CUDA graph pool memory: 12.34 GiB (actual), 11.9 GiB "
         "(estimated), difference: 0.44 GiB (3.6%).", 11.9, 12.34),
        # free memory rose during the capture
        ("0.34.0", E + "INFO 12-04 10:00:52 [gpu_worker.py:1112] CUDA graph pool memory: -0.01 GiB (actual), 0.03 GiB "
         "(estimated), difference: 0.04 GiB (4294967296.0%).", 0.03, -0.01),
    ],
)
def test_each_releases_graph_memory_line(version, line, estimated, actual):
    kv = parse_lines([line]).kv
    assert (kv.cuda_graph_estimated_gib, kv.cuda_graph_actual_gib) == (estimated, actual), version


def test_with_several_workers_the_largest_figures_count():
    kv = parse_lines([
        TP0 + "INFO 12-04 10:00:29 [gpu_model_runner.py:6142] Estimated CUDA graph memory: 0.61 GiB total",
        TP1 + "INFO 12-04 10:00:29 [gpu_model_runner.py:6142] Estimated CUDA graph memory: 0.64 GiB total",
        E + "INFO 12-04 10:00:31 [kv_cache_utils.py:1287] GPU KV cache size: 200,000 tokens",
        TP1 + "INFO 12-04 10:00:50 [gpu_model_runner.py:6243] Graph capturing finished in 19 secs, took 0.60 GiB",
        TP0 + "INFO 12-04 10:00:51 [gpu_model_runner.py:6243] Graph capturing finished in 20 secs, took 0.58 GiB",
        TP1 + "INFO 12-04 10:00:51 [gpu_worker.py:621] CUDA graph pool memory: 0.6 GiB (actual), 0.64 GiB (estimated), "
              "difference: 0.04 GiB (6.7%).",
        TP0 + "INFO 12-04 10:00:51 [gpu_worker.py:621] CUDA graph pool memory: 0.58 GiB (actual), 0.61 GiB "
              "(estimated), difference: 0.03 GiB (5.2%).",
    ]).kv
    assert (kv.cuda_graph_estimated_gib, kv.cuda_graph_actual_gib) == (0.64, 0.6)
    assert kv.cuda_graph_gib == 0.6  # unchanged: the first measured capture


def test_nothing_logged_means_none():
    kv = parse_lines([E + "INFO 08-20 10:00:52 [gpu_model_runner.py:2708] Graph capturing finished in 22 secs, took "
                          "0.52 GiB"]).kv
    assert graph_of(kv) == (0.52, None, None)
    assert graph_of(parse_lines([V021[0], V021[5]]).kv) == (None, None, None)


LOOK_ALIKES = {
    # the parts are DEBUG, in MiB, and no total
    "per-mode": V021[2],
    "encoder": E + "DEBUG 12-04 10:00:29 [gpu_model_runner.py:6376] Estimated encoder CUDA graph memory: 96.00 MiB for "
                   "7 graphs",
    "profiling-counts": V021[1],
    "advice": V021[6],
    "disabled": E + "WARNING 12-04 10:00:30 [gpu_worker.py:804] CUDA graph memory profiling is disabled "
                    "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without it, CUDA graph memory is not accounted for "
                    "during KV cache allocation, which may require lowering --gpu-memory-utilization to avoid OOM. "
                    "Consider re-enabling it (the default as of v0.21.0).",
    # a client's prompt echoed by the request logger states no fact
    "echo": "(APIServer pid=50) INFO 12-04 10:01:00 [request_logger.py:40] Received request chatcmpl-1: prompt: "
            "'CUDA graph pool memory: 9.0 GiB (actual), 9.5 GiB (estimated) Estimated CUDA graph memory: 9.5 GiB "
            "total', params: SamplingParams(n=1)",
}


@pytest.mark.parametrize("line", LOOK_ALIKES.values(), ids=LOOK_ALIKES.keys())
def test_a_line_that_only_mentions_graph_memory_gives_no_figure(line):
    assert graph_of(parse_lines([line]).kv) == (None, None, None)


@pytest.mark.parametrize("shape", sorted(WRAPS))
@pytest.mark.parametrize("log", [V021, V034], ids=["0.21", "0.34"])
def test_a_pasted_log_reads_its_graph_memory_as_the_bare_one(shape, log):
    wrap, _ = WRAPS[shape]
    assert graph_of(parse_text("\n".join(wrap(log)) + "\n").kv) == graph_of(parse_lines(log).kv)
