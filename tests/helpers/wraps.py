"""How a pasted log comes back wrapped (a terminal, a browser, a chat), each way with what it wraps."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from harness.logfacts.wrappers import Wrapper

#: The wrappers' clock: another day and zone than the server's own header times, which the timeline keeps to.
_T0 = datetime(2025, 8, 12, 8, 42, 39, 123456, tzinfo=UTC)


def _at(i: int) -> datetime:
    return _T0 + timedelta(microseconds=12_345 * i)


def _actions_time(i: int) -> str:
    return _at(i).strftime("%Y-%m-%dT%H:%M:%S.%f") + "0Z"  # .NET's seven fraction digits


def _nano_time(i: int) -> str:
    return _at(i).strftime("%Y-%m-%dT%H:%M:%S.%f") + "789Z"  # Go's RFC3339Nano, fixed nine digits (docker)


def _github_actions(lines: list[str]) -> list[str]:
    body = ["##[group]Run vllm serve /models/tiny --max-model-len 4096", "##[endgroup]", *lines,
            "##[error]Process completed with exit code 1."]
    return ["\ufeff" * (i == 0) + f"{_actions_time(i)} {line}" for i, line in enumerate(body)]


def _buildkite(lines: list[str]) -> list[str]:
    body = ["~~~ Running commands", "$ vllm serve /models/tiny --max-model-len 4096", *lines]
    return [f"[{_at(i * 80).strftime('%Y-%m-%dT%H:%M:%SZ')}] {line}" for i, line in enumerate(body)]


def _buildkite_ansi_timestamps(lines: list[str]) -> list[str]:
    return [f"\x1b_bk;t={int(_at(i).timestamp() * 1000)}\x07{line}" for i, line in enumerate(lines)]


def _compose(name: str) -> Callable[[list[str]], list[str]]:
    def wrap(lines: list[str]) -> list[str]:
        return [f"Attaching to {name}", *(f"{name}  | {line}" for line in lines), f"{name} exited with code 1"]
    return wrap


def _kubectl(lines: list[str]) -> list[str]:
    return [f"[pod/vllm-0/vllm] {line}" for line in lines]


def _journald(lines: list[str]) -> list[str]:
    return [f"Dec 04 {_at(i * 80).strftime('%H:%M:%S')} gpu-host vllm[1234]: {line}" for i, line in enumerate(lines)]


def _docker_timestamps(lines: list[str]) -> list[str]:
    return [f"{_nano_time(i)} {line}" for i, line in enumerate(lines)]


def _actions_compose_timestamps(lines: list[str]) -> list[str]:
    """A CI job that ran `docker compose logs -t`: three wrappers on every line."""
    return _github_actions([f"vllm-1  | {_nano_time(i)} {line}" for i, line in enumerate(lines)])


def _quoted_compose(lines: list[str]) -> list[str]:
    """Compose output pasted into an issue as a quote."""
    return [f"> {line}" for line in _compose("vllm-1")(lines)]


def _cloudwatch_csv(lines: list[str]) -> list[str]:
    """A CloudWatch log exported as CSV (a SageMaker endpoint's): epoch milliseconds, a comma, the message CSV-quoted
    where it holds a quote or a comma, colour codes as syslog escapes them."""
    def field(line: str) -> str:
        line = line.replace("\x1b", "#033")
        return '"' + line.replace('"', '""') + '"' if '"' in line or "," in line else line
    return [f"{int(_at(i).timestamp() * 1000)},{field(line)}" for i, line in enumerate(lines)]


def _mixed(lines: list[str]) -> list[str]:
    """A paste that mixes wrapped and bare lines (two sources, or a hand-trimmed excerpt)."""
    return [f"vllm-1  | {line}" if i % 2 else line for i, line in enumerate(lines)]


#: shape → (how the tool wraps a log's lines, the wrappers a vLLM line then carries, outermost first)
WRAPS: dict[str, tuple[Callable[[list[str]], list[str]], tuple[Wrapper, ...]]] = {
    "github-actions": (_github_actions, (Wrapper.github_actions,)),
    "buildkite": (_buildkite, (Wrapper.buildkite,)),
    "buildkite-ansi-timestamps": (_buildkite_ansi_timestamps, ()),
    "compose": (_compose("vllm-1"), (Wrapper.compose,)),
    "compose-v1": (_compose("vllm_1"), (Wrapper.compose,)),
    "kubectl": (_kubectl, (Wrapper.kubectl,)),
    "journald": (_journald, (Wrapper.journald,)),
    "docker-timestamps": (_docker_timestamps, (Wrapper.timestamps,)),
    "actions-compose-timestamps": (_actions_compose_timestamps,
                                   (Wrapper.github_actions, Wrapper.compose, Wrapper.timestamps)),
    "quoted-compose": (_quoted_compose, (Wrapper.compose,)),
    "mixed": (_mixed, ()),
    "cloudwatch-csv": (_cloudwatch_csv, (Wrapper.cloudwatch_csv,)),
}
