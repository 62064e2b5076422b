"""Hostile values: numbers, dtypes and command-line values that are out of range, not numbers at all, or real but
unusual (an FP8 checkpoint), reaching the predictor, the analysis and the commands' option parsing.

- A model whose config.json names a dtype vLLM does not compute in (`float8_e4m3fn`, `int8`, `auto`, `fp16`, garbage)
  is predicted the way vLLM resolves it; a cell whose prediction fails for any reason is still recorded, its run
  `complete`, with the failure as a note on the cell.
- Values that overflow or divide by zero (`--available-gib 1e400`, `--block-size 10**30`, `num_hidden_layers: 10**9`,
  `--max-model-len -1` through `report`/`analyze`, NaN / huge figures in a record) are one line and exit 2, or are
  analysed without a traceback; the work stays bounded (a subprocess limit fails the test as "hung", an address-space
  limit as "ate memory").
- Each flag's value is checked once, by its `type=` (harness/cli/values.py): a port, a length, a size, a version, a
  file that must exist: `repro --port 70000`, `compare --tolerance nan`, `plan --vllm-version x`, `merge --matrix
  missing.yaml`, `plan --from` a run of another matrix.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.predict.model import read_model
from harness.predict.predictor import predict
from harness.predict.serve_flags import parse_serve_flags
from tests.helpers.reliability import cli, fake_matrix, only_run, read_json

HUGE = "1" + "0" * 400  # overflows a float; an int beyond any machine
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64, "max_position_embeddings": 4096}
#: the address space a `boot-harness` child may take: a 10**9-entry list would need ~8 GiB
MEMORY_LIMIT = 3 << 30


def model_dir(root: Path, **config) -> Path:
    """A model directory whose config.json is a tiny Llama with `config` on top."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({**LLAMA, **config}))
    return root


def one_line_exit_2(*args, timeout: float = 60, memory: int | None = None) -> str:
    """`boot-harness ARGS` refuses in one stderr line, exit 2, no traceback, within `timeout` (else: "hung")."""
    extra = {}
    if memory is not None:
        extra["preexec_fn"] = lambda: resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    try:
        r = cli(*args, timeout=timeout, **extra)
    except subprocess.TimeoutExpired:
        pytest.fail(f"boot-harness {' '.join(map(str, args))[:200]} hung (no answer within {timeout} s)")
    assert "Traceback" not in r.stderr and "MemoryError" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 2, f"exit {r.returncode}: {r.stdout[-1000:]}{r.stderr[-2000:]}"
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr[-3000:]
    return lines[0]


# ---------------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """A model, a recorded fake run of a matrix whose lengths include vLLM's `-1` (auto), and a run of another
    matrix: what the commands below are given."""
    root = tmp_path_factory.mktemp("hostile-values")
    model = model_dir(root / "model", torch_dtype="bfloat16")
    env = {"FAKE_VLLM_VERSION": "0.11.0", "FAKE_VLLM_DELAY": "0.05"}
    matrix = fake_matrix(root / "m.yaml", {"auto": {"args": ["--max-model-len", "-1"], "env": env},
                                           "l1024": {"args": ["--max-model-len", "1024"], "env": env}},
                         model=str(model), linger_s=0.1)
    r = cli("run", "--matrix", matrix, "--results-dir", root / "results", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    other = fake_matrix(root / "other.yaml", {"x": {"env": env}}, linger_s=0.1)
    r = cli("run", "--matrix", other, "--results-dir", root / "other", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return {"root": root, "model": model, "matrix": matrix, "run": only_run(root / "results"),
            "other_run": only_run(root / "other")}


# ---------------------------------------------------------------------------------------------------- command line

#: (id, argv with {model}/{matrix}/{run}/{other_run} filled in, words the one line must hold)
FLAG_CASES = [
    ("kv --available-gib 1e400", ["kv", "{model}", "--available-gib", "1e400"], "--available-gib"),
    ("kv --available-gib inf", ["kv", "{model}", "--available-gib", "inf"], "--available-gib"),
    ("kv --available-gib nan", ["kv", "{model}", "--available-gib", "nan"], "--available-gib"),
    ("kv --available-gib -1", ["kv", "{model}", "--available-gib", "-1"], "--available-gib"),
    ("kv --available-gib 1e300", ["kv", "{model}", "--available-gib", "1e300"], "beyond any machine"),
    ("kv --available-bytes 10**400", ["kv", "{model}", "--available-bytes", HUGE], "beyond any machine"),
    ("kv --available-bytes -1", ["kv", "{model}", "--available-bytes", "-1"], "--available-bytes"),
    ("kv --block-size 0", ["kv", "{model}", "--", "--block-size", "0"], "--block-size"),
    ("kv --block-size -1", ["kv", "{model}", "--", "--block-size", "-1"], "--block-size"),
    ("kv --block-size 10**30", ["kv", "{model}", "--", "--block-size", "1" + "0" * 30], "--block-size"),
    ("kv --max-model-len 10**50", ["kv", "{model}", "--", "--max-model-len", "1" + "0" * 50], "--max-model-len"),
    ("kv --kv-cache-memory-bytes 10**30", ["kv", "{model}", "--", "--kv-cache-memory-bytes", "1" + "0" * 30],
     "--kv-cache-memory-bytes"),
    ("kv num_speculative_tokens 10**20",
     ["kv", "{model}", "--", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": ' + "1" + "0" * 20
      + "}"], "num_speculative_tokens"),
    ("kv num_speculative_tokens -1",
     ["kv", "{model}", "--", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": -1}'],
     "num_speculative_tokens"),
    ("kv num_speculative_tokens 'x'",
     ["kv", "{model}", "--", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": "x"}'],
     "num_speculative_tokens"),
    ("kv --vllm-version x", ["kv", "{model}", "--vllm-version", "x"], "not a vLLM version"),
    ("kv --vllm-version 0.32.0garbage", ["kv", "{model}", "--vllm-version", "0.32.0garbage"], "not a vLLM version"),
    ("plan --vllm-version x", ["plan", "--matrix", "{matrix}", "--vllm-version", "x"], "not a vLLM version"),
    ("plan --from a run of another matrix", ["plan", "--matrix", "{matrix}", "--from", "{other_run}"], "--from"),
    ("repro --port 70000", ["repro", "--matrix", "{matrix}", "case_l1024", "--port", "70000"], "not a port"),
    ("repro --port 0", ["repro", "--matrix", "{matrix}", "case_l1024", "--port", "0"], "not a port"),
    ("repro --port -1", ["repro", "--matrix", "{matrix}", "case_l1024", "--port", "-1"], "not a port"),
    ("repro --port http", ["repro", "--matrix", "{matrix}", "case_l1024", "--port", "http"], "not a port"),
    ("compare --tolerance nan", ["compare", "{run}", "{run}", "--tolerance", "nan"], "--tolerance"),
    ("compare --tolerance inf", ["compare", "{run}", "{run}", "--tolerance", "inf"], "--tolerance"),
    ("compare --tolerance 1e400", ["compare", "{run}", "{run}", "--tolerance", "1e400"], "--tolerance"),
    ("compare --tolerance -1", ["compare", "{run}", "{run}", "--tolerance=-1"], "--tolerance"),
    ("compare --time-tolerance 9**400%", ["compare", "{run}", "{run}", "--time-tolerance", "9" * 400 + "%"],
     "--time-tolerance"),
    ("compare two runs --length-axis nope", ["compare", "{run}", "{run}", "--length-axis", "nope"], "--length-axis"),
    ("compare one run --length-axis nope", ["compare", "{run}", "--axis", "case", "--length-axis", "nope"],
     "--length-axis"),
    ("analyze --length-axis nope", ["analyze", "{run}", "--length-axis", "nope"], "--length-axis"),
    ("analyze --block-size 0", ["analyze", "{run}", "--block-size", "0"], "--block-size"),
    ("analyze --block-size 10**30", ["analyze", "{run}", "--block-size", "1" + "0" * 30], "--block-size"),
    ("frontier --hi 10**30", ["frontier", "--matrix", "{matrix}", "--hi", "1" + "0" * 30], "--hi"),
    ("merge --matrix missing.yaml", ["merge", "{run}", "--out", "{root}/merged", "--matrix", "{root}/missing.yaml"],
     "missing.yaml"),
]


def _fill(arg: str, world: dict[str, Path]) -> str:
    for name, path in world.items():
        arg = arg.replace("{" + name + "}", str(path))
    return arg


@pytest.mark.parametrize("argv, words", [pytest.param(a, w, id=i) for i, a, w in FLAG_CASES])
def test_a_hostile_value_is_one_line_exit_2(argv, words, world):
    args = [_fill(a, world) for a in argv]
    line = one_line_exit_2(*args)
    assert words in line, line
    if argv[0] == "merge":
        assert not (world["root"] / "merged").exists(), "merge wrote a run it was told to refuse"


@pytest.mark.parametrize("version, words", [pytest.param("9.9.9", "newer than", id="kv --vllm-version 9.9.9"),
                                            pytest.param("0.5.0", "older than", id="kv --vllm-version 0.5.0")])
def test_a_version_outside_the_known_releases_is_predicted_with_a_warning(version, words, world):
    r = cli("kv", world["model"], "--vllm-version", version, "--", "--max-model-len", "1024", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"warning: --vllm-version {version}: ") and words in line, line


# ---------------------------------------------------------------------------------------------------- config.json

CONFIG_CASES = [
    ("num_hidden_layers 10**9", {"num_hidden_layers": 10**9}, "num_hidden_layers"),
    ("text_config.num_hidden_layers 10**9", {"text_config": {**LLAMA, "num_hidden_layers": 10**9}},
     "text_config.num_hidden_layers"),
    ("num_nextn_predict_layers 10**9", {"num_nextn_predict_layers": 10**9}, "num_nextn_predict_layers"),
    ("num_hidden_layers -3", {"num_hidden_layers": -3}, "num_hidden_layers"),
    ("num_key_value_heads 0", {"num_key_value_heads": 0}, "num_key_value_heads"),
    ("num_attention_heads -1", {"num_attention_heads": -1}, "num_attention_heads"),
    ("head_dim 10**12", {"head_dim": 10**12}, "head_dim"),
    ("hidden_size 10**15", {"hidden_size": 10**15, "head_dim": None}, "hidden_size"),
]


@pytest.mark.parametrize("config, key", [pytest.param(c, k, id=i) for i, c, k in CONFIG_CASES])
def test_an_absurd_model_size_is_one_line_naming_file_and_key(config, key, tmp_path):
    model = model_dir(tmp_path / "model", **config)
    line = one_line_exit_2("kv", model, "--", "--max-model-len", "1024", timeout=60, memory=MEMORY_LIMIT)
    assert line.startswith(f"{model / 'config.json'}:{key}: "), line


# ---------------------------------------------------------------------------------------------------- dtypes

DTYPES = [("float8_e4m3fn", "bfloat16"), ("float8_e5m2", "bfloat16"), ("int8", "bfloat16"), ("uint8", "bfloat16"),
          ("auto", "bfloat16"), (None, "bfloat16"), ("fp16", "float16"), ("half", "float16"),
          ("float16", "float16"), ("bfloat16", "bfloat16"), ("torch.bfloat16", "bfloat16"), ("float32", "bfloat16"),
          ("float", "bfloat16"), ("float64", "bfloat16"), ("not-a-dtype", "bfloat16")]


@pytest.mark.parametrize("dtype, runs_as", [pytest.param(d, r, id=f"torch_dtype={d}") for d, r in DTYPES])
def test_every_config_dtype_is_predicted_as_vllm_resolves_it(dtype, runs_as, tmp_path):
    shape = read_model(model_dir(tmp_path / "m", torch_dtype=dtype))
    p = predict(shape, parse_serve_flags(["--max-model-len", "1024"]), available_bytes=1 << 30)
    assert p.dtype == runs_as and p.kv_cache_dtype == runs_as
    assert p.bytes_per_token == 2 * 2 * 2 * 16 * 2  # layers × K,V × kv heads × head_dim × 2 bytes
    if dtype not in ("float16", "bfloat16", "fp16", "half", "torch.bfloat16"):
        assert any("dtype" in n for n in p.notes), p.notes  # what was assumed is said


def test_a_prediction_that_fails_is_a_note_on_the_cell(monkeypatch):
    """The boot path's guard: whatever the predictor raises, the record gets a note, never a lost cell."""
    from harness.boot import attempt
    from harness.masking import Masker

    def broken(*_a, **_k):
        raise KeyError("float8_e4m3fn")

    monkeypatch.setattr(attempt, "predict_cell", broken)
    cell = type("C", (), {"server_args": ["--model", "/m"], "env": {}})()
    facts = type("F", (), {"kv": None, "refusal": None, "vllm_version": None})()
    decision = type("D", (), {"outcome": None, "reason": None})()
    record = attempt._prediction(cell, lambda c, p: None, facts, decision, Masker([]))
    assert record.prediction is None and "KeyError" in record.skipped and "float8_e4m3fn" in record.skipped


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "int8", "auto", "fp16"])
def test_a_quantized_checkpoint_boots_and_its_cell_is_recorded(dtype, tmp_path):
    """A fake server (process runtime) serving a model whose config.json names `dtype`: the cell is recorded with a
    prediction and the run is `complete`."""
    model = model_dir(tmp_path / "model", torch_dtype=dtype)
    env = {"FAKE_VLLM_VERSION": "0.11.0", "FAKE_VLLM_DELAY": "0.05"}
    matrix = fake_matrix(tmp_path / "m.yaml", {"boot": {"args": ["--max-model-len", "1024"], "env": env}},
                         model=str(model), linger_s=0.1)
    try:
        r = cli("run", "--matrix", matrix, "--results-dir", tmp_path / "results", timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the run hung")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    run = read_json(only_run(tmp_path / "results") / "results.json")
    assert run["status"] == "complete"
    (cell,) = run["cells"]
    assert cell["outcome"] == "booted"
    assert cell["prediction"]["prediction"] is not None, cell["prediction"]
    assert cell["prediction"]["prediction"]["dtype"] == ("float16" if dtype == "fp16" else "bfloat16")


# ---------------------------------------------------------------------------------------------------- analysis

def _hostile_run(src: Path, dst: Path, kv: dict, refusal: dict | None, length: str) -> Path:
    """A copy of the recorded run whose cells carry `kv` figures, `refusal` and the length `length` (as a hand-edited
    or corrupted results.json would: valid JSON, absurd numbers)."""
    shutil.copytree(src, dst)
    run = read_json(dst / "results.json")
    for c in run["cells"]:
        c["kv"].update(kv)
        c["axes"] = {"mml": length}
        c["argv"] = [length if a in ("-1", "1024") else a for a in c["argv"]]
        if refusal is not None:
            c.update(outcome="refused", reason="kv_cache_too_small",
                     refusal={"kind": "kv_cache_too_small", "message": "refused", **refusal})
        (dst / "cells" / f"{c['cell_id']}.json").write_text(json.dumps(c))
    (dst / "results.json").write_text(json.dumps(run))
    return dst


ANALYSIS_CASES = [
    ("max-model-len -1 (auto)", {}, None, "-1"),
    ("max-model-len 0", {}, None, "0"),
    ("max-model-len 10**18", {}, None, str(10**18)),
    ("kv figures negative", {"available_gib": -3.0, "kv_tokens": -5, "block_size": -16, "floor_raised_bytes": -1},
     None, "1024"),
    ("kv figures zero", {"available_gib": 0.0, "kv_tokens": 0, "block_size": 0, "max_concurrency": 0.0}, None, "1024"),
    ("kv figures huge", {"available_gib": 1e300, "kv_tokens": 10**18, "max_concurrency": 1e308,
                         "floor_raised_bytes": 10**18}, None, "1024"),
    ("refusal figures huge", {"available_gib": None},
     {"needed_gib": 1e300, "available_gib": 1e300, "estimated_max_model_len": 10**18, "max_seq_len": 10**18}, "-1"),
    ("refusal figures negative", {"available_gib": None},
     {"needed_gib": -1.0, "available_gib": -2.0, "estimated_max_model_len": -7, "max_seq_len": -7}, "1024"),
]


@pytest.mark.parametrize("command", ["analyze", "report"])
@pytest.mark.parametrize("kv, refusal, length", [pytest.param(k, r, n, id=i) for i, k, r, n in ANALYSIS_CASES])
def test_hostile_figures_in_a_record_are_analysed_without_a_traceback(command, kv, refusal, length, world, tmp_path):
    run = _hostile_run(world["run"], tmp_path / "run", kv, refusal, length)
    args = {"analyze": ["analyze", run, "--json"], "report": ["report", run, "--html", tmp_path / "r.html"]}[command]
    try:
        r = cli(*args, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{command} hung")
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 0, r.stdout[-1000:] + r.stderr[-2000:]
    if command == "analyze":
        assert "NaN" not in r.stdout and "Infinity" not in r.stdout, "a figure became NaN or infinite"
