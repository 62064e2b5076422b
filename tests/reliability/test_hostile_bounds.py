"""Hostile bounds: values nobody checked and inputs sized to exhaust a loop, the stack or memory.

- The matrix: a GPU listed twice (`gpus: [0, 1, 0]`: the cell waited on its own host lock for ever), `true` in any
  number key (read as 1), a sampling interval of `1e-9` (the sampler spins), and 6,666 `exclude` rules over 100 × 100
  values (cells × rules checks: 40 s to validate). Each is one line at `validate`, or (the rules) bounded work.
- What a server logs: a version that is no X.Y.Z (`1`, `2024_nightly`) is shown as written and never fails `run`'s
  summary, `report`, `compare`, `history` or `check`.
- Sizes: a folder 1,200 deep under `history` and in a shard's logs under `merge` (no RecursionError), a scheduler's
  count of 5,000 digits (`--shard auto`), an MLA config with `kv_lora_rank: 0` (a division by zero), a run whose cell
  records are each within the per-file bound but together past the per-run one (`report --html` ran out of memory).
- `merge` of shards that are not pieces of one run: another matrix name under the same sha256, another harness
  version, a Buildkite shard beside a Slurm one, a shard holding another shard's cell, a cell the matrix lacks.

Everything but the one fake run (two cells, shared by the version cases) runs in this process through
`harness.cli.main`; work is bounded by counting steps, never by the clock.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import typing
from pathlib import Path

import pytest

from harness.matrix import model as matrix_model
from tests.builders import write_matrix
from tests.helpers.reliability import cli, fake_matrix, only_run
from tests.synthetic import make_cell, make_run, write_run

# ---------------------------------------------------------------------------------------------------- helpers


def main(capsys, monkeypatch, *args: object, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`boot-harness ARGS` in this process, output captured as a pipe gets it: (exit code, stdout, stderr)."""
    from harness.cli import main as harness_main

    for name in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    code = harness_main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line(code: int, err: str, *words: str) -> str:
    """Exit 2, one stderr line holding every word, no traceback."""
    assert "Traceback" not in err, err[-3000:]
    assert code == 2, f"exit {code}: {err[-2000:]}"
    lines = err.splitlines()
    assert len(lines) == 1, err[-3000:]
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


_AXES = {"a": {"flag": "--a", "values": [1, 2]}}


def matrix_file(tmp_path: Path, **top) -> Path:
    return write_matrix(tmp_path / "m.yaml", {"name": "bounds", "model": "m", "axes": _AXES, **top})


# ---------------------------------------------------------------------------------------------------- the matrix

GPUS_TWICE = {"index-twice": [0, 1, 0], "int-and-text": [0, "0"], "uuid-twice": ["GPU-a1", "GPU-b2", "GPU-a1"]}


@pytest.mark.parametrize("gpus", list(GPUS_TWICE.values()), ids=list(GPUS_TWICE))
def test_a_gpu_listed_twice_is_one_line_at_validate(gpus, tmp_path, capsys, monkeypatch):
    m = matrix_file(tmp_path, runtime="docker", image="i", gpus=gpus)
    line = one_line(*main(capsys, monkeypatch, "validate", "--matrix", m)[::2], "listed twice")
    assert line.startswith(f"{m}:gpus: ")


def _numeric(annotation: object) -> bool:
    """Whether a field's type takes an int or a float anywhere in it (a union, an Annotated, a list's items)."""
    if annotation in (int, float):
        return True
    return any(_numeric(a) for a in typing.get_args(annotation) if a is not Ellipsis)


def _number_fields() -> list[str]:
    """Every number key of the matrix file, found in the models (a key added later is tried too): top-level fields,
    and `expect[0].<field>` for a rule's."""
    found = [name for name, f in matrix_model.Matrix.model_fields.items() if _numeric(f.annotation)]
    found += [f"expect.{name}" for name, f in matrix_model.ExpectRule.model_fields.items() if _numeric(f.annotation)]
    return found


NUMBER_FIELDS = _number_fields()


def test_the_walk_finds_the_number_keys():
    assert {"timeout_s", "linger_s", "memory_interval_s", "container_port", "engine_timeout_s", "gpus_per_cell",
            "gpus", "expect.within_s"} <= set(NUMBER_FIELDS)


@pytest.mark.parametrize("key", NUMBER_FIELDS)
@pytest.mark.parametrize("value", [True, False], ids=["true", "false"])
def test_a_boolean_in_a_number_key_is_one_line_at_validate(key, value, tmp_path, capsys, monkeypatch):
    top: dict = {"runtime": "docker", "image": "i"}  # a container matrix: every key is read
    if key.startswith("expect."):
        top["expect"] = [{"outcome": "booted", key.split(".", 1)[1]: value}]
        shown = f"expect[0].{key.split('.', 1)[1]}"
    else:
        top[key] = value
        shown = key
    m = matrix_file(tmp_path, **top)
    line = one_line(*main(capsys, monkeypatch, "validate", "--matrix", m)[::2])
    assert line.startswith(f"{m}:{shown}: "), line
    assert "true" in line.lower() or "number" in line, line


@pytest.mark.parametrize("interval", ["1e-9", "0.01", "0.049"])
def test_a_sampling_interval_below_the_bound_is_one_line_at_validate(interval, tmp_path, capsys, monkeypatch):
    m = tmp_path / "m.yaml"
    m.write_text(f"name: bounds\nmodel: m\nmemory_interval_s: {interval}\naxes: {{a: {{flag: --a, values: [1]}}}}\n")
    line = one_line(*main(capsys, monkeypatch, "validate", "--matrix", m)[::2], "0.05")
    assert line.startswith(f"{m}:memory_interval_s: ")


def test_the_lowest_sampling_interval_is_taken(tmp_path):
    from harness.matrix.load import load_matrix

    m = matrix_file(tmp_path, memory_interval_s=matrix_model.MIN_INTERVAL_S)
    assert load_matrix(m).matrix.memory_interval_s == 0.05


#: Lines of harness.matrix.cells and .rule_index run per combination of values and per rule: building a cell (its
#: id, argv, env) is about 70; checking every rule against every combination would be 66 million checks.
STEPS_PER_ITEM = 80


def test_6666_exclude_rules_over_10000_cells_cost_linear_work():
    """100 × 100 values, 6,666 exclude rules and 100 expect rules: the lines expand() runs in the matrix modules
    stay within a few dozen per combination and per rule (what pydantic runs to build a cell is not counted)."""
    from harness.matrix import cells as cells_module
    from harness.matrix import rule_index
    from harness.matrix.cells import expand

    xs, ys = [f"x{i}" for i in range(100)], [f"y{i}" for i in range(100)]
    exclude = [{"x": xs[i % 100], "y": ys[(i * 7) // 100 % 100]} for i in range(6666)]
    expect = [{"where": {"x": xs[i]}, "outcome": "booted"} for i in range(100)]
    matrix = matrix_model.Matrix.model_validate(
        {"name": "big", "axes": {"x": {"flag": "--x", "values": xs}, "y": {"flag": "--y", "values": ys}},
         "exclude": exclude, "expect": expect})
    budget = STEPS_PER_ITEM * (100 * 100 + len(exclude) + len(expect))
    watched = {cells_module.__file__, rule_index.__file__}
    steps = 0

    def count(frame, event, arg):
        nonlocal steps
        if frame.f_code.co_filename not in watched:
            return None  # not traced line by line: the budget is the matrix modules' own work
        if event == "line":
            steps += 1
            if steps > budget:
                raise RuntimeError(f"over {budget:,} lines: the rules are checked per cell")
        return count

    sys.settrace(count)
    try:
        cells, problems = expand(matrix)
    finally:
        sys.settrace(None)
    excluded = {(r["x"], r["y"]) for r in exclude}
    assert problems == []
    assert len(cells) == 100 * 100 - len(excluded)
    assert all(c.expected is not None and c.expected.rule == xs.index(c.axes["x"]) for c in cells)


def test_the_rule_index_agrees_with_the_plain_check():
    """The index gives what checking each selector against each cell gives: lists, several axes, axes not named."""
    import itertools

    from harness.matrix.cells import selector_matches
    from harness.matrix.rule_index import SelectorIndex

    axes = {"a": ["1", "2", "3"], "b": ["x", "y"], "c": ["p", "q"]}
    rules = [{"a": "1"}, {"a": ["2", "3"], "b": "y"}, {"c": "q", "b": ["x"]}, {"a": "3", "b": "x", "c": "p"}]
    index = SelectorIndex(rules, axes)
    for combo in itertools.product(*axes.values()):
        cell = dict(zip(axes, combo, strict=False))
        want = [i for i, r in enumerate(rules) if selector_matches(r, cell)]
        got = index.matching(cell)
        assert [i for i in range(len(rules)) if got >> i & 1] == want, cell


# ---------------------------------------------------------------------------------------------------- GPUs


class _Nvml:
    """An inventory whose GPUs other processes see (kind "nvml"): the host locks are taken for them."""

    kind, slots = "nvml", 1

    def info(self, index: int):
        from harness.gpu.records import GpuInfo

        return GpuInfo(index=index, uuid=f"GPU-bounds-{os.getpid()}-{index}")

    def devices(self) -> list[int]:
        return [0, 1]


class _StopOnWait:
    """A clock whose first wait ends the acquire: a lock that would block this process on itself is a None, not a
    hang."""

    def __init__(self, stop: threading.Event):
        self.stop, self.waits = stop, 0

    def now(self) -> float:
        return 0.0

    def wait(self, event: threading.Event, seconds: float) -> bool:
        self.waits += 1
        self.stop.set()
        return True


def test_the_host_lock_of_a_gpu_named_twice_is_taken_once(tmp_path, monkeypatch):
    import tempfile

    from harness.gpu.hostlock import HostGpuLocks

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stop = threading.Event()
    clock = _StopOnWait(stop)
    locks = HostGpuLocks(_Nvml(), clock)  # type: ignore[arg-type]  # a stand-in NVML
    held = locks.acquire([0, 1, 0], stop)
    try:
        assert held is not None and clock.waits == 0, "the cell waited on its own lock"
        assert len(held) == 2
    finally:
        locks.release(held or [])


def test_an_index_and_its_uuid_are_one_gpu_twice():
    from harness.errors import UsageError
    from harness.gpu.inventory import shared_indices

    with pytest.raises(UsageError, match="already names"):
        shared_indices(["0", f"GPU-bounds-{os.getpid()}-0"], _Nvml())  # type: ignore[arg-type]  # a stand-in NVML


# ---------------------------------------------------------------------------------------------------- versions

VERSIONS = {"bare-1": "1", "nightly": "2024_nightly"}


@pytest.fixture(scope="module")
def odd_versions(tmp_path_factory) -> Path:
    """One run of two fake cells whose servers log versions that are no X.Y.Z, both expected to boot."""
    root = tmp_path_factory.mktemp("versions")
    m = fake_matrix(root / "m.yaml", {k: {"FAKE_VLLM_SCENARIO": "boot", "FAKE_VLLM_VERSION": v,
                                          "FAKE_VLLM_DELAY": "0.05"} for k, v in VERSIONS.items()},
                    linger_s=0.1, expect=[{"outcome": "booted"}])
    r = cli("run", "--matrix", m, "--results-dir", root / "results", timeout=120)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    run = only_run(root / "results")
    (run / "run.out").write_text(r.stdout)
    return run


def test_run_summarises_a_server_that_logs_no_x_y_z(odd_versions):
    import json

    cells = {c["cell_id"]: c for c in json.loads((odd_versions / "results.json").read_text())["cells"]}
    assert {c["vllm_version"] for c in cells.values()} == set(VERSIONS.values()), "shown as written"
    assert all(c["matched"] for c in cells.values())
    assert "2 matched" in (odd_versions / "run.out").read_text()


@pytest.mark.parametrize("command", [["report", "{run}"], ["report", "{run}", "--html", "{tmp}/r.html"],
                                     ["report", "{run}", "--markdown", "-"], ["compare", "{run}", "{run}"],
                                     ["history", "{run}"], ["check", "{run}"]],
                         ids=["report", "report-html", "report-markdown", "compare", "history", "check"])
def test_readers_show_a_version_that_is_no_x_y_z(command, odd_versions, tmp_path, capsys, monkeypatch):
    args = [a.format(run=odd_versions, tmp=tmp_path) for a in command]
    code, out, err = main(capsys, monkeypatch, *args)
    assert "Traceback" not in err and "not a vLLM version" not in out + err, err[-3000:]
    assert code == 0, f"exit {code}: {err[-2000:]}"


@pytest.mark.parametrize("logged", ["1", "2024_nightly", "0." + "9" * 5000, ""])
def test_a_logged_version_reads_as_the_default_rules(logged):
    from harness.predict.versions import DEFAULT_VERSION, rules_version

    assert rules_version(logged) == DEFAULT_VERSION


def test_a_given_version_of_5000_digits_is_refused_not_converted():
    from harness.predict.versions import parse_version

    with pytest.raises(ValueError, match="not a vLLM version") as info:
        parse_version("0." + "9" * 5000)
    assert len(str(info.value)) < 200


# ---------------------------------------------------------------------------------------------------- depth

DEPTH = 1200


def _unnest(root: Path) -> None:
    """Remove a tree of any depth, deepest first: pytest's own clean-up of old temp folders (shutil.rmtree) recurses
    per level and would fail on these in a later session, this runner's or another's. Its own loop, not the
    harness's walk: the clean-up holds whatever the code under test does."""
    if not root.is_dir() or root.is_symlink():
        return
    folders, todo = [], [str(root)]
    while todo:
        folder = todo.pop()
        folders.append(folder)
        with os.scandir(folder) as listing:
            for entry in listing:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(entry.path)
                else:
                    os.unlink(entry.path)
    for folder in reversed(folders):
        os.rmdir(folder)


@pytest.fixture
def nests():
    """Roots of deep trees a test made (or had the harness make): removed when it ends."""
    roots: list[Path] = []
    yield roots
    for root in roots:
        _unnest(root)


def _nest(root: Path, depth: int = DEPTH) -> Path:
    """`root/d/d/…/d`, `depth` deep, made relative to each folder's descriptor (no path resolved from the top)."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            nfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
    finally:
        os.close(fd)
    return root.joinpath(*["d"] * depth)


def test_history_finds_a_run_at_the_bottom_of_a_folder_1200_deep(tmp_path, capsys, monkeypatch, nests):
    nests.append(tmp_path / "runs")
    bottom = _nest(tmp_path / "runs")
    write_run(make_run("deep-night", [make_cell("c_a", {"c": "a"}, "booted")]), bottom)
    code, out, err = main(capsys, monkeypatch, "history", tmp_path / "runs", "--json")
    assert "Traceback" not in err and "RecursionError" not in err, err[-3000:]
    assert code == 0, err[-2000:]
    assert "deep-night" in out


def test_the_walk_is_os_walk_without_recursion(tmp_path, nests):
    from harness.walk import walk

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "f").write_text("x")
    (tmp_path / "c").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a")
    mine = [(f, sorted(d), sorted(o)) for f, d, o in walk(tmp_path)]
    theirs = [(f, sorted(d), sorted(o)) for f, d, o in os.walk(tmp_path)]
    # os.walk lists a link to a folder among the folders (not entered); this walk among the other entries
    assert [f for f, _, _ in mine] == [f for f, _, _ in theirs if "link" not in f]
    assert mine[0] == (str(tmp_path), ["a", "c"], ["link"])
    nests.append(tmp_path / "deep")
    _nest(tmp_path / "deep")
    assert sum(1 for _ in walk(tmp_path / "deep")) == DEPTH + 1


# ---------------------------------------------------------------------------------------------------- scheduler


@pytest.mark.parametrize("env,words", [
    ({"BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "7" * 5000}, "at most 9 digits"),
    ({"BUILDKITE_PARALLEL_JOB": "9" * 5000, "BUILDKITE_PARALLEL_JOB_COUNT": "2"}, "at most 9 digits"),
    ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "1" * 5000}, "at most 9"),
    ({"JOB_COMPLETION_INDEX": "0", "BOOT_HARNESS_SHARD_COUNT": "x" * 5000}, "not a whole number"),
], ids=["buildkite-count", "buildkite-index", "slurm-max", "kubernetes-count-text"])
def test_a_scheduler_number_of_5000_digits_is_one_line(env, words, tmp_path, capsys, monkeypatch):
    m = matrix_file(tmp_path)
    code, _, err = main(capsys, monkeypatch, "cells", "--matrix", m, "--shard", "auto", env=env)
    line = one_line(code, err, words)
    assert len(line) < 300, "the value is shown cut"


def test_leading_zeros_are_read_as_the_number(tmp_path):
    from harness.matrix.scheduler import detect

    ref = detect({"BUILDKITE_PARALLEL_JOB": "0" * 5000 + "1", "BUILDKITE_PARALLEL_JOB_COUNT": "0" * 5000 + "2"})
    assert ref.shard == "2/2"


# ---------------------------------------------------------------------------------------------------- kv

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64, "max_position_embeddings": 4096}
MLA = {**LLAMA, "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "qk_nope_head_dim": 16,
       "v_head_dim": 16}


@pytest.mark.parametrize("config,words", [
    ({**MLA, "kv_lora_rank": 0, "qk_rope_head_dim": 0}, "kv_lora_rank: 0"),
    ({**MLA, "kv_lora_rank": 0, "qk_rope_head_dim": 64}, "kv_lora_rank: 0"),
    ({**LLAMA, "hidden_size": 2}, "head of 0 dims"),
], ids=["kv_lora_rank-0-rope-0", "kv_lora_rank-0", "hidden-smaller-than-heads"])
def test_a_config_that_caches_nothing_per_token_is_one_line(config, words, tmp_path, capsys, monkeypatch):
    import json

    (tmp_path / "config.json").write_text(json.dumps(config))
    code, _, err = main(capsys, monkeypatch, "kv", tmp_path, "--available-gib", "1")
    assert "ZeroDivisionError" not in err
    one_line(code, err, str(tmp_path / "config.json"), words)


# ---------------------------------------------------------------------------------------------------- one run's size


@pytest.fixture
def fat_run(tmp_path, monkeypatch) -> Path:
    """Six cell records of about 20 KB each, every one within the per-file bound, 120 KB together; the per-run bound
    lowered to 100 KB (as six 61 MB records are to the real one)."""
    import harness.files

    cells = [make_cell(f"c_{i}", {"c": str(i)}, "booted", log_tail=[f"line {j} of cell {i}" for j in range(1000)])
             for i in range(6)]
    run_dir = write_run(make_run("fat", cells), tmp_path / "runs")
    sizes = [p.stat().st_size for p in (run_dir / "cells").iterdir()]
    assert all(15_000 < s < 30_000 for s in sizes) and sum(sizes) > 100_000, sizes
    monkeypatch.setattr(harness.files, "RUN_LIMIT", 100_000)
    return run_dir


@pytest.mark.parametrize("command", [["report", "{run}", "--html", "{tmp}/r.html"], ["report", "{run}"],
                                     ["compare", "{run}", "{run}"], ["check", "{run}"]],
                         ids=["report-html", "report", "compare", "check"])
def test_a_run_past_the_per_run_bound_is_one_line(command, fat_run, tmp_path, capsys, monkeypatch):
    code, _, err = main(capsys, monkeypatch, *[a.format(run=fat_run, tmp=tmp_path) for a in command])
    one_line(code, err, str(fat_run), "bytes together", "100,000")
    assert not (tmp_path / "r.html").exists()


def test_history_names_a_run_past_the_bound_and_reads_the_others(fat_run, tmp_path, capsys, monkeypatch):
    write_run(make_run("slim", [make_cell("c_0", {"c": "0"}, "booted")]), fat_run.parent)
    code, out, err = main(capsys, monkeypatch, "history", fat_run.parent, "--json")
    assert code == 0 and "Traceback" not in err, err[-3000:]
    assert "bytes together" in err and str(fat_run) in err
    assert "slim" in out


def test_each_read_is_bounded_by_what_is_left_of_the_run(fat_run, monkeypatch):
    """A file that grows after the sizes were summed is still bounded: the reads never take more than the bound."""
    from harness.errors import InputError
    from harness.results import store

    taken: list[int] = []
    real = store.read_bytes

    def spy(path, limit, **kw):
        taken.append(limit)
        return real(path, limit, **kw)

    monkeypatch.setattr(store, "read_bytes", spy)
    monkeypatch.setattr(store._Budget, "check", lambda self: None)  # as if the files grew after the sizes were read
    with pytest.raises(InputError):
        store.load_run(fat_run)
    assert taken and all(t <= 100_000 for t in taken) and taken == sorted(taken, reverse=True)


def test_the_bound_passes_every_run_the_harness_writes():
    """results.json (at most JSON_LIMIT) holds a copy of every cell: a run the harness wrote is under the bound."""
    import harness.files

    assert harness.files.RUN_LIMIT >= 2 * harness.files.JSON_LIMIT


# ---------------------------------------------------------------------------------------------------- merge


@pytest.fixture
def shards(tmp_path) -> dict:
    """A two-cell matrix file and its two shards (cell c_y is shard 1/2's, c_x shard 2/2's), recorded against it."""
    from harness.matrix.load import load_matrix
    from harness.matrix.shard import shard_of
    from harness.results.model import MatrixRef

    m = write_matrix(tmp_path / "m.yaml", {"name": "pair", "model": "m", "axes": {"c": {"x": {}, "y": {}}}})
    loaded = load_matrix(m)
    ids = [c.id for c in loaded.cells]
    assert {shard_of(i, 2) for i in ids} == {1, 2}, "the two cells fall in two shards"
    ref = MatrixRef(path=str(m), sha256=hashlib.sha256(m.read_bytes()).hexdigest(), name="pair")

    def shard(i: int, cell_ids: list[str], matrix_name: str = "pair", **changes) -> Path:
        cells = [make_cell(cid, {"c": cid.split("_", 1)[1]}, "booted") for cid in cell_ids]
        run = make_run(f"shard{i}", cells).model_copy(
            update={"matrix": ref.model_copy(update={"name": matrix_name}), "shard": f"{i}/2", **changes})
        return write_run(run, tmp_path / "runs" / f"{i}-{'-'.join(sorted(changes)) or 'plain'}")

    by_shard = {shard_of(i, 2): i for i in ids}
    return {"matrix": m, "ids": by_shard, "shard": shard, "out": tmp_path / "merged"}


def _scheduler(kind: str, index: int):
    from harness.matrix.scheduler import SchedulerRef

    return SchedulerRef(kind=kind, job_id=f"j{index}", group_id="g", index=index, count=2,
                        first=1 if kind == "slurm" else 0)


def test_merge_takes_the_two_shards(shards, capsys, monkeypatch):
    a = shards["shard"](1, [shards["ids"][1]])
    b = shards["shard"](2, [shards["ids"][2]])
    code, _, err = main(capsys, monkeypatch, "merge", a, b, "--out", shards["out"])
    assert code == 0, err


MERGES = {
    "another-matrix-name": (lambda s: [s["shard"](1, [s["ids"][1]]),
                                       s["shard"](2, [s["ids"][2]], matrix_name="another")], "with one sha256"),
    "another-harness-version": (lambda s: [s["shard"](1, [s["ids"][1]]),
                                           s["shard"](2, [s["ids"][2]], harness_version="0.0.1-other")],
                                "one harness version"),
    "buildkite-beside-slurm": (lambda s: [s["shard"](1, [s["ids"][1]], scheduler=_scheduler("buildkite", 0)),
                                          s["shard"](2, [s["ids"][2]], scheduler=_scheduler("slurm", 2))],
                               "one scheduler"),
    "a-cell-of-the-other-shard": (lambda s: [s["shard"](1, [s["ids"][1], s["ids"][2]]), s["shard"](2, [])],
                                  "shard 2/2's"),
    "a-cell-the-matrix-lacks": (lambda s: [s["shard"](1, [s["ids"][1], _extra_id(1)]), s["shard"](2, [s["ids"][2]])],
                                "does not have (2 cells)"),
}


def _extra_id(shard_i: int) -> str:
    """A cell id the pair matrix lacks that falls in shard `shard_i` of 2 (so only the matrix check can tell)."""
    from harness.matrix.shard import shard_of

    return next(f"c_x{k}" for k in range(100) if shard_of(f"c_x{k}", 2) == shard_i)


@pytest.mark.parametrize("make,words", list(MERGES.values()), ids=list(MERGES))
def test_merge_refuses_shards_that_are_not_one_run(make, words, shards, capsys, monkeypatch):
    dirs = make(shards)
    code, _, err = main(capsys, monkeypatch, "merge", *dirs, "--out", shards["out"])
    one_line(code, err, words)
    assert not shards["out"].exists(), "nothing was written"


def test_merge_takes_a_shard_rerun_by_hand_beside_the_schedulers(shards, capsys, monkeypatch):
    """Shard 2 of a Slurm array that failed, run again with `--shard 2/2`: one run still."""
    a = shards["shard"](1, [shards["ids"][1]], scheduler=_scheduler("slurm", 1))
    b = shards["shard"](2, [shards["ids"][2]])
    code, _, err = main(capsys, monkeypatch, "merge", a, b, "--out", shards["out"])
    assert code == 0, err


def test_merge_copies_a_log_folder_1200_deep(shards, capsys, monkeypatch, nests):
    a = shards["shard"](1, [shards["ids"][1]])
    b = shards["shard"](2, [shards["ids"][2]])
    nests += [a / "logs" / "nested", shards["out"]]
    (_nest(a / "logs" / "nested") / "deep.log").write_text("x")
    code, _, err = main(capsys, monkeypatch, "merge", a, b, "--out", shards["out"])
    assert code == 0 and "RecursionError" not in err, err[-2000:]
    assert (shards["out"] / "logs" / "nested").joinpath(*["d"] * DEPTH, "deep.log").read_text() == "x"
