"""The prefixes the places that run vLLM put before each of its lines, recognised so a pasted log reads as a bare one.

A log copied from CI, compose, Kubernetes or journald carries its tool's prefix on every line; the line parsers anchor
refusals and phase lines at the start of vLLM's own text, so an unremoved prefix hides the refusal while the KV lines
(found anywhere in a line) still read: a wrapped refusal would pass for a boot without one. Each shape is anchored and
exact (the tool's own format, to the digit), so a line vLLM wrote itself is never cut, however it begins; a line is
unwrapped on its own, since a paste may mix wrapped and bare lines.

The wrappers' own times are dropped, not read: the timeline stays on vLLM's header times, the server's own clock, so a
wrapped log reads exactly as the bare one (a CI runner stamps a line when it received it, on another clock and zone).
"""

from __future__ import annotations

import re
from enum import StrEnum


class Wrapper(StrEnum):
    """A tool that prefixes every line of the vLLM output it shows."""

    github_actions = "github_actions"
    """A job's raw log: `2025-08-12T08:42:39.1234567Z ` (.NET's seven fraction digits, UTC)."""
    buildkite = "buildkite"
    """The agent's `--timestamp-lines`: `[2025-08-12T08:42:38Z] ` (its inline `ESC _bk;t=<ms> BEL` marks are escape
    sequences: text.py removes them with the colour codes)."""
    compose = "compose"
    """`docker compose logs` / `up`: the service's container name, padded, and `| ` (`vllm-1  | `; v1: `vllm_1  | `)."""
    kubectl = "kubectl"
    """`kubectl logs --prefix`: `[pod/<pod>/<container>] `."""
    journald = "journald"
    """`journalctl` (short, or short-iso): `Dec 04 12:00:00 gpu-host vllm[1234]: `."""
    lemonade = "lemonade"
    """Lemonade's server log (AMD's launcher of vLLM on ROCm): `2026-05-08 11:47:02.256 [Error] (Process) ` (its own
    level, vLLM's stream name)."""
    cloudwatch_csv = "cloudwatch_csv"
    """A CloudWatch (or SageMaker) log exported as CSV: the event's epoch milliseconds and a comma (`1756144014882,`),
    the message CSV-quoted where it holds a quote or a comma (`"...""x""..."`: unquoted here)."""
    kserve = "kserve"
    """KServe's model server logger (huggingfaceserver, which runs vLLM in-process): `2024-07-01 07:28:04.488 1 kserve
    ERROR [__main__.py:<module>():254] ` (its own time, pid, level and place)."""
    xinference = "xinference"
    """Xinference's logger, which its worker also gives vLLM's own loggers: `2024-06-25 16:32:00,563
    xinference.api.restful_api 3118895 ERROR    ` (`%(asctime)s %(name)-12s %(process)d %(levelname)-8s`)."""
    dynamo = "dynamo"
    """NVIDIA Dynamo's tracing format, for its Rust runtime and the vLLM worker it runs: `2025-06-06T09:52:01.833Z ERROR
    core.run_engine_core: ` (the level right-aligned in five: `Z  INFO dynamo_run::input::http: `)."""
    gpustack = "gpustack"
    """GPUStack's server and worker log: `2025-03-04T14:57:43+00:00 - gpustack.worker.backends.vllm - INFO - ` (newer
    releases: `2025-12-20 04:37:58.559317+08:00 - `; a paste without the time keeps `gpustack.<module> - LEVEL - `)."""
    cloud_logging = "cloud_logging"
    """Google Cloud Logging (a GKE container's log copied from Logs Explorer): the entry's severity, its RFC 3339 time
    and the resource label shown as its summary field: `INFO 2025-11-19T20:16:36.096625454Z
    [resource.labels.containerName: vllm] ` (the severity is the log store's guess, not vLLM's level)."""
    timestamps = "timestamps"
    """`docker logs -t`, `docker compose logs -t`, `kubectl logs --timestamps`: an RFC 3339 time and a space
    (`2025-08-12T08:42:39.123456789Z `)."""


_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DATE_T = r"\d{4}-[01]\d-[0-3]\dT[0-2]\d:[0-5]\d:[0-6]\d"
_ZONE = r"(?:Z|[+-][0-2]\d:?[0-5]\d)"
#: One alternation, one named group per shape: a single anchored match per line, which fails at the first character
#: or two on any line vLLM writes ("(APIServer pid=…)", "INFO 12-04 …", "Traceback …").
_SHAPES = re.compile(
    r"\A(?:"
    rf"(?P<{Wrapper.github_actions}>{_DATE_T}\.\d{{7}}Z )"
    rf"|(?P<{Wrapper.dynamo}>{_DATE_T}\.\d{{1,9}}Z (?:ERROR| WARN| INFO|DEBUG|TRACE) [A-Za-z_][\w.:-]{{0,200}}: )"
    rf"|(?P<{Wrapper.gpustack}>(?:\d{{4}}-[01]\d-[0-3]\d[T ][0-2]\d:[0-5]\d:[0-6]\d(?:\.\d{{1,6}})?{_ZONE} - "
    r"[A-Za-z_][\w.]{0,200}|gpustack(?:\.\w{1,100}){0,20}) - (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) - )"
    rf"|(?P<{Wrapper.cloud_logging}>(?:DEFAULT|DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL|ALERT|EMERGENCY) "
    rf"{_DATE_T}(?:\.\d{{1,9}})?{_ZONE} \[resource\.labels\.[A-Za-z_]{{1,64}}: [^\]\n]{{1,253}}\] )"
    rf"|(?P<{Wrapper.timestamps}>{_DATE_T}(?:\.\d{{1,9}})?{_ZONE} )"
    rf"|(?P<{Wrapper.cloudwatch_csv}>1\d{{12}},)"
    rf"|(?P<{Wrapper.buildkite}>\[{_DATE_T}Z\] )"
    r"|(?P<kserve>\d{4}-[01]\d-[0-3]\d [0-2]\d:[0-5]\d:[0-6]\d\.\d{3} \d{1,10} kserve "
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \[[^\]\n]{1,300}\] )"
    r"|(?P<xinference>\d{4}-[01]\d-[0-3]\d [0-2]\d:[0-5]\d:[0-6]\d,\d{3} [A-Za-z_][\w.]{0,200} +\d{1,10} "
    r"(?:DEBUG {4}|INFO {5}|WARNING {2}|ERROR {4}|CRITICAL ))"
    r"|(?P<lemonade>\d{4}-[01]\d-[0-3]\d [0-2]\d:[0-5]\d:[0-6]\d\.\d{3} \[[A-Z][a-z]{2,8}\] \([A-Za-z]{1,40}\) )"
    rf"|(?P<{Wrapper.kubectl}>\[pod/[a-z0-9](?:[-a-z0-9.]{{0,251}}[a-z0-9])?/[a-z0-9](?:[-a-z0-9]{{0,61}}[a-z0-9])?\] )"
    rf"|(?P<{Wrapper.compose}>[A-Za-z0-9][A-Za-z0-9_.-]{{0,200}}[-_]\d{{1,4}} +\|(?: |\Z))"
    rf"|(?P<{Wrapper.journald}>(?:{_MONTH} (?:[0-3]\d| \d) [0-2]\d:[0-5]\d:[0-6]\d|{_DATE_T}{_ZONE})"
    r" [^\s\[\]:]{1,255} [^\s\[\]:/]{1,64}\[\d{1,10}\]: )"
    r")"
)
MAX_DEPTH = 3
"""Wrappers nest (a CI job that runs `docker compose logs -t`: Actions, compose, timestamps); a few layers at most."""


def unwrap(line: str) -> tuple[tuple[Wrapper, ...], str]:
    """The wrappers found at the start of `line`, outermost first, and what they wrapped."""
    found: list[Wrapper] = []
    while len(found) < MAX_DEPTH and (m := _SHAPES.match(line)):
        found.append(Wrapper(m.lastgroup or ""))  # a match names its group
        line = line[m.end():]
        if found[-1] is Wrapper.cloudwatch_csv and len(line) > 1 and line[0] == '"' and line[-1] == '"':
            line = line[1:-1].replace('""', '"')
    return tuple(found), line
