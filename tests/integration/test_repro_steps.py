"""The steps `repro` prints for a patched cell, run by bash as a person pasting them would, make the file the harness
makes itself (harness.runtime.patching.patch_file) byte for byte, from matrix.yaml and the shipped patch as they are.
No engine: `docker` / `podman` on PATH is a stand-in that logs each call and answers the copy-out step with a local
copy of the unpatched file (the seed patch's context at line 824, as tests/unit/test_patching.py builds it: GNU patch
applies the shipped patch to it with fuzz 1, as to the fork's own file). The image's own file, copied out of the
stand-in fork image by the real engine, is tests/rehearsal/test_readme_gpu_matrix.py's (docker)."""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from harness.cli import main
from harness.runtime.patching import apply_gnu_patch, patch_file
from tests.helpers.seeds import pristine_from_the_seeds_context

ROOT = Path(__file__).resolve().parents[2]
SEED_PATCH = ROOT / "patches" / "gpu_worker-kv-cap.patch"
TARGET = "/opt/vllm/lib/python3.14/site-packages/vllm/v1/worker/gpu_worker.py"
CELL = "mml262144-mtp4-floor_bytes-image_patched"
IMAGE = "registry.invalid/fork/vllm:standin"

#: An engine CLI that asks no engine: it logs its arguments, has every image, and copies the one file it holds out.
STAND_IN_CLI = r"""#!/bin/sh
printf '%s\n' "$*" >> "$STANDIN_LOG"
case "$1" in
  image|create|rm|run) exit 0 ;;
  cp) [ "$2" = "$STANDIN_CONTAINER:$STANDIN_TARGET" ] || { echo "no such path: $2" >&2; exit 1; }
      cp "$STANDIN_FILE" "$3" ;;
  *) echo "unexpected: $*" >&2; exit 1 ;;
esac
"""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def harness_made(tmp_path_factory) -> tuple[bytes, bytes, Path]:
    """(the unpatched file, the file the harness makes of it with the shipped patch, where that was kept)."""
    pristine = pristine_from_the_seeds_context()
    patched, said = apply_gnu_patch(pristine, SEED_PATCH, "vllm/v1/worker/gpu_worker.py")
    assert "with fuzz 1" in said
    out = tmp_path_factory.mktemp("harness")
    prepared = patch_file(pristine, SEED_PATCH, TARGET, sha(pristine), sha(patched), out)
    return pristine, prepared.patched_file.read_bytes(), prepared.patched_file


def printed(capsys, monkeypatch, tmp_path: Path, engine: str, pristine: bytes, patched: bytes) -> str:
    for k, v in {"CONTAINER_RUNTIME": engine, "DOCKER_HOST": "unix:///nonexistent/docker.sock",
                 "CONTAINER_HOST": "unix:///nonexistent/podman.sock", "GLM_MODEL_DIR": str(tmp_path / "glm"),
                 "FORK_IMAGE": IMAGE, "KV_CAP_BASE_SHA256": sha(pristine),
                 "KV_CAP_PATCHED_SHA256": sha(patched)}.items():
        monkeypatch.setenv(k, v)
    assert main(["repro", "--matrix", str(ROOT / "matrix.yaml"), CELL, "--results-dir", str(tmp_path / "r")]) == 0
    return capsys.readouterr().out


def paste(script: str, tmp_path: Path, engine: str, image_file: bytes) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run `script` in bash with the stand-in CLI as `engine`, its copy-out step answered with `image_file`; (the
    process, the CLI's calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / engine).write_text(STAND_IN_CLI)
    (bin_dir / engine).chmod(0o755)
    (tmp_path / "image-file").write_bytes(image_file)
    log = tmp_path / "calls.log"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STANDIN_LOG": str(log),
           "STANDIN_FILE": str(tmp_path / "image-file"), "STANDIN_TARGET": TARGET,
           "STANDIN_CONTAINER": f"bh-repro-{CELL}-copy0"}
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    return proc, (log.read_text().splitlines() if log.exists() else [])


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_the_printed_steps_make_the_harness_file_byte_for_byte(capsys, monkeypatch, tmp_path, harness_made, engine):
    pristine, patched, _ = harness_made
    script = printed(capsys, monkeypatch, tmp_path, engine, pristine, patched)
    proc, calls = paste(script, tmp_path, engine, pristine)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kept = tmp_path / "r" / "repro" / "patches" / CELL / "0-gpu_worker.py" / "gpu_worker.py"
    assert kept.read_bytes() == patched, "not the file the harness makes"
    assert kept.with_name("gpu_worker.py.orig").read_bytes() == pristine
    assert kept.stat().st_mode & 0o777 == 0o444
    assert sorted(p.name for p in kept.parent.iterdir()) == ["gpu_worker.py", "gpu_worker.py.orig"], "tree left"
    assert "Hunk #1 succeeded at 824 with fuzz 1." in proc.stdout, "GNU patch said it, as it says it to the harness"
    assert [c.split()[0] for c in calls] == ["image", "rm", "create", "cp", "rm", "run"], calls
    assert f"-v {kept}:{TARGET}:ro" in calls[-1] and shlex.split(calls[2])[-1] == IMAGE


def test_a_file_that_is_not_the_promised_one_stops_the_steps_before_the_server(capsys, monkeypatch, tmp_path,
                                                                              harness_made):
    """The base hash check is a real check: another image's file (one byte differs) ends the paste at `sha256sum -c`,
    with no patched file made and no `docker run`."""
    pristine, patched, _ = harness_made
    script = printed(capsys, monkeypatch, tmp_path, "docker", pristine, patched)
    proc, calls = paste(script, tmp_path, "docker", pristine.replace(b"# fork line 1\n", b"# fork line X\n", 1))
    assert proc.returncode != 0 and "FAILED" in proc.stdout, proc.stdout + proc.stderr
    assert [c.split()[0] for c in calls] == ["image", "rm", "create", "cp", "rm"], calls
    assert not (tmp_path / "r" / "repro" / "patches" / CELL / "0-gpu_worker.py" / "gpu_worker.py").exists()
