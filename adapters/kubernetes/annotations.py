"""The ``flowplan.io/*`` pod annotations: a pod's bounds and target, mirroring the Docker labels.

Every Docker label ``flowplan.<key>`` (:mod:`adapters.docker.labels`, the table there) is the pod
annotation ``flowplan.io/<key>`` here, with the same meaning, defaults and checks:
``flowplan.io/min_cpu_millis``, ``flowplan.io/max_cpu_millis``, ``flowplan.io/target.tier1``,
``flowplan.io/target.tier1.within`` (seconds after the pod was created) and so on.

Which pods are FlowPlan's is not an annotation: ``spec.schedulerName: flowplan`` or the label
``flowplan.io/job`` (a label, so it can be selected on). The job id is that label, else the pod's
name. A replacement pod (migration, pause, re-create) always carries the label, so the job keeps its
id across pods.

Where an annotation is absent, the pod's own spec fills in: ``max_cpu_millis`` from the CPU limit,
``memory_mib`` from the memory request, the GPU bounds from the ``nvidia.com/gpu`` limit (GPUs
cannot change in place).

One parser for both adapters: the annotations are renamed to the Docker label keys and parsed by
:func:`adapters.docker.labels.parse_labels`; its messages are renamed back, so an error names the
annotation as the user wrote it. Parsing is all or nothing, as for Docker: one bad annotation makes
the pod *unmanaged* (left alone, reported in the node's labels and the log).

A gang's count and spread (:mod:`adapters.kubernetes.gangs`) are Kubernetes' own annotations, not
Docker's ``replicas`` / ``min_replicas`` / ``max_nodes`` labels (a gang's count is its pods here, and
an elastic gang can change it live), parsed by :func:`gang_bounds`:

=================================  ===================================================================
annotation                         meaning
=================================  ===================================================================
``flowplan.io/min-replicas``       ``Job.min_replicas``: the fewest pods the gang trains with (1-1024)
``flowplan.io/max-replicas``       the most pods its owner may be scaled to: ``Job.replicas`` (1-1024;
                                   default: the pods it has)
``flowplan.io/max-nodes``          ``Job.max_nodes``: the most nodes its pods may spread over (1-1024;
                                   default 1)
``flowplan.io/elastic``            ``true`` / ``false`` (default): the gang survives a change of its
                                   count (torchrun's elastic rendezvous), so no checkpoint comes first
``flowplan.io/rank``               per pod, ``0`` .. ``1023``: the pod's rank (rank 0's node is the
                                   job's ``node``); the pods of a gang need not agree on it
``flowplan.io/min-servers``        a gang with parameter servers (:mod:`adapters.kubernetes.gangs`):
                                   ``Job.servers.min``, the fewest servers in all (1-1024; default:
                                   the servers it has)
``flowplan.io/max-servers``        ``Job.servers.max``: the most servers its owner may be scaled to
                                   (1-1024; default: the servers it has)
``flowplan.io/server-form``        ``optimus`` (default) or ``coach``: ``Job.servers.form``, the
                                   prior of its (workers, servers) speed model
=================================  ===================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from adapters.docker.errors import LabelError
from adapters.docker.labels import JOB as DOCKER_JOB
from adapters.docker.labels import PREFIX as DOCKER_PREFIX
from adapters.docker.labels import JobLabels, parse_labels

PREFIX = "flowplan.io/"
JOB_LABEL = "flowplan.io/job"
SCHEDULER_NAME = "flowplan"
#: Annotations the adapter writes (not read as bounds): requests to the training job and bookkeeping.
CHECKPOINT_REQUESTED = "flowplan.io/checkpoint-requested"
DELIVER_REQUESTED = "flowplan.io/deliver-requested"
REPLACES = "flowplan.io/replaces"
#: Who bound the pod (the daemon's lease identity): the API server copies a Binding's annotations to the pod.
BOUND_BY = "flowplan.io/bound-by"
WRITTEN = {CHECKPOINT_REQUESTED, DELIVER_REQUESTED, REPLACES, BOUND_BY}
#: Gangs (:mod:`adapters.kubernetes.gangs`): the pods sharing this label's value in a namespace are one
#: job of that id, with as many replicas as pods; the annotation, where given, is how many pods the
#: gang has (it waits until all exist). Neither is a bound: the parser skips the annotation.
GANG_LABEL = "flowplan.io/gang"
GANG_SIZE = "flowplan.io/gang-size"
#: A gang's bounds (:func:`gang_bounds`) and a pod's rank in its gang.
MIN_REPLICAS = "flowplan.io/min-replicas"
MAX_REPLICAS = "flowplan.io/max-replicas"
MAX_NODES = "flowplan.io/max-nodes"
ELASTIC = "flowplan.io/elastic"
RANK = "flowplan.io/rank"
#: A gang's parameter servers (pods of its ``ps`` role): their bounds and speed form.
MIN_SERVERS = "flowplan.io/min-servers"
MAX_SERVERS = "flowplan.io/max-servers"
SERVER_FORM = "flowplan.io/server-form"
SERVER_KEYS = {MIN_SERVERS, MAX_SERVERS, SERVER_FORM}
GANG_KEYS = {MIN_REPLICAS, MAX_REPLICAS, MAX_NODES, ELASTIC, RANK} | SERVER_KEYS
#: Docker's gang labels, as annotations: refused here, they name Kubernetes' keys instead.
_DOCKER_GANG = {
    "flowplan.io/replicas": MAX_REPLICAS,
    "flowplan.io/min_replicas": MIN_REPLICAS,
    "flowplan.io/max_nodes": MAX_NODES,
}
#: The largest gang (the snapshot's bound on ``replicas``).
MAX_GANG = 1024


class AnnotationError(ValueError):
    """A ``flowplan.io/*`` annotation has a value that cannot be used (the message names it and its value)."""


@dataclass(frozen=True)
class GangBounds:
    """What a gang's pods declare about its count and spread (``None``: not declared)."""

    min_replicas: int | None = None
    max_replicas: int | None = None
    max_nodes: int = 1
    elastic: bool = False
    min_servers: int | None = None
    max_servers: int | None = None
    server_form: str | None = None


def whole(key: str, value: str, lo: int, hi: int) -> int:
    """``value`` of annotation ``key`` as a whole number in ``[lo, hi]``; raises :class:`AnnotationError`."""
    try:
        number = int(value.strip())
    except ValueError:
        number = lo - 1
    if not lo <= number <= hi:
        raise AnnotationError(f"annotation {key}: must be a whole number from {lo} to {hi} ({value!r})")
    return number


def gang_bounds(annotations: Mapping[str, str]) -> GangBounds:
    """The gang bounds a pod's annotations declare (module docstring). Raises :class:`AnnotationError`
    naming the annotation and its value."""
    keys = (MIN_REPLICAS, MAX_REPLICAS, MAX_NODES, MIN_SERVERS, MAX_SERVERS)
    ints = {key: whole(key, annotations[key], 1, MAX_GANG) for key in keys if key in annotations}
    for low, high in ((MIN_REPLICAS, MAX_REPLICAS), (MIN_SERVERS, MAX_SERVERS)):
        lo, hi = ints.get(low), ints.get(high)
        if lo is not None and hi is not None and lo > hi:
            raise AnnotationError(f"annotation {low}: {lo} exceeds {high} {hi} ({annotations[low]!r})")
    form = None
    if SERVER_FORM in annotations:
        form = annotations[SERVER_FORM].strip().lower()
        if form not in ("optimus", "coach"):
            raise AnnotationError(f"annotation {SERVER_FORM}: expected optimus or coach ({annotations[SERVER_FORM]!r})")
    elastic = False
    if ELASTIC in annotations:
        text = annotations[ELASTIC].strip().lower()
        if text not in ("true", "false"):
            raise AnnotationError(f"annotation {ELASTIC}: expected true or false ({annotations[ELASTIC]!r})")
        elastic = text == "true"
    return GangBounds(
        ints.get(MIN_REPLICAS),
        ints.get(MAX_REPLICAS),
        ints.get(MAX_NODES, 1),
        elastic,
        ints.get(MIN_SERVERS),
        ints.get(MAX_SERVERS),
        form,
    )


def one_replica(annotations: Mapping[str, str]) -> None:
    """A single pod's gang bounds, checked: a pod without a gang is one replica. Raises
    :class:`AnnotationError` naming the annotation and its value."""
    bounds = gang_bounds(annotations)
    for key, value in ((MIN_REPLICAS, bounds.min_replicas), (MAX_REPLICAS, bounds.max_replicas)):
        if value is not None and value > 1:
            why = f"a pod without a gang is one replica (a gang is pods sharing the label {GANG_LABEL} or an owner)"
            raise AnnotationError(f"annotation {key}: {why} ({annotations[key]!r})")
    for key in sorted(SERVER_KEYS & set(annotations)):
        why = "a pod without a gang has no parameter servers (they are its gang's pods of role ps)"
        raise AnnotationError(f"annotation {key}: {why} ({annotations[key]!r})")


def parse_annotations(
    job_id: str,
    annotations: Mapping[str, str],
    created: float | None = None,
    *,
    spec_defaults: Mapping[str, str] | None = None,
) -> JobLabels:
    """The job a FlowPlan pod describes. ``spec_defaults`` (Docker label keys without the prefix)
    fill in what no annotation gives. Raises :class:`AnnotationError` naming the first bad annotation."""
    renamed: dict[str, str] = {DOCKER_JOB: job_id}
    for key, value in (spec_defaults or {}).items():
        renamed[DOCKER_PREFIX + key] = value
    for key, value in annotations.items():
        if not key.startswith(PREFIX) or key in WRITTEN or key in (JOB_LABEL, GANG_SIZE) or key in GANG_KEYS:
            continue
        if key in _DOCKER_GANG:
            raise AnnotationError(f"annotation {key}: a Docker label; on Kubernetes use {_DOCKER_GANG[key]} ({value!r})")
        renamed[DOCKER_PREFIX + key[len(PREFIX) :]] = value
    try:
        parsed = parse_labels(renamed, created=created)
    except LabelError as exc:
        # "label flowplan.x: ..." (or "labels flowplan.x and flowplan.y: ...") names annotations here.
        subject, sep, rest = str(exc).partition(": ")
        for word, here in (("labels ", "annotations "), ("label ", "annotation ")):
            if subject.startswith(word + DOCKER_PREFIX):
                subject = here + subject[len(word) :].replace(DOCKER_PREFIX, PREFIX)
                break
        text = subject + sep + rest
        raise AnnotationError(text.replace("other " + DOCKER_PREFIX, "other " + PREFIX)) from None
    assert parsed is not None  # the job key is always there
    return parsed
