"""The runs shipped in examples/runs/ (the CPU example booted for real, night after night, by
scripts/record-example-runs.sh): what a new user reads before setting anything up (README, "Try it in a minute").
They stay readable by the current schema and loader, whole, each with its server logs, memory curves and the matrix it
ran, and tell the story the README promises: night 1 meets every expectation; night 2 trims the raised KV pool to
7 MiB, so the 4096-token draft cell is refused (a regression, a missed expectation); night 3 also drops
--enforce-eager, so every boot compiles first and is slower. report, compare, history and check each show it, with
the exit codes the README's comments say (its commands are run here as written, in-process)."""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path

import pytest

from harness.cli import main
from harness.results.store import load_run
from harness.verdict.catalogue import Outcome, Reason

ROOT = Path(__file__).resolve().parents[2]
RUNS = sorted((ROOT / "examples" / "runs").glob("cpu-tiny-night*"))
FLIPPED = "mml4096-spec_draft-kv_raised"


@pytest.fixture(scope="module")
def nights():
    return [load_run(d)[0] for d in RUNS]


def run_cli(capsys, monkeypatch, *args: str) -> tuple[int, str]:
    """`boot-harness ARGS` from the checkout's root, through a pipe 200 columns wide: (exit code, stdout + stderr)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_three_nights_are_shipped_whole_with_their_logs_curves_and_matrices(nights):
    assert [d.name for d in RUNS] == ["cpu-tiny-night1", "cpu-tiny-night2", "cpu-tiny-night3"]
    for run_dir, run in zip(RUNS, nights, strict=False):
        assert run.status == "complete" and len(run.cells) == 6, run_dir
        assert sorted(p.name for p in run_dir.iterdir()) == ["cells", "logs", "matrix.yaml", "results.json"]
        assert hashlib.sha256((run_dir / "matrix.yaml").read_bytes()).hexdigest() == run.matrix.sha256, \
            "matrix.yaml is the very file the night ran"
        for cell in run.cells:
            assert cell.log_path and (run_dir / cell.log_path).is_file(), (run_dir, cell.cell_id)
            assert cell.memory is not None and len(cell.memory.samples) >= 20 and cell.memory.peak_bytes, \
                (run_dir.name, cell.cell_id, "a memory curve in every cell")
            assert cell.vllm_version and cell.prediction is not None
    size = sum(p.stat().st_size for p in (ROOT / "examples" / "runs").rglob("*") if p.is_file())
    assert size < 2_000_000, f"examples/runs is {size:,} bytes: keep it small"


def test_night_one_tells_the_example_s_story_every_expectation_met(nights):
    cells = {c.cell_id: c for c in nights[0].cells}
    assert all(c.matched for c in cells.values()), [(c.cell_id, c.outcome) for c in cells.values() if not c.matched]
    tight = cells["mml4096-spec_draft-kv_tight"]
    assert (tight.outcome, tight.reason) == (Outcome.refused, Reason.kv_cache_too_small)
    assert tight.refusal is not None and tight.refusal.estimated_max_model_len, "the refusal's own numbers"
    assert cells[FLIPPED].outcome == Outcome.booted
    assert all("--enforce-eager" in c.argv for c in cells.values())


def test_night_two_trims_the_raised_pool_and_one_cell_flips(nights):
    one, two = ({c.cell_id: c for c in n.cells} for n in nights[:2])
    assert "7340032" in two[FLIPPED].argv and "10485760" in one[FLIPPED].argv
    assert (two[FLIPPED].outcome, two[FLIPPED].reason, two[FLIPPED].matched) == \
        (Outcome.refused, Reason.kv_cache_too_small, False)
    assert all(two[c].outcome == one[c].outcome and two[c].matched for c in one if c != FLIPPED)


def test_night_three_compiles_every_boot_and_is_slower(nights):
    two, three = ({c.cell_id: c for c in n.cells} for n in nights[1:])
    for cid, c in three.items():
        assert "--enforce-eager" not in c.argv
        assert c.timeline.milestones.compiled is not None or c.timeline.durations.compile_s, (cid, "a compile phase")
        assert c.timings.verdict_s > two[cid].timings.verdict_s, (cid, "slower than night 2")
    assert three[FLIPPED].matched is False, "still the missed expectation of night 2"


# ---------------------------------------------------------------- the README's commands, as written

def readme_commands() -> list[tuple[str, str]]:
    """(command, its comment) of the "Try it in a minute" block."""
    text = (ROOT / "README.md").read_text()
    start = text.index("Try it in a minute")
    block = text[text.index("```bash\n", start) + 8:text.index("```", text.index("```bash\n", start) + 8)]
    out = []
    for line in block.splitlines():
        command, _, comment = line.partition("#")
        out.append((command.strip(), comment.strip()))
    return out


def test_the_readme_block_reads_the_shipped_nights():
    commands = readme_commands()
    assert [shlex.split(c)[1] for c, _ in commands] == ["report", "analyze", "compare", "check", "history", "facts"]
    for command, _ in commands:
        for path in shlex.split(command)[2:]:
            assert (ROOT / path).exists(), f"{command}: {path} is not shipped"


@pytest.mark.parametrize("i", range(6), ids=["report", "analyze", "compare", "check", "history", "facts"])
def test_each_readme_command_does_what_its_comment_says(i, capsys, monkeypatch):
    command, comment = readme_commands()[i]
    args = shlex.split(command)[1:]
    code, out = run_cli(capsys, monkeypatch, *args)
    said = re.search(r"exit (\d)", comment)
    assert code == (int(said.group(1)) if said else 0), (command, comment, out[-2000:])
    flat = " ".join(out.split())
    if args[0] == "report":  # the missed expectation, the compile phase, the curves
        assert "✗ expected booted" in flat and "torch.compile" in flat and "mem peak" in flat
    elif args[0] == "analyze":
        assert f"floor for {FLIPPED}: 8.25 MiB" in flat
    elif args[0] == "compare":
        assert "1 regression(s)" in flat and f"{FLIPPED} booted (ready) ✓ refused (kv_cache_too_small) ✗" in flat
        assert "TIME REGRESSIONS" in flat and "torch.compile" in flat
    elif args[0] == "check":
        assert f"{FLIPPED}: refused (kv_cache_too_small), expected booted" in flat and "FAIL" in flat
    elif args[0] == "history":
        assert "●◐◐" in flat and "argv 10485760 → 7340032" in flat and f"MISSED {FLIPPED}" in flat
    else:
        assert "kv_cache_too_small" in flat or "KV" in flat
