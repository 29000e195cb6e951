"""Kubernetes' default scheduler with static requests: bind in order, spread, never resize or move.

Mechanism (kube-scheduler, default profile; the baseline of SpeCon, IEEE Systems Journal 2021):

- a pending pod *requests* what the user asked for: ``max_cpu_millis`` and ``max_gpus`` per replica
  (requests equal limits), its memory; the gang's replicas go to one node;
- pods are bound one at a time in submission order (the scheduling queue's FIFO for equal priority);
- *filter*: the node is schedulable, carries the GPU type and labels, and the sum of the requests of
  the pods already bound there plus this one fits its allocatable CPU, memory and GPUs
  (``NodeResourcesFit``);
- *score*: ``NodeResourcesFit`` with the default ``LeastAllocated`` strategy,
  ``mean_r((allocatable_r - requested_r) / allocatable_r) * 100``, plus ``NodeResourcesBalancedAllocation``,
  ``(1 - std_r(requested_r / allocatable_r)) * 100``, both over CPU and memory (the default resource
  set; a resource the node has none of is left out), requested counting this pod; equal weights.
  The highest total wins (kube-scheduler breaks ties at random; here by node order, to stay
  deterministic). Together they *spread* pods and keep CPU and memory use balanced;
- a GPU-sharing pod (``gpu_milli``) requests its fraction of one device: the filter needs a device
  with that much room, and it is packed best fit onto the fullest device that holds it (the
  GPU-share scheduler of the Alibaba trace, :mod:`planner.policies.shared_gpus`; every baseline
  shares devices this way);
- a gang that may spread (``max_nodes`` above 1) is its ``replicas`` pods, each bound like one pod
  (filter and score with one pod's request; a node already holding some of them scores the same way)
  on at most ``max_nodes`` nodes, all or none (gang scheduling, as the coscheduling plugin does);
- a pod that fits nowhere stays pending; no preemption (all pods have the same priority);
- a bound pod is never resized or moved (the default controllers do neither).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from planner.plan import Plan
from planner.policies.common import (
    Decision,
    Ledger,
    active_jobs,
    build_plan,
    describe,
    may_arrive,
    place_replicas,
    spreads,
    stay_decisions,
    submission_order,
)
from planner.snapshot import Job, Node, Snapshot


def kube_score(node: Node, free_cpu: int, free_mem: int, cpu: int, mem: int) -> float:
    """LeastAllocated + BalancedAllocation of ``node`` once a pod requesting ``cpu`` / ``mem`` (totals) is
    bound there (``free_*``: allocatable minus what pods bound there request)."""
    fractions = []
    for cap, free, ask in ((node.cpu_millis, free_cpu, cpu), (node.memory_mib, free_mem, mem)):
        if cap > 0:
            fractions.append(min(max((cap - free + ask) / cap, 0.0), 1.0))
    if not fractions:
        return 0.0
    f = np.array(fractions)
    least = float(np.mean(1.0 - f)) * 100.0
    balanced = (1.0 - float(np.std(f))) * 100.0
    return least + balanced


def best_node(
    snapshot: Snapshot, ledger: Ledger, job: Job, cpu: int, gpus: int, allowed: Callable[[Node], bool] | None = None
) -> tuple[str, float] | None:
    """The feasible node with the best kube-scheduler score for ``job`` requesting ``cpu`` / ``gpus`` per
    replica, and the score; ``None`` when nothing fits."""
    best: tuple[float, int, str] | None = None
    for order, node in enumerate(snapshot.nodes):
        if not may_arrive(node, job) or not ledger.fits(node.name, job, cpu, gpus):
            continue
        if allowed is not None and not allowed(node):
            continue
        f = ledger.free[node.name]
        score = kube_score(node, f[0], f[2], cpu * job.replicas, job.memory_mib * job.replicas)
        if best is None or (score, -order) > (best[0], -best[1]):
            best = (score, order, node.name)
    return (best[2], best[0]) if best is not None else None


class KubernetesPolicy:
    """Kubernetes' default placement with static requests; see the module docstring."""

    name = "kubernetes"

    def __call__(self, snapshot: Snapshot) -> Plan:
        t0 = time.perf_counter()
        ledger = Ledger(snapshot)
        decisions = stay_decisions(snapshot, ledger, "bound pods are never resized or moved")
        for job in submission_order(j for j in active_jobs(snapshot) if j.status == "pending"):
            cpu, gpus = job.max_cpu_millis, job.max_gpus
            if spreads(job):
                decisions[job.id] = self.bind_pods(snapshot, ledger, job, cpu, gpus)
                continue
            got = best_node(snapshot, ledger, job, cpu, gpus)
            if got is None:
                decisions[job.id] = Decision(None, why=f"pending: no node fits its request of {describe(job, cpu, gpus)}")
                continue
            name, score = got
            ledger.take(name, job, cpu, gpus)
            decisions[job.id] = Decision(
                name,
                cpu,
                gpus,
                f"bound to {name} with its request {describe(job, cpu, gpus)}"
                f" (best LeastAllocated + BalancedAllocation score, {score:.0f})",
            )
        return build_plan(
            snapshot,
            self.name,
            decisions,
            started=t0,
            devices=ledger.device,
            message="kube-scheduler default: requests = the user's max, LeastAllocated + BalancedAllocation, no resize",
        )

    @staticmethod
    def bind_pods(snapshot: Snapshot, ledger: Ledger, job: Job, cpu: int, gpus: int) -> Decision:
        """A spreading gang's pods bound one by one to the best-scoring node, all or none."""
        order = {n.name: i for i, n in enumerate(snapshot.nodes)}

        def pick(cands: list[str], _: tuple[tuple[str, int], ...]) -> str:
            def score(name: str) -> tuple[float, int]:
                f = ledger.free[name]
                return (kube_score(ledger.nodes[name], f[0], f[2], cpu, job.memory_mib), -order[name])

            return max(cands, key=score)

        shares = place_replicas(ledger, job, cpu, gpus, job.replicas, pick)
        if shares is None:
            return Decision(None, why=f"pending: the nodes lack room for its {job.replicas} pods of {describe(job, cpu, gpus)}")
        what = describe(job, cpu, gpus, shares)
        why = f"pods bound one by one with its request {what} (best score each)"
        return Decision(shares[0][0], cpu, gpus, why, placement=shares)
