"""The five outcomes a cell can be recorded with: below the catalogue of reasons and the catalogue of causes, which
both name an outcome."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    booted = "booted"
    refused = "refused"
    crashed = "crashed"
    timeout = "timeout"
    error = "error"


OUTCOME_MEANINGS: dict[Outcome, str] = {
    Outcome.booted: "the server answered /health 200 and served one token: the configuration boots",
    Outcome.refused: "the configuration cannot boot on this hardware: vLLM refused it, or it ran out of memory, in a "
                     "line the catalogue of causes knows",
    Outcome.crashed: "the server died (or failed its first request) without a known refusal",
    Outcome.timeout: "no verdict within the cell's deadline",
    Outcome.error: "the harness could not tell, or the machine failed (a gated model, a port in use, a driver too "
                   "old, ...): not a verdict on the configuration",
}
