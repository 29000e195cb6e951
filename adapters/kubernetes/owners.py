"""The owners of gangs (a Job, StatefulSet, ReplicaSet or Kubeflow training job): their desired count of pods, read and changed.

A gang by owner (:mod:`adapters.kubernetes.gangs`) has as many pods as its owner asks for:

============================  ======================  ==============================================
owner (group)                 its count               what FlowPlan may do with it
============================  ======================  ==============================================
Job (``batch``)               ``spec.parallelism``    read; scale (at most ``spec.completions``)
StatefulSet (``apps``)        ``spec.replicas``       read; scale
ReplicaSet (``apps``)         ``spec.replicas``       read; scale, unless a Deployment (any
                                                      controller of its own) sets its count
PyTorchJob, TFJob, MPIJob,    the sum of its roles'   read; scale its ``Worker`` replicas (the
XGBoostJob, PaddleJob, JAXJob ``replicas`` (``spec.   other roles: a ``Master``, ``Chief``,
(``kubeflow.org``)            <x>ReplicaSpecs``)      ``Launcher`` or ``Evaluator``, stay) and its
                                                      ``PS`` replicas, the job's parameter servers;
                                                      only where the Kubeflow training operator's
                                                      CRD is on the server
any other kind                --                      neither: the gang is the pods seen
============================  ======================  ==============================================

A Kubeflow training job whose CRD (``pytorchjobs.kubeflow.org``, ``tfjobs.kubeflow.org``, ...) is not
on the server cannot be read (the server answers 404): its pods are then a gang of the pods seen, its
count fixed, and the observation says why, as for any owner that cannot be read. Reading and scaling
one takes ``get`` and ``patch`` on its plural (``pytorchjobs``, ``tfjobs``, ... in ``kubeflow.org``),
which ``deploy/kubernetes/rbac.yaml`` does not grant (add them where the training operator runs).
Every pod of such a job is one gang, so its roles' pods must ask alike (as any gang's), but its
parameter servers (the pods its operator labels ``ps``: :mod:`adapters.kubernetes.gangs`), which are
the job's ``servers``.

Scaling is a merge patch of the count with the ``resourceVersion`` just read (someone else's change
in between is a ``conflict``, never overwritten). The owner's controller then creates or removes the
pods; FlowPlan never creates an owner's extra pods itself (they are the controller's: its
template, its names, its indexes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from adapters.kubernetes.errors import KubernetesAdapterError

#: (API group, kind) -> (the adapter's API object, method suffix, the count's key in ``spec``).
SCALABLE = {
    ("batch", "Job"): ("batch", "namespaced_job", "parallelism"),
    ("apps", "StatefulSet"): ("apps", "namespaced_stateful_set", "replicas"),
    ("apps", "ReplicaSet"): ("apps", "namespaced_replica_set", "replicas"),
}

#: Kubeflow's training jobs (custom resources of its training operator): kind -> (plural, the key in
#: ``spec`` of its roles' replica specs). FlowPlan scales the ``Worker`` role of each.
KUBEFLOW_GROUP = "kubeflow.org"
KUBEFLOW = {
    "PyTorchJob": ("pytorchjobs", "pytorchReplicaSpecs"),
    "TFJob": ("tfjobs", "tfReplicaSpecs"),
    "MPIJob": ("mpijobs", "mpiReplicaSpecs"),
    "XGBoostJob": ("xgboostjobs", "xgbReplicaSpecs"),
    "PaddleJob": ("paddlejobs", "paddleReplicaSpecs"),
    "JAXJob": ("jaxjobs", "jaxReplicaSpecs"),
}
WORKER = "Worker"
#: The parameter-server role, as the training operator writes it in its pods' ``replica-type`` label.
SERVER_ROLE = "ps"


@dataclass(frozen=True)
class Owner:
    """A gang's controller owner (its ``ownerReferences`` entry)."""

    group: str
    kind: str
    name: str
    namespace: str
    version: str = "v1"

    @classmethod
    def of(cls, ref: dict[str, Any], namespace: str) -> Owner:
        group, _, version = str(ref.get("apiVersion", "")).rpartition("/")
        return cls(group, str(ref["kind"]), str(ref["name"]), namespace, version or "v1")

    @property
    def kubeflow(self) -> tuple[str, str] | None:
        """(plural, the roles' key in ``spec``) of a Kubeflow training job; None for any other kind."""
        return KUBEFLOW.get(self.kind) if self.group == KUBEFLOW_GROUP else None

    @property
    def count_field(self) -> str:
        if self.kubeflow is not None:
            return f"spec.{self.kubeflow[1]}"
        known = SCALABLE.get((self.group, self.kind))
        return f"spec.{known[2]}" if known else "spec.replicas"

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class OwnerCount:
    """What an owner says: its desired ``count`` (``None``: not known, ``why``), ``fixed``: why
    FlowPlan cannot change it (``None``: it can), and ``most``: the most pods it can have (a Job's
    ``spec.completions``; ``None``: no bound)."""

    count: int | None
    why: str | None = None
    fixed: str | None = None
    most: int | None = None
    #: A Kubeflow training job's replicas per role (``{"PS": 2, "Worker": 4}``); empty for any other owner.
    roles: dict[str, int] = field(default_factory=dict)


def _read(owner: Owner, json_call: Callable[..., Any], apis: dict[str, Any]) -> Any:
    """The owner as the server has it (one read). Raises :class:`KubernetesAdapterError`."""
    if owner.kubeflow is not None:
        get = apis["custom"].get_namespaced_custom_object
        return json_call(get, owner.group, owner.version, owner.namespace, owner.kubeflow[0], owner.name)
    api, suffix, _ = SCALABLE[(owner.group, owner.kind)]
    return json_call(getattr(apis[api], "read_" + suffix), owner.name, owner.namespace)


def _kubeflow_roles(owner: Owner, body: Any) -> dict[str, int]:
    """Replicas per role of a Kubeflow training job (each role's ``replicas``: default 1)."""
    assert owner.kubeflow is not None
    key = owner.kubeflow[1]
    specs = ((body or {}).get("spec") or {}).get(key) or {}
    counts = {role: (spec or {}).get("replicas", 1) for role, spec in specs.items()}
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in counts.values()):
        raise ValueError(f"spec.{key} has a count that is not a whole number ({counts!r})")
    return counts


def _kubeflow_counts(owner: Owner, body: Any) -> tuple[int, int | None, int]:
    """``(all replicas, Worker replicas or None, PS replicas)`` of a Kubeflow training job."""
    counts = _kubeflow_roles(owner, body)
    servers = sum(c for role, c in counts.items() if role.lower() == SERVER_ROLE)
    return sum(counts.values()), counts.get(WORKER), servers


def server_role_key(owner: Owner, body: Any) -> str | None:
    """The key of a Kubeflow training job's parameter-server role in its replica specs (``PS``), or None."""
    assert owner.kubeflow is not None
    specs = ((body or {}).get("spec") or {}).get(owner.kubeflow[1]) or {}
    return next((role for role in specs if role.lower() == SERVER_ROLE), None)


def read_count(owner: Owner, json_call: Callable[..., Any], apis: dict[str, Any]) -> OwnerCount:
    """The owner's desired count of pods (one read); an API error never escapes (it is ``why``)."""
    if owner.kubeflow is not None:
        try:
            roles = _kubeflow_roles(owner, _read(owner, json_call, apis))
        except KubernetesAdapterError as exc:
            crd = f" (no such {owner.kind}, or no {owner.kind} CRD on the server)" if exc.kind == "not_found" else ""
            why = f"{exc.kind}: {exc.message}{crd}"
            return OwnerCount(None, why, why)
        except ValueError as exc:
            return OwnerCount(None, str(exc), str(exc))
        fixed = None if WORKER in roles else f"{owner.kind} {owner.name} has no {WORKER} replicas"
        return OwnerCount(sum(roles.values()), None, fixed, roles=roles)
    known = SCALABLE.get((owner.group, owner.kind))
    if known is None:
        what = f"kind {owner.kind} ({owner.group or 'core'})"
        why = f"{what}: its desired count is not read (Job, StatefulSet, ReplicaSet and Kubeflow's training jobs are)"
        return OwnerCount(None, why, why)
    key = known[2]
    try:
        body = _read(owner, json_call, apis)
    except KubernetesAdapterError as exc:
        why = f"{exc.kind}: {exc.message}"
        return OwnerCount(None, why, why)
    spec = (body or {}).get("spec") or {}
    count = spec.get(key)
    count = 1 if count is None else count  # the API's default for each
    completions = spec.get("completions") if owner.kind == "Job" else None
    if isinstance(count, int) and isinstance(completions, int):  # never more pods at once than completions
        count = min(count, completions)
    if not isinstance(count, int):
        why = f"spec has no whole count ({count!r})"
        return OwnerCount(None, why, why)
    boss = next((r for r in ((body.get("metadata") or {}).get("ownerReferences") or []) if r.get("controller")), None)
    fixed = f"{owner.kind} {owner.name} is controlled by {boss['kind']} {boss['name']}, which sets its count" if boss else None
    return OwnerCount(count, None, fixed, completions if isinstance(completions, int) else None)


def scale(owner: Owner, count: int, json_call: Callable[..., Any], apis: dict[str, Any], servers: int | None = None) -> str:
    """Set the owner's desired count to ``count`` (a fresh read, then a merge patch carrying its
    ``resourceVersion``), and a Kubeflow training job's parameter servers (its ``PS`` replicas) to
    ``servers`` (``None``: a gang without servers: ``count`` is all its pods); what it did, one
    line. Raises :class:`KubernetesAdapterError`."""
    if owner.kubeflow is not None:
        return _scale_kubeflow(owner, count, json_call, apis, servers)
    if servers is not None:
        raise KubernetesAdapterError("invalid", f"{owner}: FlowPlan scales parameter servers of a Kubeflow training job only")
    known = SCALABLE.get((owner.group, owner.kind))
    if known is None:
        why = f"{owner}: FlowPlan scales a Job, StatefulSet, ReplicaSet or Kubeflow training job only"
        raise KubernetesAdapterError("invalid", why)
    api, suffix, key = known
    body = _read(owner, json_call, apis) or {}
    spec = body.get("spec") or {}
    before = spec.get(key, 1)
    completions = spec.get("completions") if owner.kind == "Job" else None
    if isinstance(completions, int) and count > completions:
        why = f"{owner}: spec.completions {completions} caps its pods at {completions}; the plan asks {count}"
        raise KubernetesAdapterError("invalid", why)
    if before == count:
        return f"{owner} {owner.count_field} already {count}"
    patch = {"metadata": {"resourceVersion": (body.get("metadata") or {}).get("resourceVersion")}, "spec": {key: count}}
    json_call(
        getattr(apis[api], "patch_" + suffix), owner.name, owner.namespace, patch, _content_type="application/merge-patch+json"
    )
    return f"{owner} {owner.count_field} {before} -> {count}"


def _scale_kubeflow(owner: Owner, count: int, json_call: Callable[..., Any], apis: dict[str, Any], servers: int | None) -> str:
    """A Kubeflow training job to ``count`` pods besides its parameter servers (all its pods when
    ``servers`` is ``None``): its ``Worker`` replicas, the other roles (a ``Master``, ``Chief`` ...)
    kept; and its ``PS`` replicas to ``servers`` where given."""
    assert owner.kubeflow is not None
    plural, key = owner.kubeflow
    body = _read(owner, json_call, apis) or {}
    try:
        total, workers, ps = _kubeflow_counts(owner, body)
    except ValueError as exc:
        raise KubernetesAdapterError("invalid", f"{owner}: {exc}") from exc
    field = f"spec.{key}.{WORKER}.replicas"
    others = total - (workers or 0) - (ps if servers is not None else 0)  # the roles kept as they are
    if workers is None or count - others < 1:
        why = f"{owner}: {count} pods leave no {WORKER} beside its {others} other replicas"
        raise KubernetesAdapterError("invalid", why)
    wanted = count - others
    role = server_role_key(owner, body) if servers is not None else None
    if servers is not None and role is None:
        raise KubernetesAdapterError("invalid", f"{owner}: no PS role in spec.{key} to give {servers} parameter server(s)")
    said = [f"{field} {workers} -> {wanted}"] if wanted != workers else []
    if role is not None and servers != ps:
        said.append(f"spec.{key}.{role}.replicas {ps} -> {servers}")
    if not said:
        ps_text = f", {role} {ps}" if role is not None else ""
        return f"{owner} {field} already {workers}{ps_text}"
    roles: dict[str, Any] = {WORKER: {"replicas": wanted}}
    if role is not None:
        roles[role] = {"replicas": servers}
    patch = {
        "metadata": {"resourceVersion": (body.get("metadata") or {}).get("resourceVersion")},
        "spec": {key: roles},
    }
    patch_call = apis["custom"].patch_namespaced_custom_object
    json_call(
        patch_call,
        owner.group,
        owner.version,
        owner.namespace,
        plural,
        owner.name,
        patch,
        _content_type="application/merge-patch+json",
    )
    return f"{owner} {', '.join(said)}"
