"""The verdict catalogue and policy: one list of outcomes and reasons, and one ordered chain of rules that turns what
was seen into a verdict — including the cases three layers used to decide between them (the generic engine failure,
an OOM-killed container, memory held through a retry)."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from harness.logfacts import Refusal
from harness.logfacts.model import RefusalKind
from harness.matrix.load import load_matrix
from harness.verdict import REASONS, Outcome, Reason
from harness.verdict.catalogue import reason_table
from harness.verdict.policy import Evidence, Sighting, decide
from tests.builders import write_matrix

ROOT = Path(__file__).resolve().parents[2]


def refusal(kind: str) -> Sighting:
    return Sighting("refusal", f"{kind} said so", refusal=Refusal(kind=kind, message="m"))


def test_every_reason_belongs_to_one_outcome_and_every_refusal_kind_is_a_reason():
    assert set(REASONS) == set(Reason)
    assert {info.outcome for info in REASONS.values()} == set(Outcome)
    literal = typing.get_args(typing.get_args(RefusalKind)[0])
    assert set(literal) <= {r.value for r in Reason} | set(Reason.__members__)


def test_docs_results_md_holds_the_catalogues_table():
    text = (ROOT / "docs" / "results.md").read_text()
    table = text.split("<!-- reasons:begin -->\n", 1)[1].split("<!-- reasons:end -->", 1)[0].strip()
    from harness.predict.refusals import PREDICTED

    assert table == reason_table(PREDICTED), \
        "regenerate the table with harness.verdict.catalogue.reason_table(harness.predict.refusals.PREDICTED)"


@pytest.mark.parametrize(("evidence", "outcome", "reason"), [
    (Evidence(sighting=refusal("kv_cache_too_small")), "refused", "kv_cache_too_small"),
    (Evidence(sighting=refusal("engine_core_failed_root_cause_not_shown")), "crashed",
     "engine_core_failed_root_cause_not_shown"),
    (Evidence(sighting=Sighting("exit", "x", exit_code=3)), "crashed", "exited"),
    (Evidence(sighting=Sighting("exit", "x", exit_code=0)), "crashed", "exited_before_ready"),
    (Evidence(sighting=Sighting("exit", "x", exit_code=-9)), "crashed", "killed"),
    (Evidence(sighting=Sighting("exit", "x")), "crashed", "killed"),
    (Evidence(sighting=Sighting("exit_after_health", "x", exit_code=1)), "crashed", "exited"),
    (Evidence(sighting=Sighting("healthy", "x")), "booted", "ready"),
    (Evidence(sighting=Sighting("probe_failed", "x")), "crashed", "probe_failed"),
    (Evidence(sighting=Sighting("deadline", "x")), "timeout", "deadline"),
    (Evidence(sighting=Sighting("stale_listener", "x")), "error", "stale_server"),
    (Evidence(start_error="no such image"), "error", "start_failed"),
    # the engine's OOM kill explains a crash or a hang, not a refusal vLLM printed first
    (Evidence(sighting=Sighting("exit", "x", exit_code=137), oom_killed=True), "crashed", "oom_killed"),
    (Evidence(sighting=Sighting("deadline", "x"), oom_killed=True), "crashed", "oom_killed"),
    (Evidence(sighting=refusal("engine_core_failed_root_cause_not_shown"), oom_killed=True), "crashed", "oom_killed"),
    (Evidence(sighting=refusal("kv_cache_too_small"), oom_killed=True), "refused", "kv_cache_too_small"),
    # memory busy: the configuration's verdict unless the retry's GPUs were still held
    # the engine hung or went away: a death or a deadline then is the engine's, a refusal or a boot still the server's
    (Evidence(sighting=Sighting("exit", "x", exit_code=143), engine_trouble="docker went away"), "error",
     "engine_lost"),
    (Evidence(sighting=Sighting("deadline", "x"), engine_trouble="podman: `inspect` hung"), "error", "engine_lost"),
    (Evidence(sighting=Sighting("healthy", "x"), engine_trouble="podman: `inspect` hung"), "booted", "ready"),
    (Evidence(sighting=refusal("kv_cache_too_small"), engine_trouble="docker went away"), "refused",
     "kv_cache_too_small"),
    (Evidence(sighting=refusal("gpu_mem_util_exceeds_free")), "refused", "gpu_mem_util_exceeds_free"),
    (Evidence(sighting=refusal("gpu_mem_util_exceeds_free"), retried_busy=True), "refused",
     "gpu_mem_util_exceeds_free"),
    (Evidence(sighting=refusal("gpu_mem_util_exceeds_free"), retried_busy=True, gpus_not_idle="GPU 0 +60 GiB"),
     "error", "gpu_memory_held"),
])
def test_the_first_rule_that_applies_decides(evidence, outcome, reason):
    d = decide(evidence)
    assert (d.outcome, d.reason) == (outcome, reason)


def test_a_misspelt_or_impossible_expected_reason_is_a_validate_error_naming_the_key(tmp_path):
    from harness.errors import ConfigError

    base = {"name": "m", "model": "x", "axes": {"a": {"v": {}}}}
    for reason, says in (("kv_insuficient", "did you mean 'kv_cache_too_small'"),
                         ("ready", "belongs to outcome booted, not refused")):
        path = write_matrix(tmp_path / f"{reason}.yaml",
                            {**base, "expect": [{"outcome": "refused", "reason": reason}]})
        with pytest.raises(ConfigError) as err:
            list(load_matrix(path).cells)
        assert str(err.value).startswith(f"{path}:expect[0].reason: ") and says in str(err.value)
