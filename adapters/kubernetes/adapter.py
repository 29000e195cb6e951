"""The Kubernetes adapter: nodes as FlowPlan nodes, FlowPlan's pods as jobs, FlowPlan as their scheduler.

What it assumes (read before relying on it):

- **A job is one pod, or a gang of pods** (the pods of a namespace sharing a ``flowplan.io/gang``
  label: one job with a replica per pod, placed on one node all or nothing; :mod:`adapters.kubernetes.gangs`
  says how each change treats them). FlowPlan's pods are those with
  ``spec.schedulerName: flowplan`` or the label ``flowplan.io/job``; their bounds and targets are in
  ``flowplan.io/*`` annotations (:mod:`adapters.kubernetes.annotations`). Job ids must be unique
  across the namespaces watched; a second pod of another namespace claiming an id is unmanaged.
- **Pod state is the job state.** Unbound (no ``spec.nodeName``) → pending; bound and not terminated
  → running on that node; ``Succeeded`` → finished; ``Failed`` → finished (logged). A pod being
  deleted is ignored: its replacement, if any, is the job.
- **FlowPlan is the scheduler of its pods.** A ``start`` binds the pending pod to the planned node
  (a ``Binding``), then sets its CPU in place if the plan differs from the pod's request.
- **CPU is the first container's.** ``requests.cpu`` is the guaranteed share (a weight: the kubelet
  turns it into ``cpu.weight``); ``limits.cpu``, where the pod has one, is the cap: the planned cap,
  else the job's declared maximum. A pod without a CPU limit gets none (a cap cannot be added
  without a re-create). A Guaranteed pod stays Guaranteed (its limit moves with its request).
- **Resize in place** goes through the pod ``resize`` subresource with the observed
  ``resourceVersion`` (a stale one is a ``conflict``): the pod, its UID and its containers stay. If
  the kubelet reported the previous resize ``Infeasible`` (the ``PodResizePending`` condition), or
  the job is not ``resizable``, or its GPU count changes, the pod is re-created instead.
- **Re-create / migrate / pause**: the old pod gets the annotation ``flowplan.io/checkpoint-requested``
  (the training SDK watches it; the SIGTERM of the deletion that follows is the fallback signal),
  then a replacement pod is created (same spec, the job label, ``flowplan.io/replaces``, the new
  resources) with ``spec.nodeName`` set to the target node (bound at creation; for a pause, unbound:
  a pending job, with ``schedulerName: flowplan`` so that no other scheduler places it), and only
  then is the old pod deleted, gracefully. If the replacement cannot be
  created, nothing else happens (the old pod keeps running: an error outcome). If the old pod cannot
  be deleted, the job has two pods: :meth:`KubernetesAdapter.reconcile` deletes the older one.
- **One writer.** With ``fence`` set (the daemon's leader election,
  :mod:`adapters.kubernetes.leader`), every write (a change, a duplicate's deletion) first asks it,
  and a daemon that lost its Lease writes nothing more (a ``conflict`` outcome). With ``identity``
  set, every Binding (and a replacement bound at creation) carries ``flowplan.io/bound-by``: the API
  server copies a Binding's annotations onto the pod, so who placed each pod is on the server.
- **Eventual consistency, partial failure.** Each change is carried out on its own; every API error
  is an :class:`~adapters.base.Outcome` (``forbidden``, ``not_found``, ``conflict``, ``invalid``,
  ``transient``, ``engine_down``), never an exception. Repeating a change that already took effect
  is a no-op that reports ``ok``; a change for a job in another state than its action starts from
  (a start of a bound pod, a migration or resize of an unbound one) is a ``conflict`` and changes
  nothing (the contract: :mod:`adapters.base`, ``docs/adapters.md``). ``observe`` raises
  :class:`KubernetesAdapterError` when the server cannot be listed at all (the loop logs the
  interval as failed and tries again).

Node capacity is the node's allocatable less what other (non-FlowPlan) pods bound to it request. A
node is schedulable for FlowPlan when Ready, not cordoned and without a ``NoSchedule`` /
``NoExecute`` taint; otherwise the snapshot marks it ``schedulable: false`` with the reason in the
label ``flowplan.io/not-schedulable``. Metric histories come from the progress store (the HTTP
ingest writes there); reading pod logs is a later slice. A job is reported ``delivered`` once the
adapter has asked it to deliver (the ``flowplan.io/deliver-requested`` annotation): until progress
is read from the pod, the handover itself cannot be seen, and the request is made only once.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from adapters.base import Adapter, Change, Clock, Outcome, WallClock, apply_each
from adapters.docker.labels import JobLabels
from adapters.docker.memory import MemoryStore, ProgressStore
from adapters.kubernetes.annotations import (
    BOUND_BY,
    CHECKPOINT_REQUESTED,
    DELIVER_REQUESTED,
    GANG_LABEL,
    JOB_LABEL,
    REPLACES,
    SCHEDULER_NAME,
    AnnotationError,
    parse_annotations,
)
from adapters.kubernetes.errors import KubernetesAdapterError, translate
from adapters.kubernetes.gangs import Gang, GangOps
from adapters.kubernetes.pods import GPU, NodeView, PodView, is_flowplan_pod, job_id_of, mib, node_view, pod_view, requested
from planner.snapshot import Allocation, Job, Node, Settings, Snapshot

log = logging.getLogger("flowplan.kubernetes")

NOT_SCHEDULABLE_LABEL = "flowplan.io/not-schedulable"
UNMANAGED_PREFIX = "flowplan.io/unmanaged."
#: Seconds every API call may take before it is a ``transient`` error.
REQUEST_TIMEOUT = 15.0
#: Attempts of a resize whose resourceVersion went stale meanwhile (each on a fresh read).
CONFLICT_RETRIES = 4


@dataclass
class Placed:
    """The pod that is a job, as last observed, and any other live pods of the same job."""

    pod: PodView
    labels: JobLabels
    duplicates: list[PodView] = field(default_factory=list)


@dataclass
class Observation:
    """Everything :meth:`KubernetesAdapter.observe` learned besides the snapshot itself."""

    placed: dict[str, Placed] = field(default_factory=dict)
    gangs: dict[str, Gang] = field(default_factory=dict)  # the gangs that are jobs (adapters/kubernetes/gangs.py)
    waiting: dict[str, str] = field(default_factory=dict)  # gang -> why it is no job (waiting for pods) or pending (split)
    nodes: dict[str, NodeView] = field(default_factory=dict)
    unmanaged: dict[str, str] = field(default_factory=dict)  # "namespace/pod" -> reason
    failed: dict[str, str] = field(default_factory=dict)  # job -> why its pod failed


class KubernetesAdapter(GangOps, Adapter):
    """Observe and change FlowPlan's pods through the API server (see the module docstring)."""

    def __init__(
        self,
        api_client: Any,
        *,
        namespaces: Sequence[str] | None = None,
        store: ProgressStore | None = None,
        clock: Clock | None = None,
        settings: Settings | None = None,
        identity: str | None = None,
        fence: Callable[[], None] | None = None,
    ) -> None:
        from kubernetes import client

        self.api = client.CoreV1Api(api_client)
        self.namespaces = list(namespaces) if namespaces else None  # None: every namespace
        self.store: ProgressStore = store if store is not None else MemoryStore()
        self.clock = clock or WallClock()
        self.settings = settings or Settings()
        self.last = Observation()
        #: Who acts (the leader election's identity): written on every Binding as ``flowplan.io/bound-by``.
        self.identity = identity
        #: Called before every write (a change, a duplicate's deletion); raises a
        #: :class:`KubernetesAdapterError` to refuse it, e.g. once this daemon lost its Lease
        #: (:meth:`adapters.kubernetes.leader.LeaderGuard.fence`).
        self.fence = fence

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, *, context: str | None = None, **options: Any) -> KubernetesAdapter:
        """From a kubeconfig file (``None``: ``$KUBECONFIG`` or ``~/.kube/config``), or in-cluster
        credentials when there is no file and the process runs in a pod."""
        from kubernetes import config

        try:
            api_client = config.new_client_from_config(config_file=path, context=context)
        except config.ConfigException:
            if path is not None:
                raise
            config.load_incluster_config()
            from kubernetes import client

            api_client = client.ApiClient()
        return cls(api_client, **options)

    # -- calls -----------------------------------------------------------------------------------

    def _json(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        """Call the API with the response left as JSON; every error translated (errors.py)."""
        try:
            resp = call(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
            data = resp.data
        except Exception as exc:
            raise translate(exc) from exc
        return json.loads(data) if data else None

    def _list_pods(self) -> list[dict[str, Any]]:
        if self.namespaces is None:
            return list(self._json(self.api.list_pod_for_all_namespaces)["items"])
        out: list[dict[str, Any]] = []
        for ns in self.namespaces:
            out.extend(self._json(self.api.list_namespaced_pod, ns)["items"])
        return out

    # -- observe ---------------------------------------------------------------------------------

    def observe(self) -> Snapshot:
        """The cluster now: one node per Kubernetes node, one job per FlowPlan pod (module docstring)."""
        now = self.clock.now()
        obs = Observation()
        raw_nodes = self._json(self.api.list_node)["items"]
        pods = self._list_pods()
        views = {v.name: v for v in (node_view(n) for n in raw_nodes)}
        obs.nodes = views
        held: dict[str, list[int]] = {name: [0, 0, 0] for name in views}
        found: dict[str, list[PodView]] = {}
        gang_pods: dict[str, list[PodView]] = {}  # gang job id -> its pods
        namespace_of: dict[str, str] = {}
        node_notes: dict[str, dict[str, str]] = {name: {} for name in views}
        for raw in pods:
            pod = pod_view(raw)
            if not is_flowplan_pod(raw):
                if pod.node in held and pod.live:
                    for i, amount in enumerate(requested(raw)):
                        held[pod.node][i] += amount
                continue
            job_id = job_id_of(raw)
            if namespace_of.setdefault(job_id, pod.namespace) != pod.namespace:
                why = f"job id {job_id!r} is already used in namespace {namespace_of[job_id]}"
                self._unmanaged(obs, node_notes, pod, why)
                continue
            if pod.deleting:
                continue
            if GANG_LABEL in pod.labels:
                gang_pods.setdefault(job_id, []).append(pod)
                continue
            found.setdefault(job_id, []).append(pod)

        jobs: list[Job] = []
        for job_id in sorted(found):
            primary, *others = sorted(found[job_id], key=_rank, reverse=True)
            try:
                parsed = self._parse(job_id, primary)
            except (AnnotationError, ValueError) as exc:
                self._unmanaged(obs, node_notes, primary, str(exc))
                continue
            obs.placed[job_id] = Placed(primary, parsed, [p for p in others if p.live])
            jobs.append(self._job(job_id, primary, parsed, obs))
        jobs.extend(self._observe_gangs(gang_pods, obs, node_notes, held))

        nodes = []
        for name in sorted(views):
            v = views[name]
            cpu, mem, gpus = held[name]
            labels = dict(v.labels)
            labels.update(node_notes[name])
            closed = v.why_not_schedulable
            if closed is not None:
                labels[NOT_SCHEDULABLE_LABEL] = closed
            nodes.append(
                Node(
                    name=name,
                    cpu_millis=max(0, v.cpu_millis - cpu),
                    memory_mib=max(0, v.memory_mib - mem),
                    gpus=max(0, v.gpus - gpus),
                    gpu_type=v.gpu_type,
                    labels=labels,
                    schedulable=closed is None,
                )
            )
        self.last = obs
        return Snapshot(time=now, nodes=nodes, jobs=jobs, settings=self.settings)

    def _unmanaged(self, obs: Observation, notes: dict[str, dict[str, str]], pod: PodView, why: str) -> None:
        obs.unmanaged[f"{pod.namespace}/{pod.name}"] = why
        if pod.node in notes:
            notes[pod.node][UNMANAGED_PREFIX + pod.name] = why[:200]
        log.warning("pod %s/%s is unmanaged: %s", pod.namespace, pod.name, why)

    @staticmethod
    def _parse(job_id: str, pod: PodView) -> JobLabels:
        defaults: dict[str, str] = {}
        if pod.cpu_limit is not None:
            defaults["max_cpu_millis"] = str(pod.cpu_limit)
        if "memory" in pod.requests:
            defaults["memory_mib"] = str(mib(pod.requests["memory"]))
        if pod.gpus:
            defaults["min_gpus"] = defaults["max_gpus"] = str(pod.gpus)
        return parse_annotations(job_id, pod.annotations, pod.created, spec_defaults=defaults)

    def _job(self, job_id: str, pod: PodView, parsed: JobLabels, obs: Observation) -> Job:
        status = _status(pod)
        if pod.phase == "Failed":
            obs.failed[job_id] = str((pod.raw.get("status") or {}).get("reason") or "Failed")
            log.warning("job %s: pod %s failed (counted as finished)", job_id, pod.name)
        allocation = None
        if status == "running":
            fields = parsed.fields
            cap = pod.cpu_limit
            shown = None if cap is None or cap == fields["max_cpu_millis"] else cap
            cpu = pod.cpu_request if pod.cpu_request is not None else (cap or fields["min_cpu_millis"])
            allocation = Allocation(cpu_millis=cpu if cap is None else min(cpu, cap), gpus=pod.gpus, cpu_limit_millis=shown)
        return Job(
            id=job_id,
            status=status,
            node=pod.node if status == "running" else None,
            allocation=allocation,
            history=list(self.store.history(job_id)),
            delivered=DELIVER_REQUESTED in pod.annotations,
            **parsed.fields,
        )

    # -- apply -----------------------------------------------------------------------------------

    def apply(self, changes: Sequence[Change]) -> list[Outcome]:
        """Carry out ``changes`` in order, each on its own; one outcome per change, errors as data
        (a bug of ours too: it must not stop the other changes)."""
        return apply_each(changes, self._apply_one, KubernetesAdapterError, log, catch_bugs=True)

    def _apply_one(self, ch: Change) -> str:
        if self.fence is not None:
            self.fence()
        gang = self.last.gangs.get(ch.job)
        if gang is not None:
            return self._apply_gang(ch, gang)
        if ch.replicas != 1 and ch.job in self.last.placed:
            why = f"job {ch.job}: one pod, not a gang (replicas={ch.replicas}); a gang is pods sharing the label {GANG_LABEL}"
            raise KubernetesAdapterError("invalid", why)
        placed = self.last.placed.get(ch.job)
        if placed is None:
            raise KubernetesAdapterError("not_found", f"job {ch.job}: no pod seen for it")
        if ch.node is not None and ch.node not in self.last.nodes:
            raise KubernetesAdapterError("invalid", f"job {ch.job}: unknown node {ch.node!r}")
        if ch.kind == "start":
            return self._start(ch, placed)
        if ch.kind == "resize":
            return self._resize(ch, placed)
        if ch.kind == "migrate":
            return self._recreate(ch, placed, ch.node)
        if ch.kind == "pause":
            return self._recreate(ch, placed, None)
        if ch.kind == "deliver":
            if DELIVER_REQUESTED in self._fresh(placed.pod).annotations:
                return "already asked to deliver"
            self._annotate(placed.pod, {DELIVER_REQUESTED: _now_text()})
            return "asked to deliver (annotation flowplan.io/deliver-requested)"
        raise KubernetesAdapterError("invalid", f"job {ch.job}: unknown change kind {ch.kind!r}")

    def _fresh(self, pod: PodView) -> PodView:
        return pod_view(self._json(self.api.read_namespaced_pod, pod.name, pod.namespace))

    def _start(self, ch: Change, placed: Placed) -> str:
        assert ch.node is not None
        pod = self._fresh(placed.pod)
        if pod.node is not None:
            # A start is for a pending job (planner/transitions.py): a pod already bound there as asked
            # is a repeat (ok); anywhere else or otherwise, moving or resizing it is another action.
            if pod.node == ch.node and self._in_effect(ch, placed, pod):
                return f"already bound to {ch.node}"
            raise KubernetesAdapterError(
                "conflict", f"job {ch.job}: {pod.name} is already bound to {pod.node}; a start is for a pending job"
            )
        if pod.gpus != ch.gpus:
            return self._recreate(ch, placed, ch.node)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "annotations": self._bound_by()},
            "target": {"apiVersion": "v1", "kind": "Node", "name": ch.node},
        }
        try:
            self._json(self.api.create_namespaced_pod_binding, pod.name, pod.namespace, body)
        except KubernetesAdapterError as exc:
            if exc.kind != "conflict":
                raise
            again = self._fresh(pod)  # bound meanwhile (by a previous attempt): fine if it is where asked
            if again.node != ch.node:
                raise
        bound = f"bound {pod.namespace}/{pod.name} to {ch.node}"
        pod = self._fresh(pod)
        if self._in_effect(ch, placed, pod):
            return bound
        try:
            return f"{bound}; {self._set_cpu(ch, placed, pod)}"
        except KubernetesAdapterError as exc:
            raise KubernetesAdapterError(exc.kind, f"{bound}, but its CPU was not set: {exc.message}") from exc

    def _bound_by(self) -> dict[str, str]:
        return {BOUND_BY: self.identity} if self.identity else {}

    def _resize(self, ch: Change, placed: Placed) -> str:
        pod = self._fresh(placed.pod)
        if pod.node is None:
            why = f"job {ch.job}: {pod.name} is unbound: a pending job is started, not resized"
            raise KubernetesAdapterError("conflict", why)
        if pod.node != ch.node:
            raise KubernetesAdapterError("invalid", f"job {ch.job}: resize on {ch.node} but its pod is on {pod.node}")
        if self._in_effect(ch, placed, pod):
            return f"already at {ch.cpu_millis}m"
        if pod.gpus != ch.gpus or not placed.labels.fields.get("resizable", True):
            return self._recreate(ch, placed, ch.node)
        if pod.resize is not None and pod.resize.startswith("Infeasible"):
            log.info("job %s: the node found the last resize infeasible (%s): re-creating", ch.job, pod.resize)
            return self._recreate(ch, placed, ch.node)
        return self._set_cpu(ch, placed, pod)

    def _wanted(self, ch: Change, placed: Placed, pod: PodView) -> tuple[int, int | None]:
        """The CPU request and limit (millicores; ``None``: no limit) that ``ch`` means for ``pod``."""
        if pod.cpu_limit is None:
            return ch.cpu_millis, None
        if pod.guaranteed:
            return ch.cpu_millis, ch.cpu_millis
        cap = ch.cpu_limit_millis if ch.cpu_limit_millis is not None else int(placed.labels.fields["max_cpu_millis"])
        return ch.cpu_millis, max(cap, ch.cpu_millis)

    def _in_effect(self, ch: Change, placed: Placed, pod: PodView) -> bool:
        return (pod.cpu_request, pod.cpu_limit) == self._wanted(ch, placed, pod) and pod.gpus == ch.gpus

    def _set_cpu(self, ch: Change, placed: Placed, pod: PodView) -> str:
        """Resize ``pod``'s CPU in place (the ``resize`` subresource, with its resourceVersion).

        A ``conflict`` (the pod changed since it was read: the kubelet writes its status often) is
        retried on a fresh read, a few times, as client-go's ``RetryOnConflict`` does; what the
        change means is worked out again from that read, so nobody else's change is overwritten.
        """
        for attempt in range(CONFLICT_RETRIES):
            try:
                return self._patch_cpu(ch, placed, pod)
            except KubernetesAdapterError as exc:
                if exc.kind != "conflict" or attempt == CONFLICT_RETRIES - 1:
                    raise
                pod = self._fresh(pod)
                if self._in_effect(ch, placed, pod):
                    return f"{pod.namespace}/{pod.name} already at {ch.cpu_millis}m"
        raise AssertionError("unreachable")

    def _patch_cpu(self, ch: Change, placed: Placed, pod: PodView) -> str:
        request, limit = self._wanted(ch, placed, pod)
        resources: dict[str, Any] = {"requests": {"cpu": f"{request}m"}}
        if limit is not None:
            resources["limits"] = {"cpu": f"{limit}m"}
        body = {
            "metadata": {"resourceVersion": pod.resource_version},
            "spec": {"containers": [{"name": pod.container, "resources": resources}]},
        }
        self._json(
            self.api.patch_namespaced_pod_resize,
            pod.name,
            pod.namespace,
            body,
            _content_type="application/strategic-merge-patch+json",
        )
        before = f"{pod.cpu_request}m" + (f" cap {pod.cpu_limit}m" if pod.cpu_limit is not None else "")
        after = f"{request}m" + (f" cap {limit}m" if limit is not None else "")
        return f"resized {pod.namespace}/{pod.name} in place: {before} -> {after}"

    def _annotate(self, pod: PodView, annotations: dict[str, str | None]) -> None:
        body = {"metadata": {"annotations": annotations}}
        self._json(self.api.patch_namespaced_pod, pod.name, pod.namespace, body, _content_type="application/merge-patch+json")

    def _recreate(self, ch: Change, placed: Placed, target: str | None) -> str:
        """Checkpoint request → replacement (bound to ``target``, or pending) → old pod deleted."""
        old = self._fresh(placed.pod)
        if target is None and old.node is None:
            return "already pending"
        if ch.kind == "migrate" and old.node is None:
            why = f"job {ch.job}: {old.name} is unbound: a pending job is started, not migrated"
            raise KubernetesAdapterError("conflict", why)
        if ch.kind == "migrate" and old.node == target and self._in_effect(ch, placed, old):
            return f"already on {target} at {ch.cpu_millis}m/{ch.gpus}g"  # migrated already (a repeated change)
        request, limit = self._wanted(ch, placed, old)
        body = replacement(old, ch.job, target, request, limit, ch.gpus)
        if target is not None:  # bound at creation: by this daemon
            body["metadata"]["annotations"].update(self._bound_by())
        self._annotate(old, {CHECKPOINT_REQUESTED: _now_text()})
        try:
            created = self._json(self.api.create_namespaced_pod, old.namespace, body)
        except KubernetesAdapterError as exc:
            try:
                self._annotate(old, {CHECKPOINT_REQUESTED: None})
            except KubernetesAdapterError:
                pass
            raise KubernetesAdapterError(
                exc.kind, f"job {ch.job}: replacement pod not created ({exc.message}); {old.name} left as it was"
            ) from exc
        new_name = created["metadata"]["name"]
        # The job is the new pod now: a repeat of this change before the next observe sees it.
        self.last.placed[ch.job] = Placed(pod_view(created), placed.labels, placed.duplicates)
        try:
            self._json(self.api.delete_namespaced_pod, old.name, old.namespace)
            gone = f"deleted {old.name}"
        except KubernetesAdapterError as exc:
            if exc.kind == "not_found":
                gone = f"{old.name} already gone"
            else:
                gone = f"{old.name} not deleted ({exc.kind}: {exc.message}); reconcile deletes it"
        where = f"on {target}" if target is not None else "pending (paused)"
        cap = f" cap {limit}m" if limit is not None else ""
        return f"re-created as {new_name} {where} at {request}m{cap}/{ch.gpus}g; {gone}"

    # -- reconcile -------------------------------------------------------------------------------

    def reconcile(self) -> list[str]:
        """Delete the extra live pods of jobs that have several (an interrupted migration). Keeps
        the one ``observe`` took as the job (bound and newest first). Lines of what it did."""
        done: list[str] = []
        for job_id, placed in self.last.placed.items():
            for other in placed.duplicates:
                try:
                    if self.fence is not None:
                        self.fence()
                    self._json(self.api.delete_namespaced_pod, other.name, other.namespace)
                    done.append(f"{job_id}: deleted duplicate pod {other.name} (kept {placed.pod.name})")
                except KubernetesAdapterError as exc:
                    if exc.kind != "not_found":
                        done.append(f"{job_id}: could not delete duplicate pod {other.name}: {exc.kind}: {exc.message}")
        done += self.reconcile_gangs(self.fence)
        for line in done:
            log.info("reconcile: %s", line)
        return done

    def close(self) -> None:
        try:
            self.api.api_client.close()
        except Exception:  # closing is best effort
            pass


def _status(pod: PodView) -> Literal["pending", "running", "finished"]:
    if pod.phase in ("Succeeded", "Failed"):
        return "finished"
    return "running" if pod.node is not None else "pending"


def _rank(pod: PodView) -> tuple[int, int, float]:
    """Which of a job's pods is the job: a live one, a bound one, the newest."""
    return (1 if pod.live else 0, 1 if pod.node is not None else 0, pod.created or 0.0)


def _now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def next_name(name: str) -> str:
    """``job-a`` → ``job-a-r1`` → ``job-a-r2``: a replacement's name (pod names stay valid DNS labels)."""
    base, sep, n = name.rpartition("-r")
    if sep and n.isdigit():
        return f"{base}-r{int(n) + 1}"
    return f"{name}-r1"


def replacement(old: PodView, job_id: str, node: str | None, request: int, limit: int | None, gpus: int) -> dict[str, Any]:
    """The pod that replaces ``old``: its spec and metadata, new resources, bound to ``node`` (or not)."""
    raw = old.raw
    meta = raw.get("metadata") or {}
    spec = copy.deepcopy(raw.get("spec") or {})
    spec.pop("nodeName", None)
    if node is not None:
        spec["nodeName"] = node
    else:  # a paused job waits for FlowPlan, not for another scheduler
        spec["schedulerName"] = SCHEDULER_NAME
    first = spec["containers"][0]
    res = first.setdefault("resources", {})
    res.setdefault("requests", {})["cpu"] = f"{request}m"
    if limit is not None:
        res.setdefault("limits", {})["cpu"] = f"{limit}m"
    if gpus:
        res.setdefault("limits", {})[GPU] = str(gpus)
        res["requests"][GPU] = str(gpus)
    else:
        for part in ("requests", "limits"):
            (res.get(part) or {}).pop(GPU, None)
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k not in (CHECKPOINT_REQUESTED, DELIVER_REQUESTED, BOUND_BY)
    }
    annotations[REPLACES] = old.name
    labels = dict(meta.get("labels") or {})
    labels[JOB_LABEL] = job_id
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": next_name(old.name),
            "namespace": old.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }
