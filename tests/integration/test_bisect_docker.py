"""`bisect` on the real Docker engine: sixteen stand-in "builds" of one image (the small Python base the project's
images start from, each tagged and labelled like a fork's nightly: `org.opencontainers.image.revision`, `.version`,
`.created`; from build 11 on its ENV makes tests/fakes/fake_vllm.py refuse), and one tag that is not there. Made with
the engine's API (no Dockerfile on disk, no shell), metadata only (no layer), removed after. The nightly user's
bisect: two nights ran the matrix on `:nightly` (build 0, then build 15), and `bisect --from` reads the ends from
them: 2 run boots, then 4 bisect boots. A patched cell: six builds with a file layer, the file another at one build,
so the cell's patch stops fitting there: 4 boots."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pytest

from tests.builders import fake_matrix
from tests.helpers.boots import harness_cli
from tests.helpers.env import require

FIRST_BAD = 11
N = 16


@pytest.fixture(scope="module")
def standins(docker_image):
    import docker

    client = docker.from_env()
    base = next((t for img in client.images.list("boot-harness/debian-bookworm-python") for t in img.tags), None)
    require("the boot-harness/debian-bookworm-python image", base is not None,
            "scripts/setup-container-example.sh makes it")
    repo = f"boot-harness/bisect-standin-{uuid.uuid4().hex[:8]}"
    made: list[str] = []
    try:
        for i in range(N):
            scenario = "refuse" if i >= FIRST_BAD else "boot"
            dockerfile = f"FROM {base}\nENV FAKE_VLLM_SCENARIO={scenario}\n".encode()
            tag = f"{repo}:v1.{i}"
            client.images.build(fileobj=io.BytesIO(dockerfile), tag=tag, rm=True, labels={
                "org.opencontainers.image.revision": f"{i:02d}" + "c0ffee" * 6,
                "org.opencontainers.image.version": f"1.{i}.0",
                "org.opencontainers.image.created": f"2025-01-{i + 1:02d}T00:00:00Z"})
            made.append(tag)
        yield repo, made, docker_image
    finally:
        for tag in [*made, f"{repo}:nightly"]:  # ours alone: the tags this fixture made
            try:
                client.images.remove(tag, noprune=False)
            except docker.errors.APIError:
                pass


def test_a_fork_nightly_bisected_over_sixteen_images_names_the_build_and_its_labels(standins, tmp_path):
    import docker

    repo, tags, env = standins
    m = fake_matrix(tmp_path / "m.yaml", {"a": {}}, axis="c", runtime="docker", image=f"{repo}:nightly",
                    python="python3", pull="never", expect=[{"outcome": "booted"}], linger_s=0.2)
    client = docker.from_env()
    for build in (0, N - 1):  # the last good night and the first bad one, as `history` shows them
        client.images.get(tags[build]).tag(repo, "nightly")
        night = harness_cli("run", "--matrix", str(m), "--results-dir", str(tmp_path / "nights"), env=env,
                            timeout=300)
        assert night.returncode == (0 if build == 0 else 1), night.stderr[-3000:]
    refs = tmp_path / "builds.txt"
    missing = f"{repo}:v1.7-never-built"
    refs.write_text("\n".join([*tags[:8], missing, *tags[8:]]) + "\n")
    proc = harness_cli("bisect", "--matrix", str(m), "c_a", "--good", tags[0], "--bad", tags[-1], "--refs",
                       str(refs), "--from", str(tmp_path / "nights"), "--results-dir", str(tmp_path / "r"), "--json",
                       env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a = json.loads(proc.stdout)
    assert (a["first_bad"]["ref"], a["last_good"]["ref"]) == (tags[FIRST_BAD], tags[FIRST_BAD - 1])
    # 17 candidates: the ends read from the nights (same matrix file, same image digests), the never-built tag
    # left out at the middle, then ⌈log2 16⌉ = 4 boots: v1.7, v1.10, v1.12, v1.11 — at most 5, and exactly these
    assert (a["boots"], a["boots_recorded"]) == (4, 2), a
    run_dir = a["run_dir"]
    booted = sorted(json.loads(p.read_text())["axes"]["candidate"]
                    for p in (tmp_path / "r").glob("*/cells/*.json"))
    assert booted == sorted(["07_v1.7", "11_v1.10", "13_v1.12", "12_v1.11"]), booted
    assert a["last_good"]["read_from"] == a["first_bad"]["read_from"] == [None]  # both booted here
    changed = {c["what"]: (c["good"], c["bad"]) for c in a["changed"]}
    assert changed["org.opencontainers.image.version"] == (f"1.{FIRST_BAD - 1}.0", f"1.{FIRST_BAD}.0")
    assert changed["org.opencontainers.image.revision"][1].startswith(f"{FIRST_BAD:02d}c0ffee")
    assert changed["image digest"][0] != changed["image digest"][1]
    assert changed["verdict"] == ("booted (ready)", "refused (kv_cache_too_small)")
    assert "recorded in" in " ".join(proc.stderr.split())
    assert harness_cli("report", run_dir, env=env, timeout=120).returncode == 0
    assert harness_cli("history", run_dir, env=env, timeout=120).returncode in (0, 1)
    [gone] = a["skipped"]  # the middle of 17: the first candidate probed after the ends
    assert gone["ref"] == missing and "cannot be had: image:" in gone["said"][0], gone


PATCHED_BUILDS = 6
MOVED = 2  # the build whose file the fork's patch no longer fits (upstream changed it, and took it back the next day)
PATCHED_FIRST_BAD = 4
PRISTINE = b"floor_gib = 0\n"


def _context(dockerfile: str, worker: bytes) -> io.BytesIO:
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile.encode()), ("worker.py", worker)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


@pytest.fixture(scope="module")
def patched_standins(docker_image):
    """Six builds holding /opt/fork/worker.py (one small layer each): build 2's file is another, from build 4 on the
    fake server refuses."""
    import docker

    client = docker.from_env()
    base = next((t for img in client.images.list("boot-harness/debian-bookworm-python") for t in img.tags), None)
    require("the boot-harness/debian-bookworm-python image", base is not None,
            "scripts/setup-container-example.sh makes it")
    repo = f"boot-harness/bisect-patched-{uuid.uuid4().hex[:8]}"
    made: list[str] = []
    try:
        for i in range(PATCHED_BUILDS):
            scenario = "refuse" if i >= PATCHED_FIRST_BAD else "boot"
            worker = b"floor_gib = 0  # read from the env now\n" if i == MOVED else PRISTINE
            tag = f"{repo}:v{i}"
            client.images.build(fileobj=_context(f"FROM {base}\nCOPY worker.py /opt/fork/worker.py\n"
                                                 f"ENV FAKE_VLLM_SCENARIO={scenario}\n", worker),
                                custom_context=True, tag=tag, rm=True)
            made.append(tag)
        yield made, docker_image
    finally:
        for tag in made:  # ours alone: the tags this fixture made
            try:
                client.images.remove(tag, noprune=False)
            except docker.errors.APIError:
                pass


def test_a_patched_cell_names_the_build_its_patch_stops_fitting_and_bisects_around_it(patched_standins, tmp_path):
    import hashlib

    tags, env = patched_standins
    patched = b"floor_gib = 4\n"
    (tmp_path / "floor.patch").write_bytes(b"--- a/opt/fork/worker.py\n+++ b/opt/fork/worker.py\n@@ -1 +1 @@\n"
                                           b"-floor_gib = 0\n+floor_gib = 4\n")
    patch = {"target": "/opt/fork/worker.py", "patch": "floor.patch",
             "base_sha256": hashlib.sha256(PRISTINE).hexdigest(), "patched_sha256": hashlib.sha256(patched).hexdigest()}
    m = fake_matrix(tmp_path / "m.yaml", {"a": {"patches": [patch]}}, axis="c", runtime="docker", image=tags[0],
                    python="python3", pull="never", expect=[{"outcome": "booted"}], linger_s=0.2)
    proc = harness_cli("bisect", "--matrix", str(m), "c_a", "--good", tags[0], "--bad", tags[-1], "--refs", *tags,
                       "--results-dir", str(tmp_path / "r"), "--json", env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a = json.loads(proc.stdout)
    assert (a["first_bad"]["ref"], a["last_good"]["ref"]) == (tags[PATCHED_FIRST_BAD], tags[PATCHED_FIRST_BAD - 1])
    [moved] = a["skipped"]  # the middle of 6, its own finding: left out (--on-patch-fail skip), named
    assert moved["ref"] == tags[MOVED] and "the cell's patch does not fit it" in moved["said"][0], moved
    assert "base_sha256" in moved["said"][0], moved
    assert a["boots"] == 4  # v0, v5, then v3 (next to the left-out v2) and v4
    run = json.loads((Path(a["run_dir"]) / "results.json").read_text())
    assert sorted(c["axes"]["candidate"] for c in run["cells"]) == ["00_v0", "03_v3", "04_v4", "05_v5"]
    for c in run["cells"]:  # every boot ran the patched file, as `run` applies it
        [p] = c["patches"]
        assert p["patched_sha256"] == hashlib.sha256(patched).hexdigest()
