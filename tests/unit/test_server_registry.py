"""The registry's proxies are the runtime and the server, member for member: what a caller sets on the cell's runtime
(the pull observer, its notes) reaches the real one, and a started server is registered until its owner stops it."""

from __future__ import annotations

from harness.boot.server_registry import LiveServers, TrackingRuntime
from harness.runtime.fake import FakeRuntime, Script


def test_the_tracking_runtime_forwards_what_callers_set_and_read():
    inner = FakeRuntime()
    runtime = TrackingRuntime(inner, LiveServers())
    observer = object()
    runtime.pull_observer = observer  # type: ignore[assignment]  # any object: passed on as is
    runtime.notes.append("GPU probe: 1 GPU")
    assert inner.pull_observer is observer and inner.notes == ["GPU probe: 1 GPU"]
    assert runtime.name == "fake" and runtime.pull_observer is observer
    runtime.preflight([])
    assert inner.preflighted == [[]]


def test_a_started_server_is_registered_until_its_owner_stops_it(tmp_path):
    from harness.masking import Masker
    from harness.runtime.base import CellContext
    from tests.builders import fake_cells

    _, (cell, *_) = fake_cells(tmp_path)
    live = LiveServers()
    runtime = TrackingRuntime(FakeRuntime(default=Script.hangs()), live)
    ctx = CellContext(run_dir=tmp_path, work_dir=tmp_path, masker=Masker(), matrix_dir=tmp_path)
    server = runtime.start(cell, ctx, lambda line: None)
    assert live.running() == [cell.id]
    assert server.base_url.startswith("http://127.0.0.1:") and server.port and server.argv[0] == "fake-vllm"
    assert server.wait(0) is None and server.container_info() is None and server.applied_patches() == []
    server.stop()
    assert live.running() == [] and not live.was_killed(cell.id), "its owner stopped it: the verdict stands"
