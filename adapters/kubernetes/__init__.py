"""The Kubernetes adapter: nodes as nodes, FlowPlan's pods as jobs, FlowPlan as their scheduler.

Start with :class:`KubernetesAdapter` (what it assumes is in its module docstring), the annotations
in :mod:`adapters.kubernetes.annotations`, progress from pod logs in :mod:`adapters.kubernetes.logs`,
the watches that wake the daemon in :mod:`adapters.kubernetes.watch`, leader election on a Lease in
:mod:`adapters.kubernetes.leader`, the local control plane in :mod:`adapters.kubernetes.sandbox`, and
``docs/kubernetes.md``. Needs the ``kubernetes`` client.
"""

from adapters.kubernetes.adapter import NOT_SCHEDULABLE_LABEL, UNMANAGED_PREFIX, KubernetesAdapter, Observation
from adapters.kubernetes.annotations import JOB_LABEL, SCHEDULER_NAME, AnnotationError, parse_annotations
from adapters.kubernetes.errors import KubernetesAdapterError, classify
from adapters.kubernetes.leader import LeaderElectionError, LeaderGuard, LeaseElector, StoppedWhileStandby
from adapters.kubernetes.logs import PodLogs
from adapters.kubernetes.sandbox import Sandbox, SandboxError, SandboxInfo
from adapters.kubernetes.watch import PodEvent, PodWatch

__all__ = [
    "JOB_LABEL",
    "NOT_SCHEDULABLE_LABEL",
    "SCHEDULER_NAME",
    "UNMANAGED_PREFIX",
    "AnnotationError",
    "KubernetesAdapter",
    "KubernetesAdapterError",
    "LeaderElectionError",
    "LeaderGuard",
    "LeaseElector",
    "Observation",
    "PodEvent",
    "PodLogs",
    "PodWatch",
    "Sandbox",
    "SandboxError",
    "SandboxInfo",
    "StoppedWhileStandby",
    "classify",
    "parse_annotations",
]
