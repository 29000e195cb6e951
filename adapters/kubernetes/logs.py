"""Training progress from pod logs: each FlowPlan pod's log read incrementally, with Docker's parsers.

Every interval, for each job whose pod has a container (bound and ``Running``, or ended), the adapter
asks the API server for the first container's log with ``timestamps=true`` (one request per pod,
up to the adapter's pool size at once, :mod:`adapters.kubernetes.pool`; a job's pods one after the
other): lines as
``docker logs --timestamps`` prints them, so :class:`adapters.docker.progress.LogProgress` reads
them exactly as the Docker adapter does (every format of :mod:`adapters.logs`; the SDK's ``declare``
and ``delivered`` events; points merged into the job's history in the state store, one per epoch,
so the HTTP ingest's points and a log read twice are not duplicated).

Incremental: the cursor (the last consumed line's timestamp, per pod UID, in the state store) asks
only for ``sinceSeconds`` back to that line, plus :data:`SINCE_SLACK` seconds for the clock skew
between this daemon and the node (the log endpoint takes seconds relative to the node's clock:
the Python client has no ``sinceTime``); lines at or before the cursor are dropped by the reader, by
their exact timestamp. A replaced pod (a migration) is a new UID with a log of its own: the job's
history, declaration and delivery are kept by job id, so the job keeps them.

A pod whose log cannot be read (a container still starting, no container runtime behind the node,
RBAC without ``pods/log``, the kubelet unreachable) keeps the history it had: the failure is in
:attr:`PodLogs.failed` and logged once per pod and reason (a warning when RBAC forbids it or on a
bug of ours, which a person must fix; otherwise at info level: a kubelet answers 400 while a
container is being created), and it never fails ``observe``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any

from adapters.docker.progress import LogProgress, parse_timestamp, to_seconds
from adapters.kubernetes.errors import KubernetesAdapterError, translate
from adapters.kubernetes.pods import PodView
from adapters.kubernetes.pool import CallPool

log = logging.getLogger("flowplan.kubernetes")

#: Seconds read before the cursor's line, for the clock skew between the daemon and the node.
SINCE_SLACK = 30
#: Pod phases with a container whose log the kubelet can serve.
LOGGED_PHASES = ("Running", "Succeeded", "Failed")


class PodLogs:
    """Reads FlowPlan pods' logs into the state store (see the module docstring)."""

    def __init__(self, api: Any, progress: LogProgress, *, timeout: float, pool: CallPool | None = None) -> None:
        self.api = api
        self.progress = progress
        self.timeout = timeout
        self.pool = pool or CallPool(1)
        #: job -> why its pod's log was not read at the last observe (``kind: message``)
        self.failed: dict[str, str] = {}
        self._said: dict[str, str] = {}  # pod UID -> the failure already logged
        self._drained: set[str] = set()  # UIDs of ended pods whose whole log was read

    def read_all(self, reads: Sequence[tuple[str, Sequence[PodView], float | None]]) -> None:
        """:meth:`read` each ``(job id, its pods, steps per epoch)``: jobs on the pool's threads at
        once, a job's pods one after the other, in the order given. Each job's progress is its own
        (the state store's keys are the job id and the pod UID): the reads share nothing else."""
        self.pool.map(self._read_job, reads)

    def _read_job(self, read: tuple[str, Sequence[PodView], float | None]) -> None:
        job_id, pods, steps_per_epoch = read
        for pod in pods:
            self.read(job_id, pod, steps_per_epoch)

    def read(self, job_id: str, pod: PodView, steps_per_epoch: float | None = None) -> None:
        """Read the new lines of ``pod``'s log into the job's progress; a failure is noted, never raised."""
        self.failed.pop(job_id, None)
        if pod.node is None or pod.phase not in LOGGED_PHASES or pod.uid in self._drained:
            return
        final = pod.phase != "Running"
        try:
            raw = self._fetch(pod)
            self.progress.read(job_id, pod.uid, raw, final=final, steps_per_epoch=steps_per_epoch)
        except KubernetesAdapterError as exc:
            self._note(job_id, pod, f"{exc.kind}: {exc.message}", serious=exc.kind == "forbidden")
            return
        except Exception as exc:  # a bug of ours in reading one log must not stop observing the cluster
            self._note(job_id, pod, f"bug: {type(exc).__name__}: {exc}", serious=True)
            return
        if final:
            self._drained.add(pod.uid)

    def _fetch(self, pod: PodView) -> bytes:
        kwargs: dict[str, Any] = {"container": pod.container, "timestamps": True}
        cursor = self.progress.cursor(pod.uid)
        if cursor.since:
            back = time.time() - to_seconds(parse_timestamp(cursor.since))
            kwargs["since_seconds"] = max(1, math.ceil(back) + SINCE_SLACK)
        try:
            resp = self.api.read_namespaced_pod_log(
                pod.name, pod.namespace, _preload_content=False, _request_timeout=self.timeout, **kwargs
            )
            return bytes(resp.data or b"")
        except Exception as exc:
            raise translate(exc) from exc

    def _note(self, job_id: str, pod: PodView, why: str, *, serious: bool) -> None:
        self.failed[job_id] = why
        if self._said.get(pod.uid) != why:
            self._said[pod.uid] = why
            level = logging.WARNING if serious else logging.INFO
            log.log(level, "job %s: log of pod %s/%s not read (its history is kept): %s", job_id, pod.namespace, pod.name, why)
