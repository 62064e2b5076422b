"""Properties of the log parser that must hold for any input: a watcher feeds it whatever a server prints."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.logfacts import LogFacts, LogParser, Signal, parse_text

REAL_LINES = [
    "INFO 05-01 10:00:00 [api_server.py:1043] vLLM API server version 0.8.5",
    "\x1b[1;36m(EngineCore_0 pid=2011)\x1b[0;0m INFO 08-20 10:00:20 [gpu_worker.py:276] Available KV cache memory: "
    "52.36 GiB",
    "(EngineCore_DP0 pid=311) INFO 10-02 09:00:24 [gpu_worker.py:253] Initial free memory 71.42 GiB, reserved 4.00GiB "
    "memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling.",
    "(EngineCore pid=1234) INFO 11-20 14:10:20 [kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, Maximum "
    "concurrency for 2,048 tokens per request: 512.00x",
    "(EngineCore pid=1234) INFO 11-20 14:00:20 [cpu_worker.py:260] Explicitly set (1.0/15.09) GiB for KV "
    "cache on node 0.",
    "(EngineCore pid=55) INFO 06-01 07:00:31 [kv_cache_utils.py:1895] Auto-fit max_model_len: reduced from 131072 to "
    "28672 to fit in available GPU memory (3.5 GiB available for KV cache)",
    "(EngineCore pid=88) INFO 09-30 16:02:10 [gpu_worker.py:842] expert offload: KV capped at the plan's reserve 1.74 "
    "GiB; 9.47 GiB of profiled KV memory left",
    "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is needed, "
    "which is larger than the available KV cache memory (2.12 GiB). Based on the available memory, the estimated "
    "maximum model length is 17360.",
    "(APIServer pid=900)   Value error, User-specified max_model_len (4096) is greater than the derived max_model_len "
    "(max_position_embeddings=2048 or model_max_length=None in model's config.json). To allow overriding this maximum",
    "ValueError: Free memory on device cuda:0 (3.2/79.19 GiB) on startup is less than desired GPU memory utilization "
    "(0.92, 72.85 GiB).",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of 79.19 GiB "
    "of which 412.06 MiB is free.",
    "(APIServer pid=80) RuntimeError: Engine core initialization failed. See root cause above.",
    "(APIServer pid=50) INFO 06-01 07:00:52 [api_server.py:596] Starting vLLM server on http://127.0.0.1:8000",
    " \x1b[93m▄▄\x1b[0m \x1b[94m▄█\x1b[0m \x1b[1m█     █     █ ▀▄▀ █\x1b[0m  version \x1b[1m0.33.0\x1b[0m\r",
]

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
QUICK = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


_LINE = st.sampled_from(REAL_LINES)
_JUNK = st.text(alphabet="0123456789.,()/ -:\x1b[m\r\n\ufffdGiBx", max_size=12)
_HOW = st.sampled_from(["replace", "head", "tail", "repeat"])


@st.composite
def mutated_real_line(draw: st.DrawFn) -> str:
    """A real line with a slice cut out, replaced, or duplicated: what a torn or garbled pipe read looks like."""
    line = draw(_LINE)
    i = draw(st.integers(0, len(line)))
    j = draw(st.integers(i, len(line)))
    how = draw(_HOW)
    if how == "replace":
        return line[:i] + draw(_JUNK) + line[j:]
    return {"head": line[:i], "tail": line[j:], "repeat": line[:j] + line[i:]}[how]


@FAST
@given(st.lists(st.text(max_size=300), max_size=8))
def test_feed_never_raises_on_arbitrary_text(lines: list[str]):
    parser = LogParser()
    for line in lines:
        assert parser.feed(line) in set(Signal)
    assert isinstance(parser.facts, LogFacts)
    assert parser.facts.lines == len(lines)


@FAST
@given(st.lists(mutated_real_line(), min_size=1, max_size=6))
def test_feed_never_raises_on_mutated_real_lines(lines: list[str]):
    parser = LogParser()
    for line in lines:
        parser.feed(line)
    facts = parser.facts
    LogFacts.model_validate(facts.model_dump())  # whatever was read is still a valid record
    if facts.refusal is not None:
        assert len(facts.refusal.message) <= 2000


@QUICK
@given(st.binary(max_size=400))
def test_undecodable_bytes_are_just_noise(raw: bytes):
    parse_text(raw.decode("utf-8", errors="replace"))


@QUICK
@given(st.lists(st.sampled_from(REAL_LINES), min_size=1, max_size=10))
def test_a_refusal_once_seen_is_never_lost_and_never_downgraded(lines: list[str]):
    parser = LogParser()
    kinds = []
    for line in lines:
        parser.feed(line)
        refusal = parser.facts.refusal
        kinds.append(refusal.kind if refusal else None)
    seen = [k for k in kinds if k is not None]
    if seen:
        assert kinds[-1] is not None
        specific = [k for k in seen if k != "engine_core_failed_root_cause_not_shown"]
        if specific:
            assert kinds[-1] == specific[0]
