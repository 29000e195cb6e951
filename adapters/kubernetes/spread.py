"""A gang's pods over nodes: their ranks, where they run, and which pod goes where for a placement.

Pure functions over :class:`~adapters.kubernetes.pods.PodView` (nothing here calls the server).

**Rank.** Rank 0's node is the job's ``node`` (the snapshot's ``Job.placement`` lists it first). The
pods of a gang are ranked by, in this order:

1. ``flowplan.io/rank`` (a whole number from 0; two pods of a gang may not claim the same);
2. Kubernetes' own index of the pod: an Indexed Job's ``batch.kubernetes.io/job-completion-index``
   annotation, a StatefulSet's ``apps.kubernetes.io/pod-index`` label;
3. the pod's name, less the ``-r<n>`` that a replacement adds (:func:`~adapters.kubernetes.adapter.next_name`),
   so a re-created pod keeps its place.

Pods with a rank (1 or 2) come before those without. A replacement copies the old pod's labels and
annotations, so it keeps its rank too.

**Shares.** Where a gang's pods run is ``(node, pods)`` per node, in the order of each node's
best-ranked pod: rank 0's node first (:func:`shares_of`).

**Assignment.** For a planned placement (``(node, replicas)`` per node, rank 0's first),
:func:`assign` says where each pod goes, moving as few as it can: rank 0 goes to the first node; a
bound pod stays where it is while its node has a planned replica left; every other pod (unbound, or
bound where none is planned) fills the planned nodes in order, by rank. A bound pod that must move
is *astray*: a bound pod cannot be unbound, so it is re-created unbound first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from adapters.base import Shares
from adapters.kubernetes.annotations import MAX_GANG, RANK, AnnotationError, whole
from adapters.kubernetes.pods import PodView

#: Kubernetes' own pod indexes (an Indexed Job's annotation; a StatefulSet's label, 1.28+).
JOB_INDEX = "batch.kubernetes.io/job-completion-index"
POD_INDEX = "apps.kubernetes.io/pod-index"
_REPLACED = re.compile(r"(-r\d+)+$")


def rank_of(pod: PodView) -> int | None:
    """The pod's rank from ``flowplan.io/rank`` or Kubernetes' index, or ``None`` (ranked by name).
    Raises :class:`AnnotationError` for a ``flowplan.io/rank`` that is not a rank."""
    if RANK in pod.annotations:
        return whole(RANK, pod.annotations[RANK], 0, MAX_GANG - 1)
    index = pod.annotations.get(JOB_INDEX, pod.labels.get(POD_INDEX))
    if index is not None and index.isdigit():
        return int(index)
    return None


def ranked(job: str, pods: Sequence[PodView]) -> list[PodView]:
    """``pods`` in rank order (module docstring). Raises :class:`AnnotationError` naming the pod, the
    annotation and its value when a rank is not one, or two pods claim the same ``flowplan.io/rank``."""
    keyed = []
    claimed: dict[int, str] = {}
    for p in pods:
        try:
            rank = rank_of(p)
        except AnnotationError as exc:
            raise AnnotationError(f"gang {job}: pod {p.name}: {exc}") from None
        if RANK in p.annotations and rank is not None:
            if rank in claimed:
                value = p.annotations[RANK]
                raise AnnotationError(f"gang {job}: pods {claimed[rank]} and {p.name} both claim annotation {RANK} ({value!r})")
            claimed[rank] = p.name
        keyed.append(((0, rank, "") if rank is not None else (1, 0, _REPLACED.sub("", p.name)), p.name, p))
    return [p for *_, p in sorted(keyed, key=lambda k: (k[0], k[1]))]


def shares_of(pods: Sequence[PodView]) -> Shares:
    """``(node, pods)`` per node of the bound ``pods`` (in rank order), rank 0's node first."""
    counts: dict[str, int] = {}
    for p in pods:
        if p.node is not None:
            counts[p.node] = counts.get(p.node, 0) + 1
    return tuple(counts.items())


def assign(shares: Shares, pods: Sequence[PodView]) -> tuple[dict[str, str], list[PodView]]:
    """``(node of each pod by name, astray pods)`` for ``pods`` (in rank order, as many as ``shares``
    plans) to run at ``shares`` (module docstring)."""
    if sum(k for _, k in shares) != len(pods) or not shares:
        raise ValueError(f"{len(pods)} pods for a placement of {sum(k for _, k in shares)}")
    room = dict(shares)
    target: dict[str, str] = {}
    astray: list[PodView] = []
    first = shares[0][0]
    target[pods[0].name] = first
    room[first] -= 1
    if pods[0].node not in (None, first):
        astray.append(pods[0])
    for p in pods[1:]:
        if p.node is None:
            continue
        if room.get(p.node, 0) > 0:
            target[p.name] = p.node
            room[p.node] -= 1
        else:
            astray.append(p)
    free = [node for node, _ in shares for _ in range(room[node])]
    for p in pods[1:]:
        if p.name not in target:
            target[p.name] = free.pop(0)
    return target, astray


def placement_text(shares: Shares) -> str:
    """``2 on n0, 2 on n1``: a placement in a message."""
    return ", ".join(f"{k} on {n}" for n, k in shares)
