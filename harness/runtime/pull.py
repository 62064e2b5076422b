"""Pulling an image the way `docker pull` shows it: the engine's own error, and progress a person can follow.

docker-py's `images.pull()` drains the engine's JSON stream and drops it: an error inside the stream (a registry rate
limit, a denied pull, a DNS failure) then surfaces as "no such image" from the lookup that follows, and a pull of many
GB shows nothing for minutes. So the stream is read here: an `error` event ends the pull with its message, and every
progress event goes to a display (a rich bar at a terminal, a few plain lines through a pipe).

`Images` is what a container runtime asks for an image by: pulled as the matrix's `pull:` says, resolved once to what
pins it, and files read out of it without running it. docker-py is imported only when an engine is asked (the process
runtime imports this module for PullObserver alone).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from harness.errors import RuntimeUnavailable
from harness.shell import OR, QUIET, Step

if TYPE_CHECKING:
    from harness.runtime.connection import EngineConnection


class PullObserver(Protocol):
    def pull_started(self, ref: str) -> None: ...

    def pull_event(self, ref: str, event: dict[str, Any]) -> None: ...

    def pull_finished(self, ref: str, status: str) -> None: ...


class NullPull:
    def pull_started(self, ref: str) -> None:
        pass

    def pull_event(self, ref: str, event: dict[str, Any]) -> None:
        pass

    def pull_finished(self, ref: str, status: str) -> None:
        pass


def split_ref(ref: str) -> tuple[str, str]:
    """(repository, tag or digest): `repo@sha256:…` keeps the digest, a bare `repo` gets `latest` (as docker does)."""
    if "@" in ref:
        repo, _, digest = ref.partition("@")
        return repo, digest
    head, _, last = ref.rpartition("/")
    if ":" in last:
        name, _, tag = last.rpartition(":")
        return (f"{head}/{name}" if head else name), tag
    return ref, "latest"


def read_pull_stream(ref: str, events: Iterable[dict[str, Any]], observer: PullObserver) -> str:
    """Consume the engine's pull events; the last status line, or RuntimeUnavailable with the engine's own message."""
    last = ""
    for event in events:
        if "error" in event or "errorDetail" in event:
            message = (event.get("errorDetail") or {}).get("message") or event.get("error") or str(event)
            raise RuntimeUnavailable(f"image: pulling {ref} failed: {message}")
        observer.pull_event(ref, event)
        if event.get("status") and not event.get("id"):
            last = str(event["status"])
    return last


def pull(client: Any, ref: str, observer: PullObserver | None = None) -> str:
    observer = observer or NullPull()
    import docker.errors

    repo, tag = split_ref(ref)
    observer.pull_started(ref)
    status = "failed"
    try:
        status = read_pull_stream(ref, client.api.pull(repo, tag=tag, stream=True, decode=True), observer)
    except docker.errors.APIError as exc:  # refused before the stream began (bad reference, engine error)
        raise RuntimeUnavailable(f"image: pulling {ref} failed: {exc.explanation or exc}") from None
    finally:
        observer.pull_finished(ref, status)
    return status


class Images:
    """The images of one runtime's cells, on its engine."""

    def __init__(self, conn: EngineConnection, policy: str):
        self.conn, self.policy = conn, policy
        #: Told about pulls (the CLI's live display); None shows nothing.
        self.observer: PullObserver | None = None
        self._found: dict[str, tuple[str, str | None]] = {}
        self._files: dict[tuple[str, str], bytes | None] = {}

    def resolve(self, ref: str) -> tuple[str, str | None]:
        """(image id, repo digest or None), pulled first as `pull:` says; once per reference."""
        if ref in self._found:
            return self._found[ref]
        import docker.errors

        from harness.runtime import engine as eng

        client = self.conn.client
        try:
            if self.policy == "always":
                pull(client, ref, self.observer)
            try:
                found = eng.image_digest(client, ref)
            except docker.errors.ImageNotFound:
                if self.policy == "never":
                    raise RuntimeUnavailable(f"image: {ref} is not present on the {self.conn.engine} engine and "
                                             "`pull: never` (build or load it, or set `pull: missing`)") from None
                pull(client, ref, self.observer)
                found = eng.image_digest(client, ref)
        except docker.errors.APIError as exc:
            raise RuntimeUnavailable(f"image: cannot get {ref}: {exc.explanation or exc}") from None
        self._found[ref] = found
        return found

    def copy_out(self, image: str, path: str) -> bytes:
        """The file at `path` in `image` (a PatchError when it is none)."""
        from harness.runtime import engine as eng

        return eng.copy_out(self.conn.client, image, path)

    def file(self, ref: str, path: str) -> bytes | None:
        """The file at `path` in the image `ref` names, or None (no such file, an engine error: never a failure);
        once per image and path."""
        key = (ref, path)
        if key not in self._files:
            try:
                self._files[key] = self.copy_out(self.resolve(ref)[0], path)
            except Exception:  # noqa: BLE001 - no such file, an engine error: nothing to read, never a failure
                self._files[key] = None
        return self._files[key]

    def labels(self, ref: str) -> dict[str, str]:
        """The image's labels (`org.opencontainers.image.revision`, …): what a bisect names a build by."""
        image_id, _ = self.resolve(ref)
        return dict(self.conn.client.images.get(image_id).attrs.get("Config", {}).get("Labels") or {})

    def entrypoint(self, image_id: str) -> list[str]:
        """The image's own entrypoint (a matrix without `entrypoint:` runs the server after it)."""
        return self.conn.client.images.get(image_id).attrs.get("Config", {}).get("Entrypoint") or []

    def planned(self, ref: str, before_run: bool = False) -> Step | None:
        """What a run would do to get `ref`, touching nothing (`run --dry-run`), and the command that does it by hand
        where the pasted `run` would not (`repro`): `pull: always` pulls again, which `run` does not, and a file copied
        out of the image first (`before_run`) needs the image before `run` would pull it. The engine is the
        configured one: nothing is asked."""
        if self.policy == "never":
            return None
        engine = self.conn.engine
        said = f"would pull {ref} {'first' if self.policy == 'always' else 'if absent'} (pull: {self.policy})"
        if self.policy == "always":
            return Step(said, ((engine, "pull", ref),))
        if before_run:
            return Step(said, ((engine, "image", "inspect", ref, *QUIET, OR, engine, "pull", ref),))
        return Step(said)


class PullDisplay:
    """At a terminal a byte bar over all layers; through a pipe one line when the pull starts, one per layer done, a
    byte total at most every `every_s`, and the engine's final status, so a CI log shows a long pull moving."""

    def __init__(self, console: Any, every_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.console, self.every_s, self.clock = console, every_s, clock
        self._layers: dict[str, tuple[int, int]] = {}
        self._done: set[str] = set()
        self._last_line = 0.0
        self._progress: Any = None
        self._task: Any = None

    def pull_started(self, ref: str) -> None:
        self._layers.clear()
        self._done.clear()
        self._last_line = self.clock()
        if self.console.is_terminal:
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

            self._progress = Progress(TextColumn("pull {task.description}"), BarColumn(), DownloadColumn(),
                                      TransferSpeedColumn(), console=self.console, transient=True)
            self._progress.start()
            self._task = self._progress.add_task(ref, total=None)
        else:
            self.console.print(f"pull {ref}: started", highlight=False, markup=False, emoji=False, soft_wrap=True)

    def _bytes(self) -> tuple[int, int]:
        return sum(c for c, _ in self._layers.values()), sum(t for _, t in self._layers.values())

    def pull_event(self, ref: str, event: dict[str, Any]) -> None:
        layer, status = event.get("id"), str(event.get("status", ""))
        detail = event.get("progressDetail") or {}
        if layer and status == "Downloading" and detail.get("total"):
            self._layers[layer] = (int(detail.get("current", 0)), int(detail["total"]))
        if layer and status in ("Download complete", "Pull complete", "Already exists"):
            total = self._layers.get(layer, (0, 0))[1]
            self._layers[layer] = (total, total)
            if layer not in self._done and status != "Download complete":
                self._done.add(layer)
                if self._progress is None:
                    self.console.print(f"pull {ref}: layer {layer} {status.lower()} ({len(self._done)} done)",
                                       highlight=False, markup=False, emoji=False, soft_wrap=True)
        current, total = self._bytes()
        if self._progress is not None:
            self._progress.update(self._task, completed=current, total=total or None)
        elif total and self.clock() - self._last_line >= self.every_s:
            self._last_line = self.clock()
            self.console.print(f"pull {ref}: {current / 1e6:,.0f} of {total / 1e6:,.0f} MB", highlight=False,
                               markup=False, emoji=False, soft_wrap=True)

    def pull_finished(self, ref: str, status: str) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        self.console.print(f"pull {ref}: {status or 'done'}", highlight=False, markup=False, emoji=False,
                           soft_wrap=True)
