"""The owners of gangs (a Job, StatefulSet or ReplicaSet): their desired count of pods, read and changed.

A gang by owner (:mod:`adapters.kubernetes.gangs`) has as many pods as its owner asks for:

============================  ======================  ==============================================
owner (group)                 its count               what FlowPlan may do with it
============================  ======================  ==============================================
Job (``batch``)               ``spec.parallelism``    read; scale (at most ``spec.completions``)
StatefulSet (``apps``)        ``spec.replicas``       read; scale
ReplicaSet (``apps``)         ``spec.replicas``       read; scale, unless a Deployment (any
                                                      controller of its own) sets its count
PyTorchJob (``kubeflow.org``) the sum of              read; scale its ``Worker`` replicas (the
                              ``spec.pytorchReplicas  ``Master`` stays); only where the Kubeflow
                              Specs.*.replicas``      training operator's CRD is on the server
any other kind                --                      neither: the gang is the pods seen
============================  ======================  ==============================================

A PyTorchJob whose CRD (``pytorchjobs.kubeflow.org``) is not on the server cannot be read (the
server answers 404): its pods are then a gang of the pods seen, its count fixed, and the
observation says why, as for any owner that cannot be read. Reading and scaling it takes ``get``
and ``patch`` on ``pytorchjobs`` (``kubeflow.org``), which ``deploy/kubernetes/rbac.yaml`` does not
grant (add them where the training operator runs).

Scaling is a merge patch of the count with the ``resourceVersion`` just read (someone else's change
in between is a ``conflict``, never overwritten). The owner's controller then creates or removes the
pods; FlowPlan never creates an owner's extra pods itself (they are the controller's: its
template, its names, its indexes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from adapters.kubernetes.errors import KubernetesAdapterError

#: (API group, kind) -> (the adapter's API object, method suffix, the count's key in ``spec``).
SCALABLE = {
    ("batch", "Job"): ("batch", "namespaced_job", "parallelism"),
    ("apps", "StatefulSet"): ("apps", "namespaced_stateful_set", "replicas"),
    ("apps", "ReplicaSet"): ("apps", "namespaced_replica_set", "replicas"),
}

#: Kubeflow's PyTorchJob (a custom resource of the training operator).
PYTORCH = ("kubeflow.org", "PyTorchJob")
PYTORCH_PLURAL = "pytorchjobs"
WORKER = "Worker"


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
    def count_field(self) -> str:
        if (self.group, self.kind) == PYTORCH:
            return "spec.pytorchReplicaSpecs"
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


def _read(owner: Owner, json_call: Callable[..., Any], apis: dict[str, Any]) -> Any:
    """The owner as the server has it (one read). Raises :class:`KubernetesAdapterError`."""
    if (owner.group, owner.kind) == PYTORCH:
        get = apis["custom"].get_namespaced_custom_object
        return json_call(get, owner.group, owner.version, owner.namespace, PYTORCH_PLURAL, owner.name)
    api, suffix, _ = SCALABLE[(owner.group, owner.kind)]
    return json_call(getattr(apis[api], "read_" + suffix), owner.name, owner.namespace)


def _pytorch_counts(body: Any) -> tuple[int, int | None]:
    """``(all replicas, Worker replicas or None)`` of a PyTorchJob (each role's ``replicas``: default 1)."""
    specs = ((body or {}).get("spec") or {}).get("pytorchReplicaSpecs") or {}
    counts = {role: (spec or {}).get("replicas", 1) for role, spec in specs.items()}
    if not all(isinstance(c, int) for c in counts.values()):
        raise ValueError(f"spec.pytorchReplicaSpecs has a count that is not a whole number ({counts!r})")
    return sum(counts.values()), counts.get(WORKER)


def read_count(owner: Owner, json_call: Callable[..., Any], apis: dict[str, Any]) -> OwnerCount:
    """The owner's desired count of pods (one read); an API error never escapes (it is ``why``)."""
    if (owner.group, owner.kind) == PYTORCH:
        try:
            total, workers = _pytorch_counts(_read(owner, json_call, apis))
        except KubernetesAdapterError as exc:
            crd = " (no such PyTorchJob, or no PyTorchJob CRD on the server)" if exc.kind == "not_found" else ""
            why = f"{exc.kind}: {exc.message}{crd}"
            return OwnerCount(None, why, why)
        except ValueError as exc:
            return OwnerCount(None, str(exc), str(exc))
        return OwnerCount(total, None, None if workers is not None else f"PyTorchJob {owner.name} has no {WORKER} replicas")
    known = SCALABLE.get((owner.group, owner.kind))
    if known is None:
        what = f"kind {owner.kind} ({owner.group or 'core'})"
        why = f"{what}: its desired count is not read (Job, StatefulSet, ReplicaSet, PyTorchJob are)"
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


def scale(owner: Owner, count: int, json_call: Callable[..., Any], apis: dict[str, Any]) -> str:
    """Set the owner's desired count to ``count`` (a fresh read, then a merge patch carrying its
    ``resourceVersion``); what it did, one line. Raises :class:`KubernetesAdapterError`."""
    if (owner.group, owner.kind) == PYTORCH:
        return _scale_pytorch(owner, count, json_call, apis)
    known = SCALABLE.get((owner.group, owner.kind))
    if known is None:
        raise KubernetesAdapterError("invalid", f"{owner}: FlowPlan scales a Job, StatefulSet, ReplicaSet or PyTorchJob only")
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


def _scale_pytorch(owner: Owner, count: int, json_call: Callable[..., Any], apis: dict[str, Any]) -> str:
    """A PyTorchJob to ``count`` pods: its ``Worker`` replicas, the other roles (``Master``) kept."""
    body = _read(owner, json_call, apis) or {}
    try:
        total, workers = _pytorch_counts(body)
    except ValueError as exc:
        raise KubernetesAdapterError("invalid", f"{owner}: {exc}") from exc
    field = f"spec.pytorchReplicaSpecs.{WORKER}.replicas"
    if workers is None or count - (total - workers) < 1:
        why = f"{owner}: {count} pods leave no {WORKER} beside its {total - (workers or 0)} other replicas"
        raise KubernetesAdapterError("invalid", why)
    wanted = count - (total - workers)
    if wanted == workers:
        return f"{owner} {field} already {workers}"
    patch = {
        "metadata": {"resourceVersion": (body.get("metadata") or {}).get("resourceVersion")},
        "spec": {"pytorchReplicaSpecs": {WORKER: {"replicas": wanted}}},
    }
    patch_call = apis["custom"].patch_namespaced_custom_object
    json_call(
        patch_call,
        owner.group,
        owner.version,
        owner.namespace,
        PYTORCH_PLURAL,
        owner.name,
        patch,
        _content_type="application/merge-patch+json",
    )
    return f"{owner} {field} {workers} -> {wanted}"
