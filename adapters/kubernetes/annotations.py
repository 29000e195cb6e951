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
"""

from __future__ import annotations

from collections.abc import Mapping

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


class AnnotationError(ValueError):
    """A ``flowplan.io/*`` annotation has a value that cannot be used (the message names it and its value)."""


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
        if not key.startswith(PREFIX) or key in WRITTEN or key in (JOB_LABEL, GANG_SIZE):
            continue
        renamed[DOCKER_PREFIX + key[len(PREFIX) :]] = value
    try:
        parsed = parse_labels(renamed, created=created)
    except LabelError as exc:
        text = str(exc)
        if text.startswith("label " + DOCKER_PREFIX):
            text = "annotation " + PREFIX + text[len("label " + DOCKER_PREFIX) :]
        raise AnnotationError(text.replace("other " + DOCKER_PREFIX, "other " + PREFIX)) from None
    assert parsed is not None  # the job key is always there
    return parsed
