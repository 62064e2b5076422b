"""How to split a matrix across CI runners: `--shard I/N` takes the cells whose id hashes to shard I, so the shards are
disjoint, cover every cell, and keep their cells when the matrix grows."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from harness.errors import UsageError
from harness.matrix.load import load_matrix
from harness.matrix.shard import parse_shard, shard_cells, shard_of
from harness.results.model import CellResult, Expected, GpuInfo
from harness.scale.junit import cell_properties
from tests import builders

ROOT = Path(__file__).resolve().parents[2]
FAKE = str(ROOT / "tests" / "fakes" / "fake_vllm.py")


def matrix_text(lengths: list[int], mtp: tuple[str, ...] = ("off", "mtp2", "mtp4")) -> str:
    return yaml.safe_dump({
        "name": "grid", "command": ["vllm", "serve"],
        "axes": {"max_model_len": {"flag": "--max-model-len", "values": lengths},
                 "mtp": {m: {} for m in mtp}, "floor": {"none": {}, "env": {}, "bytes": {}}},
    })


def ids(tmp_path: Path, text: str) -> list[str]:
    """The cell ids of the matrix `text`, loaded from a file as `cells` loads it."""
    path = tmp_path / f"m{len(list(tmp_path.glob('m*.yaml')))}.yaml"
    path.write_text(text)
    return [c.id for c in list(load_matrix(path).cells)]


def shard_sizes(cell_ids: list[str], n: int) -> list[int]:
    """How many of `cell_ids` each of the n shards gets, counted from `shard_of` alone."""
    sizes = [0] * n
    for cid in cell_ids:
        sizes[shard_of(cid, n) - 1] += 1
    return sizes


@pytest.mark.parametrize("text,expected", [("1/1", (1, 1)), ("2/3", (2, 3)), (" 3 / 3 ", (3, 3))])
def test_parse_shard_reads_i_of_n(text, expected):
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text,says", [("0/3", "between 1 and 3"), ("4/3", "between 1 and 3"), ("x", "expected I/N"),
                                       ("1/0", "at least 1"), ("", "expected I/N"), ("1/2/3", "expected I/N"),
                                       ("-1/2", "expected I/N")])
def test_a_bad_shard_is_a_one_line_usage_error(text, says):
    with pytest.raises(UsageError) as err:
        parse_shard(text)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_shards_are_disjoint_and_cover_every_cell(tmp_path):
    all_ids = ids(tmp_path, matrix_text([65536, 131072, 262144]))
    for n in (1, 2, 3, 5, 8):
        parts = [shard_cells(all_ids, i, n) for i in range(1, n + 1)]
        flat = [c for p in parts for c in p]
        assert sorted(flat) == sorted(all_ids) and len(flat) == len(set(flat)), n
        assert [len(p) for p in parts] == shard_sizes(all_ids, n)


def test_a_cell_keeps_its_shard_when_the_matrix_grows(tmp_path):
    before = ids(tmp_path, matrix_text([131072, 262144]))
    after = ids(tmp_path, matrix_text([65536, 131072, 262144, 524288], mtp=("off", "mtp2", "mtp4", "mtp8")))
    assert set(before) < set(after)
    for n in (2, 3, 4):
        assert {c: shard_of(c, n) for c in before} == {c: shard_of(c, n) for c in after if c in before}


def test_the_split_depends_on_ids_not_positions_and_keeps_matrix_order(tmp_path):
    all_ids = ids(tmp_path, matrix_text([131072, 262144]))
    shard = shard_cells(all_ids, 1, 2)
    assert shard == [c for c in all_ids if c in shard], "matrix order within a shard"
    assert set(shard_cells(list(reversed(all_ids)), 1, 2)) == set(shard)


def test_a_tiny_matrix_can_leave_a_shard_empty():
    sizes = shard_sizes(["a-only-cell"], 4)
    assert sum(sizes) == 1 and sizes.count(0) == 3


def fake_matrix(tmp_path: Path, scenarios: list[str]) -> Path:
    return builders.fake_matrix(tmp_path / "fake.yaml", scenarios, env={"FAKE_VLLM_DELAY": "0.05"}, linger_s=1,
                                expect=[{"where": {"scenario": "boot"}, "outcome": "booted"}])


def test_run_on_an_empty_shard_writes_an_empty_complete_run(tmp_path, capsys):
    from harness.cli import main

    path = fake_matrix(tmp_path, ["boot"])
    cells = list(load_matrix(path).cells)
    empty = next(i for i in (1, 2) if shard_of(cells[0].id, 2) != i)
    assert main(["run", "--matrix", str(path), "--shard", f"{empty}/2", "--results-dir",
                 str(tmp_path / "results")]) == 0
    assert "none of the 1 selected cells" in capsys.readouterr().err
    (run_dir,) = (tmp_path / "results").iterdir()
    run = json.loads((run_dir / "results.json").read_text())
    assert (run["status"], run["shard"], run["cells"], run["summary"]["cells"]) == ("complete", f"{empty}/2", [], 0)
    # what reads it says the run holds no cells, once, instead of a grid of no columns or "no max_model_len axis"
    said = "holds no cells (an empty shard or selection): nothing to show"
    for argv, code in ((["report", run_dir], 0), (["report", run_dir, "--markdown", "-"], 0),
                       (["analyze", run_dir], 0)):
        capsys.readouterr()
        assert main([str(a) for a in argv]) == code, argv
        out = capsys.readouterr()
        assert " ".join((out.out + out.err).split()).count(said) == 1, (argv, out.out, out.err)  # wraps at spaces
        assert "| **** |" not in out.out and "no max_model_len axis" not in out.out + out.err


def test_a_cell_becomes_junit_properties_without_the_facts_it_never_logged():
    r = CellResult(cell_id="mml4096-spec_draft", axes={}, runtime="process", argv=[], env={}, outcome="refused",
                   reason="kv_cache_too_small", expected=Expected(outcome="refused", reason="kv_cache_too_small"),
                   matched=True, gpus=[GpuInfo(index=0, name="H200", driver="570.1", total_gib=139.8, free_gib=139.2)])
    r.kv.kv_tokens = 3072
    props = dict(cell_properties(r))
    assert props["boot.outcome"] == "refused" and props["boot.reason"] == "kv_cache_too_small"
    assert props["boot.expected"] == "refused/kv_cache_too_small" and props["boot.matched"] == "true"
    assert props["boot.kv.kv_tokens"] == "3072" and "boot.kv.available_gib" not in props
    assert props["boot.gpu.0"].startswith("H200 driver 570.1")
    assert all(isinstance(v, str) for v in props.values())


def test_the_pytest_plugin_takes_a_shard_and_writes_junit_properties(tmp_path):
    path = fake_matrix(tmp_path, ["boot", "crash", "refuse"])
    cells = [c.id for c in list(load_matrix(path).cells)]
    n = 2
    mine = shard_cells(cells, 1, n)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(ROOT / "tests" / "test_boot_matrix.py"), "--boot-matrix", str(path),
         "--boot-shard", f"1/{n}", "--boot-results-dir", str(tmp_path / "results"),
         "--junitxml", str(tmp_path / "j.xml"), "-o", "junit_family=xunit1", "-p", "no:cacheprovider", "-q",
         f"--rootdir={ROOT}"],
        capture_output=True, text=True, cwd=ROOT, timeout=120)
    cases = ET.parse(tmp_path / "j.xml").getroot().iter("testcase")
    seen = {}
    for case in cases:
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        seen[props.get("boot.cell_id")] = props
    assert sorted(seen) == sorted(mine), proc.stdout[-2000:]
    for props in seen.values():
        assert props["boot.outcome"] in ("booted", "crashed", "refused") and "boot.verdict_s" in props
    (run_dir,) = (tmp_path / "results").iterdir()
    assert json.loads((run_dir / "results.json").read_text())["shard"] == f"1/{n}"
