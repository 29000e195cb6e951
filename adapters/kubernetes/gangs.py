"""Gangs on Kubernetes: the pods sharing a ``flowplan.io/gang`` label, or an owner, are one job, all or nothing.

A *gang* is the snapshot's job with ``replicas`` > 1: identical containers placed all or none, on
one node or, up to its ``max_nodes``, over several (its ``placement``: pods per node, rank 0's node
first; :mod:`adapters.kubernetes.spread` ranks the pods and says which goes where). On Kubernetes it
is every FlowPlan pod of a namespace whose label ``flowplan.io/gang`` has the same value:

- **The job id is the label's value**; ``replicas`` is the number of the gang's pods. A
  ``flowplan.io/job`` label on a gang pod does not change the id. A single pod (no gang label) that
  claims the same id in the same namespace makes the gang unmanaged (the ids would collide).
- **Or the pods share an owner**: FlowPlan pods *without* the gang label whose controller (the
  ``metadata.ownerReferences`` entry with ``controller: true``: a Job, StatefulSet, ReplicaSet, or
  any kind) is the same are one gang too, its id the owner's ``<kind>/<name>`` (``job/train``;
  :func:`~adapters.kubernetes.pods.owner_job_id`). The label wins: a pod with it is in the label's
  gang whatever owns it. Without the size annotation the size is the owner's desired count, read
  once per owner per observe: a Job's ``spec.parallelism`` (at most its ``spec.completions``), a
  StatefulSet's or ReplicaSet's ``spec.replicas``. An owner of another kind, or one that cannot be
  read (forbidden, not found, the server failing), leaves the gang the pods seen, and
  ``Observation.owner_fallback`` and the log say why. FlowPlan changes the count of a Job,
  StatefulSet or ReplicaSet owner (below; :mod:`adapters.kubernetes.owners`), never of another kind,
  of a ReplicaSet a Deployment controls, or of a gang with ``flowplan.io/gang-size``.
- **Bounds** (:func:`~adapters.kubernetes.annotations.gang_bounds`): ``flowplan.io/max-nodes`` is the
  job's ``max_nodes``, ``flowplan.io/elastic`` its ``elastic``; for a gang whose count FlowPlan can
  change, ``flowplan.io/min-replicas`` is its ``min_replicas`` and ``flowplan.io/max-replicas`` its
  ``replicas`` (at least the pods it has; default: those; with more, ``min_replicas`` defaults to the
  pods it has: a gang never shrinks below them unless told). Any other gang's ``replicas`` is its pods
  and the two are not used (``Observation.fixed_count`` and the log say why). A bad value makes the
  gang unmanaged, with a note naming the key and the value.
- **The size may be declared**: the annotation ``flowplan.io/gang-size: "4"`` on the pods (the same
  on each) says how many pods the gang has. Until that many exist, the gang *waits*: it is not a job
  in the snapshot, so nothing plans for half a gang (``Observation.waiting`` and the log say why).
  Without the annotation the gang is the pods that exist: pods created one by one may be seen as a
  smaller gang, which a later start then finds grown and refuses (``conflict``); declare the size.
- **The pods must agree**: the same ``flowplan.io/*`` bounds and targets (the written annotations
  such as ``flowplan.io/checkpoint-requested`` aside), the same GPUs and memory. Where two pods
  differ, the gang is unmanaged, with a note naming both pods, the key and the two values (in
  ``Observation.unmanaged``, the node labels and the log), never an exception. Bounds are parsed from
  the rank 0 pod; ``target.tier1.within`` counts from the earliest pod's creation.
- **Parameter servers**: the gang's pods that Kubeflow's training operator labels
  ``training.kubeflow.org/replica-type: ps`` (a TFJob's ``PS`` role) are not replicas but the job's
  ``servers`` (:func:`server_role`): each one's CPU and memory requests (the same on each), in all
  ``flowplan.io/min-servers`` .. ``flowplan.io/max-servers`` (default: the servers it has; both the
  servers it has where FlowPlan cannot change the count: only a Kubeflow job's ``PS`` replicas are
  scaled), the speed form ``flowplan.io/server-form``. They need not declare FlowPlan's bounds. A
  running gang runs with them when every one is bound on exactly its workers' nodes, the same number
  on each (``allocation.servers``, :func:`servers_per_node`); else it is pending with a note, and
  the next start gathers them. A failed server ends the job.
- **State**: every pod unbound → ``pending``; every pod bound, on at most ``max_nodes`` nodes →
  ``running`` on rank 0's node, with its ``placement`` when spread (or below its ``replicas``), and
  the smallest CPU request of its pods (a resize half done shows, and is repeated for the rest); any
  pod ``Failed``, or all ``Succeeded`` → ``finished``. Pods on more nodes than ``max_nodes``, or some
  bound and some not (a start or an undo interrupted by a crash, an elastic gang's new pod):
  ``pending`` with a note, so the plan starts it again and the start places it (below).
- **Replacements**: a replacement pod keeps the old pod's labels (the gang label with them) and
  its ``ownerReferences`` (its owner with them), and names the pod it replaces
  (``flowplan.io/replaces``). A pod that a live pod of its gang replaces is not a
  member but a *duplicate* (a migration interrupted after its replacements were created):
  :meth:`GangOps.reconcile_gangs` deletes it.

How each change is carried out (:class:`~adapters.kubernetes.gang_changes.GangChanges`; every
change first lists the gang's pods afresh, one call with a label selector (an owner's gang: the
labels its pods share, then their owner), and refuses as ``conflict`` when their number is not what
observe saw):

- a new **count** (a ``start``, ``migrate`` or ``resize`` whose ``replicas`` is not the gang's pods),
  through the owner: a running gang that is not elastic, or whose change is a ``migrate``, is asked
  to checkpoint and re-created unbound first, as a pause (a restart); then the owner's count is
  patched (:func:`~adapters.kubernetes.owners.scale`). FlowPlan never makes or removes an owner's
  pods itself: its controller does, and until it has, the gang waits (no job). So the outcome is
  ``transient``, saying the change is in progress; once the pods are there, the gang is pending at
  its new count and the next plan's ``start`` binds it as planned. A gang whose count cannot change
  is never asked to by a plan of its snapshot (its ``replicas`` is its pods); a change that asks
  anyway is refused as ``conflict``, naming the job and both counts, and changes nothing.
- a new number of **servers** (``servers`` on each planned node, in all not the server pods): as a
  new count, always a restart (TensorFlow's ``TF_CONFIG`` lists every server), the owner's ``PS``
  replicas patched with its ``Worker`` replicas (:func:`~adapters.kubernetes.owners.scale`).
- ``start``: a ``Binding`` of each unbound pod to its planned node
  (:func:`~adapters.kubernetes.spread.assign`: rank 0 to the first planned node, a pod already bound
  where a planned replica is left stays, the rest fill the planned nodes in rank order); then, when
  any pod was not at the planned CPU, the gang's pods listed again and the CPU of each such pod set
  in place; the parameter servers, ``servers`` on each of those nodes, bound after the workers (a
  server bound elsewhere re-created unbound first). **All or none**: if a Binding fails midway,
  the gang's bound pods (by this start, or by an earlier one cut short) are deleted and re-created
  unbound (a bound pod cannot be unbound: Kubernetes has no call for it), so the gang is pending
  again, and the outcome is the Binding's error and what was undone. Pods of the gang found bound
  where no replica is planned (a split gang) are re-created unbound first, then bound with the
  others. A gang already running as planned: ok (its servers gathered where they are not);
  running otherwise: ``conflict``.
- ``resize``: (the pods must run as planned; a new spread is a migration) every pod's CPU in
  place, each as a single pod's; a pod already at the figure is left alone, so a resize that
  failed halfway is finished by the next one. Re-created (as a migration to the same nodes) when
  the GPUs change, the job is not resizable, or the kubelet found any pod's last resize
  ``Infeasible``.
- ``migrate`` / ``pause``: every (bound) pod gets ``flowplan.io/checkpoint-requested``; then all the
  replacements are created, unbound; only when every one exists are the old pods deleted. If a
  replacement cannot be created, those already created are deleted, the requests withdrawn, and the
  gang keeps running where it was. For a migration, the replacements are bound as planned (as a
  start places them) once every old pod has ended (its checkpoint written; within the adapter's checkpoint timeout, shared
  by the gang), as for a single pod: no replacement starts while an old pod still trains. Past the
  timeout they wait unbound (the job is pending) and a later ``start`` binds them.
- ``deliver``: ``flowplan.io/deliver-requested`` on every pod that lacks it; the job is reported
  ``delivered`` once every pod carries it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from adapters.docker.labels import JobLabels
from adapters.kubernetes.annotations import (
    DELIVER_REQUESTED,
    GANG_LABEL,
    GANG_SIZE,
    MAX_GANG,
    MAX_NODES,
    MAX_REPLICAS,
    MAX_SERVERS,
    MIN_REPLICAS,
    MIN_SERVERS,
    PREFIX,
    RANK,
    WRITTEN,
    GangBounds,
    gang_bounds,
)
from adapters.kubernetes.errors import KubernetesAdapterError
from adapters.kubernetes.owners import SERVER_ROLE, Owner, OwnerCount, read_count
from adapters.kubernetes.pods import PodView, controller_of, mib, requested
from adapters.kubernetes.spread import ranked, shares_of
from planner.snapshot import ServerRole, Share, gang_problem, server_problem

if TYPE_CHECKING:
    from adapters.kubernetes.adapter import Observation
    from planner.snapshot import Job

log = logging.getLogger("flowplan.kubernetes")


class GangError(ValueError):
    """A gang's pods cannot be one job (they disagree, or the declared size is bad): the message says why."""


@dataclass
class Gang:
    """A gang as last observed: its pods (in rank order), what they declare, and superseded pods to delete."""

    job: str
    namespace: str
    members: list[PodView]
    labels: JobLabels
    duplicates: list[PodView] = field(default_factory=list)
    by_owner: bool = False  # the pods share a controller owner, not the gang label
    owner: Owner | None = None
    fixed: str | None = None  # why FlowPlan cannot change its count (None: through its owner)
    elastic: bool = False  # flowplan.io/elastic: a new count needs no restart
    max_nodes: int = 1  # flowplan.io/max-nodes: spread over more, the gang is pending (gathered by a start)
    servers: list[PodView] = field(default_factory=list)  # its parameter servers (role ps), by rank
    servers_fixed: str | None = None  # why FlowPlan cannot change how many servers it has (None: it can)

    @property
    def size(self) -> int:
        return len(self.members)


#: The label Kubeflow's training operator puts on each pod of a training job: its role (``ps``,
#: ``worker``, ``chief`` ...), lower case.
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"


def is_server(pod: PodView) -> bool:
    """Is the pod a parameter server (its training operator's role label says ``ps``)?"""
    return pod.labels.get(REPLICA_TYPE, "").lower() == SERVER_ROLE


def ranked_servers(servers: list[PodView]) -> list[PodView]:
    """Parameter-server pods in order: by the operator's ``replica-index``, then by name."""

    def key(p: PodView) -> tuple[int, int, str]:
        index = p.labels.get(REPLICA_INDEX, "")
        return (0, int(index), p.name) if index.isdigit() else (1, 0, p.name)

    return sorted(servers, key=key)


def server_role(job: str, servers: list[PodView], bounds: GangBounds, fixed: str | None) -> ServerRole:
    """The ``Job.servers`` of a gang's parameter-server pods: each one's CPU and memory requests (the
    same on each), in all ``min-servers`` .. ``max-servers`` (default: the servers it has; both the
    servers it has where ``fixed`` says why the count cannot change). Raises :class:`GangError`."""
    first = servers[0]
    for p in servers[1:]:
        for what, a, b in (
            ("CPU request", first.requests.get("cpu"), p.requests.get("cpu")),
            ("memory request", first.requests.get("memory"), p.requests.get("memory")),
        ):
            if a != b:
                raise GangError(f"gang {job}: parameter servers {first.name} and {p.name} disagree on {what} ({a!r} vs {b!r})")
    if first.cpu_request is None or first.cpu_request < 1:
        raise GangError(f"gang {job}: parameter server {first.name} has no CPU request (resources.requests.cpu)")
    if first.gpus:
        raise GangError(f"gang {job}: parameter server {first.name} asks {first.gpus} GPU(s); servers are CPU only here")
    have = len(servers)
    lo, hi = bounds.min_servers, bounds.max_servers
    if fixed is not None:
        lo = hi = have
    else:
        hi = max(have, hi or have)
        lo = have if lo is None else lo
    if lo > hi:
        raise GangError(f"gang {job}: annotation {MIN_SERVERS}: {lo} exceeds the {hi} servers it may have ({MAX_SERVERS})")
    memory = first.requests.get("memory")
    return ServerRole(
        min=lo,
        max=hi,
        cpu_millis=first.cpu_request,
        memory_mib=mib(memory) if memory is not None else 0,
        form="coach" if bounds.server_form == "coach" else "optimus",
    )


def servers_per_node(servers: list[PodView], nodes: list[str]) -> tuple[int | None, str | None]:
    """``(servers on each node, None)`` when every live server is bound, on exactly ``nodes`` (the
    workers' nodes), the same number on each; else ``(None, why)``."""
    live = [p for p in servers if p.live]
    counts = dict(shares_of(live))
    if all(p.node is not None for p in live) and set(counts) == set(nodes) and len(set(counts.values())) == 1:
        return next(iter(counts.values())), None
    where = ", ".join(f"{p.name} on {p.node or '(unbound)'}" for p in live)
    return None, (
        f"parameter servers not the same number on each of its workers' nodes ({', '.join(nodes)}): {where}; "
        "started again, the start places them"
    )


def split_superseded(pods: list[PodView]) -> tuple[list[PodView], list[PodView]]:
    """``(members, superseded)`` of a gang's pods (none being deleted), each by name: a pod that a
    live pod of the gang replaces (its ``flowplan.io/replaces``) is superseded."""
    replaced = {p.annotations.get("flowplan.io/replaces") for p in pods if p.live}
    members = sorted((p for p in pods if p.name not in replaced), key=lambda p: p.name)
    superseded = sorted((p for p in pods if p.name in replaced), key=lambda p: p.name)
    return members, superseded


def role_counts(roles: dict[str, int], pods: list[PodView]) -> str:
    """``: PS 0 of 2, Worker 2 of 2`` for a Kubeflow job's ``roles`` (replicas per role) and the pods
    seen of each (by the operator's role label), with a hint where a role has none seen; ``""``
    without roles, or when a pod has no role label (not made by the operator)."""
    if not roles or any(REPLICA_TYPE not in p.labels for p in pods):
        return ""
    seen: dict[str, int] = {}
    for p in pods:
        role = p.labels.get(REPLICA_TYPE, "").lower()
        seen[role] = seen.get(role, 0) + 1
    text = ": " + ", ".join(f"{role} {seen.get(role.lower(), 0)} of {k}" for role, k in roles.items())
    if any(k and not seen.get(role.lower()) for role, k in roles.items()):
        text += "; a role's pods are FlowPlan's only with schedulerName: flowplan or the label flowplan.io/job"
    return text


def declared_size(job: str, members: list[PodView]) -> int | None:
    """The ``flowplan.io/gang-size`` the pods declare (the same on each), or ``None``. Raises :class:`GangError`."""
    value = members[0].annotations.get(GANG_SIZE)
    for p in members[1:]:
        if p.annotations.get(GANG_SIZE) != value:
            a, b = members[0], p
            other = p.annotations.get(GANG_SIZE)
            raise GangError(f"gang {job}: pods {a.name} and {b.name} disagree on annotation {GANG_SIZE} ({value!r} vs {other!r})")
    if value is None:
        return None
    try:
        size = int(value)
    except ValueError:
        size = 0
    if not 1 <= size <= MAX_GANG:
        raise GangError(f"gang {job}: annotation {GANG_SIZE}: must be a whole number from 1 to {MAX_GANG} ({value!r})")
    return size


def _declared(pod: PodView) -> dict[str, Any]:
    """What a gang pod declares that its gang's pods must share: bounds, targets, GPUs, memory."""
    out: dict[str, Any] = {
        k: v for k, v in pod.annotations.items() if k.startswith(PREFIX) and k not in WRITTEN and k not in (GANG_SIZE, RANK)
    }
    out["GPUs (nvidia.com/gpu limit)"] = pod.gpus
    out["memory request"] = pod.requests.get("memory")
    return out


def agreed(job: str, members: list[PodView]) -> None:
    """Raises :class:`GangError` naming two pods, the key and both values where the gang's pods disagree."""
    first = _declared(members[0])
    for p in members[1:]:
        other = _declared(p)
        for key in sorted(set(first) | set(other)):
            if first.get(key) != other.get(key):
                a, b = first.get(key), other.get(key)
                what = f"annotation {key}" if key.startswith(PREFIX) else key
                raise GangError(
                    f"gang {job}: pods {members[0].name} and {p.name} disagree on {what} ({a!r} vs {b!r}); "
                    "a gang's pods must declare the same"
                )


def gang_status(
    members: list[PodView], max_nodes: int = 1
) -> tuple[Literal["pending", "running", "finished"], str | None, str | None]:
    """``(status, node, note)`` of a gang from its pods in rank order (module docstring); ``node`` is
    rank 0's; ``note`` says why a gang with bound pods is pending."""
    if any(p.phase == "Failed" for p in members) or all(p.phase == "Succeeded" for p in members):
        return "finished", None, None
    live = [p for p in members if p.live]
    nodes = {p.node for p in live}
    if None not in nodes and len(nodes) <= max_nodes:
        return "running", live[0].node, None
    if nodes == {None}:
        return "pending", None, None
    where = ", ".join(f"{p.name} on {p.node or '(unbound)'}" for p in live)
    if None in nodes:
        return "pending", None, f"split ({where}): some pods unbound; started again, the start binds them as planned"
    why = f"over {len(nodes)} nodes, more than annotation {MAX_NODES} {max_nodes}"
    return "pending", None, f"split {why} ({where}): started again, the start places its pods as planned"


class GangOps:
    """The gang half of :class:`~adapters.kubernetes.adapter.KubernetesAdapter` (a mixin): observing
    gangs and settling interrupted migrations (:class:`~adapters.kubernetes.gang_changes.GangChanges`
    carries out changes to them). Uses the adapter's calls (``_json``, ``_parse``, ...)."""

    if TYPE_CHECKING:
        api: Any
        last: Observation

        def _json(self, call: Any, *args: Any, **kwargs: Any) -> Any: ...
        def _parse(self, job_id: str, pod: PodView) -> JobLabels: ...
        def _job(self, job_id: str, pod: PodView, parsed: JobLabels, obs: Observation) -> Job: ...
        def _unmanaged(self, obs: Observation, notes: dict[str, dict[str, str]], pod: PodView, why: str) -> None: ...

        owner_apis: dict[str, Any]

    # -- observe ---------------------------------------------------------------------------------

    def _observe_gangs(
        self,
        found: dict[str, list[PodView]],
        obs: Observation,
        notes: dict[str, dict[str, str]],
        held: dict[str, list[int]],
    ) -> list[Job]:
        """The jobs the gangs ``found`` (job id → its pods, none being deleted) make; a gang that waits
        for pods or whose pods disagree is no job, and its bound pods' requests come off their nodes."""
        jobs: list[Job] = []
        for job_id in sorted(found):
            members, superseded = split_superseded(found[job_id])
            try:
                job = self._gang_job(job_id, members, superseded, obs)
            except (GangError, ValueError) as exc:  # AnnotationError is a ValueError
                for pod in members:
                    self._unmanaged(obs, notes, pod, str(exc))
                job = None
            if job is None:
                for pod in members:
                    if pod.live and pod.node in held:
                        for i, amount in enumerate(requested(pod.raw)):
                            held[pod.node][i] += amount
                continue
            jobs.append(job)
        return jobs

    def _gang_job(self, job_id: str, members: list[PodView], superseded: list[PodView], obs: Observation) -> Job | None:
        servers = ranked_servers([p for p in members if is_server(p)])
        members = [p for p in members if not is_server(p)]
        if not members:
            raise GangError(f"gang {job_id}: {len(servers)} parameter server pod(s) (label {REPLICA_TYPE}) and no worker")
        if job_id in obs.placed:
            single = obs.placed[job_id].pod.name
            ns = members[0].namespace
            raise GangError(f"gang {job_id}: pod {single} (no gang label) has the same job id in namespace {ns}")
        size = declared_size(job_id, members)
        said_by = f"annotation {GANG_SIZE}"
        ref = controller_of(members[0].raw) if not members[0].labels.get(GANG_LABEL) else None
        owner = Owner.of(ref, members[0].namespace) if ref is not None else None
        fixed: str | None = f"a gang by label {GANG_LABEL}: its count is its pods"
        if owner is not None:
            fixed = f"annotation {GANG_SIZE} declares its count" if size is not None else None
        cap = None  # the most pods the owner can have (a Job's spec.completions)
        roles: dict[str, int] = {}
        if size is None and owner is not None:
            got = self._owner_size(job_id, members, owner, obs)
            size, said_by, fixed, cap = got.count, f"{owner.kind} {owner.name} {owner.count_field}", got.fixed, got.most
            roles = got.roles
        have = len(members) + len(servers)
        if size is not None and have != size:
            if have > size and fixed is not None:
                raise GangError(f"gang {job_id}: {have} pods, but {said_by} says {size}")
            more = "waiting for the rest" if have < size else "waiting for its controller to remove the rest"
            why = f"{have} of {size} pods exist ({said_by}{role_counts(roles, members + servers)}); {more}"
            obs.waiting[job_id] = why
            log.info("gang %s waits: %s", job_id, why)
            return None
        agreed(job_id, members)
        members = ranked(job_id, members)
        bounds = gang_bounds(members[0].annotations)
        created = min((p.created for p in members if p.created is not None), default=None)
        labels = self._parse(job_id, replace(members[0], created=created))
        status, node, note = gang_status(members, bounds.max_nodes)
        count, most, fewest = len(members), len(members), bounds.min_replicas
        if fixed is None:
            most = max(count, min(bounds.max_replicas or count, cap or MAX_GANG))
            if fewest is None and most > count:  # it may grow; it never shrinks below what it has unless told
                fewest = count
        elif bounds.min_replicas is not None or bounds.max_replicas is not None:
            obs.fixed_count[job_id] = f"its count stays {count}: {fixed}"  # the bounds cannot be used
            log.warning("gang %s: annotations %s/%s not used: %s", job_id, MIN_REPLICAS, MAX_REPLICAS, obs.fixed_count[job_id])
            fewest = None
        if fewest is not None and fewest > most:
            raise GangError(f"gang {job_id}: annotation {MIN_REPLICAS}: {fewest} exceeds the {most} replicas it may have")
        if status == "running" and fewest is not None and count < fewest:
            raise GangError(f"gang {job_id}: {count} pods run, below annotation {MIN_REPLICAS} {fewest}")
        if status == "running":  # the pod with the least CPU stands for all: a half-done resize shows
            live = [p for p in members if p.live]
            shown = min(live, key=lambda p: (p.cpu_request or 0, p.name))
        elif status == "finished":
            shown = next((p for p in members if p.phase == "Failed"), members[0])
        else:
            shown = next((p for p in members if p.node is None), members[0])
        job = self._job(job_id, shown, labels, obs)
        update: dict[str, Any] = {
            "replicas": most,
            "min_replicas": fewest,
            "max_nodes": bounds.max_nodes,
            "elastic": bounds.elastic,
            "delivered": all(DELIVER_REQUESTED in p.annotations for p in members),
        }
        if status == "running":
            shares = shares_of([p for p in members if p.live])
            update["node"] = shares[0][0]
            if len(shares) > 1 or count != most:
                update["placement"] = [Share(node=n, replicas=k) for n, k in shares]
        servers_fixed = None
        if servers:
            servers_fixed = fixed
            if servers_fixed is None and (owner is None or owner.kubeflow is None):
                servers_fixed = "FlowPlan scales the PS replicas of a Kubeflow training job only"
            if servers_fixed is not None and (bounds.min_servers is not None or bounds.max_servers is not None):
                obs.fixed_count[job_id] = f"its servers stay {len(servers)}: {servers_fixed}"
                log.warning("gang %s: annotations %s/%s not used: %s", job_id, MIN_SERVERS, MAX_SERVERS, obs.fixed_count[job_id])
            update["servers"] = server_role(job_id, servers, bounds, servers_fixed)
            if any(p.phase == "Failed" for p in servers):
                status, note = "finished", None
                update.update(status="finished", node=None, placement=None, allocation=None)
            elif status == "running" and note is None:
                per, note = servers_per_node(servers, [n for n, _ in shares_of([p for p in members if p.live])])
                if per is not None and job.allocation is not None:
                    update["allocation"] = job.allocation.model_copy(update={"servers": per})
        if note is not None:
            update.update(status="pending", node=None, allocation=None, placement=None)
            obs.waiting[job_id] = note
            log.warning("gang %s is %s", job_id, note)
        duplicates = [p for p in superseded if p.live]
        obs.gangs[job_id] = Gang(
            job_id,
            members[0].namespace,
            members,
            labels,
            duplicates,
            by_owner=owner is not None,
            owner=owner,
            fixed=fixed,
            elastic=bounds.elastic,
            max_nodes=bounds.max_nodes,
            servers=servers,
            servers_fixed=servers_fixed,
        )
        job = job.model_copy(update=update)
        problem = gang_problem(job) or server_problem(job)
        if problem is not None:  # e.g. more pods than min-replicas allows to be running
            raise GangError(f"gang {job_id}: {problem}")
        return job

    def _owner_size(self, job_id: str, members: list[PodView], owner: Owner, obs: Observation) -> OwnerCount:
        """What an owner gang's owner says of its count (one read per owner per observe, kept in
        ``obs.owner_sizes``); when it cannot be read, why is in ``obs.owner_fallback`` and the log:
        the gang is then the pods seen."""
        key = (owner.namespace, owner.kind, owner.name)
        if key not in obs.owner_sizes:
            obs.owner_sizes[key] = read_count(owner, self._json, self.owner_apis)
        got = obs.owner_sizes[key]
        if got.count is None:
            why = f"owner {owner}: {got.why}; the gang is the {len(members)} pods seen"
            obs.owner_fallback[job_id] = why
            log.warning("gang %s: %s", job_id, why)
        return got

    # -- reconcile -------------------------------------------------------------------------------

    def reconcile_gangs(self, fence: Callable[[], None] | None) -> list[str]:
        """Delete the pods of each gang that a live pod of the gang replaces (an interrupted migration)."""
        done: list[str] = []
        for job_id, gang in self.last.gangs.items():
            for other in gang.duplicates:
                try:
                    if fence is not None:
                        fence()
                    self._json(self.api.delete_namespaced_pod, other.name, other.namespace)
                    done.append(f"{job_id}: deleted superseded gang pod {other.name}")
                except KubernetesAdapterError as exc:
                    if exc.kind != "not_found":
                        done.append(f"{job_id}: could not delete superseded gang pod {other.name}: {exc.kind}: {exc.message}")
        return done
