"""Gangs in the simulated cluster: where a job's replicas run, and what a change asks of them.

A running :class:`~adapters.sim.cluster.SimJob` holds ``shares``: ``(node, replicas)`` per node, rank
0's node first (the snapshot's ``Job.placement``, the plan's ``Assignment.placement``, a change's
``Change.placement``). Each replica holds the job's per-replica CPU, GPUs and memory on its node, and
the whole gang trains at the speed of its placement (:meth:`adapters.sim.truth.GroundTruth.epoch_seconds`).

What a change of count or placement costs follows :mod:`planner.transitions`: the loop sends it as a
``resize`` (live, no loss) for an elastic job and as a ``migrate`` (checkpoint-restart) otherwise; the
simulator refuses a ``resize`` that changes the count or placement of a job that is not elastic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from adapters.base import Shares
from adapters.sim.scenario import JobSpec
from planner.snapshot import Share


def shares_problem(spec: JobSpec, shares: Shares, known: Iterable[str]) -> str | None:
    """Why ``spec`` cannot run at ``shares`` (``None``: it can), in one line naming the value."""
    names = [n for n, _ in shares]
    count = sum(k for _, k in shares)
    if any(k < 1 for _, k in shares):
        return f"placement {list(shares)}: a node listed with no replica"
    if len(set(names)) != len(names):
        return f"placement {list(shares)}: a node listed twice"
    unknown = sorted(set(names) - set(known))
    if unknown:
        return f"unknown node {unknown[0]} in placement {list(shares)}"
    if len(names) > spec.max_nodes:
        return f"placement over {len(names)} nodes, but max_nodes is {spec.max_nodes}"
    if not spec.fewest_replicas <= count <= spec.replicas:
        return f"{count} replicas, outside [{spec.fewest_replicas}, {spec.replicas}] (min_replicas, replicas)"
    return None


def snapshot_placement(shares: Shares, replicas: int) -> list[Share] | None:
    """The snapshot's ``Job.placement`` of a running gang: ``None`` when all ``replicas`` run on one node."""
    if len(shares) == 1 and shares[0][1] == replicas:
        return None
    return [Share(node=n, replicas=k) for n, k in shares]


def could_start(s: JobSpec, room: Sequence[tuple[float, int, int, int]]) -> bool:
    """Whether a waiting job could start now at its minimum, given each node's room (idle CPU, whole
    GPUs free, memory free, most milli-GPUs one device has free): a fractional job on one node, any
    other with its fewest replicas over at most ``max_nodes`` nodes."""
    if s.gpu_milli is not None:
        return any(
            cpu + 1e-6 >= s.min_cpu_millis and most >= s.gpu_milli and (s.memory_mib == 0 or mem >= s.memory_mib)
            for cpu, _, mem, most in room
        )
    per_node = [
        min(
            math.floor((cpu + 1e-6) / s.min_cpu_millis),
            gpus // s.min_gpus if s.min_gpus else s.replicas,
            mem // s.memory_mib if s.memory_mib else s.replicas,
        )
        for cpu, gpus, mem, _ in room
    ]
    return sum(sorted((max(k, 0) for k in per_node), reverse=True)[: s.max_nodes]) >= s.fewest_replicas
