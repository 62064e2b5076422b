"""Which model each command's `--json` prints (harness.jsonout): the table scripts/export-schemas.py exports to
harness/schemas/<command>.output.schema.json, and tests/unit/test_output_schemas.py holds every real output to.
A command whose JSON has two shapes (`compare` of one run or of two) has a union; the shapes exclude each other."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from harness.analysis.check import CheckJson
from harness.analysis.compare import CompareRunsJson
from harness.analysis.fit import AnalyzeEmptyJson, AnalyzeJson
from harness.analysis.frontier import FrontierJson
from harness.analysis.history import HistoryJson
from harness.analysis.pairs import ComparePairsJson
from harness.bisect.answer import BisectJson
from harness.matrix.selection import CellsJson
from harness.predict.facts_json import FactsJson
from harness.predict.from_log import KvLogJson
from harness.predict.plan import PlanJson
from harness.predict.prediction import KvPrediction
from harness.report.json_view import ReportJson

#: command → the type of what `boot-harness COMMAND --json` prints.
OUTPUTS: dict[str, Any] = {
    "cells": CellsJson,
    "facts": FactsJson,
    "kv": KvPrediction | KvLogJson,  # kv MODEL; kv MODEL --log LOG
    "plan": PlanJson,
    "analyze": AnalyzeJson | AnalyzeEmptyJson,  # a run with cells; one without
    "compare": CompareRunsJson | ComparePairsJson,  # two runs; pairs within one
    "history": HistoryJson,
    "check": CheckJson,
    "report": ReportJson,
    "frontier": FrontierJson,
    "bisect": BisectJson,
}


def output_schema(command: str) -> dict[str, Any]:
    """The JSON Schema of what `COMMAND --json` prints (serialization mode: every key is always printed)."""
    return TypeAdapter(OUTPUTS[command]).json_schema(mode="serialization")
