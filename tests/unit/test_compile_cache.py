"""The run's compile cache without a server: what each mode hands a cell, how a private copy's files come back, what a
killed run leaves for the sweep, and how the cache reaches a process and a container. The real thing — vLLM compiling
into it, two cells at once — is tests/integration/test_compile_cache.py.

    cache = CompileCache.for_run("run", matrix_dir, run_dir, parallel=2)
    used = cache.checkout(work_dir)                 # a private copy under --parallel, the shared dir otherwise
    record = cache.checkin(used, compiled=True, hit=False)
"""

from __future__ import annotations

import os

import pytest

from harness.masking import Masker
from harness.matrix.load import load_matrix
from harness.runtime import scratch
from harness.runtime.base import CellContext
from harness.runtime.compile_cache import CONTAINER_DIR, CompileCache, merge, planned_dir
from harness.runtime.server_env import cache_env as server_env
from tests.builders import write_matrix


def tree(root, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_merge_moves_in_only_what_is_missing_never_over_a_file_that_is_there(tmp_path):
    shared, mine = tmp_path / "shared", tmp_path / "mine"
    tree(shared, {"vllm/torch_compile_cache/h1/rank_0_0/backbone/vllm_compile_cache.py": "{'first': 1}"})
    tree(mine, {"vllm/torch_compile_cache/h1/rank_0_0/backbone/vllm_compile_cache.py": "{'second': 2}",
                "vllm/torch_compile_cache/h2/rank_0_0/backbone/artifact": "bytes",
                "vllm/torch_compile_cache/h2/rank_0_0/backbone/vllm_compile_cache.py": "{'h2': 1}"})
    assert merge(mine, shared) == 2
    cached = shared / "vllm/torch_compile_cache/h1/rank_0_0/backbone/vllm_compile_cache.py"
    assert cached.read_text() == "{'first': 1}"
    assert (shared / "vllm/torch_compile_cache/h2/rank_0_0/backbone/artifact").read_text() == "bytes"
    assert not [p for p in shared.rglob("*") if p.name.endswith(".tmp")]
    assert merge(mine, shared) == 0, "a second merge of the same files adds nothing"


def test_an_index_appears_only_after_the_artifacts_it_names(tmp_path, monkeypatch):
    """A cell seeding its copy while another merges must never see an index without its artifacts: the replace of
    each file is watched, and every artifact comes before the index."""
    import harness.runtime.compile_cache as cc

    shared, mine = tmp_path / "shared", tmp_path / "mine"
    tree(mine, {"h/vllm_compile_cache.py": "{}", "h/a1": "x", "h/cache_key_factors.json": "{}", "h/z9": "y"})
    order = []
    real_replace = os.replace
    monkeypatch.setattr(cc.os, "replace",
                        lambda src, dst: (order.append(os.path.basename(dst)), real_replace(src, dst)))
    merge(mine, shared)
    assert set(order[:2]) == {"a1", "z9"} and set(order[2:]) == {"vllm_compile_cache.py", "cache_key_factors.json"}


def test_one_cell_at_a_time_uses_the_shared_directory_itself_and_counts_what_it_added(tmp_path):
    cache = CompileCache.for_run("run", tmp_path, tmp_path / "run", parallel=1)
    used = cache.checkout(tmp_path / "run" / "work" / "c1")
    assert used.path == tmp_path / "run" / "compile-cache" and not used.private
    tree(used.path, {"vllm/x": "1", "vllm/y": "2"})
    record = cache.checkin(used, compiled=True, hit=False)
    assert (record.mode, record.private_copy, record.files_before, record.files_added) == ("run", False, 1, 2)


def test_under_parallel_each_cell_works_on_a_copy_and_an_unfinished_compile_adds_nothing(tmp_path):
    cache = CompileCache.for_run("run", tmp_path, tmp_path / "run", parallel=2)
    tree(cache.root, {"vllm/old": "o"})
    a, b = (cache.checkout(tmp_path / "run" / "work" / c) for c in ("a", "b"))
    assert a.private and a.path != b.path and (a.path / "vllm/old").read_text() == "o"
    assert not (a.path / scratch.OWNER_FILE).exists(), "the run's claim is not copied into a cell's scratch"
    tree(a.path, {"vllm/new-a": "a"})
    tree(b.path, {"vllm/new-b": "torn"})
    assert cache.checkin(b, compiled=False, hit=None).files_added == 0, "b died mid-compile: nothing of it is kept"
    assert cache.checkin(a, compiled=True, hit=False).files_added == 1
    assert sorted(p.name for p in (cache.root / "vllm").iterdir()) == ["new-a", "old"]


def test_none_gives_no_cache_a_path_is_kept_and_the_run_cache_goes_with_the_run(tmp_path):
    assert CompileCache.for_run("none", tmp_path, tmp_path / "r1", 1).checkout(tmp_path / "w") is None
    kept = CompileCache.for_run("./cc", tmp_path, tmp_path / "r2", 1)
    assert kept.root == tmp_path / "cc" and kept.mode == "path"
    kept.close()
    assert (tmp_path / "cc").is_dir(), "the user's directory outlives the run"
    own = CompileCache.for_run("run", tmp_path, tmp_path / "r3", 1)
    own.close()
    assert not (tmp_path / "r3" / "compile-cache").exists()
    assert planned_dir("run", tmp_path, None) is None and planned_dir("~/x/", tmp_path, None).is_absolute()


def test_a_killed_runs_cache_is_swept_like_its_cells_scratch(tmp_path):
    run = tmp_path / "results" / "run1"
    CompileCache.for_run("run", tmp_path, run, 1)
    owner = run / "compile-cache" / scratch.OWNER_FILE
    owner.write_text(owner.read_text().replace(str(os.getpid()), "999999999"))
    assert scratch.sweep(tmp_path / "results", alive=lambda pid: False) == [run / "compile-cache"]
    assert not (run / "compile-cache").exists()


def test_a_process_gets_the_cache_in_its_env_and_a_container_a_mount_at_one_path(tmp_path):
    from harness.runtime.container import ContainerRuntime
    from harness.runtime.process import ProcessRuntime

    ctx = CellContext(run_dir=tmp_path, work_dir=tmp_path / "w", masker=Masker(), matrix_dir=tmp_path,
                      compile_cache=tmp_path / "cc")
    loaded = load_matrix(write_matrix(tmp_path / "m.yaml", {"name": "m", "runtime": "docker", "image": "img:1",
                                                              "axes": {"a": {"x": {}}}}))
    (cell,) = list(loaded.cells)
    line = ProcessRuntime(["vllm", "serve"]).command_line(cell, ctx)
    assert f"VLLM_CACHE_ROOT={tmp_path}/cc/vllm" in line
    runtime = ContainerRuntime(loaded, "docker")
    assert runtime.container_env(cell, ctx)["VLLM_CACHE_ROOT"] == f"{CONTAINER_DIR}/vllm"
    assert runtime.cache_volume(ctx) == {str(tmp_path / "cc"): (CONTAINER_DIR, "rw")}
    assert server_env("/c") == {"VLLM_CACHE_ROOT": "/c/vllm", "TORCHINDUCTOR_CACHE_DIR": "/c/inductor",
                                "TRITON_CACHE_DIR": "/c/triton"}


@pytest.mark.parametrize("value,words", [("cache", "with a '/'"), ("", "run, none"), (3, "run, none")])
def test_a_compile_cache_that_is_no_mode_and_no_path_is_refused(tmp_path, value, words):
    from harness.errors import ConfigError

    path = write_matrix(tmp_path / "m.yaml", {"name": "m", "compile_cache": value, "axes": {"a": {"x": {}}}})
    with pytest.raises(ConfigError, match=f"compile_cache: .*{words}"):
        load_matrix(path)
