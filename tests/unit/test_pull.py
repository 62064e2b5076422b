"""Image pulls as the engine reports them: an error inside the engine's JSON stream ends the pull with the engine's
own words (docker-py's images.pull() drops the stream, so a rate limit read as "no such image"), and progress a
person can follow through a pipe (CI logs) without a line per progress event."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from harness.errors import RuntimeUnavailable
from harness.runtime.pull import NullPull, PullDisplay, read_pull_stream, split_ref


def test_an_error_inside_the_stream_is_the_pull_error_in_the_engines_words():
    events = [{"status": "Pulling from tcclaviger/vllm", "id": "sha256:da40"},
              {"errorDetail": {"message": "toomanyrequests: You have reached your pull rate limit."},
               "error": "toomanyrequests: You have reached your pull rate limit."}]
    with pytest.raises(RuntimeUnavailable, match=r"^image: pulling x failed: toomanyrequests: You have reached"):
        read_pull_stream("x", events, NullPull())


def test_references_split_as_docker_splits_them():
    assert split_ref("docker.io/tcclaviger/vllm@sha256:da40") == ("docker.io/tcclaviger/vllm", "sha256:da40")
    assert split_ref("localhost:5000/a/b:1.2") == ("localhost:5000/a/b", "1.2")
    assert split_ref("localhost:5000/a/b") == ("localhost:5000/a/b", "latest")
    assert split_ref("vllm/vllm-openai") == ("vllm/vllm-openai", "latest")


def test_through_a_pipe_a_pull_is_a_few_whole_lines_not_one_per_event():
    buf = io.StringIO()
    now = [0.0]
    display = PullDisplay(Console(file=buf, width=80), every_s=10, clock=lambda: now[0])
    display.pull_started("docker.io/org/image@sha256:abc")
    for i in range(200):
        now[0] = i * 0.5
        display.pull_event("r", {"status": "Downloading", "id": "l1", "progressDetail": {"current": i * 10**7,
                                                                                         "total": 2 * 10**9}})
    display.pull_event("r", {"status": "Pull complete", "id": "l1"})
    display.pull_finished("docker.io/org/image@sha256:abc", "Status: Downloaded newer image")
    lines = buf.getvalue().splitlines()
    assert lines[0] == "pull docker.io/org/image@sha256:abc: started"
    assert 8 <= sum("MB" in ln for ln in lines) <= 11, lines
    assert "pull r: layer l1 pull complete (1 done)" in lines
    assert lines[-1] == "pull docker.io/org/image@sha256:abc: Status: Downloaded newer image"
    assert all(len(ln) > 0 for ln in lines)
