"""The executor's retry policy on the FakeRuntime: a memory-busy refusal is booted once more (BusyRetry, the default),
nothing else is, and NoRetry reports every first attempt as it came. tests/integration/test_executor.py shows the same
retry on real processes and GPUs that are not idle."""

from __future__ import annotations

from harness.boot.attempt import CellRunner, watch_config
from harness.boot.executor import Executor
from harness.boot.retry import BusyRetry, RetryPolicy
from harness.gpu.inventory import CpuInventory
from harness.results.store import RunStore
from harness.runtime.fake import FakeRuntime, Script
from harness.verdict import Outcome, Reason
from tests.builders import fake_cells
from tests.helpers.retry import NoRetry


def boot(tmp_path, script, retry: RetryPolicy | None = None):
    loaded, cells = fake_cells(tmp_path, values=("a",))
    runtime = FakeRuntime({"c_a": script})
    store = RunStore.create(tmp_path / "r", loaded, runtime.name, [c.id for c in cells])
    runner = CellRunner(loaded, runtime, store, watch_config(loaded))
    executor = Executor(runner, CpuInventory(1), 1) if retry is None else Executor(runner, CpuInventory(1), 1,
                                                                                    retry=retry)
    (result,) = executor.run(cells)
    return result, runtime, store


def test_by_default_a_memory_busy_refusal_is_booted_once_more_and_its_first_log_kept(tmp_path):
    r, runtime, store = boot(tmp_path, [Script.memory_busy(), Script.booted()])
    assert (r.outcome, r.attempts, r.contaminated) == (Outcome.booted, 2, True)
    assert runtime.started == ["c_a", "c_a"]
    kept = (store.run_dir / "logs" / "c_a.attempt1.log").read_text()
    assert "Free memory on device" in kept and "contaminated, not the configuration's verdict" in kept
    assert "its log: logs/c_a.attempt1.log" in (store.run_dir / r.log_path).read_text()


def test_a_second_memory_busy_refusal_is_not_booted_a_third_time(tmp_path):
    r, runtime, _ = boot(tmp_path, Script.memory_busy(), BusyRetry())
    assert (r.outcome, r.reason, r.attempts) == (Outcome.refused, Reason.gpu_mem_util_exceeds_free, 2)
    assert len(runtime.started) == 2


def test_any_other_verdict_is_the_first_attempts(tmp_path):
    r, runtime, store = boot(tmp_path, Script.refused_kv())
    assert (r.outcome, r.reason, r.attempts) == (Outcome.refused, Reason.kv_cache_too_small, 1)
    assert runtime.started == ["c_a"] and not (store.run_dir / "logs" / "c_a.attempt1.log").exists()


def test_no_retry_reports_a_memory_busy_refusal_as_it_came(tmp_path):
    r, runtime, _ = boot(tmp_path, [Script.memory_busy(), Script.booted()], NoRetry())
    assert (r.outcome, r.reason, r.attempts, r.contaminated) == \
        (Outcome.refused, Reason.gpu_mem_util_exceeds_free, 1, False)
    assert runtime.started == ["c_a"]
