"""How `compare` reads runs: pairs within one run that differ in one axis, and two runs cell by cell — regressions
(exit 1, for nightly CI), fixes, cells in one run only, and KV drift beyond a tolerance."""

from __future__ import annotations

import json

import pytest

from harness.analysis.compare import compare_runs, pairs_within, parse_tolerance
from harness.errors import UsageError
from tests.synthetic import cpu_cell, cpu_example_run, make_cell, make_run, write_run
from tests.unit.test_analysis_frontier import cli

MIB = 2**20


def image_run():
    """Two images × two lengths: the new image tips 4096 into a KV refusal and logs a smaller pool at 2048."""
    cells = []
    for image, per_token in (("old", 1024), ("new", 2048)):
        for n in (2048, 4096):
            c = cpu_cell(n, "off", "tight", 6 * MIB, per_token=per_token)
            cells.append(c.model_copy(update={"cell_id": f"mml{n}-image_{image}",
                                              "axes": {"max_model_len": str(n), "image": image}}))
    return make_run("images", cells)


def test_pairs_differing_only_in_the_image_come_flipped_first_with_their_kv_differences():
    pairs = pairs_within(image_run())
    assert [(p.shared["max_model_len"], p.flipped) for p in pairs] == [("4096", True), ("2048", False)]
    flipped = pairs[0]
    assert (flipped.a.outcome, flipped.b.outcome) == ("booted", "refused")
    tokens = next(n for n in flipped.numbers if n.name == "KV tokens")
    assert (tokens.a, tokens.b) == (6144, None)
    same = next(n for n in pairs[1].numbers if n.name == "KV tokens")
    assert (same.a, same.b, same.delta) == (6144, 3072, -3072)
    cap = next(n for n in pairs[1].numbers if n.name == "cap")
    assert cap.delta == 0


def test_pairs_can_differ_in_any_axis_and_a_missing_axis_is_a_usage_error():
    pairs = pairs_within(cpu_example_run(), axis="spec")
    assert {p.shared["max_model_len"] for p in pairs} == {"2048", "4096"}
    assert all(p.shared["kv"] == "tight" for p in pairs), "kv=raised has no spec=off partner"
    with pytest.raises(UsageError, match="no `image` axis"):
        pairs_within(cpu_example_run())
    with pytest.raises(UsageError, match="no such axis"):
        pairs_within(cpu_example_run(), axis="gpu")


def nightly(**changes):
    """The CPU example's run, with cells replaced by id."""
    base = cpu_example_run("b")
    cells = [changes.get(c.cell_id, c) for c in base.cells]
    return make_run("b", [c for c in cells if c is not None])


def test_a_boot_that_stops_booting_is_a_regression_and_the_reverse_a_fix():
    a = cpu_example_run("a")
    broke = a.cells[0].model_copy(update={"outcome": "crashed", "reason": "exited", "matched": False})
    fixed = a.cells[1].model_copy(update={"outcome": "booted", "reason": "ready", "matched": None})
    d = compare_runs(a, nightly(**{broke.cell_id: broke, fixed.cell_id: fixed}))
    assert [c.cell_id for c in d.regressions] == [broke.cell_id] and d.has_regression
    assert "booted → crashed" in d.regressions[0].why
    assert [c.cell_id for c in d.fixes] == [fixed.cell_id]
    assert d.unchanged == 4
    # A boot where the matrix still expects a refusal is a new mismatch: the gate holds until the expectation moves.
    surprise = fixed.model_copy(update={"matched": False})
    assert [c.cell_id for c in compare_runs(a, nightly(**{fixed.cell_id: surprise})).regressions] == [fixed.cell_id]


def test_a_new_mismatch_is_a_regression_even_without_a_boot_lost():
    a = cpu_example_run("a")
    c = a.cells[1]  # refused (kv_cache_too_small), as expected
    d = compare_runs(a, nightly(**{c.cell_id: c.model_copy(update={"reason": "cuda_oom_unknown", "matched": False})}))
    assert [x.cell_id for x in d.regressions] == [c.cell_id] and "fails its expectation" in d.regressions[0].why


def test_cells_in_one_run_only_are_listed_and_a_new_failing_cell_gates():
    a = cpu_example_run("a")
    extra = make_cell("mml8192-spec_off-kv_tight", {"max_model_len": "8192", "spec": "off", "kv": "tight"}, "refused",
                      refusal={"kind": "kv_cache_too_small", "max_seq_len": 8192}, expected=("booted", None))
    b = nightly(**{a.cells[5].cell_id: None})
    b.cells.append(extra)
    d = compare_runs(a, b)
    assert [c.cell_id for c in d.only_a] == [a.cells[5].cell_id]
    assert [c.cell_id for c in d.only_b] == [extra.cell_id]
    assert [c.cell_id for c in d.regressions] == [extra.cell_id]


def test_kv_numbers_that_move_beyond_the_tolerance_drift_and_rounding_does_not():
    a = make_run("a", [make_cell("c", {"m": "1"}, "booted", kv={"available_gib": 10.0, "kv_tokens": 100_000,
                                                               "model_load_gib": 0.01})])
    b = make_run("b", [make_cell("c", {"m": "1"}, "booted", kv={"available_gib": 10.1, "kv_tokens": 97_000,
                                                               "model_load_gib": 0.02})])
    d = compare_runs(a, b, 0.02)
    assert [x.field for x in d.drift] == ["kv.kv_tokens"], "1 % of GiB is inside 2 %; 0.01 GiB is print rounding"
    assert d.drift[0].rel == pytest.approx(-0.03), "relative to A"
    assert not d.has_regression
    assert [x.field for x in compare_runs(a, b, 0.005).drift] == ["kv.available_gib", "kv.kv_tokens"]


@pytest.mark.parametrize(("text", "value"), [("2%", 0.02), ("2", 0.02), ("0.02", 0.02), ("0", 0.0)])
def test_tolerance_reads_percent_or_fraction(text, value):
    assert parse_tolerance(text) == pytest.approx(value)


def test_the_command_exits_1_on_a_regression_0_without_and_speaks_json(tmp_path, capsys):
    a = cpu_example_run("night-1")
    broke = a.cells[0].model_copy(update={"outcome": "timeout", "reason": "deadline", "matched": False})
    b = make_run("night-2", [broke, *a.cells[1:]])
    da, db = write_run(a, tmp_path), write_run(b, tmp_path)
    assert cli("compare", str(da), str(da)) == 0
    capsys.readouterr()
    assert cli("compare", str(da), str(db)) == 1
    assert "REGRESSIONS" in capsys.readouterr().out
    assert cli("compare", str(da), str(db), "--json") == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["has_regression"] and doc["regressions"][0]["cell_id"] == broke.cell_id
    assert cli("compare", str(db), str(da)) == 0, "the way back is a fix"
    capsys.readouterr()
    assert cli("compare", str(da), "--axis", "spec", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["axis"] == "spec" and [p["flipped"] for p in doc["pairs"]] == [True, False]
    assert cli("compare", str(da), str(db), "--tolerance", "lots") == 2
    assert cli("compare", str(da)) == 2, "no image axis: say so, exit 2"
