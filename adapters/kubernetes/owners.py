"""The owners of gangs (a Job, StatefulSet or ReplicaSet): their desired count of pods, read and changed.

A gang by owner (:mod:`adapters.kubernetes.gangs`) has as many pods as its owner asks for:

============================  ======================  ==============================================
owner (group)                 its count               what FlowPlan may do with it
============================  ======================  ==============================================
Job (``batch``)               ``spec.parallelism``    read; scale (at most ``spec.completions``)
StatefulSet (``apps``)        ``spec.replicas``       read; scale
ReplicaSet (``apps``)         ``spec.replicas``       read; scale, unless a Deployment (any
                                                      controller of its own) sets its count
any other kind                --                      neither: the gang is the pods seen
============================  ======================  ==============================================

A Kubeflow ``PyTorchJob`` is such another kind here: its count is a sum over
``pytorchReplicaSpecs`` that this adapter does not read or write yet.

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

Call = Callable[..., Any]


@dataclass(frozen=True)
class Owner:
    """A gang's controller owner (its ``ownerReferences`` entry)."""

    group: str
    kind: str
    name: str
    namespace: str

    @classmethod
    def of(cls, ref: dict[str, Any], namespace: str) -> Owner:
        return cls(str(ref.get("apiVersion", "")).partition("/")[0], str(ref["kind"]), str(ref["name"]), namespace)

    @property
    def count_field(self) -> str:
        known = SCALABLE.get((self.group, self.kind))
        return f"spec.{known[2]}" if known else "spec.replicas"

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class OwnerCount:
    """What an owner says: its desired ``count`` (``None``: not known, ``why``), and ``fixed``: why
    FlowPlan cannot change it (``None``: it can)."""

    count: int | None
    why: str | None = None
    fixed: str | None = None


def read_count(owner: Owner, json_call: Callable[..., Any], apis: dict[str, Any]) -> OwnerCount:
    """The owner's desired count of pods (one read); an API error never escapes (it is ``why``)."""
    known = SCALABLE.get((owner.group, owner.kind))
    if known is None:
        why = f"kind {owner.kind} ({owner.group or 'core'}): its desired count is not read (Job, StatefulSet and ReplicaSet are)"
        return OwnerCount(None, why, why)
    api, suffix, key = known
    try:
        body = json_call(getattr(apis[api], "read_" + suffix), owner.name, owner.namespace)
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
    return OwnerCount(count, None, fixed)


def scale(owner: Owner, count: int, json_call: Callable[..., Any], apis: dict[str, Any]) -> str:
    """Set the owner's desired count to ``count`` (a fresh read, then a merge patch carrying its
    ``resourceVersion``); what it did, one line. Raises :class:`KubernetesAdapterError`."""
    known = SCALABLE.get((owner.group, owner.kind))
    if known is None:
        raise KubernetesAdapterError("invalid", f"{owner}: FlowPlan scales a Job, StatefulSet or ReplicaSet only")
    api, suffix, key = known
    body = json_call(getattr(apis[api], "read_" + suffix), owner.name, owner.namespace) or {}
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
