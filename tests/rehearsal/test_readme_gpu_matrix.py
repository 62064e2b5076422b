"""The README's GPU block, typed literally from the repo root with its default (relative) paths, on the stand-in fork
image: matrix.yaml as shipped, the seed's patch byte for byte. What it must show is the seed's story, told by the
harness itself: without MTP the plan's reserve holds the need and the server boots; with MTP the draft's KV tips it
into "To serve at least one request ..." at both lengths; an operator floor changes nothing on the unpatched worker and
boots both lengths on the patched one. Between cells the GPU (a stand-in NVML) is waited for."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli import boot_harness
from tests.helpers.boots import boots_in_a_shell, check_timeline
from tests.helpers.env import ROOT
from tests.helpers.rehearsal import STUB_HOOK_LOG, new_run_dirs

README = ROOT / "README.md"
RESULTS = ROOT / "results"
#: Lines of the block that are the user's own setup, stood in by the `standin` fixture's environment.
SETUP_LINES = ("pip install -e .", "export GLM_MODEL_DIR=")


def readme_gpu_block() -> list[str]:
    text = README.read_text()
    section = text[text.index("## The GPU matrix"):]
    block = section[section.index("```bash\n") + len("```bash\n"):section.index("\n```", section.index("```bash"))]
    return [re.sub(r"\s{2,}#.*$", "", line).strip() for line in block.splitlines() if line.strip()]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def containers() -> set[str]:
    return set(subprocess.run(["docker", "ps", "-aq"], capture_output=True, text=True).stdout.split())


@pytest.fixture(scope="module")
def readme(standin):
    """Every `boot-harness` line of the block, run as a user types it, in order; what each printed."""
    lines = readme_gpu_block()
    commands = [ln for ln in lines if ln.startswith("boot-harness ")]
    assert [ln for ln in lines if ln not in commands] and all(
        ln.startswith(SETUP_LINES) for ln in lines if ln not in commands), lines
    env = {**__import__("os").environ, **standin}
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}:{env['PATH']}"
    before = {p.parent for p in RESULTS.glob("*/results.json")}
    runs: dict[str, subprocess.CompletedProcess] = {}
    seen: dict[str, tuple] = {}
    try:
        for command in commands:
            snapshot = (containers(), sorted(RESULTS.iterdir()), subprocess.run(
                ["git", "status", "--porcelain", "--ignored", "patches", "results"], cwd=ROOT, capture_output=True,
                text=True).stdout)
            runs[command] = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True,
                                           text=True, timeout=1800)
            seen[command] = snapshot
        run_dirs = new_run_dirs(RESULTS, before)
        yield commands, runs, seen, run_dirs, env
    finally:
        for p in new_run_dirs(RESULTS, before):
            shutil.rmtree(p.parent, ignore_errors=True)
        shutil.rmtree(RESULTS / "repro", ignore_errors=True)


def by_verb(readme, verb: str) -> list[tuple[str, subprocess.CompletedProcess]]:
    commands, runs, *_ = readme
    return [(c, runs[c]) for c in commands if c.split()[1] == verb]


def the_run(readme) -> dict:
    run_dirs = readme[3]
    assert len(run_dirs) == 1, run_dirs
    return json.loads(run_dirs[0].read_text())


def test_every_command_of_the_block_succeeds(readme):
    for command, proc in readme[1].items():
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        assert "Traceback" not in proc.stderr, command


def test_validate_and_cells_show_the_twelve_cells_of_the_patched_vs_unpatched_matrix(readme):
    (_, validate), = by_verb(readme, "validate")
    assert "12 cells on 4 axes, 11 with an expectation" in validate.stdout
    (_, cells), = by_verb(readme, "cells")
    ids = cells.stdout.split()
    assert len(ids) == 12 and "mml262144-mtp4-floor_bytes-image_patched" in ids


def test_the_dry_run_prints_every_cell_and_touches_nothing(readme):
    commands, runs, seen, *_ = readme
    dry = next(c for c in commands if "--dry-run" in c)
    after = commands[commands.index(dry) + 1]
    assert seen[dry] == seen[after], "a dry run created a container, a run directory or a file under patches/"
    out = runs[dry].stdout
    assert out.count("docker run --rm --init") == 12 and "--gpus all" in out
    assert "would copy /opt/vllm/lib/python3.14/site-packages/vllm/v1/worker/gpu_worker.py out of" in out
    assert "GNU patch -p1 --batch --forward" in out


def test_the_run_tells_the_seeds_story_on_the_stand_in(readme, standin):
    run = the_run(readme)
    cells = {c["cell_id"]: c for c in run["cells"]}
    assert run["status"] == "complete" and len(cells) == 12
    assert run["summary"]["matched"] == 11 and run["summary"]["mismatched"] == 0 and run["summary"]["error"] == 0
    # the seed's table: no MTP boots under the cap, MTP refuses at both lengths, numbers parsed
    assert cells["mml131072-mtp_off-floor_none-image_unpatched"]["outcome"] == "booted"
    for length in (131072, 262144):
        refused = cells[f"mml{length}-mtp4-floor_none-image_unpatched"]
        assert (refused["outcome"], refused["reason"]) == ("refused", "kv_cache_too_small")
        r = refused["refusal"]
        assert r["max_seq_len"] == length and r["needed_gib"] > r["available_gib"]
        assert r["available_gib"] == refused["kv"]["offload_cap_gib"], "what refuses is the plan's cap"
        # the patch's effect: the same floors refuse unpatched and boot patched
        for floor in ("env", "bytes"):
            unpatched, patched = (cells[f"mml{length}-mtp4-floor_{floor}-image_{i}"] for i in ("unpatched", "patched"))
            assert (unpatched["outcome"], unpatched["reason"]) == ("refused", "kv_cache_too_small")
            assert unpatched["refusal"]["available_gib"] == r["available_gib"], "unpatched, the floor is ignored"
            assert patched["outcome"] == "booted" and patched["kv"]["kv_tokens"] * 13312 >= 4 * 2**30 - 13312 * 128
    for c in cells.values():
        assert c["container"]["engine"] == "docker" and c["container"]["image"] == standin["FORK_IMAGE"]


def test_every_cell_records_its_gpu_memory_curve_through_nvml_with_the_neighbour_told_apart(readme):
    """The code a GPU runner runs: NVML (the stand-in, scripted) per GPU of the cell, the server's own processes
    matched by host PID through the engine's State.Pid, a neighbour's process not counted as the server's."""
    gib = 1 << 30
    topped = 0
    for cell in the_run(readme)["cells"]:
        mem = cell["memory"]
        assert mem["source"] == "nvml" and mem["stopped"] is None, (cell["cell_id"], mem["stopped"])
        (gpu,) = mem["devices"]
        assert gpu["total_bytes"] == int(139.8 * gib) == mem["limit_bytes"]
        # the scripted curve counts from the server's own start, which precedes the `started` milestone: a sample
        # taken 6 s or more after that milestone saw the curve's top
        started = cell["timeline"]["milestones"]["started"]
        if any(t - started >= 6 for t, _ in mem["samples"]):
            assert mem["peak_bytes"] == gpu["peak_server_bytes"] == 118 * gib, cell["cell_id"]
            topped += 1
        else:  # a step of the curve (or none, if the server went before the stand-in's poll saw it)
            assert mem["peak_bytes"] == gpu["peak_server_bytes"] in {g * gib for g in (0, 1, 40, 90)}, cell["cell_id"]
        assert gpu["peak_others_bytes"] >= 2 * gib, "the neighbour (and idle) are not the server's"
        assert mem["headroom_bytes"] == int(gpu["total_bytes"] * 0.9) - gpu["peak_server_bytes"]
        assert mem["samples"] and all(0 <= t <= cell["timings"]["total_s"] for t, _ in mem["samples"])
    assert topped, "no cell lived long enough to show the curve's top: real vLLM boots take 20 s and more here"


def test_every_cell_of_the_gpu_matrix_carries_its_timeline(readme):
    """The README's run on the stand-in: each cell's milestones from the image present to the verdict, and the
    durations its log printed; the run's report shows them per cell and which phase dominated."""
    run_dir = readme[3][0].parent
    for cell in the_run(readme)["cells"]:
        check_timeline(cell, run_dir / "logs" / f"{cell['cell_id']}.log")
        assert cell["timeline"]["milestones"]["pulled"] is not None
    from harness.report.build import build_report
    from harness.results.store import load_run

    rep = build_report(load_run(run_dir)[0], plot=False)
    html, md = rep.html(), rep.markdown()
    assert html.count('class="row" id="timeline-') == 12 and "boot time in 12 cells:" in html
    assert "### Boot timeline" in md and md.count("| mml") >= 12


def test_the_shipped_patch_was_applied_byte_for_byte_by_gnu_patch(readme, standin, tmp_path):
    run_dir = readme[3][0].parent
    patched_cells = [c for c in the_run(readme)["cells"] if c["axes"]["image"] == "patched"]
    assert len(patched_cells) == 4
    for c in patched_cells:
        (p,) = c["patches"]
        assert p["warnings"] == ["Hunk #1 succeeded at 824 with fuzz 1."], "the seed's file ends without a newline"
        kept = run_dir / p["patched_file"]
        assert sha(kept) == p["patched_sha256"] == standin["KV_CAP_PATCHED_SHA256"]
        original = kept.with_name(kept.name + ".orig")
        assert sha(original) == standin["KV_CAP_BASE_SHA256"]
    # GNU patch run by hand the seed's way on the pristine file the harness copied out of the image: the same bytes
    d = tmp_path / "D" / "vllm" / "v1" / "worker"
    d.mkdir(parents=True)
    shutil.copy(original, d / "gpu_worker.py")
    with (ROOT / "patches" / "gpu_worker-kv-cap.patch").open("rb") as stdin:
        subprocess.run(["patch", "-p1"], cwd=tmp_path / "D", stdin=stdin, check=True, capture_output=True)
    assert (d / "gpu_worker.py").read_bytes() == kept.read_bytes()


def test_every_cell_waited_for_the_gpu_to_be_idle_and_recorded_it(readme):
    run_dir = readme[3][0].parent
    run = the_run(readme)
    waits = []
    for c in run["cells"]:
        assert c["gpus"] and c["gpus"][0]["name"] == "NVIDIA H200 (stand-in NVML)", c["cell_id"]
        log = (run_dir / c["log_path"]).read_text()
        m = re.search(r"before start: GPUs at their idle baseline \(waited ([\d.]+) s\)", log)
        assert m, c["cell_id"]
        waits.append(float(m.group(1)))
    # the stand-in keeps memory used 3 s after a server is gone: every cell after the first waited for it
    assert all(w >= 1.0 for w in waits[1:]), waits


def test_every_cells_container_got_the_gpu_request_from_docker_itself(readme):
    """dockerd's nvidia device driver put NVIDIA_VISIBLE_DEVICES=all into each cell's container spec and ran the
    (stub) nvidia-container-runtime-hook for it, which logged both."""
    seen = {}
    for line in STUB_HOOK_LOG.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 4:
            seen[parts[2]] = parts[3]
    for c in the_run(readme)["cells"]:
        assert seen.get(c["container"]["container_id"]) == "NVIDIA_VISIBLE_DEVICES=all", c["cell_id"]


def test_compare_on_the_image_axis_shows_what_the_patch_changes(readme, standin):
    run_dir = readme[3][0].parent
    proc = boot_harness("compare", run_dir, "--axis", "image", "--json", program=[str(ROOT / ".venv/bin/boot-harness")],
                        env=readme[4], inherit_env=False)
    assert proc.returncode == 0, proc.stderr
    pairs = json.loads(proc.stdout)["pairs"]
    assert len(pairs) == 4 and all(p["flipped"] for p in pairs), pairs
    assert {(p["a"]["value"], p["a"]["outcome"], p["b"]["value"], p["b"]["outcome"]) for p in pairs} == {
        ("unpatched", "refused", "patched", "booted")}


def test_repro_prints_the_docker_run_that_boots_the_patched_cell_in_a_shell(readme):
    """What it prints is the steps that make the patched file (copied out of the image, checked, GNU patch, checked),
    then the `docker run`: pasted into one shell, they boot the cell, on the file the run itself mounted."""
    (command, proc), = by_verb(readme, "repro")
    cell = command.split()[-1]
    script = proc.stdout.strip()
    line = script.splitlines()[-1]
    assert line.startswith("docker run --rm --init") and "--gpus all" in line and "--ipc host" in line
    assert f"docker cp bh-repro-{cell}-copy0:/opt/vllm/lib/python3.14/site-packages/vllm/v1/worker/gpu_worker.py " \
           in script and "patch -p1 --batch --forward" in script and "sha256sum -c" in script
    mount = re.search(r"-v (\S+):/opt/vllm/lib/python3\.14/site-packages/vllm/v1/worker/gpu_worker\.py:ro", line)
    assert mount and mount.group(1).startswith(str(RESULTS / "repro" / "patches" / cell)), line
    boots_in_a_shell(script, 8000, 300, ["docker", "rm", "-f", f"bh-repro-{cell}"])
    run_kept = readme[3][0].parent / "patches" / cell / "0-gpu_worker.py" / "gpu_worker.py"
    assert Path(mount.group(1)).read_bytes() == run_kept.read_bytes(), "the shell made another file than the run"
