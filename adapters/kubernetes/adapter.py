"""The Kubernetes adapter: nodes as FlowPlan nodes, FlowPlan's pods as jobs, FlowPlan as their scheduler.

What it assumes (read before relying on it):

- **A job is one pod, or a gang of pods** (the pods of a namespace sharing a ``flowplan.io/gang``
  label, or else the same controller owner, e.g. a Job's pods: one job with a replica per pod, placed
  all or nothing, on one node or spread over several, its count changed through its owner;
  :mod:`adapters.kubernetes.gangs` says how each change treats them). A change list with a
  placement that is not its change's replicas (rank 0 on the change's node) is refused whole,
  before anything is applied, with one line naming the job and the placement. FlowPlan's pods are those with
  ``spec.schedulerName: flowplan`` or the label ``flowplan.io/job``; their bounds and targets are in
  ``flowplan.io/*`` annotations (:mod:`adapters.kubernetes.annotations`). Job ids must be unique
  across the namespaces watched; a second pod of another namespace claiming an id is unmanaged.
- **Pod state is the job state.** Unbound (no ``spec.nodeName``) → pending; bound and not terminated
  → running on that node; ``Succeeded`` → finished; ``Failed`` → finished (logged). A pod being
  deleted is ignored: its replacement, if any, is the job.
- **FlowPlan is the scheduler of its pods.** A ``start`` sets the pending pod's CPU if the plan
  differs from its request (the ``resize`` subresource takes an unbound pod too), then binds it to
  the planned node (a ``Binding``): the kubelet admits it at the planned size.
- **CPU is the first container's.** ``requests.cpu`` is the guaranteed share (a weight: the kubelet
  turns it into ``cpu.weight``); ``limits.cpu``, where the pod has one, is the cap: the planned cap,
  else the job's declared maximum. A pod without a CPU limit gets none (a cap cannot be added
  without a re-create). A Guaranteed pod stays Guaranteed (its limit moves with its request).
- **Resize in place** goes through the pod ``resize`` subresource with the observed
  ``resourceVersion`` (a stale one is a ``conflict``): the pod, its UID and its containers stay. If
  the kubelet reported the previous resize ``Infeasible`` (the ``PodResizePending`` condition), or
  the job is not ``resizable``, or its GPU count changes, the pod is re-created instead.
- **Re-create / migrate / pause: the checkpoint comes first.** The old pod gets the annotation
  ``flowplan.io/checkpoint-requested`` (the training SDK watches it); a replacement pod is created
  *unbound* (same spec, the job label, ``flowplan.io/replaces``, the new resources,
  ``schedulerName: flowplan`` so that no other scheduler places it: it cannot start); the old pod
  is deleted, gracefully (its SIGTERM is the fallback checkpoint signal). For a migration the
  adapter then waits, up to ``checkpoint_timeout`` seconds, for the old pod to be gone (the kubelet
  removes it once its container has exited: the checkpoint is written) and only then binds the
  replacement to the target node. If the old pod outlives the wait, the outcome is ``transient``
  and the replacement stays pending: the job is pending, and a later ``start`` binds it, but only
  once every old pod of the job has ended (until then the start is ``transient`` too). A pause
  leaves the replacement unbound without waiting. If the replacement cannot be created, nothing
  else happens (the checkpoint request is withdrawn; the old pod keeps running); if the old pod
  cannot be deleted, the replacement is deleted again and the request withdrawn (what fails of
  that is left to :meth:`KubernetesAdapter.reconcile`, which keeps the bound pod).
- **One writer.** With ``fence`` set (the daemon's leader election,
  :mod:`adapters.kubernetes.leader`), every write (a change, a duplicate's deletion) first asks it,
  and a daemon that lost its Lease writes nothing more (a ``conflict`` outcome). With ``identity``
  set, every Binding (and a replacement bound at creation) carries ``flowplan.io/bound-by``: the API
  server copies a Binding's annotations onto the pod, so who placed each pod is on the server.
- **Many at once, in a safe order.** Changes are carried out up to ``workers`` at once (a thread
  pool, :mod:`adapters.kubernetes.pool`; ``flowplan daemon --api-threads``), and so are the log
  reads of ``observe``. The changes of one job run one after the other, in the order given (a
  migration's checkpoint → replacement → deletion is one change, and one thread, anyway). The
  order given is kept where it frees room: the changes are taken as *phases* (each run of changes
  of one rank of :func:`planner.transitions.diff_order`: pauses, shrinking resizes, migrations,
  growing resizes, starts — the order :func:`adapters.loop.diff` sorts them in), and a phase starts
  only once every change of the phase before has ended, so nothing is bound to a node before what
  leaves it has been asked to.
- **Few calls.** A resize, and a start's CPU, patch with the ``resourceVersion`` of the pod as
  ``observe`` listed it (no read first; a stale one is a ``conflict``, read again and retried); a
  start is then one Binding (no read: a pod bound meanwhile makes it a ``conflict``, and the pod is
  read then); a pod already at the planned CPU is never patched.
- **Eventual consistency, partial failure.** Each change is carried out on its own; every API error
  is an :class:`~adapters.base.Outcome` (``forbidden``, ``not_found``, ``conflict``, ``invalid``,
  ``transient``, ``engine_down``), never an exception. Repeating a change that already took effect
  is a no-op that reports ``ok``; a change for a job in another state than its action starts from
  (a start of a bound pod, a migration or resize of an unbound one) is a ``conflict`` and changes
  nothing (the contract: :mod:`adapters.base`, ``docs/adapters.md``); a resize, move or pause of a
  job whose pod ``Succeeded`` since the observe is ok with nothing changed, of one that ``Failed`` a
  ``conflict``: an ended pod is never re-created (that would run the job again). ``observe`` raises
  :class:`KubernetesAdapterError` when the server cannot be listed at all (the loop logs the
  interval as failed and tries again).

Node capacity is the node's allocatable less what other (non-FlowPlan) pods bound to it request. A
node is schedulable for FlowPlan when Ready, not cordoned and without a ``NoSchedule`` /
``NoExecute`` taint; otherwise the snapshot marks it ``schedulable: false`` with the reason in the
label ``flowplan.io/not-schedulable``. Metric histories come from the progress store (the HTTP
ingest writes there) and from each pod's log, read incrementally with the Docker adapter's parsers
(:mod:`adapters.kubernetes.logs`): a failed log read keeps the history and never fails
``observe``. The SDK's ``declare`` events in a log fill the target's ``max_epochs`` and the job's
``schedule``; a job is reported ``delivered`` once its log says so (the SDK's ``delivered``) or
once the adapter has asked it to deliver (the ``flowplan.io/deliver-requested`` annotation, so the
request is made only once).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from adapters.base import (
    Adapter,
    Change,
    Clock,
    Outcome,
    WallClock,
    outcome_of,
    refuse_fractions,
    refuse_whole,
)
from adapters.docker.labels import JobLabels
from adapters.docker.memory import MemoryStore, ProgressStore
from adapters.docker.progress import LogProgress, curve_priors
from adapters.kubernetes.annotations import (
    BOUND_BY,
    CHECKPOINT_REQUESTED,
    DELIVER_REQUESTED,
    GANG_LABEL,
    JOB_LABEL,
    PREFIX,
    REPLACES,
    SCHEDULER_NAME,
    AnnotationError,
    one_replica,
    parse_annotations,
)
from adapters.kubernetes.errors import KubernetesAdapterError, translate
from adapters.kubernetes.gang_changes import GangChanges, ended_since, planned
from adapters.kubernetes.gangs import Gang, GangOps
from adapters.kubernetes.logs import PodLogs
from adapters.kubernetes.owners import OwnerCount
from adapters.kubernetes.pods import (
    GPU,
    NodeView,
    PodView,
    controller_of,
    is_flowplan_pod,
    job_id_of,
    mib,
    node_constraints,
    node_view,
    pod_view,
    requested,
)
from adapters.kubernetes.pool import DEFAULT_SIZE, CallPool, widen_connections
from adapters.kubernetes.spread import placement_text
from adapters.logs.mlflow import MlflowClient
from planner.snapshot import Allocation, Job, Node, Settings, Snapshot
from planner.transitions import diff_order
from store import declared_json

log = logging.getLogger("flowplan.kubernetes")

NOT_SCHEDULABLE_LABEL = "flowplan.io/not-schedulable"
UNMANAGED_PREFIX = "flowplan.io/unmanaged."
#: Seconds every API call may take before it is a ``transient`` error.
REQUEST_TIMEOUT = 15.0
#: Attempts of a resize whose resourceVersion went stale meanwhile (each on a fresh read).
CONFLICT_RETRIES = 4
#: A watch event about a pod the adapter created or deleted this recently (seconds after the call
#: returned) is the adapter's own doing (:meth:`KubernetesAdapter.own_event`).
OWN_EVENT_GRACE = 2.0
#: Seconds between reads while waiting for an old pod to end (a migration's checkpoint).
POLL_SECONDS = 0.25


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
    log_failed: dict[str, str] = field(default_factory=dict)  # job -> why its pod's log was not read
    terminating: dict[str, list[PodView]] = field(default_factory=dict)  # job -> its pods being deleted
    owner_sizes: dict[tuple[str, str, str], OwnerCount] = field(default_factory=dict)  # (ns, kind, name) -> what it says
    fixed_count: dict[str, str] = field(default_factory=dict)  # gang declaring count bounds -> why its count cannot change
    owner_fallback: dict[str, str] = field(default_factory=dict)  # owner gang -> why its size is the pods seen


class KubernetesAdapter(GangOps, GangChanges, Adapter):
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
        read_logs: bool = True,
        checkpoint_timeout: float = 30.0,
        workers: int = DEFAULT_SIZE,
        mlflow: str | None = None,
    ) -> None:
        from kubernetes import client

        #: Changes applied and pod logs read at once (:mod:`adapters.kubernetes.pool`).
        self.pool = CallPool(workers)
        widen_connections(api_client, workers)
        self.api = client.CoreV1Api(api_client)
        #: Owners of gangs (Job; StatefulSet, ReplicaSet; Kubeflow's training jobs): one read per owner per observe,
        #: for its desired count.
        self.batch = client.BatchV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        #: The owners' APIs by name (:mod:`adapters.kubernetes.owners`): a Kubeflow training job is a custom object.
        self.owner_apis = {"batch": self.batch, "apps": self.apps, "custom": client.CustomObjectsApi(api_client)}
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
        #: Seconds a migration waits, within ``apply``, for the old pod to end (checkpoint written)
        #: before it binds the replacement; past it, the replacement waits unbound for a later ``start``.
        self.checkpoint_timeout = checkpoint_timeout
        #: What the pods' logs said (points, declarations, deliveries), under ``k8s.*`` keys.
        self.progress = LogProgress(self.store, "k8s", log)
        #: Finished jobs whose run this adapter recorded for the curve prior (once each).
        self._runs_recorded: set[str] = set()
        self._failed_said: dict[str, str] = {}  # job -> the UID of the failed pod already logged
        #: Reads each FlowPlan pod's log every observe (:mod:`adapters.kubernetes.logs`); None: not read.
        self.logs = PodLogs(self.api, self.progress, timeout=REQUEST_TIMEOUT, pool=self.pool) if read_logs else None
        #: An MLflow tracking server whose runs tagged ``flowplan.job=<job id>`` add to the jobs' progress
        #: (:mod:`adapters.logs.mlflow`), read every observe after the logs; None: none.
        self.mlflow = MlflowClient(mlflow, timeout=5.0) if mlflow else None
        self._touched: dict[str, float] = {}  # "namespace/pod" -> time.monotonic() when a create/delete of ours returned
        self._touched_lock = threading.Lock()  # changes run on the pool's threads

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

    def _touch(self, namespace: str, *names: str) -> None:
        now = time.monotonic()
        with self._touched_lock:
            if len(self._touched) > 1000:  # a long-lived daemon: forget what no event can still be about
                self._touched = {k: t for k, t in self._touched.items() if t > now - 10 * OWN_EVENT_GRACE}
            for name in names:
                self._touched[f"{namespace}/{name}"] = now

    def own_event(self, pod: str, received: float) -> bool:
        """Was a watch event about ``pod`` (``namespace/name``), received at ``received``
        (``time.monotonic()``), our doing? True when the adapter created or deleted that pod and the
        event came before the call returned or within :data:`OWN_EVENT_GRACE` seconds after it.
        The daemon does not re-plan for its own actions (:mod:`adapters.kubernetes.watch`)."""
        t = self._touched.get(pod)
        return t is not None and received <= t + OWN_EVENT_GRACE

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
                obs.terminating.setdefault(job_id, []).append(pod)
                continue
            if GANG_LABEL in pod.labels or controller_of(raw) is not None:
                gang_pods.setdefault(job_id, []).append(pod)
                continue
            found.setdefault(job_id, []).append(pod)

        jobs: list[Job] = []
        for job_id in sorted(found):
            primary, *others = sorted(found[job_id], key=_rank, reverse=True)
            try:
                parsed = self._parse(job_id, primary)
                one_replica(primary.annotations)
            except (AnnotationError, ValueError) as exc:
                self._unmanaged(obs, node_notes, primary, str(exc))
                continue
            obs.placed[job_id] = Placed(primary, parsed, [p for p in others if p.live])
        if self.logs is not None:  # the jobs' progress first (on the pool): the jobs are made of it
            # a pod being deleted first: its last lines, e.g. up to its checkpoint
            going = obs.terminating
            self.logs.read_all([(j, [*going.get(j, []), p.pod], p.labels.steps_per_epoch) for j, p in obs.placed.items()])
            obs.log_failed.update({job_id: self.logs.failed[job_id] for job_id in obs.placed if job_id in self.logs.failed})
        if self.mlflow is not None:
            # Each job's tagged runs, one job after another; a server that fails is skipped for the rest
            # of this observe (logged once per failure), not waited out once a job.
            for job_id in sorted({*obs.placed, *gang_pods}):
                if not self.progress.read_mlflow(job_id, self.mlflow, steps_per_epoch=self._steps_of(obs, job_id, gang_pods)):
                    break
        for job_id, placed in obs.placed.items():
            jobs.append(self._job(job_id, placed.pod, placed.labels, obs))
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
        return Snapshot(time=now, nodes=nodes, jobs=jobs, settings=self.settings, curve_priors=curve_priors(self.store, jobs))

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
        parsed = parse_annotations(job_id, pod.annotations, pod.created, spec_defaults=defaults)
        # Where the pod may run (its nodeSelector and required node affinity): FlowPlan binds it, so
        # the plan must keep them (pods.node_constraints; what it cannot express makes it unmanaged).
        selector, models = node_constraints(pod.raw)
        if not selector and models is None:
            return parsed
        fields = dict(parsed.fields)
        if selector:
            fields["node_selector"] = selector
        if models is not None:
            own = fields.get("gpu_type")
            if own is not None:
                models = sorted(set(models) & ({own} if isinstance(own, str) else set(own)))
                if not models:
                    why = f"{own!r} allows no GPU model the pod's node affinity allows"
                    raise AnnotationError(f"annotation {PREFIX}gpu_type: {why}")
            fields["gpu_type"] = models[0] if len(models) == 1 else models
        return dataclasses.replace(parsed, fields=fields)

    def _steps_of(self, obs: Observation, job_id: str, gang_pods: dict[str, list[PodView]]) -> float | None:
        """The steps per epoch a job's pod declares (its ``flowplan.io/steps_per_epoch``), for MLflow's steps."""
        if job_id in obs.placed:
            return obs.placed[job_id].labels.steps_per_epoch
        for pod in gang_pods.get(job_id, []):
            try:
                return self._parse(job_id, pod).steps_per_epoch
            except (AnnotationError, ValueError):
                return None
        return None

    def _job(self, job_id: str, pod: PodView, parsed: JobLabels, obs: Observation) -> Job:
        status = _status(pod)
        failure = None
        if pod.phase == "Failed":
            obs.failed[job_id] = failure = _failure(pod)
            if self._failed_said.get(job_id) != pod.uid:  # once per pod, not at every observe while it stays
                self._failed_said[job_id] = pod.uid
                log.warning("job %s: pod %s failed (counted as finished)", job_id, pod.name)
        allocation = None
        if status == "running":
            fields = parsed.fields
            cap = pod.cpu_limit
            shown = None if cap is None or cap == fields["max_cpu_millis"] else cap
            cpu = pod.cpu_request if pod.cpu_request is not None else (cap or fields["min_cpu_millis"])
            allocation = Allocation(cpu_millis=cpu if cap is None else min(cpu, cap), gpus=pod.gpus, cpu_limit_millis=shown)
        fields = dict(parsed.fields)
        fields["target"] = self.progress.with_declared(job_id, fields.get("target"))
        fields["schedule"] = self.progress.declared_schedule(job_id, fields["target"])
        history = list(self.store.history(job_id))
        task = fields.get("task")
        if status == "finished" and task is not None and history and job_id not in self._runs_recorded:
            # Its curve lends to the task's other jobs (the store's task_curves); no speeds are kept here.
            epochs = max(p.epoch for p in history)
            target = fields["target"]
            declared = declared_json(fields["schedule"], target.max_epochs if target is not None else None)
            self.store.record_speeds(job_id, [], task=task, image=None, epochs=epochs, finished=True, schedule=declared)
            self._runs_recorded.add(job_id)
        return Job(
            id=job_id,
            status=status,
            node=pod.node if status == "running" else None,
            allocation=allocation,
            started=pod.started if status == "running" else None,
            history=history,
            # asked to deliver (the annotation: asked once), or the job's log says it delivered
            delivered=DELIVER_REQUESTED in pod.annotations or self.progress.delivered(job_id),
            failure=failure,
            **fields,
        )

    # -- apply -----------------------------------------------------------------------------------

    def apply(self, changes: Sequence[Change]) -> list[Outcome]:
        """Carry out ``changes``, each on its own, up to ``workers`` at once, phase by phase and each
        job's in order (module docstring); one outcome per change, in the order of ``changes``,
        errors as data (a bug of ours too: it must not stop the other changes). A plan that places a
        GPU fraction is refused whole, before anything is applied: ``nvidia.com/gpu`` is a whole-device
        count, and sharing one needs a device plugin (time-slicing, MPS, a GPU-share plugin) FlowPlan
        does not configure."""
        why = "nvidia.com/gpu counts whole devices; sharing one needs a device plugin"
        refused = refuse_fractions(changes, "Kubernetes", why, log)
        if refused is not None:
            return refused
        for ch in changes:
            problem = self._unsupported(ch)
            if problem is not None:
                return refuse_whole(changes, ch, problem, log)
        outcomes: dict[int, Outcome] = {}
        for phase in self._phases(changes):
            by_job: dict[str, list[tuple[int, Change]]] = {}
            for i in phase:
                by_job.setdefault(changes[i].job, []).append((i, changes[i]))
            for run in self.pool.map(self._apply_run, list(by_job.values())):
                outcomes.update(run)
        return [outcomes[i] for i in range(len(changes))]

    def _apply_run(self, run: list[tuple[int, Change]]) -> list[tuple[int, Outcome]]:
        """One job's changes of a phase, one after the other (on one of the pool's threads)."""
        return [(i, outcome_of(ch, self._apply_one, KubernetesAdapterError, log, catch_bugs=True)) for i, ch in run]

    def _phases(self, changes: Sequence[Change]) -> list[list[int]]:
        """The indices of ``changes`` cut into runs of one apply rank (:func:`planner.transitions.diff_order`);
        a resize shrinks when it asks no more CPU or GPUs than each of the job's pods has now."""
        phases: list[list[int]] = []
        rank = None
        for i, ch in enumerate(changes):
            placed = self.last.placed.get(ch.job)
            gang = self.last.gangs.get(ch.job)
            pods = gang.members if gang is not None else [placed.pod] if placed is not None else []
            try:
                shrinks = bool(pods) and all(
                    p.cpu_request is not None and ch.cpu_millis <= p.cpu_request and ch.gpus <= p.gpus for p in pods
                )
            except ValueError:  # a quantity the server took but we cannot read: the change says why
                shrinks = False
            now = diff_order(ch.kind, shrinks)
            if now != rank:
                phases.append([])
                rank = now
            phases[-1].append(i)
        return phases

    def _apply_one(self, ch: Change) -> str:
        if self.fence is not None:
            self.fence()
        gang = self.last.gangs.get(ch.job)
        if gang is not None:
            return self._apply_gang(ch, gang)
        if ch.replicas != 1 and ch.job in self.last.placed:
            why = f"job {ch.job}: one pod, not a gang (replicas={ch.replicas}); "
            why += f"a gang is pods sharing the label {GANG_LABEL} or a controller owner"
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
            pod = self._fresh(placed.pod)
            if DELIVER_REQUESTED in pod.annotations:
                return "already asked to deliver"
            if pod.phase == "Failed":  # as on Docker: a failed job has no model to deliver
                raise KubernetesAdapterError("conflict", f"job {ch.job}: {pod.name} Failed: nothing to deliver")
            self._annotate(placed.pod, {DELIVER_REQUESTED: _now_text()})
            if pod.phase == "Succeeded":  # tier 1 at its last epoch, ended before the ask: the final model
                return "finished before the deliver: its final model is the delivery (annotation flowplan.io/deliver-requested)"
            return "asked to deliver (annotation flowplan.io/deliver-requested)"
        raise KubernetesAdapterError("invalid", f"job {ch.job}: unknown change kind {ch.kind!r}")

    def _unsupported(self, ch: Change) -> str | None:
        """Why ``ch`` cannot be carried out as written, ever (``None``: it can be tried): a placement
        that is not its replicas with rank 0 on its node. The plan is then refused whole, before
        anything is applied (a half-placed gang is what all or none forbids). One line naming the
        job and the values."""
        shares = planned(ch)
        if not shares:
            return None
        where = placement_text(shares)
        if shares[0][0] != ch.node or sum(k for _, k in shares) != ch.replicas or any(k < 1 for _, k in shares):
            return f"job {ch.job}: placement {where} is not its {ch.replicas} replicas with rank 0 on {ch.node}"
        if len({n for n, _ in shares}) != len(shares):
            return f"job {ch.job}: placement {where} lists a node twice"
        return None

    def _fresh(self, pod: PodView) -> PodView:
        return pod_view(self._json(self.api.read_namespaced_pod, pod.name, pod.namespace))

    def _start(self, ch: Change, placed: Placed) -> str:
        assert ch.node is not None
        # As observed this interval, not read again: a pod bound meanwhile makes the Binding a
        # ``conflict``, and the pod is read then (below).
        pod = placed.pod
        if pod.node is not None:
            # A start is for a pending job (planner/transitions.py): a pod already bound there as asked
            # is a repeat (ok); anywhere else or otherwise, moving or resizing it is another action.
            if pod.node == ch.node and self._in_effect(ch, placed, pod):
                return f"already bound to {ch.node}"
            raise KubernetesAdapterError(
                "conflict", f"job {ch.job}: {pod.name} is already bound to {pod.node}; a start is for a pending job"
            )
        for old in self.last.terminating.get(ch.job, []):
            if not self._gone(old):  # a migration's or pause's old pod: its checkpoint comes first
                raise KubernetesAdapterError(
                    "transient",
                    f"job {ch.job}: {old.name} is still terminating (checkpointing); {pod.name} is bound once it has ended",
                )
        if pod.gpus != ch.gpus:
            return self._recreate(ch, placed, ch.node)
        cpu = ""
        if not self._in_effect(ch, placed, pod):
            # The CPU first, while the pod is pending: the kubelet then admits it at the planned size,
            # and no kubelet writes an unbound pod's status, so the observed resourceVersion holds.
            cpu = "; " + self._set_cpu(ch, placed, pod, pending=True)
        try:
            already = self._bind(pod, ch.node)
        except KubernetesAdapterError as exc:
            if not cpu:
                raise
            raise KubernetesAdapterError(exc.kind, f"job {ch.job}: {exc.message}; it stays pending{cpu}") from exc
        if already is not None:  # bound there since it was observed: as a start of a bound pod (above)
            if self._in_effect(ch, placed, already):
                return f"already bound to {ch.node}"
            raise KubernetesAdapterError(
                "conflict", f"job {ch.job}: {pod.name} is already bound to {ch.node}; a start is for a pending job"
            )
        return f"bound {pod.namespace}/{pod.name} to {ch.node}{cpu}"

    def _bind(self, pod: PodView, node: str) -> PodView | None:
        """A Binding of ``pod`` to ``node`` (FlowPlan acting as its scheduler); a repeat is fine:
        ``None`` when this Binding placed it, the pod as read again when it was bound there already."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "annotations": self._bound_by()},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            self._json(self.api.create_namespaced_pod_binding, pod.name, pod.namespace, body)
        except KubernetesAdapterError as exc:
            if exc.kind != "conflict":
                raise
            again = self._fresh(pod)  # bound meanwhile (by a previous attempt): fine if it is where asked
            if again.node != node:
                raise
            return again
        return None

    def _bound_by(self) -> dict[str, str]:
        return {BOUND_BY: self.identity} if self.identity else {}

    def _resize(self, ch: Change, placed: Placed) -> str:
        # As observed this interval, not read again: the patch carries its resourceVersion, and a
        # stale one (the pod changed since) is a conflict that ``_set_cpu`` reads and retries.
        pod = placed.pod
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

    def _set_cpu(self, ch: Change, placed: Placed, pod: PodView, *, pending: bool = False) -> str:
        """Resize ``pod``'s CPU in place (the ``resize`` subresource, with its resourceVersion);
        ``pending``: the pod is unbound (a start sets its CPU before the Binding).

        A ``conflict`` (the pod changed since it was read: the kubelet writes its status often) is
        retried on a fresh read, a few times, as client-go's ``RetryOnConflict`` does; what the
        change means is worked out again from that read, so nobody else's change is overwritten.
        A pending pod found bound meanwhile is left alone (a ``conflict``: a start is for a pending job).
        """
        for attempt in range(CONFLICT_RETRIES):
            try:
                return self._patch_cpu(ch, placed, pod)
            except KubernetesAdapterError as exc:
                if exc.kind != "conflict" or attempt == CONFLICT_RETRIES - 1:
                    raise
                pod = self._fresh(pod)
                moot = ended_since(ch, [pod])  # it ended since it was observed (its status changed)
                if moot is not None:
                    return moot
                if self._in_effect(ch, placed, pod):
                    return f"{pod.namespace}/{pod.name} already at {ch.cpu_millis}m"
                if pending and pod.node is not None:
                    why = f"job {ch.job}: {pod.name} was bound to {pod.node} meanwhile; a start is for a pending job"
                    raise KubernetesAdapterError("conflict", why) from exc
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
        if pod.node is None:
            return f"CPU of {pod.namespace}/{pod.name} set before its Binding: {before} -> {after}"
        return f"resized {pod.namespace}/{pod.name} in place: {before} -> {after}"

    def _annotate(self, pod: PodView, annotations: dict[str, str | None]) -> None:
        body = {"metadata": {"annotations": annotations}}
        self._json(self.api.patch_namespaced_pod, pod.name, pod.namespace, body, _content_type="application/merge-patch+json")

    def _recreate(self, ch: Change, placed: Placed, target: str | None) -> str:
        """Checkpoint request → replacement created unbound → old pod deleted → once the old pod is
        gone (its checkpoint written), the replacement bound to ``target`` (none for a pause)."""
        old = self._fresh(placed.pod)
        moot = ended_since(ch, [old])
        if moot is not None:
            return moot
        if target is None and old.node is None:
            return "already pending"
        if ch.kind == "migrate" and old.node is None:
            why = f"job {ch.job}: {old.name} is unbound: a pending job is started, not migrated"
            raise KubernetesAdapterError("conflict", why)
        if ch.kind == "migrate" and old.node == target and self._in_effect(ch, placed, old):
            return f"already on {target} at {ch.cpu_millis}m/{ch.gpus}g"  # migrated already (a repeated change)
        request, limit = self._wanted(ch, placed, old)
        # Unbound (and ``schedulerName: flowplan``): it cannot start before it is bound, and it is
        # bound only once the old pod has ended, so it never starts before the checkpoint is written.
        body = replacement(old, ch.job, None, request, limit, ch.gpus)
        self._annotate(old, {CHECKPOINT_REQUESTED: _now_text()})
        try:
            created = self._json(self.api.create_namespaced_pod, old.namespace, body)
        except KubernetesAdapterError as exc:
            self._withdraw(old)
            raise KubernetesAdapterError(
                exc.kind, f"job {ch.job}: replacement pod not created ({exc.message}); {old.name} left as it was"
            ) from exc
        finally:
            self._touch(old.namespace, body["metadata"]["name"])
        new = pod_view(created)
        # The job is the new pod now: a repeat of this change before the next observe sees it.
        self.last.placed[ch.job] = Placed(new, placed.labels, placed.duplicates)
        self.last.terminating.setdefault(ch.job, []).append(old)
        try:
            self._json(self.api.delete_namespaced_pod, old.name, old.namespace)
        except KubernetesAdapterError as exc:
            if exc.kind != "not_found":  # the old pod keeps running: take the replacement back
                self._undo_replacement(ch, placed, old, new)
                raise KubernetesAdapterError(
                    exc.kind,
                    f"job {ch.job}: {old.name} not deleted ({exc.message}); replacement withdrawn, {old.name} left running",
                ) from exc
        finally:
            self._touch(old.namespace, old.name)
        cap = f" cap {limit}m" if limit is not None else ""
        made = f"re-created as {new.name} at {request}m{cap}/{ch.gpus}g"
        if target is None:
            return f"{made}, pending (paused); {old.name} deleted (asked to checkpoint)"
        waited = self._wait_gone(old)
        if waited is None:
            raise KubernetesAdapterError(
                "transient",
                f"job {ch.job}: {old.name} asked to checkpoint and deleted, still terminating after "
                f"{self.checkpoint_timeout:g} s; {made} waits unbound and is started once {old.name} has ended",
            )
        try:
            if self.fence is not None:  # the wait may have outlasted this daemon's Lease
                self.fence()
            self._bind(new, target)
        except KubernetesAdapterError as exc:
            raise KubernetesAdapterError(
                exc.kind, f"job {ch.job}: {made}, {old.name} gone, but not bound to {target} ({exc.message}); it is pending"
            ) from exc
        return f"{made} on {target}; {old.name} ended {waited:.1f} s after its deletion (checkpoint) before it was bound"

    def _withdraw(self, old: PodView) -> None:
        try:
            self._annotate(old, {CHECKPOINT_REQUESTED: None})
        except KubernetesAdapterError:
            pass

    def _undo_replacement(self, ch: Change, placed: Placed, old: PodView, new: PodView) -> None:
        """The old pod could not be deleted: delete the (unbound, never started) replacement, withdraw
        the checkpoint request. What fails here is left to reconcile (it keeps the bound pod)."""
        self.last.placed[ch.job] = placed
        self.last.terminating.get(ch.job, []).remove(old)
        try:
            self._json(self.api.delete_namespaced_pod, new.name, new.namespace, grace_period_seconds=0)
        except KubernetesAdapterError:
            pass
        finally:
            self._touch(new.namespace, new.name)
        self._withdraw(old)

    def _gone(self, pod: PodView) -> bool:
        """Has ``pod`` (that very pod: its UID) ended and been removed?"""
        try:
            again = self._fresh(pod)
        except KubernetesAdapterError as exc:
            if exc.kind == "not_found":
                return True
            raise
        return again.uid != pod.uid

    def _wait_gone(self, pod: PodView, timeout: float | None = None) -> float | None:
        """Wait up to ``timeout`` (default ``checkpoint_timeout``) seconds for ``pod`` to be gone; the
        seconds it took, or None."""
        limit = self.checkpoint_timeout if timeout is None else timeout
        began = time.monotonic()
        while True:
            if self._gone(pod):
                self._touch(pod.namespace, pod.name)  # its DELETED event is our doing
                return time.monotonic() - began
            if time.monotonic() - began >= limit:
                return None
            time.sleep(POLL_SECONDS)

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
                    self._touch(other.namespace, other.name)
                    done.append(f"{job_id}: deleted duplicate pod {other.name} (kept {placed.pod.name})")
                except KubernetesAdapterError as exc:
                    if exc.kind != "not_found":
                        done.append(f"{job_id}: could not delete duplicate pod {other.name}: {exc.kind}: {exc.message}")
        done += self.reconcile_gangs(self.fence)
        for line in done:
            log.info("reconcile: %s", line)
        return done

    def close(self) -> None:
        self.pool.close()
        try:
            self.api.api_client.close()
        except Exception:  # closing is best effort
            pass


def _status(pod: PodView) -> Literal["pending", "running", "finished"]:
    if pod.phase in ("Succeeded", "Failed"):
        return "finished"
    return "running" if pod.node is not None else "pending"


def _failure(pod: PodView) -> str:
    """How a Failed pod failed: the pod's reason (``Evicted``, ``DeadlineExceeded``), else its first
    container's termination reason and exit code (``OOMKilled (exit 137)``, ``Error (exit 3)``), else
    ``Failed``; at most 200 characters."""
    status = pod.raw.get("status") or {}
    if status.get("reason"):
        return str(status["reason"])[:200]
    for cs in status.get("containerStatuses") or []:
        done = (cs.get("state") or {}).get("terminated") or {}
        if done:
            code = done.get("exitCode")
            text = str(done.get("reason") or "exited") + (f" (exit {code})" if code is not None else "")
            return text[:200]
    return "Failed"


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
