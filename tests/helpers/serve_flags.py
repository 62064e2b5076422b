"""What the harness reads from a vLLM command line, and the speculative configs the spellings are written with."""

from __future__ import annotations

import dataclasses

from harness.errors import UsageError
from harness.predict.serve_flags import ServeFlags, parse_serve_flags

MTP = '{"method":"mtp","num_speculative_tokens":4}'
DRAFT = '{"method":"draft_model","model":"/models/tiny-draft","num_speculative_tokens":2}'


def harness_reads(argv: list[str], version: str | None = None) -> dict | str:
    try:
        flags = parse_serve_flags(argv, version)
    except UsageError as exc:
        assert "\n" not in str(exc), "one line"
        return f"refused: {exc}"
    default = ServeFlags()
    return {f.name: getattr(flags, f.name) for f in dataclasses.fields(flags)
            if f.name != "model" and getattr(flags, f.name) != getattr(default, f.name)}
