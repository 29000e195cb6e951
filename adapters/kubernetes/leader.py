"""Leader election on a ``coordination.k8s.io/v1`` Lease, so that two daemons never act at once.

Every daemon started with ``--adapter kubernetes`` is a *candidate*. One round (:meth:`LeaseElector.round`):

- read the Lease (``get``). None there: ``create`` it with this candidate as holder. Two candidates
  creating it at once: the server keeps one, the other gets 409 Conflict and stays standby.
- held by this candidate, or by nobody (``holderIdentity`` empty: the last holder let go): ``update``
  it (renew, or take it), carrying the ``resourceVersion`` just read.
- held by another: standby, unless the Lease has not changed for its ``leaseDurationSeconds`` **as
  measured on this candidate's own monotonic clock** since it first saw that version (the holder's
  ``renewTime`` is not trusted: clocks differ between machines). Then take it over with an ``update``
  carrying the ``resourceVersion`` it read: if two standbys try at once, the server accepts one and
  answers 409 Conflict to the other (optimistic concurrency); the loser stays standby.

A background thread runs a round every ``renew_every`` seconds (the daemon's interval), apart from
the daemon's own intervals, so a slow plan does not let the Lease lapse. The holder counts itself
leader only until ``renew_deadline`` (2/3 of the lease duration) after the start of its last
successful renewal: a standby waits the whole duration from the moment *it* saw that renewal, which
is later, so the old leader has stopped before the new one starts, whatever the clocks say.

:class:`LeaderGuard` is what the daemon uses, as it uses the state store's lease for Docker:

- called before every interval: returns at once while leader; as a standby it blocks, polling, until
  this candidate holds the Lease (or the daemon is stopped: :class:`StoppedWhileStandby`);
- :meth:`LeaderGuard.fence` is called by the adapter before every write: once the Lease is lost (a
  renewal refused, the deadline passed without one), the writes still to come in that interval are
  refused (a ``conflict`` outcome), at once;
- :meth:`LeaderGuard.release` on a clean stop empties ``holderIdentity`` so a standby takes over at
  its next round instead of waiting out the lease.

Errors: what no later round can fix is fatal (:class:`LeaderElectionError`, one line): 403 on the
Lease (naming the verb and the resource RBAC lacks), a namespace that does not exist, a Lease the
server refuses as invalid. The API server down or slow is not (a line when it starts and when it
ends, and the rounds go on; a leader that cannot renew before its deadline stops acting).
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from adapters.kubernetes.errors import KubernetesAdapterError, classify

log = logging.getLogger("flowplan.kubernetes.leader")

DEFAULT_LEASE_NAME = "flowplan-daemon"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

Role = Literal["leader", "standby", "lost", "unreachable", "reachable"]


class LeaderElectionError(Exception):
    """The Lease cannot be used at all (RBAC forbids a verb on it): one line, the daemon stops."""


class StoppedWhileStandby(Exception):
    """The daemon was asked to stop while it waited, as a standby, for the Lease."""


def default_identity() -> str:
    """``hostname:pid``; in a pod the hostname is the pod's name."""
    return f"{socket.gethostname()}:{os.getpid()}"


def default_namespace(namespaces: list[str] | None) -> str:
    """Where the Lease lives by default: the daemon's own namespace in a pod, else the first
    namespace it manages, else ``default``."""
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as f:
            own = f.read().strip()
        if own:
            return own
    except OSError:
        pass
    return namespaces[0] if namespaces else "default"


def micro_time(at: float | None = None) -> str:
    """A ``MicroTime`` as the API server writes it."""
    return datetime.fromtimestamp(time.time() if at is None else at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Observed:
    """The version of another holder's Lease this candidate saw, and when (its monotonic clock)."""

    version: str
    holder: str
    duration: float
    since: float


class LeaseElector:
    """One candidate for the Lease ``namespace/name``; see the module docstring."""

    def __init__(
        self,
        api_client: Any,
        *,
        name: str = DEFAULT_LEASE_NAME,
        namespace: str = "default",
        identity: str | None = None,
        duration: float = 90.0,
        renew_every: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
        report: Callable[[Role, str], None] | None = None,
    ) -> None:
        from kubernetes import client

        if not name or not namespace:
            raise ValueError("the lease needs a name and a namespace")
        if duration < 1:
            raise ValueError(f"lease duration {duration:g} s: must be at least 1 s (leaseDurationSeconds is whole seconds)")
        if renew_every >= duration:
            raise ValueError(f"lease duration {duration:g} s: must be longer than the renewal period ({renew_every:g} s)")
        self.api = client.CoordinationV1Api(api_client)
        self.name = name
        self.namespace = namespace
        self.identity = identity or default_identity()
        self.duration_seconds = max(1, math.ceil(duration))
        self.renew_every = renew_every
        self.renew_deadline = self.duration_seconds * 2 / 3
        # A request may take until half-way to the deadline: the deadline, not the request, bounds acting.
        self.timeout = max(1.0, min(self.renew_deadline / 2, 10.0))
        self.monotonic = monotonic
        self.report = report or (lambda role, line: log.info("%s: %s", role, line))
        self.renewed_at: float | None = None  # monotonic start of the last successful write as holder
        self.observed: Observed | None = None
        self.holder: str = ""  # who holds it, as last read
        self.error: LeaderElectionError | None = None
        self.changed = threading.Condition()
        self._role: Role | None = None
        self._down = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}"

    # -- one round -------------------------------------------------------------------------------

    def leading(self) -> bool:
        """Whether this candidate may act now: it holds the Lease and its deadline has not passed."""
        return self.renewed_at is not None and self.monotonic() < self.renewed_at + self.renew_deadline

    def round(self) -> bool:
        """Read the Lease, then renew, take or leave it; whether this candidate leads afterwards."""
        start = self.monotonic()
        try:
            lease = self.read()
            won = self.write(lease, start)
        except KubernetesAdapterError as exc:
            if exc.kind not in ("engine_down", "transient"):
                raise
            if not self._down:
                self._down = True
                self._announce("unreachable", f"lease {self.where}: {exc.message}; retrying every {self.renew_every:g} s")
            self._check_deadline()
            return self.leading()
        if self._down:
            self._down = False
            self._announce("reachable", f"lease {self.where}: the API server answers again")
        if won:
            self.renewed_at = start
            if self._role != "leader":
                self._announce(
                    "leader",
                    f"LEADER: {self.identity} holds lease {self.where} (duration {self.duration_seconds} s); "
                    "observing and applying",
                )
        elif self._role == "leader":
            self.renewed_at = None
            self._announce("lost", f"LOST lease {self.where} to {self.holder or 'nobody'}: applying nothing; now standby")
        elif self._role is None or self._role == "lost":
            holder = self.holder or "another candidate"
            wait = self.observed.duration if self.observed else self.duration_seconds
            self._announce(
                "standby",
                f"standby: lease {self.where} is held by {holder}; polling every {self.renew_every:g} s, "
                f"taking over when it is not renewed for {wait:g} s",
            )
        return won

    def read(self) -> dict[str, Any] | None:
        """The Lease as JSON, or ``None`` when there is none."""
        try:
            return self._call("get", self.api.read_namespaced_lease, self.name, self.namespace)
        except KubernetesAdapterError as exc:
            if exc.kind == "not_found":
                return None
            raise

    def write(self, lease: dict[str, Any] | None, start: float) -> bool:
        """Renew, take or leave ``lease`` as read; whether this candidate holds it afterwards."""
        now = micro_time()
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": self.duration_seconds,
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": 0,
                },
            }
            try:
                return self._won(lambda: self._call("create", self.api.create_namespaced_lease, self.namespace, body))
            except KubernetesAdapterError as exc:
                if exc.kind == "not_found":  # NamespaceLifecycle: no such namespace; no round would ever succeed
                    raise LeaderElectionError(
                        f"cannot create lease {self.where}: namespace {self.namespace!r} does not exist "
                        f"(create it, or give --lease-namespace): {exc.message}"
                    ) from exc
                raise
        spec = lease.get("spec") or {}
        meta = lease.get("metadata") or {}
        holder = str(spec.get("holderIdentity") or "")
        self.holder = holder
        if holder and holder != self.identity:
            version = str(meta.get("resourceVersion", ""))
            if self.observed is None or self.observed.version != version:
                duration = float(spec.get("leaseDurationSeconds") or self.duration_seconds)
                self.observed = Observed(version, holder, duration, start)
            if start < self.observed.since + self.observed.duration:
                return False  # still the holder's, by this candidate's clock
            log.info("lease %s: %s has not renewed it for %g s: taking over", self.where, holder, start - self.observed.since)
        taking = holder != self.identity
        new_spec = dict(spec)
        new_spec.update(holderIdentity=self.identity, leaseDurationSeconds=self.duration_seconds, renewTime=now)
        if taking:
            new_spec["acquireTime"] = now
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": new_spec}
        return self._won(lambda: self._call("update", self.api.replace_namespaced_lease, self.name, self.namespace, body))

    def _won(self, attempt: Callable[[], Any]) -> bool:
        try:
            written = attempt()
        except KubernetesAdapterError as exc:
            if exc.kind == "conflict":  # another candidate wrote it first: re-read next round
                return False
            raise
        self.holder = self.identity
        self.observed = None
        spec = (written or {}).get("spec") or {}
        return spec.get("holderIdentity") == self.identity

    def _call(self, verb: str, call: Any, *args: Any) -> Any:
        try:
            resp = call(*args, _preload_content=False, _request_timeout=self.timeout)
            data = resp.data
        except Exception as exc:
            kind, message = classify(exc)
            if kind == "forbidden":
                raise LeaderElectionError(
                    f"RBAC forbids {verb} on leases.coordination.k8s.io {self.where} (the Role in "
                    f"deploy/kubernetes/rbac.yaml grants get, create, update): {message}"
                ) from exc
            if kind == "invalid":  # a name that is no DNS subdomain, say: every round would fail the same way
                raise LeaderElectionError(f"the API server refuses lease {self.where} ({verb}): {message}") from exc
            if kind == "not_found" and verb == "update":  # deleted since it was read: read it again next round
                kind = "conflict"
            raise KubernetesAdapterError(kind, message) from exc
        return json.loads(data) if data else None

    def _check_deadline(self) -> None:
        if self._role == "leader" and not self.leading():
            self.renewed_at = None
            self._announce(
                "lost",
                f"LOST lease {self.where}: not renewed within {self.renew_deadline:g} s; applying nothing; now standby",
            )

    def _announce(self, role: Role, line: str) -> None:
        if role in ("leader", "standby", "lost"):
            self._role = role
        self.report(role, line)

    # -- the background renewal ------------------------------------------------------------------

    def start(self) -> LeaseElector:
        """Run a round now (so the caller knows at once), then every ``renew_every`` s in a thread."""
        self._step()
        self._thread = threading.Thread(target=self._loop, name=f"lease {self.where}", daemon=True)
        self._thread.start()
        return self

    def _step(self) -> None:
        try:
            self.round()
        except LeaderElectionError as exc:
            self.renewed_at = None
            self.error = exc
            self._stop.set()
        except Exception as exc:  # anything else (a bug of ours, an odd answer): the next round tries again
            log.warning("lease %s: round failed: %s: %s", self.where, type(exc).__name__, exc)
            self._check_deadline()
        with self.changed:
            self.changed.notify_all()

    def _loop(self) -> None:
        while not self._stop.wait(self._pause()):
            self._step()

    def _pause(self) -> float:
        """Until the next round: the period, but never past the point where a leader's deadline nears."""
        if self.renewed_at is None:
            return self.renew_every
        left = self.renewed_at + self.renew_deadline - self.monotonic()
        return max(0.25, min(self.renew_every, left))

    def stop(self, release: bool = True) -> None:
        """Stop renewing; with ``release``, a holder lets go of the Lease (``holderIdentity`` emptied)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout + 1)
        if release and self.leading():
            self.renewed_at = None
            try:
                lease = self.read()
                spec = (lease or {}).get("spec") or {}
                if lease is not None and spec.get("holderIdentity") == self.identity:
                    spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=micro_time())
                    self._call("update", self.api.replace_namespaced_lease, self.name, self.namespace, lease)
                    self.report("standby", f"released lease {self.where}")
            except (KubernetesAdapterError, LeaderElectionError) as exc:
                log.warning("lease %s: not released (%s); a standby takes it when it expires", self.where, exc)


class LeaderGuard:
    """The daemon's guard on Kubernetes: block while standby, refuse writes once the Lease is lost."""

    def __init__(self, elector: LeaseElector, stopped: Callable[[], bool]) -> None:
        self.elector = elector
        self.stopped = stopped

    def __call__(self) -> None:
        e = self.elector
        with e.changed:
            while not e.leading():
                if e.error is not None:
                    raise e.error
                if self.stopped():
                    raise StoppedWhileStandby(f"stopped while standby for lease {e.where}")
                e.changed.wait(timeout=min(0.5, e.renew_every))

    def fence(self) -> None:
        """Raise (a ``conflict``) unless this daemon may write now: called before every change."""
        if not self.elector.leading():
            raise KubernetesAdapterError(
                "conflict", f"not applied: this daemon no longer holds lease {self.elector.where} (another daemon may act)"
            )

    def release(self) -> None:
        self.elector.stop(release=True)
