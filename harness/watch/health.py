"""/health polling (tenacity + requests) and the one-token probe that proves the server can actually serve.

The poller runs in its own thread and can be woken early: a readiness line in the log means "ask now", which keeps the
verdict within one round trip of the server becoming ready instead of one poll interval.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import requests
from tenacity import RetryCallState, Retrying, retry_if_exception_type, retry_if_result

from harness.clock import Clock
from harness.watch.events import Event, EventKind, EventQueue


def health_ok(session: requests.Session, url: str, timeout: float) -> bool:
    return session.get(url, timeout=timeout).status_code == 200


class HealthPoller:
    """Polls `base_url + path` until 200, then posts one `healthy` event; stops on `stop()` or the deadline."""

    def __init__(self, base_url: str, events: EventQueue, clock: Clock, deadline: float,
                 interval_s: float = 0.25, path: str = "/health", request_timeout_s: float = 1.0):
        self.url = base_url.rstrip("/") + path
        self.events, self.clock, self.deadline = events, clock, deadline
        self.interval_s, self.request_timeout_s = interval_s, request_timeout_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._burst_until = float("-inf")
        self._thread = threading.Thread(target=self._run, daemon=True, name="health-poller")
        self.session = requests.Session()

    def start(self) -> HealthPoller:
        self._thread.start()
        return self

    #: After a readiness line the server is about to listen: ask every 50 ms for a while instead of every interval.
    BURST_S, BURST_INTERVAL_S = 3.0, 0.05

    def wake(self) -> None:
        self._burst_until = self.clock.now() + self.BURST_S
        self._wake.set()

    def _wait(self, _: RetryCallState) -> float:
        return self.BURST_INTERVAL_S if self.clock.now() < self._burst_until else self.interval_s

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)
        self.session.close()

    def _sleep(self, seconds: float) -> None:
        if self._wake.wait(seconds):
            self._wake.clear()

    def _should_stop(self, _: RetryCallState) -> bool:
        return self._stop.is_set() or self.clock.now() >= self.deadline

    def _run(self) -> None:
        retrying = Retrying(
            retry=retry_if_result(lambda ok: not ok) | retry_if_exception_type(requests.RequestException),
            stop=self._should_stop,
            wait=self._wait,
            sleep=self._sleep,
            retry_error_callback=lambda _: False,
        )
        if retrying(health_ok, self.session, self.url, self.request_timeout_s) and not self._stop.is_set():
            self.events.put(Event(EventKind.healthy, self.clock.now()))


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    detail: str
    #: The connection failed (refused, reset): the listener went away, most likely with the server.
    connection_lost: bool = False


def probe_completion(base_url: str, timeout_s: float) -> ProbeResult:
    """One `max_tokens: 1` completion for the model the server says it serves."""
    base = base_url.rstrip("/")
    try:
        with requests.Session() as s:
            models = s.get(f"{base}/v1/models", timeout=timeout_s)
            if models.status_code != 200:
                return ProbeResult(False, f"GET /v1/models answered HTTP {models.status_code}")
            data = models.json().get("data") or []
            if not data:
                return ProbeResult(False, "GET /v1/models lists no model")
            model = data[0]["id"]
            r = s.post(f"{base}/v1/completions", timeout=timeout_s,
                       json={"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0})
            if r.status_code != 200:
                return ProbeResult(False, f"POST /v1/completions answered HTTP {r.status_code}: {r.text[:200]}")
            if not r.json().get("choices"):
                return ProbeResult(False, "POST /v1/completions returned no choices")
            return ProbeResult(True, "one-token completion served")
    except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
        return ProbeResult(False, f"probe failed: {type(exc).__name__}: {str(exc)[:200]}",
                           connection_lost=isinstance(exc, requests.ConnectionError))
