"""Pods and nodes as the Kubernetes adapter reads them: plain views over the API's JSON.

The adapter lists pods and nodes as JSON (``_preload_content=False``): it needs a few fields, copies
whole pod specs for replacements, and a 1,000-node list decodes several times faster as plain JSON
than as the client's model objects. These helpers read that JSON; nothing here calls the server.

FlowPlan manages the *first* container of a pod (the training container): its CPU request is the
job's guaranteed share, its CPU limit the cap, its ``nvidia.com/gpu`` limit the job's GPUs.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from adapters.kubernetes.annotations import GANG_LABEL, JOB_LABEL, SCHEDULER_NAME

GPU = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def quantity(text: Any) -> Decimal:
    """A Kubernetes quantity (``500m``, ``2``, ``256Gi``, ``1e3``) as a number; raises ``ValueError``."""
    s = str(text).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if suffix and s.endswith(suffix) and not (suffix in ("E",) and _is_exponent(s)):
            number = s[: -len(suffix)]
            break
    else:
        suffix, number = "", s
    try:
        value = Decimal(number) * _SUFFIXES[suffix]
    except InvalidOperation:
        raise ValueError(f"not a quantity: {text!r}") from None
    if not value.is_finite():
        raise ValueError(f"not a quantity: {text!r}")
    return value


def _is_exponent(s: str) -> bool:
    try:
        Decimal(s)
        return True
    except InvalidOperation:
        return False


def millis(text: Any) -> int:
    """CPU quantity in millicores (rounded up, as the API rounds)."""
    return math.ceil(quantity(text) * 1000)


def mib(text: Any) -> int:
    return int(quantity(text) // 2**20)


def timestamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass
class PodView:
    """The fields of a pod the adapter uses, and the pod's JSON (``raw``) for replacements."""

    raw: dict[str, Any]
    name: str
    namespace: str
    uid: str
    resource_version: str
    node: str | None
    phase: str
    deleting: bool
    created: float | None
    labels: dict[str, str]
    annotations: dict[str, str]
    scheduler: str
    container: str
    requests: dict[str, str]
    limits: dict[str, str]
    restarts: int
    resize: str | None  # "Infeasible: <message>", "Deferred: ...", "InProgress", or None
    #: When its container (the first) last started running, else the pod's start time (``None``: not yet).
    started: float | None = None

    @property
    def cpu_request(self) -> int | None:
        return millis(self.requests["cpu"]) if "cpu" in self.requests else None

    @property
    def cpu_limit(self) -> int | None:
        return millis(self.limits["cpu"]) if "cpu" in self.limits else None

    @property
    def gpus(self) -> int:
        text = self.limits.get(GPU, self.requests.get(GPU))
        return int(quantity(text)) if text is not None else 0

    @property
    def guaranteed(self) -> bool:
        """QoS class Guaranteed (requests equal limits for CPU and memory): a resize must keep it so."""
        return (
            "cpu" in self.limits
            and "memory" in self.limits
            and quantity(self.requests.get("cpu", self.limits["cpu"])) == quantity(self.limits["cpu"])
            and quantity(self.requests.get("memory", self.limits["memory"])) == quantity(self.limits["memory"])
        )

    @property
    def live(self) -> bool:
        """Neither being deleted nor terminated."""
        return not self.deleting and self.phase not in ("Succeeded", "Failed")


def is_flowplan_pod(raw: dict[str, Any]) -> bool:
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    labels = meta.get("labels") or {}
    return spec.get("schedulerName") == SCHEDULER_NAME or JOB_LABEL in labels or GANG_LABEL in labels


def controller_of(raw: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's controller: its ``metadata.ownerReferences`` entry with ``controller: true``, or ``None``."""
    for ref in (raw.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") is True and ref.get("kind") and ref.get("name"):
            return dict(ref)
    return None


def owner_job_id(ref: dict[str, Any]) -> str:
    """The job id of the gang an owner's pods make: ``<kind>/<name>`` (``job/train``,
    ``statefulset/web``). A label value or a pod name never holds a ``/``, so it cannot be the id of
    a label gang or a single pod; a character the snapshot's ids do not allow becomes ``-``, and an
    id past their 253 characters is cut, with a hash of the whole to keep it unique."""
    text = f"{str(ref['kind']).lower()}/{ref['name']}"
    text = re.sub(r"[^A-Za-z0-9._:/-]", "-", text).strip("._:/-") or "owner"
    if len(text) > 253:
        text = text[:244] + "-" + hashlib.sha1(text.encode()).hexdigest()[:8]
    return text


def job_id_of(raw: dict[str, Any]) -> str:
    """The gang label (a gang's pods are one job, adapters/kubernetes/gangs.py), else the controller
    owner's ``<kind>/<name>`` (the owner's pods are a gang too), else the job label, else the name."""
    meta = raw.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(GANG_LABEL):
        return str(labels[GANG_LABEL])
    owner = controller_of(raw)
    if owner is not None:
        return owner_job_id(owner)
    return str(labels.get(JOB_LABEL) or meta.get("name", ""))


def pod_view(raw: dict[str, Any]) -> PodView:
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    containers = spec.get("containers") or [{}]
    first = containers[0]
    resources = first.get("resources") or {}
    restarts = sum(int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or [])
    return PodView(
        raw=raw,
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "default")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        node=spec.get("nodeName") or None,
        phase=str(status.get("phase") or "Pending"),
        deleting=meta.get("deletionTimestamp") is not None,
        created=timestamp(meta.get("creationTimestamp")),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        scheduler=str(spec.get("schedulerName") or "default-scheduler"),
        container=str(first.get("name", "")),
        requests={k: str(v) for k, v in (resources.get("requests") or {}).items()},
        limits={k: str(v) for k, v in (resources.get("limits") or {}).items()},
        restarts=restarts,
        resize=_resize_state(status),
        started=_started(status),
    )


def _started(status: dict[str, Any]) -> float | None:
    """The first container's ``state.running.startedAt`` (its current run), else ``status.startTime``."""
    for c in status.get("containerStatuses") or []:
        running = (c.get("state") or {}).get("running") or {}
        if running.get("startedAt"):
            return timestamp(running["startedAt"])
        break
    return timestamp(status.get("startTime"))


class PlacementError(ValueError):
    """A pod's node constraints say what FlowPlan cannot honour (the message names the field)."""


def node_constraints(raw: dict[str, Any]) -> tuple[dict[str, str], list[str] | None]:
    """Where a pod may run, as the contract says it: ``(node_selector, gpu_types)``.

    FlowPlan binds its pods itself (no scheduler reads their constraints), so it must keep them:
    ``spec.nodeSelector`` is the job's ``node_selector`` as it is; the *required* node affinity
    (``requiredDuringSchedulingIgnoredDuringExecution``) is read when it is one term of ``In``
    expressions: on ``nvidia.com/gpu.product`` its values are the GPU models any of which will do
    (``gpu_types``); on another label, one value is a selector entry. Anything else (several terms,
    ``NotIn``, ``Exists``, ``Gt``, ``matchFields``, ``In`` with several values on another label)
    raises :class:`PlacementError`: the adapter leaves such a pod unmanaged rather than bind it where
    the kubelet would refuse it. Preferred affinity is a preference: not read."""
    spec = raw.get("spec") or {}
    selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    models: set[str] | None = None
    if GPU_PRODUCT_LABEL in selector:
        models = {selector.pop(GPU_PRODUCT_LABEL)}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = (required or {}).get("nodeSelectorTerms") or []
    where = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    if len(terms) > 1:
        raise PlacementError(f"{where}: {len(terms)} terms (any of them) cannot be planned; FlowPlan takes one")
    for term in terms:
        if term.get("matchFields"):
            raise PlacementError(f"{where}[0].matchFields: not supported (only matchExpressions with In)")
        for i, expr in enumerate(term.get("matchExpressions") or []):
            key, op, values = str(expr.get("key")), expr.get("operator"), [str(v) for v in expr.get("values") or []]
            at = f"{where}[0].matchExpressions[{i}]"
            if op != "In" or not values:
                raise PlacementError(f"{at}: {key} {op} {values} cannot be planned (only In with values)")
            if key == GPU_PRODUCT_LABEL:
                models = set(values) if models is None else models & set(values)
                if not models:
                    raise PlacementError(f"{at}: {key} In {values} leaves no GPU model its other constraints allow")
            elif len(values) == 1 and selector.get(key, values[0]) == values[0]:
                selector[key] = values[0]
            else:
                raise PlacementError(f"{at}: {key} In {values} cannot be planned (one value per label, or {GPU_PRODUCT_LABEL})")
    return selector, None if models is None else sorted(models)


def _resize_state(status: dict[str, Any]) -> str | None:
    """The pod's resize state: the ``PodResizePending`` / ``PodResizeInProgress`` conditions (1.33+),
    else the older ``status.resize`` field."""
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "PodResizePending":
            return f"{cond.get('reason') or 'Pending'}: {cond.get('message') or ''}".strip()
        if cond.get("type") == "PodResizeInProgress":
            return "InProgress"
    old = status.get("resize")
    return str(old) if old else None


@dataclass
class NodeView:
    """A node's allocatable resources and whether FlowPlan may place jobs on it (and why not)."""

    name: str
    cpu_millis: int
    memory_mib: int
    gpus: int
    gpu_type: str | None
    labels: dict[str, str]
    ready: bool
    unschedulable: bool
    taints: list[str] = field(default_factory=list)

    @property
    def why_not_schedulable(self) -> str | None:
        if not self.ready:
            return "not Ready"
        if self.unschedulable:
            return "cordoned (spec.unschedulable)"
        if self.taints:
            return f"tainted {', '.join(self.taints)}"
        return None


def node_view(raw: dict[str, Any]) -> NodeView:
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    labels = dict(meta.get("labels") or {})
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    taints = [
        f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}"
        for t in spec.get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute")
    ]
    return NodeView(
        name=str(meta.get("name", "")),
        cpu_millis=millis(alloc.get("cpu", "0")),
        memory_mib=mib(alloc.get("memory", "0")),
        gpus=int(quantity(alloc.get(GPU, "0"))),
        gpu_type=labels.get(GPU_PRODUCT_LABEL),
        labels=labels,
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        taints=taints,
    )


def requested(raw: dict[str, Any]) -> tuple[int, int, int]:
    """CPU millicores, memory MiB and GPUs a (foreign) pod holds on its node: its containers' requests."""
    cpu = mem = gpus = 0
    for c in (raw.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        req = res.get("requests") or {}
        lim = res.get("limits") or {}
        try:
            cpu += millis(req.get("cpu", lim.get("cpu", "0")))
            mem += mib(req.get("memory", lim.get("memory", "0")))
            gpus += int(quantity(lim.get(GPU, req.get(GPU, "0"))))
        except ValueError:
            continue
    return cpu, mem, gpus
