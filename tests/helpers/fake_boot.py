"""One cell of fake_vllm.py's scenarios booted in this process (the run owner on the process runtime); a child
script of tests/reliability/test_teardown.py runs it under a subreaper too."""

from __future__ import annotations

from pathlib import Path

from harness.boot.session import RunOptions, RunSession
from harness.matrix.load import load_matrix
from harness.runtime.process import ProcessRuntime
from tests.builders import fake_matrix


def boot(tmp_path: Path, scenario: str, runtime: ProcessRuntime | None = None, **top):
    loaded = load_matrix(fake_matrix(tmp_path / "fake.yaml", [scenario], **{"linger_s": 3, **top}))
    cell = list(loaded.cells)[0]
    session = RunSession.open(loaded, [cell], RunOptions(results_dir=tmp_path / "results"), runtime=runtime)
    (result,) = session.run()
    return result, session.store
