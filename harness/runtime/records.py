"""What a runtime reports about a cell it ran, as the cell's record holds it: the container, the patches applied to
it, and what it did with the run's compile cache. They live with the code that produces them; harness.results
includes them in its schema."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


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
