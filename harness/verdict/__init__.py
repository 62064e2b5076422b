"""What a boot's verdict can be (catalogue) and how raw evidence becomes one (policy): decided once, in one place."""

from harness.verdict.catalogue import OUTCOME_MEANINGS, REASONS, Outcome, Reason, reasons_of
from harness.verdict.policy import Decision, Evidence, Finding, decide

__all__ = ["OUTCOME_MEANINGS", "REASONS", "Decision", "Evidence", "Finding", "Outcome", "Reason", "decide",
           "reasons_of"]
