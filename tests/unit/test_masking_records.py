"""Masking never breaks a record, and a scheduler's labels are not secrets: Buildkite sets BUILDKITE_STEP_KEY to the
step's key on every job (`boot`), whose name has the word KEY; masked by name it turned every `booted` into `***ed`
and the run's record into a validation error."""

from __future__ import annotations

from harness.masking import Masker, secret_values
from harness.results.model import CellResult


def cell(**changes) -> CellResult:
    return CellResult(cell_id="mml4096", axes={"mml": "4096"}, runtime="process", argv=["vllm", "serve"], env={},
                      outcome="booted", reason="ready", **changes)


def test_a_buildkite_step_key_is_a_label_not_a_secret():
    assert secret_values({"BUILDKITE_STEP_KEY": "boot", "BUILDKITE_GROUP_KEY": "nightly"}) == set()
    assert secret_values({"BUILDKITE_AGENT_ACCESS_TOKEN": "bkagent_0123456789"}) == {"bkagent_0123456789"}


def test_a_short_secret_inside_the_harness_own_words_is_masked_in_text_and_kept_in_the_fields_the_schema_names():
    masker = Masker(secret_values({"MY_API_KEY": "boot"}))
    r = masker.record(cell(detail="booted: boot log says boot"))
    assert (r.outcome, r.reason) == ("booted", "ready")
    assert r.detail == "***ed: *** log says ***"
