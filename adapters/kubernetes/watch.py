"""Watches of FlowPlan's pods: tell the daemon at once when a job arrives or ends.

The Kubernetes counterpart of :mod:`adapters.docker.events`. Background threads follow a watch
(``list_namespaced_pod`` / ``list_pod_for_all_namespaces`` with ``watch=true``, read with the
client's ``kubernetes.watch`` line reader) of the pods FlowPlan manages, two per namespace
watched (or two cluster-wide): one with the field selector ``spec.schedulerName=flowplan``, one
with the label selector ``flowplan.io/job`` (a watch cannot say "either"; a pod both watches see
is reported once: each kind of event is reported once per pod UID). The request is opened directly, not
inside ``kubernetes.watch.Watch.stream`` (which sends it only when the first event is read): the
daemon must know at once that the watch is open, or refused.
``on_event`` is called (the daemon's :class:`~adapters.daemon.WakeClock` then cuts its sleep short,
after its debounce) when:

- a pending pod arrives (``ADDED`` without ``spec.nodeName``): a job to place;
- a pod ends (``Succeeded`` / ``Failed``): its resources are free;
- a pod is deleted (``DELETED``): the same.

Binding, resizes and status updates of running pods wake nothing: the next interval sees them.
Which events were the daemon's own doing (a replacement it created unbound for a pause, the old
pod of a migration it deleted) is decided later, by the clock's filter
(``KubernetesAdapter.own_event``), as on Docker.

Each watch starts from a list (its ``resourceVersion``, so pods already there are no news),
resumes from the last ``resourceVersion`` seen (bookmarks keep it fresh) each time the server ends
it (``timeoutSeconds``), and starts again from a new list on ``410 Gone`` (the version expired) or
any error (RBAC without ``watch``, the server down), every ``retry`` seconds, saying so in the log
once and, when it is back, once more and with one wake-up (events may have been missed). The
control interval stays the heartbeat: nothing depends on the watches.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.kubernetes.annotations import JOB_LABEL, SCHEDULER_NAME
from adapters.kubernetes.errors import classify

log = logging.getLogger("flowplan.kubernetes.watch")

#: Seconds the server keeps one watch request open before it ends it (it is resumed at once).
WATCH_SECONDS = 60
#: (kind, pod UID) pairs remembered so that each is reported once (then forgotten all at once).
MAX_REMEMBERED = 100_000
#: The two ways a pod is FlowPlan's, as watch selectors.
SELECTORS = ({"field_selector": f"spec.schedulerName={SCHEDULER_NAME}"}, {"label_selector": JOB_LABEL})


@dataclass(frozen=True)
class PodEvent:
    """One watch event that may change a plan (``kind`` ``reconnected``: a watch came back)."""

    kind: str  # "pending", "ended", "deleted", "reconnected"
    namespace: str
    name: str
    received: float  # time.monotonic()

    @property
    def pod(self) -> str:
        return f"{self.namespace}/{self.name}"

    def describe(self) -> str:
        if self.kind == "reconnected":
            return "pod watch back"
        return f"{self.kind} pod {self.pod}"


class PodWatch:
    """Follows the watches of FlowPlan's pods in background threads; see the module docstring."""

    def __init__(
        self,
        api_client: Any,
        namespaces: Sequence[str] | None,
        on_event: Callable[[PodEvent], None],
        *,
        retry: float = 5.0,
        heartbeat: float = 30.0,
    ) -> None:
        from kubernetes import client

        self.api: Any = client.CoreV1Api(api_client)  # called with plain JSON (_preload_content=False)
        self.namespaces: list[str | None] = list(namespaces) if namespaces else [None]
        self.on_event = on_event
        self.retry = retry
        self.heartbeat = heartbeat
        self.received = 0
        #: the last error of any watch (``kind: message``), None while every watch is open
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._responses: dict[int, Any] = {}  # watch number -> its open HTTP response
        self._connected: dict[int, bool] = {}
        self._reported: set[tuple[str, str]] = set()  # (kind, pod UID) already reported
        self._threads: list[threading.Thread] = []

    def start(self) -> PodWatch:
        n = 0
        for ns in self.namespaces:
            for selector in SELECTORS:
                self._connected[n] = False
                t = threading.Thread(target=self._follow, args=(n, ns, selector), name=f"flowplan-watch-{n}", daemon=True)
                t.start()
                self._threads.append(t)
                n += 1
        return self

    def wait_connected(self, timeout: float) -> bool:
        """Wait until every watch is open (or ``timeout``); whether they all are."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not all(self._connected.values()):
            time.sleep(0.02)
        return all(self._connected.values())

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            responses = list(self._responses.values())
        for resp in responses:  # ends a read blocked on the socket now
            with contextlib.suppress(Exception):
                resp.shutdown()
        for t in self._threads:
            t.join(timeout=2)

    def _list_version(self, ns: str | None, selector: dict[str, str]) -> str:
        import json

        if ns is None:
            resp = self.api.list_pod_for_all_namespaces(limit=1, _preload_content=False, _request_timeout=15, **selector)
        else:
            resp = self.api.list_namespaced_pod(ns, limit=1, _preload_content=False, _request_timeout=15, **selector)
        return str(json.loads(resp.data)["metadata"]["resourceVersion"])

    def _follow(self, n: int, ns: str | None, selector: dict[str, str]) -> None:
        from kubernetes.client.exceptions import ApiException

        failed = False
        where = (f"namespace {ns}" if ns is not None else "all namespaces") + f", {next(iter(selector.values()))}"
        func = self.api.list_pod_for_all_namespaces if ns is None else self.api.list_namespaced_pod
        args = () if ns is None else (ns,)
        while not self._stop.is_set():
            try:
                version = self._list_version(ns, selector)
                while not self._stop.is_set():
                    resp = func(
                        *args,
                        watch=True,
                        resource_version=version,
                        allow_watch_bookmarks=True,
                        timeout_seconds=WATCH_SECONDS,
                        _preload_content=False,
                        _request_timeout=(15, WATCH_SECONDS + 15),
                        **selector,
                    )
                    with self._lock:
                        self._responses[n] = resp
                    if self._stop.is_set():
                        break
                    self._connected[n] = True
                    if failed:
                        log.warning("pod watch (%s): back; re-planning at once when pods arrive or end again", where)
                        failed = False
                        self.last_error = None
                        self._emit(PodEvent("reconnected", ns or "", "", time.monotonic()))
                    version = self._read(resp, version)
                    # the server ended this request (timeoutSeconds): resume from the last version
            except Exception as exc:
                self._connected[n] = False
                if self._stop.is_set():
                    break
                gone = isinstance(exc, ApiException) and exc.status == 410
                kind, message = classify(exc)
                self.last_error = f"{kind}: {message}"
                if not failed and not gone:
                    log.warning(
                        "pod watch (%s) failed (%s); falling back to the %g s interval until it is back (retrying every %g s)",
                        where,
                        self.last_error,
                        self.heartbeat,
                        self.retry,
                    )
                    failed = True
                if gone:  # the version expired: list again at once; what happened meanwhile wakes the daemon
                    self._emit(PodEvent("reconnected", ns or "", "", time.monotonic()))
                else:
                    self._stop.wait(self.retry)
            finally:
                with self._lock:
                    resp = self._responses.pop(n, None)
                if resp is not None:
                    with contextlib.suppress(Exception):
                        resp.release_conn()

    def _read(self, resp: Any, version: str) -> str:
        """Follow one open watch response to its end; the last ``resourceVersion`` seen."""
        import json

        from kubernetes.client.exceptions import ApiException
        from kubernetes.watch.watch import iter_resp_lines

        for line in iter_resp_lines(resp):
            if self._stop.is_set():
                break
            ev = json.loads(line)
            obj = ev.get("object") or {}
            if ev.get("type") == "ERROR":  # e.g. 410 Gone: the version is too old to resume from
                raise ApiException(status=obj.get("code"), reason=f"{obj.get('reason')}: {obj.get('message')}")
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if ev.get("type") != "BOOKMARK":
                self._handle(str(ev.get("type")), obj)
        return version

    def _handle(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        phase = (obj.get("status") or {}).get("phase")
        if kind == "ADDED" and not spec.get("nodeName") and meta.get("deletionTimestamp") is None:
            what = "pending"
        elif kind in ("ADDED", "MODIFIED") and phase in ("Succeeded", "Failed"):
            what = "ended"
        elif kind == "DELETED":
            what = "deleted"
        else:
            return
        with self._lock:  # once per pod and kind, whichever of the watches sees it first
            key = (what, str(meta.get("uid", "")))
            if key in self._reported:
                return
            if len(self._reported) >= MAX_REMEMBERED:  # a long-lived daemon: at worst one wake-up twice
                self._reported.clear()
            self._reported.add(key)
        self.received += 1
        self._emit(PodEvent(what, str(meta.get("namespace", "")), str(meta.get("name", "")), time.monotonic()))

    def _emit(self, event: PodEvent) -> None:
        try:
            self.on_event(event)
        except Exception:  # the daemon's callback must not kill the watch
            log.exception("pod watch: callback failed for %s", event.describe())
