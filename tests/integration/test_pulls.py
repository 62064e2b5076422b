"""Pulls through the real Docker engine: an error the engine reports inside its pull stream (a registry's rate limit
cutting a pull off after it started) is the run's one-line error, in the engine's words — not the "no such image"
that docker-py's images.pull() leaves — and the pull's progress shows in the log, through a pipe, as it goes."""

from __future__ import annotations

from tests.builders import write_matrix
from tests.helpers.boots import harness_cli
from tests.standins.registry import RATE_LIMIT, RateLimitedRegistry


def test_a_rate_limit_inside_the_pull_stream_is_the_error_the_engine_gave(docker_image, tmp_path):
    with RateLimitedRegistry() as registry:
        ref = f"{registry.host}/boot-harness/never-complete:1"
        m = write_matrix(tmp_path / "m.yaml", {"name": "pull", "runtime": "docker", "image": ref, "pull": "missing",
                                               "axes": {"x": {"a": {}}}})
        proc = harness_cli("run", "--matrix", str(m), "--results-dir", str(tmp_path / "r"), env=docker_image,
                           timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == f"image: pulling {ref} failed: toomanyrequests: {RATE_LIMIT}", lines
    assert lines[0] == f"pull {ref}: started" and "no such image" not in proc.stderr.lower()
    assert not (tmp_path / "r").exists()
