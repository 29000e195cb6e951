"""The engines' event streams: tell the daemon at once when a job container comes, starts, dies or goes.

Each host gets a background thread that follows ``GET /events`` filtered to containers with a
``flowplan.job`` label and the actions in :data:`WATCHED`, and calls ``on_event`` for each one
(the daemon's :class:`~adapters.daemon.WakeClock` then cuts its sleep short). The control interval
stays as the heartbeat, so nothing depends on the stream:

- if a stream fails (the engine restarts, the socket goes away), the thread says so in the log
  once, and the daemon falls back to its interval until the stream is back; it retries every
  ``retry`` seconds, logs once when it is back, and then wakes the daemon once (events may have
  been missed meanwhile);
- a stream that hangs without failing (a silent network partition to a remote engine) is covered
  by the heartbeat too.

Which events were the daemon's own doing is decided later, by the clock's filter
(``DockerAdapter.own_event``), not here: the id of a container the adapter creates is known only
once its create call returns, and its ``create`` event may come first.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.docker.engine import HostSpec, api_client
from adapters.docker.labels import JOB

log = logging.getLogger("flowplan.docker.events")

#: The container actions that can change a plan: a job arrives (create), starts (outside the
#: daemon), ends or fails (die), or is withdrawn (destroy).
WATCHED = ("create", "start", "die", "destroy")


@dataclass(frozen=True)
class EngineEvent:
    """One engine event about a job container (``action`` ``reconnected``: the stream came back)."""

    host: str
    action: str
    container: str
    name: str
    job: str
    received: float  # time.monotonic()

    def describe(self) -> str:
        if self.action == "reconnected":
            return f"{self.host}: events stream back"
        return f"{self.host}: {self.action} {self.name or self.container[:12]} (job {self.job})"


class EngineEvents:
    """Follows every host's event stream in a background thread; see the module docstring."""

    def __init__(
        self, specs: Sequence[HostSpec], on_event: Callable[[EngineEvent], None], *, retry: float = 5.0, heartbeat: float = 30.0
    ) -> None:
        self.specs = list(specs)
        self.on_event = on_event
        self.retry = retry
        self.heartbeat = heartbeat
        self.received = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._streams: dict[str, Any] = {}
        self._connected: dict[str, bool] = {s.name: False for s in self.specs}
        self._threads: list[threading.Thread] = []

    def start(self) -> EngineEvents:
        for spec in self.specs:
            t = threading.Thread(target=self._follow, args=(spec,), name=f"flowplan-events-{spec.name}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def wait_connected(self, timeout: float) -> bool:
        """Wait until every stream is open (or ``timeout``); whether they all are."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not all(self._connected.values()):
            time.sleep(0.02)
        return all(self._connected.values())

    def connected(self) -> dict[str, bool]:
        return dict(self._connected)

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            streams = list(self._streams.values())
            self._streams.clear()
        for stream in streams:
            with contextlib.suppress(Exception):
                stream.close()
        for t in self._threads:
            t.join(timeout=2)

    def _follow(self, spec: HostSpec) -> None:
        failed = False
        while not self._stop.is_set():
            api: Any = None
            try:
                api = api_client(spec.url, timeout=10)
                filters = {"type": "container", "label": [JOB], "event": list(WATCHED)}
                stream = api.events(decode=True, filters=filters)
                with self._lock:
                    if self._stop.is_set():
                        stream.close()
                        break
                    self._streams[spec.name] = stream
                self._connected[spec.name] = True
                if failed:
                    log.warning("events: host %s: stream back; re-planning at once on container changes again", spec.name)
                    failed = False
                    self._emit(EngineEvent(spec.name, "reconnected", "", "", "", time.monotonic()))
                for ev in stream:
                    if self._stop.is_set():
                        break
                    self._handle(spec.name, ev)
                if self._stop.is_set():
                    break
                raise ConnectionError("the engine closed the events stream")
            except Exception as exc:
                self._connected[spec.name] = False
                if self._stop.is_set():
                    break
                if not failed:
                    log.warning(
                        "events: host %s: stream failed (%s); falling back to the %g s interval until it is back "
                        "(retrying every %g s)",
                        spec.name,
                        str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                        self.heartbeat,
                        self.retry,
                    )
                    failed = True
                self._stop.wait(self.retry)
            finally:
                with self._lock:
                    self._streams.pop(spec.name, None)
                if api is not None:
                    with contextlib.suppress(Exception):
                        api.close()

    def _handle(self, host: str, ev: dict[str, Any]) -> None:
        action = str(ev.get("Action") or ev.get("status") or "")
        if action not in WATCHED:
            return
        actor = ev.get("Actor") or {}
        attrs = actor.get("Attributes") or {}
        container = str(actor.get("ID") or ev.get("id") or "")
        self.received += 1
        self._emit(EngineEvent(host, action, container, str(attrs.get("name", "")), str(attrs.get(JOB, "")), time.monotonic()))

    def _emit(self, event: EngineEvent) -> None:
        try:
            self.on_event(event)
        except Exception:  # the daemon's callback must not kill the stream
            log.exception("events: callback failed for %s", event.describe())
