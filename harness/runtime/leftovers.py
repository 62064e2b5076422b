"""Containers of ours the engine could not remove while it was away (a restart): removed once it answers again,
before the next cell starts. What still fails stays for the next cell, and for `gc` (or the next run's sweep, by the
owner labels, harness.runtime.engine.owner_labels) when this run has none left."""

from __future__ import annotations

import threading

from harness.runtime.connection import EngineConnection


class Leftovers:
    def __init__(self, conn: EngineConnection):
        self.conn = conn
        self._ids: set[str] = set()
        self._lock = threading.Lock()

    def leave(self, container_id: str) -> None:
        """A teardown's removal failed because the engine was away: try again once it is back."""
        with self._lock:
            self._ids.add(container_id)

    def engine_ready(self) -> None:
        """Before a container is made: the engine answers (harness.runtime.connection), and what it could not remove
        before is gone."""
        self.conn.await_return()
        with self._lock:
            todo = sorted(self._ids)
        for cid in todo:
            try:
                self.conn.client.containers.get(cid).remove(force=True)
            except Exception as exc:  # noqa: BLE001 - gone already, or the engine's trouble (told apart below)
                if self.conn.trouble("remove", exc):
                    continue  # away again: the next call tries
            with self._lock:
                self._ids.discard(cid)

    def discard(self, name: str) -> None:
        """A container the engine created before it went away, so that the next try can take its name."""
        try:
            self.engine_ready()
            self.conn.client.containers.get(name).remove(force=True)
        except Exception:  # noqa: BLE001 - never created, or gone with the engine
            pass
