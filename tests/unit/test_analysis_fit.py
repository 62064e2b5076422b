"""How `analyze` reads a run: KV need and cap lines against max_model_len, their crossover, the floor that boots a
refusal, and the numbers that contradict their outcome. Synthetic runs built with the real pydantic models."""

from __future__ import annotations

import json

import pytest

from harness.analysis.fit import Point, analyze_run, crossover, least_squares
from harness.analysis.kv import cap_of, length_axis
from harness.errors import UsageError
from harness.units import GIB, human_int, read_human_int
from tests.cli import in_process as cli
from tests.helpers.serve_flags import harness_reads
from tests.synthetic import cpu_cell, cpu_example_run, make_cell, make_run, seed_run, write_run


def group(analysis, **key):
    return next(g for g in analysis.groups if all(g.key.get(k) == v for k, v in key.items()))


# ---------------------------------------------------------------- the seed's numbers


def test_the_seed_measurements_give_back_the_seeds_slopes_fixed_part_and_crossover():
    g = group(analyze_run(seed_run()), mtp="mtp4")
    assert g.cap_line.slope == pytest.approx(13_845, abs=5), "cap grows ~13,845 B/token"
    assert g.need_line.slope == pytest.approx(12_700, abs=10), "need grows ~12,700 B/token"
    assert g.need_line.intercept / GIB == pytest.approx(0.52, abs=0.005), "need has ~0.52 GiB fixed"
    assert g.cap_line.intercept / GIB == pytest.approx(0.05, abs=0.005)
    assert g.cross.kind == "above", "the cap overtakes the need as the length grows"
    assert 430_000 <= g.cross.length <= 450_000, "the lines cross near 440k tokens"


def test_the_seeds_boot_whose_need_exceeds_its_cap_is_flagged_not_hidden():
    a = analyze_run(seed_run())
    flagged = [f for f in a.findings if f.severity == "inconsistent"]
    assert [f.cell_id for f in flagged] == ["mml131072-mtp_off-floor_none"]
    assert "exceeds its cap" in flagged[0].text and "1.86 GiB" in flagged[0].text and "1.74 GiB" in flagged[0].text


def test_a_group_with_one_length_says_so_instead_of_guessing_a_line():
    g = group(analyze_run(seed_run()), mtp="off")
    assert g.need_line is None and g.cap_line is None
    assert "a line needs two lengths" in g.need_why
    assert g.cross.kind == "unknown"


def test_each_refusal_gets_a_floor_ready_to_paste_that_covers_the_need_beyond_rounding():
    g = group(analyze_run(seed_run()), mtp="mtp4")
    f = next(f for f in g.floors if f.length == 131072)
    # "2.07 GiB needed" is anything in [2.065, 2.075): the floor must cover the top of it.
    assert f.floor_bytes >= 2.075 * GIB
    assert f.floor_gib == "2.08" and int(float(f.floor_gib) * GIB) >= f.floor_bytes
    assert f.paste() == ["CLAV_KV_RESERVE_FLOOR_GIB=2.08", f"--kv-cache-memory-bytes {f.floor_bytes}"]
    assert f.vllm_estimate == 110_080 and f.fitted_max_len is not None
    assert any("gpu_worker-kv-cap.patch" in n for n in f.notes), "the floor only lifts the fork's cap when patched"


# ---------------------------------------------------------------- the CPU example (docs/cpu-calibration.md)


def test_on_the_cpu_the_fits_recover_the_bytes_per_token_from_token_counts_and_estimates():
    a = analyze_run(cpu_example_run())
    assert a.length_axis == "max_model_len"
    off, draft = group(a, spec="off", kv="tight"), group(a, spec="draft", kv="tight")
    assert off.block == 128 and off.block_source == "CPU backend"
    assert off.need_line.slope == pytest.approx(1024) and draft.need_line.slope == pytest.approx(2048)
    assert off.cap_line.slope == 0 and off.cap_line.intercept == 3 * 2**20, "the explicit KV bytes, exactly"
    assert (off.cross.kind, off.cross.length) == ("below", 2944)
    assert (draft.cross.kind, draft.cross.length) == ("below", 1408), "the draft halves what fits in 3 MiB"


def test_the_cpu_floor_is_the_measured_edge_to_the_byte():
    f = next(f for f in group(analyze_run(cpu_example_run()), spec="draft", kv="tight").floors if f.length == 2048)
    assert f.floor_bytes == 4_456_448, "docs/cpu-calibration.md: 4456448 boots, 4456447 refuses"
    assert f.vllm_estimate == f.fitted_max_len == 1408


def test_gib_figures_printed_as_0_0_are_left_out_of_the_fit_and_said_so():
    # The same refusals without the explicit byte count: only the refusal's GiB figures (0.0 / 0.01) remain.
    cells = [cpu_cell(n, "draft", "tight", 3 * 2**20) for n in (2048, 4096)]
    for c in cells:
        c.argv = [a for a in c.argv if a not in ("--kv-cache-memory-bytes", str(3 * 2**20))]
    g = analyze_run(make_run("coarse", cells)).groups[0]
    assert g.need_line is None and g.cap_line is None
    assert any("too coarsely" in f.text for f in g.findings)


# ---------------------------------------------------------------- the pieces


def test_least_squares_reports_its_residuals_when_there_are_more_points_than_unknowns():
    pts = [Point(1000, 1000.0, "a", "x"), Point(2000, 2100.0, "b", "x"), Point(3000, 2900.0, "c", "x")]
    line = least_squares(pts)
    assert line.slope == pytest.approx(0.95) and "least squares over 3 points" in line.method
    assert line.max_residual > 0 and sum(p.residual for p in pts) == pytest.approx(0)
    assert least_squares(pts[:1]) is None


@pytest.mark.parametrize(("cap", "need", "kind"), [
    ((2.0, 100.0), (1.0, 200.0), "above"),   # (bytes/token, fixed): the cap grows faster and starts lower
    ((2.0, 300.0), (1.0, 200.0), "always"),
    ((0.0, 300.0), (1.0, 200.0), "below"),   # a fixed cap: lengths up to where the need reaches it fit
    ((0.0, 100.0), (1.0, 200.0), "never"),
])
def test_the_crossover_says_which_side_fits(cap, need, kind):
    line = lambda s, i: least_squares([Point(0, i, "a", ""), Point(100, i + 100 * s, "b", "")])  # noqa: E731 - a one-line helper
    assert crossover(line(*cap), line(*need)).kind == kind


def test_a_refusal_below_a_boot_is_not_monotonic_and_is_flagged():
    cells = [cpu_cell(2048, "off", "tight", 3 * 2**20), cpu_cell(1024, "off", "tight", 3 * 2**20)]
    cells[1] = cells[1].model_copy(update={"outcome": "refused", "reason": "kv_cache_too_small"})
    findings = analyze_run(make_run("odd", cells)).findings
    assert any("not monotonic" in f.text for f in findings)


def test_the_length_axis_is_found_by_name_by_flag_or_given():
    assert length_axis(seed_run()) == "max_model_len"
    cells = [make_cell(f"len{n}", {"len": str(n)}, "booted", argv=["x", "--max-model-len", str(n)]) for n in (1, 2)]
    assert length_axis(make_run("r", cells)) == "len"
    with pytest.raises(UsageError, match="no such axis"):
        length_axis(seed_run(), "nope")
    with pytest.raises(UsageError, match="no max_model_len axis"):
        analyze_run(make_run("r", [make_cell("a", {"image": "x"}, "booted")]))


def test_human_lengths_read_like_vllm_reads_them():
    assert [human_int(v) for v in ("131072", "128k", "128K", "4G", "25.6k", "1.5K", "x")] == \
        [131072, 128000, 131072, 4 * 2**30, 25600, None, None]


def test_the_harness_and_the_release_aware_flags_read_one_human_int():
    """units.read_human_int is the one reader: human_int is it for the newest release, serve_flags asks it with the
    release's rule (t/T from 0.13.0) and words its refusals."""
    assert read_human_int(" 1T ") == human_int("1T") == 2**40 and read_human_int("2t") == 2 * 10**12
    with pytest.raises(ValueError):
        read_human_int("1T", tera=False)  # before 0.13.0 a tera suffix falls through to int()
    with pytest.raises(ValueError, match=r"no decimals with a binary suffix \(did you mean 1.5k\?\)"):
        read_human_int("1.5K")
    assert harness_reads(["--max-model-len", "1.5K"], "0.32.0") == \
        "refused: --max-model-len '1.5K': no decimals with a binary suffix (did you mean 1.5k?)"
    assert harness_reads(["--max-model-len", "1T"], "0.12.0") == \
        "refused: --max-model-len '1T': not a number vLLM 0.12.0 reads (131072, 128k, 128K)"
    assert harness_reads(["--max-model-len", "1T"], "0.13.0") == {"max_model_len": 2**40}


def test_the_fork_cap_wins_over_an_unpatched_explicit_kv_request():
    c = make_cell("c", {"m": "1"}, "refused", argv=["--kv-cache-memory-bytes", "4G"], kv={"offload_cap_gib": 1.74})
    assert cap_of(c).source == "offload cap (log)"
    assert cap_of(c.model_copy(update={"kv": c.kv.model_copy(update={"offload_cap_gib": None})})).bytes == 4 * GIB


def test_analyze_prints_the_fit_and_writes_json(tmp_path, capsys):
    run_dir = write_run(seed_run(), tmp_path)
    assert cli("analyze", str(run_dir)) == 0
    text = capsys.readouterr().out
    assert "12,698 B/token" in text and "440," in text and "CLAV_KV_RESERVE_FLOOR_GIB=2.08" in text
    assert cli("analyze", str(run_dir / "results.json"), "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    g = next(g for g in doc["groups"] if g["group"]["mtp"] == "mtp4")
    assert round(g["need"]["bytes_per_token"]) == 12698 and g["crossover"]["kind"] == "above"
    assert cli("analyze", str(tmp_path / "missing")) == 2


def test_a_logged_kv_floor_is_the_cap_not_the_flag_it_overrode():
    c = make_cell("c", {"m": "1"}, "booted", argv=["--kv-cache-memory-bytes", "3145728"],
                  kv={"floor_raised_bytes": 5368709})
    assert (cap_of(c).bytes, cap_of(c).source) == (5368709, "KV floor (log)")
    unpatched = c.model_copy(update={"kv": c.kv.model_copy(update={"floor_raised_bytes": None})})
    assert (cap_of(unpatched).bytes, cap_of(unpatched).source) == (3145728, "--kv-cache-memory-bytes")


def _with_prediction(cell, bytes_per_token: int):
    """The cell as if the predictor had modelled `bytes_per_token` and no per-sequence state (the fork's plan)."""
    from harness.predict.prediction import KvPrediction, PredictionRecord

    length = int(cell.axes["max_model_len"])
    need = bytes_per_token * length
    p = KvPrediction(vllm_version="0.30.1", model="/models/glm", max_model_len=length, dtype="bfloat16",
                     kv_cache_dtype="bfloat16", block_size=16, bytes_per_token=bytes_per_token, bytes_per_block=16 *
                     bytes_per_token, blocks_per_request=length // 16, need_bytes=need, groups=[])
    return cell.model_copy(update={"prediction": PredictionRecord(prediction=p)})


def test_a_prediction_without_the_state_term_is_told_apart_from_a_per_token_error():
    """The seed's case: the plan modelled ~13,600 B/token and nothing per sequence; the boots say 12,698 B/token and a
    0.52 GiB fixed term. analyze names both terms: the slope and the missing intercept."""
    run = seed_run()
    run = run.model_copy(update={"cells": [_with_prediction(c, 13_600) for c in run.cells]})
    g = next(g for g in analyze_run(run).groups if g.key.get("mtp") == "mtp4")
    assert g.predicted_line is not None and round(g.predicted_line.slope) == 13_600
    texts = [f.text for f in g.findings if f.severity == "inconsistent"]
    assert any(t.startswith("slope:") and "over-modelled" in t for t in texts), texts
    assert any(t.startswith("intercept:") and "+0.52 GiB" in t and "lacks" in t for t in texts), texts
    assert analyze_run(run).output().groups[1].predicted_need.bytes_per_token == 13_600


def test_a_prediction_that_matches_the_boots_raises_no_finding():
    run = seed_run()
    line = next(g for g in analyze_run(run).groups if g.need_line).need_line
    cells = []
    for c in run.cells:
        c = _with_prediction(c, 1)
        p = c.prediction.prediction
        need = round(line.at(p.max_model_len))
        cells.append(c.model_copy(update={"prediction": c.prediction.model_copy(update={
            "prediction": p.model_copy(update={"need_bytes": need})})}))
    g = next(g for g in analyze_run(run.model_copy(update={"cells": cells})).groups if g.need_line)
    assert not [f for f in g.findings if f.text.startswith(("slope:", "intercept:"))]
