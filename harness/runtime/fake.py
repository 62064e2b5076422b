"""A runtime whose servers follow a script, in this process — for tests of everything above the runtime (the run
owner, the executor, the verdict policy, the CLI, the pytest plugin), the way httpx's MockTransport stands in for
the network. Nothing is spawned: each server is a thread that writes its script's log lines to the watch, and a small
HTTP listener on loopback that answers /health, /v1/models and /v1/completions once the script says it serves, so
the watch loop and its health poll and probe run exactly as they do against vLLM.

    runtime = FakeRuntime({"c_a": [Script.memory_busy(), Script.booted()]}, default=Script.booted())
    RunSession.open(loaded, cells, options, runtime=runtime).run()

Scripts are per cell id, and a list gives one script per attempt (the memory-busy retry boots a cell twice).
"""

from __future__ import annotations

import http.server
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness.clock import SYSTEM, Clock
from harness.errors import CellStartError, ProbeFailed
from harness.logfacts.timeline import Milestone
from harness.matrix.cells import Cell
from harness.memory.model import LimitKind, MemorySource
from harness.memory.probe import Limit, MemoryProbe, Reading
from harness.runtime.base import CellContext, LineSink, read_host_file
from harness.runtime.ports import HOST
from harness.runtime.pull import PullObserver
from harness.runtime.records import AppliedPatch, ContainerInfo, ServerStop, Stopped
from harness.shell import secret_safe_command

_HEADER = "(EngineCore pid=1) {level} 12-01 10:00:{sec:02d} [fake.py:1] "


def _line(sec: int, text: str, process: str = "(EngineCore pid=1)") -> str:
    return f"{process} INFO 12-01 10:00:{sec:02d} [fake.py:1] {text}"


#: (milestone the line ends, the line) for Script.full_boot: vLLM 0.32's wording, one rank, a compiled model.
BOOT_LINES: tuple[tuple[str, str], ...] = (
    ("first_line", _line(0, "non-default args: {'model': 'fake'}", "(APIServer pid=1)")),
    ("engine_started",
     _line(1, "Initializing a V1 LLM engine (v0.32.0) with config: model='fake', enforce_eager=False")),
    ("loading_started", _line(2, "Starting to load model fake...", "(Worker pid=2)")),
    ("weights_loaded", _line(2, "Model loading took 14.99 GiB memory and 5.100000 seconds", "(Worker pid=2)")),
    ("compiled", _line(3, "torch.compile takes 21.50 s in total", "(Worker pid=2)")),
    ("kv_sized", _line(4, "GPU KV cache size: 10,720 tokens, Maximum concurrency for 4,096 tokens per request: 2.62x")),
    ("graphs_captured", _line(5, "Graph capturing finished in 12 secs, took 0.52 GiB", "(Worker pid=2)")),
    ("engine_ready", _line(6, "init engine (profile, create kv cache, warmup model) took 41.20 s")),
    ("listening", _line(7, "Starting vLLM server on http://127.0.0.1:8000", "(APIServer pid=1)")),
)


@dataclass(frozen=True)
class Script:
    """What one fake server does: log `lines`, one every `line_delay_s`, then serve, exit with `exit_code`, or hang
    (until stopped); `start_error` makes the start itself fail (the runtime's CellStartError). A `deaf` server ignores
    SIGTERM (vLLM mid-start-up): its stop waits the grace out on the runtime's clock, then kills it (-9)."""

    lines: tuple[str, ...] = ()
    then: Literal["serve", "exit", "hang"] = "serve"
    exit_code: int = 1
    line_delay_s: float = 0.0
    start_error: str | None = None
    #: The server's memory: (lines logged so far, bytes from then on) steps; () holds 0 bytes throughout.
    memory: tuple[tuple[int, int], ...] = ()
    #: After this many lines the memory probe fails (a container gone, NVML erring); None: it never does.
    memory_fails_after: int | None = None
    deaf: bool = False

    @classmethod
    def booted(cls, kv_tokens: int = 10720) -> Script:
        return cls((_HEADER.format(level="INFO", sec=1) + f"GPU KV cache size: {kv_tokens:,} tokens",
                    _HEADER.format(level="INFO", sec=2) + "Starting vLLM server on http://127.0.0.1:8000"))

    @classmethod
    def refused_kv(cls, max_len: int = 4096, needed_gib: float = 0.02, available_gib: float = 0.01,
                   estimate: int = 3072) -> Script:
        return cls((_HEADER.format(level="ERROR", sec=3) + "ValueError: To serve at least one request with the "
                    f"model's max seq len ({max_len}), ({needed_gib} GiB KV cache is needed, which is larger than the "
                    f"available KV cache memory ({available_gib} GiB). Based on the available memory, the estimated "
                    f"maximum model length is {estimate}. Try increasing `gpu_memory_utilization` or decreasing "
                    "`max_model_len` when initializing the engine.",), then="exit")

    @classmethod
    def memory_busy(cls) -> Script:
        return cls((_HEADER.format(level="ERROR", sec=3) + "ValueError: Free memory on device (10.5/79.19 GiB) on "
                    "startup is less than desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory "
                    "utilization or reduce GPU memory used by other processes.",), then="exit")

    @classmethod
    def crashed(cls, exit_code: int = 3) -> Script:
        return cls((_HEADER.format(level="ERROR", sec=3) + "RuntimeError: something unforeseen",), then="exit",
                   exit_code=exit_code)

    @classmethod
    def full_boot(cls, line_delay_s: float = 0.0, until: str | None = None) -> Script:
        """A GPU boot of vLLM 0.32 line by line, one line per phase (BOOT_LINES); with `until` (a milestone's name)
        the server logs the lines before that milestone's and then hangs in its phase."""
        lines: list[str] = []
        for milestone, text in BOOT_LINES:
            if milestone == until:
                return cls(tuple(lines), then="hang", line_delay_s=line_delay_s)
            lines.append(text)
        return cls(tuple(lines), line_delay_s=line_delay_s)

    @classmethod
    def hangs(cls) -> Script:
        return cls((_HEADER.format(level="INFO", sec=1) + "loading",), then="hang")

    @classmethod
    def cannot_start(cls, why: str = "the fake engine refused the container") -> Script:
        return cls(start_error=why)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Listener

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if not self.server.serving.is_set():
            return self._send(503, {"error": "not ready"})
        if self.path == "/health":
            return self._send(200, {})
        if self.path == "/v1/models":
            return self._send(200, {"data": [{"id": "fake"}]})
        return self._send(404, {})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.server.serving.is_set() and self.path == "/v1/completions":
            return self._send(200, {"choices": [{"text": "x"}]})
        return self._send(503, {})


class _Listener(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__((HOST, 0), _Handler)
        self.serving = threading.Event()


class FakeServer:
    """A Server (harness.runtime.base) playing one Script."""

    def __init__(self, cell: Cell, script: Script, on_line: LineSink, clock: Clock = SYSTEM):
        self.script, self.on_line, self.clock = script, on_line, clock
        self.argv = ["fake-vllm", *cell.server_args]
        self._listener = _Listener()
        self.port = self._listener.server_address[1]
        self.base_url = f"http://{HOST}:{self.port}"
        self._code: int | None = None
        self._exited = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._stop: ServerStop | None = None
        #: How many of its lines the script has logged (its memory steps with them).
        self.logged = 0
        # a short poll: `stop` waits for serve_forever to notice its shutdown, 0.5 s by default, on every teardown
        threading.Thread(target=self._listener.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True,
                         name=f"fake-http-{cell.id}").start()
        threading.Thread(target=self._play, daemon=True, name=f"fake-{cell.id}").start()

    def _play(self) -> None:
        for line in self.script.lines:
            if self.clock.wait(self._stopped, self.script.line_delay_s):
                break
            self.on_line(line)
            self.logged += 1
        if not self._stopped.is_set():
            if self.script.then == "serve":
                self._listener.serving.set()
            elif self.script.then == "exit":
                self._exit(self.script.exit_code)
        self._stopped.wait()

    def _exit(self, code: int) -> None:
        with self._lock:
            if self._code is not None:
                return
            self._code = code
        self._listener.serving.clear()
        self.on_line(None)
        self._exited.set()

    def wait(self, timeout: float | None = None) -> int | None:
        self._exited.wait(timeout)
        return self._code

    def owns_listener(self) -> bool:
        return self._code is None

    def stop(self, grace_s: float = 5.0) -> ServerStop:
        """What its script simulates: gone already (exited), SIGTERM honoured at once (-15), or deaf: SIGKILLed (-9)
        once the grace has passed on the runtime's clock."""
        with self._lock:
            if self._stop is not None:
                return self._stop
            t0, exited = self.clock.now(), self._code is not None
        self._stopped.set()
        if self.script.deaf and not exited:
            self.clock.sleep(grace_s)
        self._exit(-9 if self.script.deaf else -15)
        self._listener.shutdown()
        self._listener.server_close()
        how = Stopped.exited if exited else Stopped.killed if self.script.deaf else Stopped.terminated
        with self._lock:
            if self._stop is None:
                self._stop = ServerStop(how=how, grace_s=grace_s, exit_code=self._code,
                                        gone_s=0.0 if exited else round(self.clock.now() - t0, 3))
            return self._stop

    def container_info(self) -> ContainerInfo | None:
        return None

    def applied_patches(self) -> list[AppliedPatch]:
        return []

    def pids(self) -> set[int]:
        return set()

    def memory_probe(self) -> MemoryProbe:
        return _ScriptedMemory(self)


class _ScriptedMemory:
    """The fake server's memory as its script steps it, on a host of 64 GiB."""

    source = MemorySource.process

    def __init__(self, server: FakeServer):
        self.server = server

    def limit(self) -> Limit:
        return Limit(64 << 30, LimitKind.host_total)

    def read(self) -> Reading:
        script, logged = self.server.script, self.server.logged
        if script.memory_fails_after is not None and logged >= script.memory_fails_after:
            raise ProbeFailed("the fake server's memory is no longer readable")
        return Reading(max((b for at, b in script.memory if at <= logged), default=0))


class FakeRuntime:
    """A Runtime (harness.runtime.base) of scripted in-process servers; `started` lists the cells it started."""

    name = "fake"

    def __init__(self, scripts: Mapping[str, Script | Sequence[Script]] | None = None,
                 default: Script = Script.booted(), clock: Clock = SYSTEM):
        """`clock`: what a script's `line_delay_s` passes on (a FakeClock: a slow boot without the wait)."""
        self.scripts = dict(scripts or {})
        self.clock = clock
        self.default = default
        self.started: list[str] = []
        self.preflighted: list[list[str]] = []
        self.notes: list[str] = []
        self.pull_observer: PullObserver | None = None
        self._lock = threading.Lock()

    def script_for(self, cell: Cell) -> Script:
        with self._lock:
            attempt = self.started.count(cell.id)
            self.started.append(cell.id)
        s = self.scripts.get(cell.id, self.default)
        if isinstance(s, Script):
            return s
        return s[min(attempt, len(s) - 1)]

    def preflight(self, cells: list[Cell], gpu_checks: bool = True) -> None:
        self.preflighted.append([c.id for c in cells])

    def start(self, cell: Cell, ctx: CellContext, on_line: LineSink) -> FakeServer:
        script = self.script_for(cell)
        if script.start_error:
            raise CellStartError(script.start_error)
        time.sleep(0)  # a real start yields; keep the ordering of threads realistic
        ctx.mark(Milestone.started)
        return FakeServer(cell, script, on_line, self.clock)

    def command_line(self, cell: Cell, ctx: CellContext, host_port: int = 8000) -> list[str]:
        """Printed as the real runtimes print theirs: a secret is a reference to the variable holding it, or `***`."""
        return secret_safe_command({}, ["fake-vllm", *cell.server_args, "--port", str(host_port)], os.environ)

    def planned_command_line(self, cell: Cell, ctx: CellContext, host_port: int = 8000) -> tuple[list[str], list[str]]:
        return self.command_line(cell, ctx, host_port), []

    def read_server_file(self, cell: Cell, path: str) -> bytes | None:
        return read_host_file(Path(path))

    def image_labels(self, ref: str) -> dict[str, str]:
        return {}

    def image_digest(self, ref: str) -> str | None:
        return None
