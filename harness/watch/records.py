"""What the watch reports about the server's log as saved, as the cell's record holds it (harness.results includes
it in its schema)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LogCut(BaseModel):
    """The server's log was not saved (or read) whole: held to its cap, cut by a full disk, or skimmed past the
    parser's bound. Absent from a record whose log is whole and was read line by line."""

    model_config = ConfigDict(extra="forbid")

    limit_bytes: int | None = Field(description="the cap the saved log was held to (`log_max_mb`); null: none")
    written_bytes: int = Field(description="bytes of log the server wrote (its lines, masked, and the harness's "
                                           "notes), whether kept or not")
    written_lines: int
    dropped_bytes: int = Field(description="bytes left out of the saved log: between its head and its tail (the "
                                           "line there says how many), or after a full disk cut it")
    dropped_lines: int
    disk_error: str | None = Field(None, description="why the log file stopped taking lines (a full disk); the "
                                                     "boot went on")
    skimmed_lines: int = Field(0, description="lines past the parser's bound (the cap): only searched for what "
                                              "decides a boot (a refusal, a readiness line, an exception), never "
                                              "for facts")
