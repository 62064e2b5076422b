"""`boot-harness facts LOG --json`: what the parser finds in one saved server log, under the keys a cell record
uses for the same facts (kv, refusal, cause, timeline), plus what the log states in bytes (harness.predict.stated)."""

from __future__ import annotations

from pydantic import Field

from harness.jsonout import JsonOutput
from harness.logfacts import KvFacts, LogFacts, Refusal
from harness.logfacts.timeline import Timeline
from harness.predict.stated import Stated
from harness.verdict.catalogue import Reason
from harness.verdict.causes import Finding


class FactsJson(JsonOutput):
    """`boot-harness facts LOG --json`."""

    vllm_version: str | None
    reason: Reason | None = Field(description="the cause's id, else the refusal's kind, else ready for a log that "
                                              "says it is ready; null when the log holds nothing decisive")
    kv: KvFacts
    cause: Finding | None
    refusal: Refusal | None
    stated: Stated
    timeline: Timeline


def facts_output(facts: LogFacts, said: Stated) -> FactsJson:
    cause = facts.cause
    reason = (cause.id if cause is not None and cause.id is not None else facts.refusal.kind if facts.refusal
              else Reason.ready if facts.ready_lines else None)
    return FactsJson(vllm_version=facts.vllm_version, reason=reason, kv=facts.kv, cause=cause, refusal=facts.refusal,
                     stated=said, timeline=facts.timeline)
