"""A server's environment, built once (harness.runtime.server_env) for the process runtime's start and printed line and
for the container: every compile cache (vLLM's, inductor's, Triton's) goes under the run's shared cache when there is
one, else under the cell's own scratch, never to a default two cells would share. The process runtime's start is
caught at the moment it would spawn, so the environment checked is the one the server would really get."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness.errors import CellStartError
from harness.masking import Masker
from harness.matrix.cells import Cell
from harness.runtime import compile_cache
from harness.runtime.base import CellContext
from harness.runtime.container_spec import container_env
from harness.runtime.process import ProcessRuntime
from harness.runtime.server_env import CACHE_DIRS, SERVER_ENV, SERVER_ID_VAR, build_env
from tests.builders import fake_cells

CACHE_VARS = sorted(CACHE_DIRS)


class _Spawned(Exception):
    pass


def started_env(monkeypatch, tmp_path: Path, cell: Cell, cache: Path | None = None,
                gpu_ids: list[str] | None = None) -> dict[str, str]:
    """The environment ProcessRuntime.start hands to the server's process (the spawn itself refused)."""
    seen: dict[str, dict[str, str]] = {}

    def popen(argv, env, **kwargs):
        seen["env"] = env
        raise OSError("not spawned in a unit test")

    monkeypatch.setattr(subprocess, "Popen", popen)
    ctx = CellContext(run_dir=tmp_path / "run", work_dir=tmp_path / "run" / "work" / cell.id, masker=Masker(),
                      matrix_dir=tmp_path, compile_cache=cache, gpu_ids=gpu_ids)
    with pytest.raises(CellStartError, match="not spawned"):
        ProcessRuntime(["vllm", "serve"], base_env={"HOME": "/home/h", "PATH": "/bin"}).start(cell, ctx, lambda _: None)
    return seen["env"]


def test_without_a_compile_cache_each_cell_compiles_into_its_own_scratch(monkeypatch, tmp_path):
    _, (a, b) = fake_cells(tmp_path)
    envs = {c.id: started_env(monkeypatch, tmp_path, c) for c in (a, b)}
    for var in CACHE_VARS:
        assert all(var in env for env in envs.values()), f"{var} left to its default, which every cell shares"
        dirs = {cid: Path(env[var]) for cid, env in envs.items()}
        assert dirs[a.id] != dirs[b.id], f"{var} shared by two cells"
        for cid, d in dirs.items():
            work = tmp_path / "run" / "work" / cid
            assert work in d.parents and d.is_dir(), f"{var}={d} is not a folder the harness made in {work}"


def test_with_a_compile_cache_every_cell_compiles_into_the_shared_one(monkeypatch, tmp_path):
    _, (a, b) = fake_cells(tmp_path)
    shared = tmp_path / "cc"
    envs = [started_env(monkeypatch, tmp_path, c, cache=shared) for c in (a, b)]
    for var in CACHE_VARS:
        assert envs[0][var] == envs[1][var] == f"{shared}/{CACHE_DIRS[var]}"


def test_the_printed_line_and_the_started_server_get_the_same_variables(monkeypatch, tmp_path):
    _, (cell, _) = fake_cells(tmp_path, env={"CUDA_VISIBLE_DEVICES": "7", "NO_COLOR": "0", "MINE": "x"})
    started = started_env(monkeypatch, tmp_path, cell, cache=tmp_path / "cc", gpu_ids=["1", "2"])
    assert started["HOME"] == "/home/h", "a local server inherits the harness's environment"
    assert started["NO_COLOR"] == "0" and started["MINE"] == "x", "the matrix's env wins over the defaults"
    assert started["CUDA_VISIBLE_DEVICES"] == "1,2", "the scheduler's GPUs win over the matrix's"
    assert started[SERVER_ID_VAR].startswith(f"{os.getpid()}-")
    printed = build_env(cell.env, cache_root=str(tmp_path / "cc"), gpu_ids=["1", "2"])
    assert {k: started[k] for k in printed} == printed
    assert SERVER_ID_VAR not in printed and "TMPDIR" not in printed


@pytest.mark.parametrize("cache", [None, Path("/host/cc")], ids=["no-cache", "cache"])
def test_a_container_gets_the_defaults_and_the_cache_where_it_is_mounted(tmp_path, cache):
    _, (cell, _) = fake_cells(tmp_path, env={"MINE": "x"})
    env = container_env(cell, cache)
    assert env == {**SERVER_ENV, **({} if cache is None else
                                    {v: f"{compile_cache.CONTAINER_DIR}/{n}" for v, n in CACHE_DIRS.items()}),
                   "MINE": "x"}
