"""Every command's real `--json` output is valid against its exported schema (harness/schemas/<command>.output
.schema.json): the commands run in this process over the recorded example nights, the shipped matrices and logs
(the cases of scripts/json-outputs.py, the same that prove the outputs byte-identical across a change), and a
frontier search (it boots, so its groups come from the pure search over a fake oracle). `bisect --json` boots too:
tests/unit/test_bisect_cli.py holds its answer (over the FakeRuntime) to its schema.

The schemas forbid keys they do not name, so a key printed but not modelled, or modelled but not printed, fails."""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

import jsonschema
import pytest

from harness.cli.outputs import OUTPUTS

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "harness" / "schemas"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


outputs = _script("json-outputs")
CASES = outputs.cases()


@functools.cache
def validator(command: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{command}.output.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def problems(command: str, doc: object) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator(command).iter_errors(doc)]


def test_every_json_command_has_cases_and_every_case_a_schema():
    assert {command for command, _ in CASES.values()} | {"frontier", "bisect"} == set(OUTPUTS)
    for command, argv in CASES.values():
        assert argv[0] == command and "--json" in argv


@pytest.mark.parametrize("case", list(CASES))
def test_the_real_output_is_valid_against_its_schema(case: str):
    command, argv = CASES[case]
    code, out, err = outputs.run(argv)
    assert code in (0, 1), err
    doc = json.loads(out)
    assert problems(command, doc) == []


def test_the_shapes_of_one_command_exclude_each_other():
    """kv and kv --log, analyze of a run with cells and of one without, compare of two runs and of pairs: a document
    of one shape is never valid as the other (each forbids the other's keys), so a reader can tell them apart."""
    shapes = {"kv": ("kv-fits", "kv-log-mml2048-spec_off-kv_tight"),
              "compare": ("compare-1-2", "compare-pairs-cpu-tiny-night1")}
    for command, (one, other) in shapes.items():
        for case in (one, other):
            doc = json.loads(outputs.run(CASES[case][1])[1])
            schema = validator(command).schema
            matches = [alt for alt in schema["anyOf"]
                       if jsonschema.Draft202012Validator({**schema, "anyOf": [alt]}).is_valid(doc)]
            assert len(matches) == 1, (case, matches)


def test_an_empty_run_analyzed_is_valid_as_the_empty_shape(tmp_path):
    from harness.analysis.fit import AnalyzeEmptyJson
    from harness.emit import render

    doc = json.loads(render(AnalyzeEmptyJson(run="r", cells=0, note="run r holds no cells")))
    assert problems("analyze", doc) == []
    assert problems("analyze", {**doc, "cells": 1}) != []  # the empty shape holds no cell


def test_a_frontier_search_is_valid_against_the_frontier_schema():
    from harness.analysis.frontier import Answer, FrontierJson, GroupFrontier, find_frontier
    from harness.emit import render
    from harness.verdict import Outcome, Reason

    def oracle(length: int, why: str) -> Answer:  # 2,944 tokens fit; a refusal says so
        return Answer(Outcome.booted, Reason.ready) if length <= 2944 else \
            Answer(Outcome.refused, Reason.kv_insufficient, 2944, f"mml{length}")

    search = find_frontier(oracle, 128, 8192, 128)
    doc = json.loads(render(FrontierJson(run_dir="results/x", groups=[GroupFrontier({"spec": "off"}, "c", search)
                                                                      .output()])))
    assert doc["groups"][0]["probes"] and problems("frontier", doc) == []


def test_a_key_the_schema_does_not_name_is_refused():
    """The check above can fail: an output with one key more (or one less) is invalid."""
    code, out, _ = outputs.run(CASES["check-cpu-tiny-night2"][1])
    doc = json.loads(out)
    assert problems("check", doc) == []
    assert problems("check", {**doc, "extra": 1}) != []
    assert problems("check", {k: v for k, v in doc.items() if k != "misses"}) != []
