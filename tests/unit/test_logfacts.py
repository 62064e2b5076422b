"""How to read a vLLM boot log with ``harness.logfacts``.

Feed the server's output to a ``LogParser`` one physical line at a time; each ``feed`` says whether that line was a
refusal (stop waiting), a readiness line (poll /health now) or nothing. ``parser.facts`` is what the log told so far.
The lines below are written in each version's real format (ANSI colour, process prefixes and all).
"""

from __future__ import annotations

import pytest

from harness.logfacts import (
    KvFacts,
    LogFacts,
    LogParser,
    Refusal,
    Signal,
    parse_file,
    parse_lines,
    parse_text,
)

ESC = "\x1b"


def facts_of(*lines: str) -> LogFacts:
    return parse_lines(lines)


def kv_of(*lines: str) -> KvFacts:
    return facts_of(*lines).kv


def refusal_of(*lines: str) -> Refusal | None:
    return facts_of(*lines).refusal


# --- the basics ------------------------------------------------------------------------------------------------------


def test_feed_lines_as_they_arrive_and_act_on_the_signal():
    parser = LogParser()
    assert parser.feed("INFO 05-01 10:00:00 [api_server.py:1043] vLLM API server version 0.8.5\n") is Signal.NONE
    assert parser.feed("INFO 05-01 10:00:53 [api_server.py:1090] Starting vLLM API server on "
                       "http://0.0.0.0:8000\n") is (
        Signal.READY
    )
    facts = parser.facts
    assert facts.vllm_version == "0.8.5"
    assert facts.ready_lines == ["Starting vLLM API server on http://0.0.0.0:8000"]
    assert facts.lines == 2


def test_a_refusal_line_says_stop_waiting():
    parser = LogParser()
    signal = parser.feed(
        "(EngineCore_DP0 pid=7) ERROR 09-30 12:00:00 [core.py:708] ValueError: No available memory for the cache "
        "blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
    )
    assert signal is Signal.REFUSAL
    assert parser.facts.refusal.kind == "no_cache_blocks"


def test_facts_is_a_snapshot_not_a_live_view():
    parser = LogParser()
    parser.feed("INFO 05-01 10:00:30 [kv_cache_utils.py:634] GPU KV cache size: 437,744 tokens")
    before = parser.facts
    before.kv.kv_tokens = 1
    parser.feed("INFO 05-01 10:00:53 [api_server.py:1090] Starting vLLM API server on http://0.0.0.0:8000")
    assert before.ready_lines == [] and before.lines == 1
    assert parser.facts.kv.kv_tokens == 437744


def test_nothing_fed_means_nothing_known():
    facts = LogParser().facts
    assert facts == LogFacts(kv=KvFacts())
    assert parse_text("") == LogFacts(kv=KvFacts())


def test_the_models_refuse_unknown_fields():
    with pytest.raises(ValueError):
        Refusal(kind="cuda_oom_unknown", message="x", bogus=1)
    with pytest.raises(ValueError):
        Refusal(kind="not_a_kind", message="x")


# --- facts, version by version ---------------------------------------------------------------------------------------

P010 = f"{ESC}[1;36m(EngineCore_0 pid=2011){ESC}[0;0m "  # 0.10.1 always colours the prefix
P011 = f"{ESC}[1;36m(EngineCore_DP0 pid=311){ESC}[0;0m "  # 0.10.2–0.11
P012 = f"{ESC}[0;36m(EngineCore_DP0 pid=77){ESC}[0;0m "  # 0.12–0.15 colour the prefix even into files
INFO_COLOR = f"{ESC}[32mINFO{ESC}[0m {ESC}[90m12-03 08:00:30{ESC}[0m {ESC}[90m[gpu_model_runner.py:3550]{ESC}[0m "
P019 = "(EngineCore pid=55) "  # 0.19+: plain unless on a tty
API = "(APIServer pid=50) "


@pytest.mark.parametrize(
    ("version", "line", "field", "value"),
    [
        # weights
        ("0.8.5", "INFO 05-01 10:00:12 [gpu_model_runner.py:1329] Model loading took 14.9889 GiB and 4.128477 seconds",
         "model_load_gib", 14.9889),
        ("0.12", P012 + INFO_COLOR + "Model loading took 60.1523 GiB memory and 25.422 seconds",
         "model_load_gib", 60.1523),
        ("0.33", P019 + "INFO 11-01 10:00:20 [gpu_model_runner.py:5089] Model loading took 14.99 GiB memory and "
         "6.2 seconds", "model_load_gib", 14.99),
        # KV memory
        ("0.10.1", P010 + "INFO 08-20 10:00:20 [gpu_worker.py:276] Available KV cache memory: 52.36 GiB",
         "available_gib", 52.36),
        ("0.19", P019 + "INFO 03-10 11:00:31 [gpu_worker.py:437] Available KV cache memory: 3.5 GiB",
         "available_gib", 3.5),
        ("0.8.5 V0", "INFO 05-01 10:00:29 [worker.py:287] model weights take 14.99GiB; non_torch_memory takes 0.12GiB; "
         "PyTorch activation peak memory takes 1.19GiB; the rest of the memory reserved for KV Cache is 54.97GiB.",
         "available_gib", 54.97),
        # explicit KV size
        ("0.10.2", P011 + "INFO 09-15 09:00:24 [gpu_worker.py:251] Initial free memory 71.41796875 GiB, "
                          "reserved 4.00GiB "
         "memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This does "
         "does not respect the gpu_memory_utilization config.", "reserved_gib", 4.0),
        ("0.15", P012 + "INFO 02-01 09:00:24 [gpu_worker.py:313] Initial free memory 71.42 GiB, reserved 12.5 GiB "
         "memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling.",
         "reserved_gib", 12.5),
        ("0.32 CPU", P019 + "INFO 11-20 14:00:20 [cpu_worker.py:260] Explicitly set (1.0/15.09) GiB for KV cache on "
         "node 0.", "reserved_gib", 1.0),
        ("0.32 CPU", P019 + "INFO 11-20 14:00:20 [cpu_worker.py:260] Auto set (1.65/15.09) GiB for KV cache on node 0, "
         "with 13.58 GiB requested memory for the worker. 11.93 GiB memory was consumed by non-kv usages.",
         "reserved_gib", 1.65),
        # KV tokens and concurrency: two lines up to 0.25, one line from 0.30
        ("0.11", P011 + "INFO 10-02 09:00:24 [kv_cache_utils.py:1087] GPU KV cache size: 10,720 tokens", "kv_tokens",
         10720),
        ("0.11", P011 + "INFO 10-02 09:00:24 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 tokens per "
         "request: 9.14x", "max_concurrency", 9.14),
        ("0.30", P019 + "INFO 01-15 12:00:31 [kv_cache_utils.py:2396] GPU KV cache size: 28,672 tokens, Maximum "
         "concurrency for 28,672 tokens per request: 1.00x", "concurrency_tokens", 28672),
        ("0.32 CPU", P019 + "INFO 11-20 14:10:20 [kv_cache_utils.py:2327] CPU KV cache size: 3,072 tokens, Maximum "
         "concurrency for 2,048 tokens per request: 1.50x", "kv_tokens", 3072),
        ("0.33 hisparse", P019 + "INFO 11-01 10:00:31 [kv_cache_utils.py:1146] GPU + host KV cache size: 1,000,000 "
         "tokens, Maximum concurrency for 131,072 tokens per request: 7.63x", "kv_tokens", 1000000),
        # CUDA graphs
        ("0.10.1", P010 + "INFO 08-20 10:00:52 [gpu_model_runner.py:2708] Graph capturing finished in 22 secs, took "
         "0.52 GiB", "cuda_graph_gib", 0.52),
        ("0.19", P019 + "INFO 03-10 11:00:30 [gpu_model_runner.py:5956] Estimated CUDA graph memory: 0.61 GiB total",
         "cuda_graph_gib", 0.61),
        # auto-fit (0.15+)
        ("0.22", P019 + "INFO 06-01 07:00:31 [kv_cache_utils.py:1895] Auto-fit max_model_len: reduced from 131072 to "
         "28672 to fit in available GPU memory (3.5 GiB available for KV cache)", "autofit_max_model_len", 28672),
        ("0.33", P019 + "INFO 11-01 10:00:31 [kv_cache_planning.py:1405] Auto-fit max_model_len: reduced from 131072 "
         "to 40960 to fit in available KV cache memory (5.12 GiB)", "autofit_max_model_len", 40960),
        ("0.33", P019 + "INFO 11-01 10:00:31 [kv_cache_planning.py:1396] Auto-fit max_model_len: full model context "
         "length 32768 fits in available KV cache memory (20.0 GiB)", "autofit_max_model_len", 32768),
        # engine init time
        ("0.15", P012 + "INFO 02-01 09:00:40 [core.py:259] init engine (profile, create kv cache, warmup model) took "
         "20.08 seconds", "engine_init_s", 20.08),
        ("0.22", P019 + "INFO 06-01 07:00:50 [core.py:303] init engine (profile, create kv cache, warmup model) took "
         "33.10 s (compilation: 12.00 s)", "engine_init_s", 33.1),
        # the fork's expert-offload cap
        ("fork", P019 + "INFO 09-30 16:02:10 [gpu_worker.py:842] expert offload: KV capped at the plan's reserve "
         "1.74 GiB; 9.47 GiB of profiled KV memory left to the expert arena", "offload_cap_gib", 1.74),
        ("fork", P019 + "INFO 09-30 16:02:10 [gpu_worker.py:842] expert offload: KV capped at the plan's reserve "
         "1.74 GiB; 9.47 GiB of profiled KV memory left to the expert arena", "offload_uncapped_gib", 9.47),
    ],
)
def test_each_versions_fact_lines(version, line, field, value):
    assert getattr(kv_of(line), field) == value, version


@pytest.mark.parametrize(
    ("line", "version"),
    [
        ("INFO 05-01 10:00:00 [api_server.py:1043] vLLM API server version 0.8.5", "0.8.5"),
        (f"{ESC}[1;36m(APIServer pid=2000){ESC}[0;0m INFO 08-20 10:00:00 [api_server.py:1805] vLLM API server "
         "version 0.10.1", "0.10.1"),
        ("(APIServer pid=900) INFO 03-10 11:00:00 [utils.py:299] vLLM server version 0.19.0, serving model /m",
         "0.19.0"),
        ("(APIServer pid=80) INFO 09-30 16:00:00 [api_utils.py:327] vLLM server version 0.30.1.dev7+gclav, serving "
         "model /models/glm", "0.30.1.dev7+gclav"),
        # the 0.15+ ASCII logo, coloured, one physical line of a multi-line record (ends in \r)
        (f"{ESC}[0;36m(APIServer pid=4100){ESC}[0;0m {ESC}[32mINFO{ESC}[0m {ESC}[90m11-29 15:00:29{ESC}[0m "
         f"{ESC}[90m[startup.py:38]{ESC}[0m  {ESC}[93m▄▄{ESC}[0m {ESC}[94m▄█{ESC}[0m {ESC}[1m█     █     "
         f"█ ▀▄▀ █{ESC}[0m"
         f"  version {ESC}[1m0.33.0{ESC}[0m\r", "0.33.0"),
    ],
)
def test_the_version_comes_from_the_banner_or_the_logo(line, version):
    assert facts_of(line).vllm_version == version


def test_a_version_mentioned_elsewhere_is_not_the_servers():
    assert facts_of("INFO 05-01 10:00:00 [__init__.py:1] transformers version 4.51.0 is installed").vllm_version is None


def test_the_measured_graph_memory_beats_the_estimate_in_either_order():
    estimate = P019 + "INFO 03-10 11:00:30 [gpu_model_runner.py:5956] Estimated CUDA graph memory: 0.61 GiB total"
    measured = P019 + ("INFO 03-10 11:00:50 [gpu_model_runner.py:6457] Graph capturing finished in 18 secs, "
                       "took 0.58 GiB")
    assert kv_of(estimate, measured).cuda_graph_gib == 0.58
    assert kv_of(measured, estimate).cuda_graph_gib == 0.58


def test_tensor_parallel_workers_repeat_lines_and_the_tightest_available_memory_counts():
    kv = kv_of(
        "(Worker_TP0 pid=11) INFO 03-10 11:00:31 [gpu_worker.py:437] Available KV cache memory: 20.5 GiB",
        "(Worker_TP1 pid=12) INFO 03-10 11:00:31 [gpu_worker.py:437] Available KV cache memory: 19.75 GiB",
        "(Worker_TP0 pid=11) INFO 03-10 11:00:20 [gpu_model_runner.py:5133] Model loading took 7.5 GiB memory and 3 s",
        "(Worker_TP1 pid=12) INFO 03-10 11:00:20 [gpu_model_runner.py:5133] Model loading took 7.6 GiB memory and 3 s",
    )
    assert kv.available_gib == 19.75
    assert kv.model_load_gib == 7.5  # first logged wins for the rest


def test_negative_available_memory_is_kept_as_logged():
    assert kv_of("INFO 08-20 10:00:20 [gpu_worker.py:276] Available KV cache memory: -2.34 GiB").available_gib == -2.34


def test_the_old_vllmworker_prefix_is_stripped_too():
    line = "(VllmWorker rank=0 pid=9) INFO 05-01 10:00:12 [gpu_model_runner.py:1329] Model loading took 7.1 GiB and 3 s"
    assert kv_of(line).model_load_gib == 7.1


# --- readiness -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "INFO 05-01 10:00:53 [api_server.py:1090] Starting vLLM API server on http://0.0.0.0:8000",  # 0.8.5
        "(APIServer pid=300) INFO 10-02 09:00:41 [api_server.py:1912] Starting vLLM API server 0 on http://h:8000",
        "(APIServer pid=50) INFO 06-01 07:00:52 [api_server.py:596] Starting vLLM server on http://127.0.0.1:8000",
        "INFO:     Application startup complete.",  # uvicorn, bare
        f"{ESC}[0;36m(APIServer pid=50){ESC}[0;0m INFO:     Application startup complete.\n",
    ],
)
def test_readiness_lines_say_poll_health_now(line):
    parser = LogParser()
    assert parser.feed(line) is Signal.READY
    assert parser.facts.ready_lines[0].startswith(("Starting vLLM", "Application startup complete"))


def test_lines_that_only_talk_about_starting_are_not_ready():
    parser = LogParser()
    assert parser.feed("INFO 05-01 10:00:00 [api_server.py:1] Starting vLLM engine with config ...") is Signal.NONE
    assert parser.feed("INFO:     Waiting for application startup.") is Signal.NONE


# --- refusals, kind by kind ------------------------------------------------------------------------------------------

KV_012 = (
    "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is needed, "
    "which is larger than the available KV cache memory (2.12 GiB). Based on the available memory, the estimated "
    "maximum model length is 17360. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
    "initializing the engine."
)


def test_kv_insufficient_carries_every_number_it_states():
    refusal = refusal_of(P012 + f"{ESC}[31mERROR{ESC}[0m {ESC}[90m12-03 08:00:41{ESC}[0m "
                                f"{ESC}[90m[core.py:842]{ESC}[0m "
                         + KV_012 + "\r")
    assert refusal == Refusal(
        kind="kv_cache_too_small",
        message=KV_012,
        max_seq_len=131072,
        needed_gib=16.0,
        available_gib=2.12,
        estimated_max_model_len=17360,
    )


@pytest.mark.parametrize(
    ("line", "estimated"),
    [
        # 0.8.5 prints the "Based on" clause without its number (a bug in its f-string)
        ("ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is "
         "needed, which is larger than the available KV cache memory (10.21 GiB). Based on the available memory,  Try "
         "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.", None),
        # 0.33: "model's", round(x, 2) so 0.0, and no estimate when it would be 0
        ("(EngineCore pid=4133) ERROR 11-29 15:00:29 [core.py:1210] ValueError: To serve at least one request with the "
         "model's max seq len (2048), (0.0 GiB KV cache is needed, which is larger than the available KV cache memory "
         "(0.0 GiB). Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or "
         "decreasing `max_model_len` when initializing the engine.", None),
        ("ValueError: To serve at least one request with the model's max seq len (262144), (3.62 GiB KV cache is "
         "needed, which is larger than the available KV cache memory (3.43 GiB). Based on the available memory, the "
         "estimated maximum model length is 246016. Try increasing ...", 246016),
    ],
)
def test_kv_insufficient_in_every_versions_wording(line, estimated):
    refusal = refusal_of(line)
    assert refusal.kind == "kv_cache_too_small"
    assert refusal.estimated_max_model_len == estimated
    assert refusal.max_seq_len in (131072, 2048, 262144)


def test_the_cpu_backend_prints_the_refusal_twice_and_the_first_is_kept():
    logged = "(EngineCore pid=1234) ERROR 11-20 14:00:20 [core.py:1210] " + KV_012.replace("17360", "1536")
    raw = KV_012.replace("17360", "9999")
    parser = LogParser()
    assert parser.feed(logged) is Signal.REFUSAL
    assert parser.feed(raw) is Signal.REFUSAL  # still a refusal line; the facts keep the first
    assert parser.facts.refusal.estimated_max_model_len == 1536


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
         "initializing the engine.", "no_cache_blocks"),
        ("(EngineCore pid=5) ERROR 06-01 07:00:31 [core.py:1100] ValueError: Cannot auto-fit max_model_len: not enough "
         "GPU memory available to serve even a single token. Try increasing `gpu_memory_utilization`.",
         "autofit_impossible"),
        ("(EngineCore pid=31) ERROR 01-15 12:01:40 [gpu_model_runner.py:5413] Failed to load model - not enough GPU "
         "memory. Try lowering --gpu-memory-utilization to free memory for weights, increasing --tensor-parallel-size, "
         "or using --quantization.", "cuda_oom_weights"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
         "79.19 GiB of which 1.50 GiB is free.", "cuda_oom_unknown"),
        ("(Worker_TP0 pid=11) torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.",
         "cuda_oom_unknown"),
        ("[rank0]: torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)",
         "cuda_oom_unknown"),
        ("RuntimeError: CUDA error: out of memory", "cuda_oom_unknown"),
        ("RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try "
         "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
         "cuda_oom_sampler_warmup"),
        ("(APIServer pid=80) RuntimeError: Engine core initialization failed. See root cause above. Failed core "
         "proc(s): {'EngineCore': 1}", "engine_core_failed_root_cause_not_shown"),
        ("RuntimeError: Engine core initialization failed. See root cause above.",
         "engine_core_failed_root_cause_not_shown"),  # 0.8.5
    ],
)
def test_each_refusal_kind(line, kind):
    parser = LogParser()
    assert parser.feed(line) is Signal.REFUSAL
    assert parser.facts.refusal.kind == kind


def test_oom_reports_the_failed_allocation_in_gib():
    refusal = refusal_of(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 412.06 MiB is free."
    )
    assert refusal.needed_gib == pytest.approx(0.875)
    assert refusal.available_gib == pytest.approx(412.06 / 1024)


@pytest.mark.parametrize(
    ("line", "free", "requested"),
    [
        # 0.10.1–0.15 (gpu_worker)
        ("(EngineCore_0 pid=2011) ValueError: Free memory on device (10.5/79.19 GiB) on startup is less than desired "
         "GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
         "processes.", 10.5, 71.27),
        # 0.19+ (worker/utils.py) names the device
        ("ValueError: Free memory on device cuda:0 (3.2/79.19 GiB) on startup is less than desired GPU memory "
         "utilization (0.92, 72.85 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
         3.2, 72.85),
        # 0.33 with externally held weights
        ("ValueError: Free memory on device cuda:0 (30.0/79.19 GiB) on startup is less than the engine's budget after "
         "excluding external process's weights (0.9, 40.0 GiB). Decrease GPU memory utilization or reduce GPU memory "
         "used by other processes.", 30.0, 40.0),
        # the CPU backend's counterparts
        ("ValueError: Available memory on node 0 (2.5/15.09 GiB) on startup is less than desired CPU memory "
         "utilization (0.9, 13.58 GiB). On the CPU backend, ...", 2.5, 13.58),
        ("ValueError: Available memory on node 0 (2.5/15.09 GiB) on kv cache allocation is less than requested memory "
         "for kv (4.0 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by "
         "other processes.", 2.5, 4.0),
    ],
)
def test_gpu_memory_busy_means_something_else_holds_the_memory(line, free, requested):
    refusal = refusal_of(line)
    assert refusal.kind == "gpu_mem_util_exceeds_free"
    assert (refusal.available_gib, refusal.needed_gib) == (free, requested)


def test_memory_released_during_profiling_is_memory_busy_too():
    """gpu_worker asserts that free memory did not grow while it profiled: another process let go of memory then, so
    the attempt says nothing about the configuration (vllm 0.32 gpu_worker.py, determine_available_memory)."""
    refusal = refusal_of("(EngineCore pid=77) AssertionError: Error in memory profiling. Initial free memory 10.5 GiB, "
                         "current free memory 12.3 GiB. This happens when other processes sharing the same container "
                         "release GPU memory while vLLM is profiling during initialization.")
    assert refusal.kind == "gpu_mem_util_exceeds_free" and refusal.available_gib == 10.5


def test_the_startup_memory_suggestion_is_not_a_refusal():
    # 0.10.2 and 0.30+ log this at INFO after a successful profile (0.11–0.22 at DEBUG)
    for line in (
        "(EngineCore_DP0 pid=311) INFO 09-15 09:00:30 [gpu_worker.py:390] Free memory on device (78.97/79.19 GiB) on "
        "startup. Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is 15.27 GiB for weight, 1.43 GiB "
        "for peak activation, 0.11 GiB for non-torch memory, and 0.52 GiB for CUDAGraph memory. Replace "
        "gpu_memory_utilization config with `--kv-cache-memory=57310496972` to fit into requested memory, or "
        "`--kv-cache-memory=65800000000` to fully utilize gpu memory. Current kv cache memory in use is 56201234432 "
        "bytes.",
        "(EngineCore pid=5) INFO 11-01 10:00:40 [gpu_worker.py:1066] Free memory on device (78.97/79.19 GiB) on "
        "startup. Desired GPU memory utilization is (0.92, 72.85 GiB). Actual usage is 15.4 GiB for consumed memory "
        "(weights + non-torch), 1.43 GiB for peak activation, and 0.52 GiB for CUDAGraph memory. Replace "
        "gpu_memory_utilization config with `--kv-cache-memory=59000000000` (54.95 GiB) to fit into requested memory, "
        "or `--kv-cache-memory=65000000000` (60.54 GiB) to fully utilize gpu memory. Current kv cache memory in use "
        "is 54.9 GiB.",
    ):
        parser = LogParser()
        assert parser.feed(line) is Signal.NONE
        assert parser.facts.refusal is None


MAX_LEN = (
    "User-specified max_model_len (4096) is greater than the derived max_model_len (max_position_embeddings=2048 or "
    "model_max_length=None in model's config.json)."
)


@pytest.mark.parametrize(
    "line",
    [
        # 0.9.2+: inside pydantic's ValidationError, behind the API server's prefix
        "(APIServer pid=900)   Value error, " + MAX_LEN + " To allow overriding this maximum, set the env var "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. [type=value_"
        "error, input_value=ArgsKwargs((), {'max_model_len': 4096}), input_type=ArgsKwargs]",
        # ≤0.9.1: a plain ValueError
        "ValueError: " + MAX_LEN.replace(".)", ". This may lead to incorrect model outputs or CUDA errors.)")
        + " To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
    ],
)
def test_max_len_exceeds_model_is_refused_before_any_engine_starts(line):
    refusal = refusal_of(line)
    assert refusal.kind == "max_len_exceeds_model"
    assert (refusal.max_seq_len, refusal.derived_max_model_len) == (4096, 2048)


@pytest.mark.parametrize(
    "line",
    [
        # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, ≥0.12: the same sentence as a warning
        "(APIServer pid=900) WARNING 03-10 11:00:00 [model.py:2176] " + MAX_LEN + " VLLM_ALLOW_LONG_MAX_MODEL_LEN must "
        "be used with extreme caution. If the model uses relative position encoding (RoPE), positions exceeding "
        "derived_max_model_len lead to nan.",
        # ≤0.11: "... This may lead to incorrect model outputs or CUDA errors. Make sure the value is correct ..."
        "WARNING 05-01 10:00:00 [config.py:3102] User-specified max_model_len (4096) is greater than the derived "
        "max_model_len (max_position_embeddings=2048 or model_max_length=None in model's config.json). This may lead "
        "to incorrect model outputs or CUDA errors. Make sure the value is correct and within the model context size.",
        # the same warning with its header lost (the level is gone, the wording still says so)
        MAX_LEN + " VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution.",
    ],
)
def test_the_allow_long_max_model_len_warning_is_not_a_refusal(line):
    parser = LogParser()
    assert parser.feed(line) is Signal.NONE
    assert parser.facts.refusal is None


# --- which refusal a boot is remembered by ---------------------------------------------------------------------------

GENERIC = ("(APIServer pid=80) RuntimeError: Engine core initialization failed. See root cause above. "
           "Failed core proc(s): {}")


def test_the_specific_root_cause_beats_the_generic_failure_in_either_order():
    assert refusal_of(KV_012, GENERIC).kind == "kv_cache_too_small"
    assert refusal_of(GENERIC, KV_012).kind == "kv_cache_too_small"  # interleaved output from two processes


def test_the_first_specific_refusal_wins():
    weights = ("ERROR 01-15 12:01:40 [gpu_model_runner.py:5413] Failed to load model - not enough GPU memory. Try "
               "lowering --gpu-memory-utilization ... (original error: CUDA out of memory. Tried to "
               "allocate 896.00 MiB."
               " GPU 0 has a total capacity of 79.19 GiB of which 412.06 MiB is free.)")
    torch_oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB."
    refusal = refusal_of(weights, torch_oom, GENERIC)
    assert refusal.kind == "cuda_oom_weights"
    assert refusal.needed_gib == pytest.approx(0.875)


def test_the_refusal_message_is_the_bare_line_trimmed_to_2000_chars():
    long_tail = KV_012 + " " + "x" * 5000
    refusal = refusal_of(f"{ESC}[0;36m(EngineCore pid=1){ESC}[0;0m ERROR 11-29 15:00:29 [core.py:1] " + long_tail)
    assert refusal.message == long_tail[:2000]


# --- lines that only mention a keyword ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        # advice and arg dumps
        "WARNING 05-01 10:00:00 [arg_utils.py:1558] This may cause out of memory errors; consider "
        "lowering max_model_len",
        "INFO 05-01 10:00:00 [api_server.py:1044] args: Namespace(max_model_len=131072, gpu_memory_utilization=0.9, "
        "kv_cache_memory_bytes=None)",
        "INFO 05-01 10:00:00 [utils.py:233] non-default args: {'max_model_len': 4096, 'enforce_eager': True}",
        "INFO 05-01 10:00:00 [llm.py:111] values will increase the KV cache size and thus improve the model's "
        "throughput. However, if the value is too high, it may cause out-of-memory (OOM) errors.",
        # source lines shown inside a traceback
        # ('raise ValueError("No available memory for the cache blocks. "' is one: issue 40, tests/unit/test_causes.py)
        "    except torch.cuda.OutOfMemoryError as e:",
        '            f"To serve at least one request with the model\'s max seq len "',
        '                "Failed to load model - not enough GPU memory. "',
        # an INFO/WARNING line is never a refusal, whatever it says
        "WARNING 05-01 10:00:00 [x.py:1] CUDA out of memory. Retrying with a smaller batch.",
        "INFO 05-01 10:00:00 [x.py:1] Engine core initialization failed. (a test fixture echoed)",
        # the "EngineCore failed to start." header comes before the root cause: not decisive on its own
        "(EngineCore pid=5) ERROR 11-29 15:00:29 [core.py:1210] EngineCore failed to start.",
    ],
)
def test_a_keyword_in_another_context_is_not_a_refusal(line):
    parser = LogParser()
    assert parser.feed(line) is Signal.NONE
    assert parser.facts.refusal is None


# --- robustness: feed() never raises --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "",
        "\n",
        "\r",
        "\r\n",
        "\x00\x01\x02\xff",
        "\ufffd\ufffd\ufffd KV cache \ufffd",
        f"{ESC}[",
        f"{ESC}[31",
        "(EngineCore pid=) INFO",
        "To serve at least one request with the models's max seq len (",  # cut mid-line
        "Available KV cache memory: ",
        "GPU KV cache size: 99999999999999999999999999999999999999999 tokens",
        "Model loading took 1" + "0" * 5000 + " GiB",
        "version " * 10000,
    ],
)
def test_feed_never_raises_on_partial_or_hostile_lines(line):
    parser = LogParser()
    assert parser.feed(line) in set(Signal)
    assert parser.facts.lines == 1


def test_feed_tolerates_bytes_and_non_strings():
    parser = LogParser()
    not_utf8 = b"INFO 05-01 10:00:30 [kv_cache_utils.py:634] GPU KV cache size: 1,024 tokens\xff"
    assert parser.feed(not_utf8) is Signal.NONE
    assert parser.feed(None) is Signal.NONE  # type: ignore[arg-type]  # not a line: the test
    assert parser.feed(12345) is Signal.NONE  # type: ignore[arg-type]  # not a line: the test
    assert parser.facts.kv.kv_tokens == 1024
    assert parser.facts.lines == 3


def test_a_one_megabyte_line_is_cut_not_choked_on():
    parser = LogParser()
    huge = "INFO 05-01 10:00:30 [kv_cache_utils.py:634] GPU KV cache size: 2,048 tokens " + "A" * (1 << 20)
    assert parser.feed(huge) is Signal.NONE
    assert parser.facts.kv.kv_tokens == 2048
    assert parser.feed("x" * (1 << 20) + " Starting vLLM server on http://h") is Signal.NONE  # beyond 64 KiB: unseen


def test_numbers_with_too_many_digits_are_ignored_not_misread():
    assert kv_of("GPU KV cache size: 1234567890123456789012345 tokens").kv_tokens is None


def test_a_record_fed_unsplit_is_read_line_by_line():
    parser = LogParser()
    record = (
        "ERROR 12-03 08:00:41 [core.py:842] EngineCore failed to start.\r\n"
        "ERROR 12-03 08:00:41 [core.py:842] Traceback (most recent call last):\r\n"
        "ERROR 12-03 08:00:41 [core.py:842] " + KV_012 + "\n"
    )
    assert parser.feed(record) is Signal.REFUSAL
    assert parser.facts.lines == 1


# --- whole logs ------------------------------------------------------------------------------------------------------


def test_parse_text_splits_on_lf_cr_and_crlf():
    text = "a\r\nb\rc\nINFO 05-01 10:00:30 [kv_cache_utils.py:634] GPU KV cache size: 7 tokens"
    facts = parse_text(text)
    assert facts.lines == 4
    assert facts.kv.kv_tokens == 7


def test_parse_file_streams_and_replaces_undecodable_bytes(tmp_path):
    log = tmp_path / "boot.log"
    log.write_bytes(
        b"\xff\xfe garbage \x00\x01\r\n"
        + b"INFO 05-01 10:00:30 [kv_cache_utils.py:634] GPU KV cache size: 437,744 tokens\r\n"
        + b"Z" * (3 << 20) + b" Starting vLLM server on http://h\n"  # a 3 MB line: its head is read, the rest skipped
        + b"INFO:     Application startup complete.\r"
    )
    facts = parse_file(log)
    assert facts.lines == 4
    assert facts.kv.kv_tokens == 437744
    assert facts.ready_lines == ["Application startup complete."]


def test_parse_file_keeps_crlf_split_across_read_chunks_as_one_line_end(tmp_path):
    log = tmp_path / "boot.log"
    head = b"y" * ((1 << 16) - 1) + b"\r"  # the \r ends the first 64 KiB read, its \n starts the next
    log.write_bytes(head + b"\nINFO:     Application startup complete.\n")
    facts = parse_file(log)
    assert facts.lines == 2
    assert facts.ready_lines == ["Application startup complete."]
