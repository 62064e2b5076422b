"""What a boot's verdict can be (catalogue) and how raw evidence becomes one (harness.verdict.policy: decided once,
in one place). The package exports the catalogue only, so the log facts can name their refusal kinds by it.

Its names load on first use (PEP 562): `Outcome` alone (harness.verdict.outcome) costs nothing, while the catalogue
of causes compiles every cause's patterns, which a command that reads no log (`--help`, `cells`) never needs."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.verdict.catalogue import REASONS, Reason, reasons_of
    from harness.verdict.outcome import OUTCOME_MEANINGS, Outcome

_EXPORTS = {"OUTCOME_MEANINGS": "harness.verdict.outcome", "Outcome": "harness.verdict.outcome",
            "REASONS": "harness.verdict.catalogue", "Reason": "harness.verdict.catalogue",
            "reasons_of": "harness.verdict.catalogue"}

__all__ = ["OUTCOME_MEANINGS", "REASONS", "Outcome", "Reason", "reasons_of"]


def __getattr__(name: str) -> Any:
    """A name of the catalogue, imported on first use and kept; anything else is the usual AttributeError."""
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'harness.verdict' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
