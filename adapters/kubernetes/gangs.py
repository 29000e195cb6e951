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
  the first pod by name; ``target.tier1.within`` counts from the earliest pod's creation.
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

How each change is carried out (:class:`GangOps`; every change first lists the gang's pods afresh,
one call with a label selector (an owner's gang: the labels its pods share, then their owner), and
refuses as ``conflict`` when their number is not what observe saw):

- a new **count** (a ``start``, ``migrate`` or ``resize`` whose ``replicas`` is not the gang's pods),
  through the owner: a running gang that is not elastic, or whose change is a ``migrate``, is asked
  to checkpoint and re-created unbound first, as a pause (a restart); then the owner's count is
  patched (:func:`~adapters.kubernetes.owners.scale`). FlowPlan never makes or removes an owner's
  pods itself: its controller does, and until it has, the gang waits (no job). So the outcome is
  ``transient``, saying the change is in progress; once the pods are there, the gang is pending at
  its new count and the next plan's ``start`` binds it as planned. A gang whose count cannot change
  is never asked to (its ``replicas`` is its pods); a plan that asks anyway is refused whole by the
  adapter, before anything is applied, naming the job and both counts.
- ``start``: a ``Binding`` of each unbound pod to its planned node
  (:func:`~adapters.kubernetes.spread.assign`: rank 0 to the first planned node, a pod already bound
  where a planned replica is left stays, the rest fill the planned nodes in rank order); then, when
  any pod was not at the planned CPU, the gang's pods listed again and the CPU of each such pod set
  in place. **All or none**: if a Binding fails midway, the gang's bound pods (by this start, or by
  an earlier one cut short) are deleted and re-created unbound (a bound pod cannot be unbound:
  Kubernetes has no call for it), so the gang is pending again, and the outcome is the Binding's
  error and what was undone. Pods of the gang found bound where no replica is planned (a split
  gang) are re-created unbound first, then bound with the others. A gang already running as
  planned: ok; running otherwise: ``conflict``.
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
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from adapters.docker.labels import JobLabels
from adapters.kubernetes.annotations import (
    CHECKPOINT_REQUESTED,
    DELIVER_REQUESTED,
    GANG_LABEL,
    GANG_SIZE,
    MAX_GANG,
    MAX_NODES,
    MAX_REPLICAS,
    MIN_REPLICAS,
    PREFIX,
    RANK,
    WRITTEN,
    gang_bounds,
)
from adapters.kubernetes.errors import KubernetesAdapterError
from adapters.kubernetes.owners import Owner, OwnerCount, read_count, scale
from adapters.kubernetes.pods import PodView, controller_of, is_flowplan_pod, job_id_of, pod_view, requested
from adapters.kubernetes.spread import Shares, assign, placement_text, ranked, shares_of
from planner.snapshot import Share, gang_problem

if TYPE_CHECKING:
    from adapters.base import Change
    from adapters.kubernetes.adapter import Observation, Placed
    from planner.snapshot import Job

log = logging.getLogger("flowplan.kubernetes")


class GangError(ValueError):
    """A gang's pods cannot be one job (they disagree, or the declared size is bad): the message says why."""


@dataclass
class Gang:
    """A gang as last observed: its pods (by name), what they declare, and superseded pods to delete."""

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

    @property
    def size(self) -> int:
        return len(self.members)


def split_superseded(pods: list[PodView]) -> tuple[list[PodView], list[PodView]]:
    """``(members, superseded)`` of a gang's pods (none being deleted), each by name: a pod that a
    live pod of the gang replaces (its ``flowplan.io/replaces``) is superseded."""
    replaced = {p.annotations.get("flowplan.io/replaces") for p in pods if p.live}
    members = sorted((p for p in pods if p.name not in replaced), key=lambda p: p.name)
    superseded = sorted((p for p in pods if p.name in replaced), key=lambda p: p.name)
    return members, superseded


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
    gangs and carrying out changes to them. Uses the adapter's calls (``_json``, ``_wanted``, ...)."""

    if TYPE_CHECKING:
        api: Any
        last: Observation
        identity: str | None

        def _json(self, call: Any, *args: Any, **kwargs: Any) -> Any: ...
        def _parse(self, job_id: str, pod: PodView) -> JobLabels: ...
        def _job(self, job_id: str, pod: PodView, parsed: JobLabels, obs: Observation) -> Job: ...
        def _unmanaged(self, obs: Observation, notes: dict[str, dict[str, str]], pod: PodView, why: str) -> None: ...
        def _wanted(self, ch: Change, placed: Placed, pod: PodView) -> tuple[int, int | None]: ...
        def _in_effect(self, ch: Change, placed: Placed, pod: PodView) -> bool: ...
        def _set_cpu(self, ch: Change, placed: Placed, pod: PodView, *, pending: bool = False) -> str: ...
        def _annotate(self, pod: PodView, annotations: dict[str, str | None]) -> None: ...
        def _bind(self, pod: PodView, node: str) -> PodView | None: ...
        def _bound_by(self) -> dict[str, str]: ...
        def _wait_gone(self, pod: PodView, timeout: float | None = None) -> float | None: ...

        fence: Callable[[], None] | None
        checkpoint_timeout: float
        batch: Any
        apps: Any

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
        if size is None and owner is not None:
            got = self._owner_size(job_id, members, owner, obs)
            size, said_by, fixed = got.count, f"{owner.kind} {owner.name} {owner.count_field}", got.fixed
        if size is not None and len(members) != size:
            if len(members) > size and fixed is not None:
                raise GangError(f"gang {job_id}: {len(members)} pods, but {said_by} says {size}")
            more = "waiting for the rest" if len(members) < size else "waiting for its controller to remove the rest"
            why = f"{len(members)} of {size} pods exist ({said_by}); {more}"
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
            most = max(count, bounds.max_replicas or count)
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
        if note is not None:
            update.update(status="pending", node=None, allocation=None)
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
        )
        job = job.model_copy(update=update)
        problem = gang_problem(job)
        if problem is not None:  # e.g. more pods than min-replicas allows to be running
            raise GangError(f"gang {job_id}: {problem}")
        return job

    def _owner_size(self, job_id: str, members: list[PodView], owner: Owner, obs: Observation) -> OwnerCount:
        """What an owner gang's owner says of its count (one read per owner per observe, kept in
        ``obs.owner_sizes``); when it cannot be read, why is in ``obs.owner_fallback`` and the log:
        the gang is then the pods seen."""
        key = (owner.namespace, owner.kind, owner.name)
        if key not in obs.owner_sizes:
            obs.owner_sizes[key] = read_count(owner, self._json, {"batch": self.batch, "apps": self.apps})
        got = obs.owner_sizes[key]
        if got.count is None:
            why = f"owner {owner}: {got.why}; the gang is the {len(members)} pods seen"
            obs.owner_fallback[job_id] = why
            log.warning("gang %s: %s", job_id, why)
        return got

    # -- apply -----------------------------------------------------------------------------------

    def _gang_now(self, ch: Change, gang: Gang, count: int | None = None) -> list[PodView]:
        """The gang's pods now (one list call), in rank order, less those being deleted or
        superseded; ``conflict`` when their number is not ``count`` (default: as observed)."""
        if gang.by_owner:  # no selector for an owner: the labels its pods share, then the owner's job id
            shared = set.intersection(*(set(p.labels.items()) for p in gang.members)) if gang.members else set()
            selector = ",".join(f"{k}={v}" for k, v in sorted(shared))
            data = self._json(self.api.list_namespaced_pod, gang.namespace, label_selector=selector)
            raws = [r for r in data["items"] if is_flowplan_pod(r) and job_id_of(r) == gang.job]
        else:
            data = self._json(self.api.list_namespaced_pod, gang.namespace, label_selector=f"{GANG_LABEL}={gang.job}")
            raws = data["items"]
        pods = [v for v in (pod_view(raw) for raw in raws) if not v.deleting]
        members, _ = split_superseded(pods)
        want = gang.size if count is None else count
        if len(members) != want:
            why = f"job {ch.job}: the gang has {len(members)} pods now, the plan {want} replicas"
            raise KubernetesAdapterError("conflict", why)
        try:
            return ranked(ch.job, members)
        except ValueError as exc:  # a rank annotation changed since observe
            raise KubernetesAdapterError("invalid", str(exc)) from exc

    def _placed(self, gang: Gang, pod: PodView) -> Placed:
        from adapters.kubernetes.adapter import Placed

        return Placed(pod, gang.labels)

    def _apply_gang(self, ch: Change, gang: Gang) -> str:
        for node, _ in planned(ch):
            if node not in self.last.nodes:
                raise KubernetesAdapterError("invalid", f"job {ch.job}: unknown node {node!r}")
        if ch.kind in ("start", "migrate", "resize") and ch.replicas != gang.size:
            return self._gang_rescale(ch, gang, self._gang_now(ch, gang))
        pods = self._gang_now(ch, gang)
        if ch.kind == "start":
            return self._gang_start(ch, gang, pods)
        if ch.kind == "resize":
            return self._gang_resize(ch, gang, pods)
        if ch.kind == "migrate":
            if any(p.node is None for p in pods):
                raise KubernetesAdapterError("conflict", f"job {ch.job}: the gang is not running: it is started, not migrated")
            where, astray = assign(planned(ch), pods)
            if not astray and all(where[p.name] == p.node and self._in_effect(ch, self._placed(gang, p), p) for p in pods):
                return f"already at {placement_text(planned(ch))} at {ch.cpu_millis}m/{ch.gpus}g"
            return self._gang_replace(ch, gang, pods, place=True)
        if ch.kind == "pause":
            bound = [p for p in pods if p.node is not None]
            if not bound:
                return f"already pending ({len(pods)} pods)"
            return self._gang_replace(ch, gang, bound, place=False)
        if ch.kind == "deliver":
            missing = [p for p in pods if DELIVER_REQUESTED not in p.annotations]
            if not missing:
                return "already asked to deliver"
            for p in missing:
                self._annotate(p, {DELIVER_REQUESTED: _now_text()})
            return f"asked to deliver (annotation flowplan.io/deliver-requested on {len(missing)} pods)"
        raise KubernetesAdapterError("invalid", f"job {ch.job}: unknown change kind {ch.kind!r}")

    def _gang_rescale(self, ch: Change, gang: Gang, pods: list[PodView]) -> str:
        """A new count: through the owner (module docstring). A running gang that is not elastic is
        asked to checkpoint and re-created unbound first (a restart, as a migration); then the owner's
        count is patched. The pods the plan places exist only once the owner's controller has made
        (or removed) the difference: until then the outcome is ``transient`` and says so, and the
        next ``start`` binds the new set as planned."""
        if gang.owner is None or gang.fixed is not None:
            why = gang.fixed or "no owner"
            raise KubernetesAdapterError(
                "invalid", f"job {ch.job}: the plan asks {ch.replicas} replicas, the gang has {gang.size} pods; {why}"
            )
        said = []
        bound = [p for p in pods if p.node is not None]
        if bound and (ch.kind != "resize" or not gang.elastic):  # a restart: the checkpoint first
            said.append(self._gang_replace(ch, gang, bound, place=False))
        said.append("scaled " + scale(gang.owner, ch.replicas, self._json, {"batch": self.batch, "apps": self.apps}))
        verb = "make" if ch.replicas > len(pods) else "remove"
        raise KubernetesAdapterError(
            "transient",
            f"job {ch.job}: {'; '.join(said)}; in progress: once its controller has made the gang {ch.replicas} pods "
            f"({verb} {abs(ch.replicas - len(pods))}), a start binds them at {placement_text(planned(ch))}",
        )

    def _gang_start(self, ch: Change, gang: Gang, pods: list[PodView]) -> str:
        """Bind every pod where the plan places it (:func:`~adapters.kubernetes.spread.assign`), all or
        none: a Binding that fails undoes every Binding of the gang (module docstring)."""
        shares = planned(ch)
        where, astray = assign(shares, pods)
        if all(p.node is not None for p in pods):
            if not astray and all(self._in_effect(ch, self._placed(gang, p), p) for p in pods):
                return f"already bound at {placement_text(shares)} ({len(pods)} pods)"
        if gang_status(pods, gang.max_nodes)[0] == "running":
            text = placement_text(shares_of(pods))
            raise KubernetesAdapterError("conflict", f"job {ch.job}: the gang runs at {text}; a start is for a pending job")
        said: list[str] = []
        if astray:  # a split gang: gather it (a bound pod cannot be unbound, only re-created)
            done, failed = self._unbind(ch, gang, astray)
            if failed:
                raise KubernetesAdapterError("conflict", f"job {ch.job}: split gang not gathered: {failed}")
            said.append(done)
            pods = self._gang_now(ch, gang, ch.replicas)
            where, _ = assign(shares, pods)
        if any(p.gpus != ch.gpus for p in pods):
            return self._gang_replace(ch, gang, pods, place=True)
        bound = [p for p in pods if p.node is not None]  # by an earlier, interrupted start: undone with the rest
        at_cpu = all(self._in_effect(ch, self._placed(gang, p), p) for p in pods)  # a Binding changes no resources
        for p in pods:
            if p.node is not None:
                continue
            try:
                self._bind(p, where[p.name])
            except KubernetesAdapterError as exc:
                done, failed = self._unbind(ch, gang, bound)
                undo = (done or "nothing to undo") + (f"; NOT undone: {failed}" if failed else "")
                raise KubernetesAdapterError(
                    exc.kind,
                    f"job {ch.job}: gang not placed: binding {p.name} to {where[p.name]} failed ({exc.message}); {undo}",
                ) from exc
            bound.append(p)
        said.append(f"bound the {len(bound)} pods of gang {gang.namespace}/{ch.job} at {placement_text(shares)}")
        resized = []
        for p in [] if at_cpu else self._gang_now(ch, gang, ch.replicas):
            placed = self._placed(gang, p)
            if not self._in_effect(ch, placed, p):
                try:
                    self._set_cpu(ch, placed, p)
                except KubernetesAdapterError as exc:
                    text = "; ".join(said)
                    raise KubernetesAdapterError(exc.kind, f"{text}, but the CPU of {p.name} was not set: {exc.message}") from exc
                resized.append(p.name)
        if resized:
            said.append(f"CPU set in place to {ch.cpu_millis}m on {len(resized)} pods")
        return "; ".join(said)

    def _unbind(self, ch: Change, gang: Gang, pods: list[PodView]) -> tuple[str, str]:
        """Re-create ``pods`` unbound (deleting each once its copy exists): ``(done, failed)`` lines."""
        from adapters.kubernetes.adapter import replacement

        done, failed = [], []
        for p in pods:
            request = p.cpu_request if p.cpu_request is not None else int(gang.labels.fields["min_cpu_millis"])
            body = replacement(p, ch.job, None, request, p.cpu_limit, p.gpus)
            same_gang(body, p)
            try:
                created = self._json(self.api.create_namespaced_pod, p.namespace, body)
                self._json(self.api.delete_namespaced_pod, p.name, p.namespace)
                done.append(f"{p.name} as {created['metadata']['name']}")
            except KubernetesAdapterError as exc:
                failed.append(f"{p.name} ({exc.kind}: {exc.message})")
        text = f"re-created unbound (a bound pod cannot be unbound): {', '.join(done)}" if done else ""
        return text, ", ".join(failed)

    def _gang_resize(self, ch: Change, gang: Gang, pods: list[PodView]) -> str:
        if any(p.node is None for p in pods):
            why = f"job {ch.job}: the gang has unbound pods: a pending job is started, not resized"
            raise KubernetesAdapterError("conflict", why)
        shares = planned(ch)
        if shares_of(pods) != shares:
            now = placement_text(shares_of(pods))
            raise KubernetesAdapterError(
                "invalid", f"job {ch.job}: resize at {placement_text(shares)} but the gang runs at {now}; a move is a migration"
            )
        todo = [p for p in pods if not self._in_effect(ch, self._placed(gang, p), p)]
        if not todo:
            return f"already at {ch.cpu_millis}m ({len(pods)} pods)"
        infeasible = [p.name for p in pods if p.resize is not None and p.resize.startswith("Infeasible")]
        if any(p.gpus != ch.gpus for p in pods) or not gang.labels.fields.get("resizable", True) or infeasible:
            if infeasible:
                log.info("job %s: the node found the last resize of %s infeasible: re-creating", ch.job, infeasible)
            return self._gang_replace(ch, gang, pods, place=True)
        done: list[str] = []
        for p in todo:
            try:
                done.append(self._set_cpu(ch, self._placed(gang, p), p))
            except KubernetesAdapterError as exc:
                so_far = f"resized {len(done)} of {len(todo)} pods; " if done else ""
                raise KubernetesAdapterError(exc.kind, f"job {ch.job}: {so_far}{p.name}: {exc.message}") from exc
        return f"resized {len(done)} pods of gang {gang.namespace}/{ch.job} in place to {ch.cpu_millis}m"

    def _gang_replace(self, ch: Change, gang: Gang, olds: list[PodView], *, place: bool) -> str:
        """Checkpoint requests → every replacement, unbound → old pods deleted → once every old pod is
        gone (its checkpoint written), with ``place``, the replacements bound where the change places
        them (none for a pause), as a single pod's migration does; all replacements or none (those
        made are deleted again if one cannot be). Bound at creation, a replacement could start before
        its old pod had written its checkpoint: two copies of the gang training at once."""
        from adapters.kubernetes.adapter import replacement

        asked: list[PodView] = []
        created: list[dict[str, Any]] = []

        def undo() -> str:
            lost = []
            for c in created:
                try:
                    self._json(self.api.delete_namespaced_pod, c["metadata"]["name"], gang.namespace, grace_period_seconds=0)
                except KubernetesAdapterError as exc:
                    lost.append(f"{c['metadata']['name']} ({exc.kind})")
            for p in asked:
                try:
                    self._annotate(p, {CHECKPOINT_REQUESTED: None})
                except KubernetesAdapterError:
                    pass
            made = f"deleted the {len(created)} replacements made" if created else "no replacement made"
            if lost:
                made += f" (NOT deleted: {', '.join(lost)}; reconcile deletes them)"
            return made + "; old pods left as they were"

        try:
            for p in olds:
                self._annotate(p, {CHECKPOINT_REQUESTED: _now_text()})
                asked.append(p)
            for p in olds:
                request, limit = self._wanted(ch, self._placed(gang, p), p)
                # Unbound (``schedulerName: flowplan``): it cannot start before it is bound below.
                body = replacement(p, ch.job, None, request, limit, ch.gpus)
                same_gang(body, p)
                created.append(self._json(self.api.create_namespaced_pod, p.namespace, body))
        except KubernetesAdapterError as exc:
            raise KubernetesAdapterError(exc.kind, f"job {ch.job}: gang not re-created ({exc.message}); {undo()}") from exc
        news = [pod_view(c) for c in created]
        kept = [p for p in gang.members if p.name not in {o.name for o in olds}]
        # The gang is the new pods now: a repeat of this change before the next observe sees them.
        self.last.gangs[ch.job] = replace(gang, members=ranked(ch.job, kept + news), duplicates=[])
        left = []
        for p in olds:
            try:
                self._json(self.api.delete_namespaced_pod, p.name, p.namespace)
            except KubernetesAdapterError as exc:
                if exc.kind != "not_found":
                    left.append(f"{p.name} ({exc.kind}: {exc.message})")
        gone = f"old pods not deleted: {', '.join(left)}; reconcile deletes them" if left else f"deleted {len(olds)} old pods"
        made = f"re-created {len(news)} pods of gang {gang.namespace}/{ch.job} at {ch.cpu_millis}m/{ch.gpus}g; {gone}"
        if not place:
            return f"{made}; pending (paused)"
        if left:
            raise KubernetesAdapterError("transient", f"job {ch.job}: {made}; the replacements wait unbound")
        return self._gang_bind_after(ch, olds, ranked(ch.job, kept + news), made)

    def _gang_bind_after(self, ch: Change, olds: list[PodView], pods: list[PodView], made: str) -> str:
        """Bind the unbound ``pods`` (the gang, in rank order) where the change places them once every
        one of ``olds`` is gone (within the checkpoint timeout, shared by the gang); past it, the
        replacements wait unbound and a later ``start`` binds them."""
        began = time.monotonic()
        for p in olds:
            left = self.checkpoint_timeout - (time.monotonic() - began)  # one timeout for the whole gang
            if self._wait_gone(p, max(left, 0.0)) is None:
                raise KubernetesAdapterError(
                    "transient",
                    f"job {ch.job}: {made}; {p.name} still terminating after {self.checkpoint_timeout:g} s (its "
                    "checkpoint): the replacements wait unbound and are started once the old pods have ended",
                )
        waited = time.monotonic() - began
        where, _ = assign(planned(ch), pods)
        news = [p for p in pods if p.node is None]
        bound: list[str] = []
        try:
            if self.fence is not None:  # the wait may have outlasted this daemon's Lease
                self.fence()
            for p in news:
                self._bind(p, where[p.name])
                bound.append(p.name)
        except KubernetesAdapterError as exc:
            some = f"{len(bound)} of {len(news)} bound" if bound else "none bound"
            raise KubernetesAdapterError(
                exc.kind,
                f"job {ch.job}: {made}; old pods gone, but binding at {placement_text(planned(ch))} failed ({exc.message}); "
                f"{some}, the next start gathers the gang",
            ) from exc
        at = placement_text(planned(ch))
        return f"{made}; the old pods ended within {waited:.1f} s (checkpoint), then the {len(news)} were bound at {at}"

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


def planned(ch: Change) -> Shares:
    """Where ``ch`` places the job's pods, ``(node, replicas)`` per node, rank 0's first."""
    if ch.node is None:
        return ()
    return ch.placement if ch.placement is not None else ((ch.node, ch.replicas),)


def same_gang(body: dict[str, Any], old: PodView) -> None:
    """A replacement stays in its gang: the old pod's labels (the gang label with them) and owners
    (less ``blockOwnerDeletion``: setting it takes a right on the owner that FlowPlan is not given)."""
    body["metadata"]["labels"] = dict(old.labels)
    owners = (old.raw.get("metadata") or {}).get("ownerReferences")
    if owners:
        body["metadata"]["ownerReferences"] = [{k: v for k, v in o.items() if k != "blockOwnerDeletion"} for o in owners]


def _now_text() -> str:
    from adapters.kubernetes.adapter import _now_text as now_text

    return now_text()
