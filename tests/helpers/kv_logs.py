"""Recorded vLLM logs held against the KV predictor: where they are (the CPU boots, the published GPU logs), each
published log's cases, and the prediction held against a log."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.logfacts import LogParser
from harness.predict.cell import predict_cell
from tests.helpers.env import ROOT

DATA = ROOT / "tests" / "data"
MODELS = DATA / "kv" / "models"
#: Published GPU logs, each with its source, its model's config and its flags (tests/data/kv/published).
PUBLISHED = DATA / "kv" / "published"


def read(path: str) -> bytes | None:
    """The server's view of files: /models/… is tests/data/kv/models/… (as a container's bind mount would be)."""
    host = Path(path.replace("/models/", str(MODELS) + "/", 1))
    return host.read_bytes() if host.is_file() else None


def facts_of(lines):
    parser = LogParser()
    for line in lines:
        parser.feed(line)
    return parser.facts


def outcome_of(facts):
    if facts.refusal is not None:
        return "refused", facts.refusal.kind
    return "booted", "ready"


def held(server_args, lines, version=None):
    facts = facts_of(lines)
    outcome, reason = outcome_of(facts)
    return predict_cell(server_args, read, facts.kv, facts.refusal, outcome, reason, version or facts.vllm_version)


def published_cases(pattern: str = "*.json") -> Iterator[pytest.param]:
    """Each logged boot of the published logs that `pattern` names under PUBLISHED, as `pytest.param(doc, case)` with
    the id `NAME-i` (NAME: its path there without .json): a log's `cases`, or one case per log of its `logs` with
    its `flags`. The one loader of the published logs."""
    for path in sorted(PUBLISHED.glob(pattern)):
        doc = json.loads(path.read_text())
        cases = doc.get("cases") or [{"flags": doc["flags"], "log": lines} for lines in doc["logs"]]
        for i, case in enumerate(cases):
            yield pytest.param(doc, case, id=f"{path.relative_to(PUBLISHED).with_suffix('')}-{i}")
