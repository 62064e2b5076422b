"""`bisect` on the real Docker engine: sixteen stand-in "builds" of one image (the small Python base the project's
images start from, each tagged and labelled like a fork's nightly: `org.opencontainers.image.revision`, `.version`,
`.created`; from build 11 on its ENV makes tests/fakes/fake_vllm.py refuse), and one tag that is not there. Made with
the engine's API (no Dockerfile on disk, no shell), metadata only (no layer), removed after: about 6 fake boots."""

from __future__ import annotations

import io
import json
import uuid

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
    made = []
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
        for tag in made:  # ours alone: the tags this fixture made
            try:
                client.images.remove(tag, noprune=False)
            except docker.errors.APIError:
                pass


def test_a_fork_nightly_bisected_over_sixteen_images_names_the_build_and_its_labels(standins, tmp_path):
    repo, tags, env = standins
    m = fake_matrix(tmp_path / "m.yaml", {"a": {}}, axis="c", runtime="docker", image=tags[0], python="python3",
                    pull="never", expect=[{"outcome": "booted"}])
    refs = tmp_path / "builds.txt"
    missing = f"{repo}:v1.7-never-built"
    refs.write_text("\n".join([*tags[:8], missing, *tags[8:]]) + "\n")
    proc = harness_cli("bisect", "--matrix", str(m), "c_a", "--good", tags[0], "--bad", tags[-1], "--refs",
                       str(refs), "--results-dir", str(tmp_path / "r"), "--json", env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a = json.loads(proc.stdout)
    assert (a["first_bad"]["ref"], a["last_good"]["ref"]) == (tags[FIRST_BAD], tags[FIRST_BAD - 1])
    assert a["boots"] <= 2 + 5, a
    changed = {c["what"]: (c["good"], c["bad"]) for c in a["changed"]}
    assert changed["org.opencontainers.image.version"] == (f"1.{FIRST_BAD - 1}.0", f"1.{FIRST_BAD}.0")
    assert changed["org.opencontainers.image.revision"][1].startswith(f"{FIRST_BAD:02d}c0ffee")
    assert changed["image digest"][0] != changed["image digest"][1]
    assert changed["verdict"] == ("booted (ready)", "refused (kv_cache_too_small)")
    run_dir = a["run_dir"]
    assert harness_cli("report", run_dir, env=env, timeout=120).returncode == 0
    assert harness_cli("history", run_dir, env=env, timeout=120).returncode in (0, 1)
    [gone] = a["skipped"]  # the middle of 17: the first candidate probed after the ends
    assert gone["ref"] == missing and "cannot be had: image:" in gone["said"][0], gone
