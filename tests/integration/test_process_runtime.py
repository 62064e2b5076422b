"""The process runtime and the runner on real processes: a scripted fake server (tests/fakes/fake_vllm.py) shows the
shapes real vLLM cannot be made to show on demand, in a second or so each. Real process groups, signals and
sockets, so not unit tests (tests/unit/test_process_runtime.py has the stop logic on a FakeClock); no vLLM needed."""

from __future__ import annotations

import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.runtime.ports import free_port
from harness.runtime.process import ProcessRuntime
from harness.runtime.records import Stopped
from tests.builders import FAKE_VLLM
from tests.helpers.fake_boot import boot

FAKE = str(FAKE_VLLM)


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return False
    except ProcessLookupError:
        return True


def test_a_booting_server_is_booted_and_then_stopped(tmp_path):
    result, store = boot(tmp_path, "boot")
    assert (result.outcome, result.reason) == ("booted", "ready")
    assert result.kv.kv_tokens == 10720 and result.vllm_version == "0.0.0-fake"
    assert result.argv[-4:] == ["--host", "127.0.0.1", "--port", str(result.port)]
    assert (store.run_dir / result.log_path).read_text().count("Application startup complete") == 1
    assert not list((store.run_dir / "active").glob("*.json")), "the process-group record is removed after teardown"
    stop = result.stop
    assert (stop.how, stop.exit_code, stop.left) == (Stopped.terminated, -15, 0), "SIGTERM honoured within the grace"
    assert stop.gone_s is not None  # a figure: gone, not left


def test_a_refusing_server_is_refused_with_its_numbers(tmp_path):
    result, _ = boot(tmp_path, "refuse")
    assert (result.outcome, result.reason, result.exit_code) == ("refused", "kv_cache_too_small", 1)
    assert (result.stop.how, result.stop.exit_code, result.stop.gone_s) == (Stopped.exited, 1, 0.0), result.stop
    assert result.refusal.estimated_max_model_len == 3072


def test_a_refusal_followed_by_a_hang_is_decided_at_the_line_and_the_server_killed(tmp_path):
    # The server hangs after its refusal line and the deadline is 600 s away: only the line can have decided, and
    # only the harness can have ended the server (after linger_s), so no clock of this machine is asserted.
    result, _ = boot(tmp_path, "refuse_hang", linger_s=1, timeout_s=600)
    assert (result.outcome, result.reason) == ("refused", "kv_cache_too_small")
    assert result.exit_code in (-15, -9), f"the harness stopped the hanging server: exit {result.exit_code}"
    assert result.stop.how in (Stopped.terminated, Stopped.killed), result.stop


def test_a_server_that_ignores_sigterm_is_killed_at_the_deadline(tmp_path):
    result, store = boot(tmp_path, "ignore_term", timeout_s=2)
    assert (result.outcome, result.reason) == ("timeout", "deadline")
    stop = result.stop
    assert (stop.how, stop.exit_code, stop.left) == (Stopped.killed, -9, 0), "SIGTERM ignored: SIGKILL after the grace"
    assert stop.gone_s is not None and stop.grace_s <= stop.gone_s, "the grace ran out before the SIGKILL"
    assert result.exit_code == -9


@pytest.mark.parametrize("scenario,reason", [("crash", "uncaught_exception"), ("exit0", "exited_before_ready"),
                                             ("probe_fail", "probe_failed")])
def test_crash_shapes(tmp_path, scenario, reason):
    result, _ = boot(tmp_path, scenario)
    assert (result.outcome, result.reason) == ("crashed", reason)


def test_binary_garbage_in_the_log_does_not_stop_the_boot(tmp_path):
    result, _ = boot(tmp_path, "garbage")
    assert result.outcome == "booted"


class _Foreign(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *a):
        pass


def test_a_server_already_on_the_port_is_an_error_never_booted(tmp_path):
    port = free_port()
    foreign = ThreadingHTTPServer(("127.0.0.1", port), _Foreign)
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    try:
        result, _ = boot(tmp_path, "boot", runtime=ProcessRuntime([sys.executable, FAKE], port_picker=lambda: port))
    finally:
        foreign.shutdown()
    assert (result.outcome, result.reason) == ("error", "start_failed")


def test_a_stale_listener_that_appears_after_start_is_never_taken_for_ours(tmp_path):
    port = free_port()
    holder: list[ThreadingHTTPServer] = []

    def picker() -> int:
        # our server will never bind; a foreign one takes the port right after the harness checked it was free
        def later():
            time.sleep(0.3)
            holder.append(ThreadingHTTPServer(("127.0.0.1", port), _Foreign))
            holder[0].serve_forever()
        threading.Thread(target=later, daemon=True).start()
        return port

    try:
        result, _ = boot(tmp_path, "never_bind", runtime=ProcessRuntime([sys.executable, FAKE], port_picker=picker))
    finally:
        if holder:
            holder[0].shutdown()
    assert (result.outcome, result.reason) == ("error", "stale_server")


def test_secrets_in_env_and_argv_never_reach_the_record_or_the_log(tmp_path):
    secret = "hf_abcdefghijklmnop"
    result, store = boot(tmp_path, "boot", env={"HF_TOKEN": secret}, args=["--api-key", "sk-verysecret123"])
    files = [p.read_text() for p in store.run_dir.rglob("*") if p.is_file()]
    assert result.env["HF_TOKEN"] == "***"
    assert not any(secret in f or "sk-verysecret123" in f for f in files)
