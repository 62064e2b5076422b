"""What a boot's verdict can be (catalogue) and how raw evidence becomes one (harness.verdict.policy: decided once,
in one place). The package exports the catalogue only, so the log facts can name their refusal kinds by it."""

from harness.verdict.catalogue import OUTCOME_MEANINGS, REASONS, Outcome, Reason, reasons_of

__all__ = ["OUTCOME_MEANINGS", "REASONS", "Outcome", "Reason", "reasons_of"]
