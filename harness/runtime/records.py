"""What a runtime reports about a cell it ran, as the cell's record holds it: the container, the patches applied to
it, what it did with the run's compile cache, and how its server was stopped. They live with the code that produces
them; harness.results includes them in its schema."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.units import fmt_seconds


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ContainerInfo(_Record):
    engine: str
    engine_version: str | None = None
    image: str
    image_digest: str | None = None
    container_id: str | None = None
    container_name: str | None = None
    oom_killed: bool | None = None
    engine_trouble: str | None = Field(None, description="which engine call did not answer, or how the engine went "
                                                         "away, while the cell ran; null when it always answered")


class AppliedPatch(_Record):
    target: str
    patch: str
    base_sha256: str
    patched_sha256: str
    patched_file: str = Field(description="the patched file kept in the run directory (relative to it)")
    patch_output: str | None = Field(None, description="what GNU `patch -p1 --batch --forward` printed, verbatim")
    warnings: list[str] = Field([], description="patch's lines about a hunk applied at an offset or with fuzz")


class CompileCacheUse(_Record):
    """What one cell did with the run's compile cache (harness.runtime.compile_cache)."""

    mode: Literal["run", "path"] = Field(description="`run` (the run's own directory) or `path` (the matrix's, kept "
                                                     "across runs)")
    dir: str = Field(description="the shared directory on the host")
    private_copy: bool = Field(description="the cell used a private copy (cells ran at once), merged back after it")
    files_before: int = Field(description="files the cache held when the cell started")
    files_added: int = Field(description="files the cell added to the shared cache")
    hit: bool | None = Field(None, description="the log says the compiled graph came from the cache (null: nothing "
                                               "was compiled)")


class Stopped(StrEnum):
    """How a server's stop ended it: what a `timeout` or an interrupted night's reader asks of its teardown."""

    exited = "exited"  # gone before the stop: nothing was signalled
    terminated = "terminated"  # SIGTERM honoured within the grace
    killed = "killed"  # SIGTERM ignored: SIGKILL once the grace ran out
    left = "left"  # processes outlived every SIGKILL: left to `boot-harness gc`
    unknown = "unknown"  # the engine cannot tell (its stop failed, or its last state could not be read)


#: What each way says, for the schema and docs/results.md.
STOPPED_MEANINGS: dict[Stopped, str] = {
    Stopped.exited: "the server was gone before the stop; nothing was signalled",
    Stopped.terminated: "it ended on SIGTERM within the grace",
    Stopped.killed: "it ignored SIGTERM and was SIGKILLed once the grace ran out (vLLM mid-start-up)",
    Stopped.left: "processes outlived every SIGKILL; their record stays for `boot-harness gc`",
    Stopped.unknown: "the engine cannot tell (its stop failed or its last state was unreadable): no guess",
}


class ServerStop(_Record):
    """How the harness's stop ended one cell's server, from what the stop itself did (signals sent, the grace run out,
    what a scan found left; a container's exit code and OOMKilled): a teardown proved from what happened."""

    how: Stopped = Field(description="; ".join(f"{k.value}: {v}" for k, v in STOPPED_MEANINGS.items()))
    grace_s: float = Field(description="the seconds SIGTERM was given before SIGKILL")
    gone_s: float | None = Field(None, description="seconds from the stop's start until the server was gone (0 when "
                                                   "it had exited before); null when it was not (left) or unknown")
    exit_code: int | None = Field(None, description="the server's exit code once stopped (the cell's, unless it "
                                                    "exited on its own first)")
    left: int = Field(0, description="processes that outlived the stop (`left`)")
    note: str | None = Field(None, description="what the engine's stop or removal said went wrong, when it did")

    @property
    def clean(self) -> bool:
        """Nothing a reader needs told: it had exited, or it honoured SIGTERM, and nothing went wrong."""
        return self.how in (Stopped.exited, Stopped.terminated) and self.note is None

    def describe(self) -> str:
        """`ignored SIGTERM; SIGKILLed after the 3.0 s grace, gone 0.4 s later`: one line for the cell's detail."""
        after = "" if self.gone_s is None else f", gone {fmt_seconds(max(0.0, self.gone_s - self.grace_s))} later"
        said = {
            Stopped.exited: "exited before the stop",
            Stopped.terminated: "ended on SIGTERM" + ("" if self.gone_s is None
                                                      else f" {fmt_seconds(self.gone_s)} after it"),
            Stopped.killed: f"ignored SIGTERM; SIGKILLed after the {fmt_seconds(self.grace_s)} grace{after}",
            Stopped.left: f"{self.left} process{'es' if self.left != 1 else ''} outlived the stop's SIGKILLs; "
                          "`boot-harness gc` ends them",
            Stopped.unknown: "how the server stopped is unknown",
        }[self.how]
        return said + (f" ({self.note})" if self.note else "")
