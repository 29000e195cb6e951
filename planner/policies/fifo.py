"""FIFO: a batch queue in submission order, no backfilling, no preemption.

Mechanism (the default of batch schedulers such as Slurm without backfill, and the usual
"first come, first served" baseline of Tiresias, NSDI 2019, and Optimus, EuroSys 2018):

- running jobs keep what they hold until they finish; nothing is resized, moved or preempted;
- pending jobs are served in submission order, each with what it requested (``max_cpu_millis``,
  ``max_gpus`` per replica, its memory), on the first node in node order where that fits;
- the first job that does not fit blocks every job behind it (head-of-line blocking), even jobs that
  would fit. A job whose request exceeds every node it may use even when empty can never run and is
  skipped instead of blocking the queue forever (a batch system rejects it at submission);
- a gang that may spread (``max_nodes`` above 1) asks for all its ``replicas``; they are placed one
  by one like pods, each on the first node in node order where it fits (on at most ``max_nodes``
  nodes), all or none. It can never run when its replicas exceed what ``max_nodes`` empty nodes hold.
"""

from __future__ import annotations

import time

from planner.plan import Plan
from planner.policies.common import (
    Decision,
    Ledger,
    active_jobs,
    build_plan,
    capacity_over_nodes,
    describe,
    may_arrive,
    place_replicas,
    spreads,
    stay_decisions,
    submission_order,
)
from planner.snapshot import Job, Snapshot


def ever_fits(snapshot: Snapshot, job: Job, cpu: int, gpus: int) -> bool:
    """Whether an empty node the job may use would hold ``cpu`` / ``gpus`` per replica (a gang that
    may spread: empty nodes, up to ``max_nodes`` of them, would hold all its replicas)."""
    if spreads(job):
        return capacity_over_nodes(snapshot, job, cpu, gpus) >= job.replicas
    r = job.replicas
    return any(
        may_arrive(n, job) and cpu * r <= n.cpu_millis and gpus * r <= n.gpus and job.memory_mib * r <= n.memory_mib
        for n in snapshot.nodes
    )


class FifoPolicy:
    """First come, first served with head-of-line blocking; see the module docstring."""

    name = "fifo"

    def __call__(self, snapshot: Snapshot) -> Plan:
        t0 = time.perf_counter()
        ledger = Ledger(snapshot)
        decisions = stay_decisions(snapshot, ledger, "FIFO never preempts")
        blocker: Job | None = None
        for pos, job in enumerate(submission_order(j for j in active_jobs(snapshot) if j.status == "pending"), start=1):
            cpu, gpus = job.max_cpu_millis, job.max_gpus
            ask = describe(job, cpu, gpus)
            if not ever_fits(snapshot, job, cpu, gpus):
                where = f"the empty nodes it may use (at most {job.max_nodes})" if spreads(job) else "every node it may use"
                decisions[job.id] = Decision(None, why=f"waits: its request of {ask} exceeds {where}")
                continue
            if blocker is not None:
                decisions[job.id] = Decision(
                    None, why=f"waits at queue position {pos} behind {blocker.id} (head-of-line blocking)"
                )
                continue
            if spreads(job):
                shares = place_replicas(ledger, job, cpu, gpus, job.replicas, lambda cands, _: cands[0])
                if shares is None:
                    blocker = job
                    decisions[job.id] = Decision(None, why=f"waits at the head of the queue: the nodes lack {ask} free")
                    continue
                what = describe(job, cpu, gpus, shares)
                why = f"starts on {shares[0][0]} with its request {what} (queue position {pos})"
                decisions[job.id] = Decision(shares[0][0], cpu, gpus, why, placement=shares)
                continue
            node = next((n.name for n in snapshot.nodes if may_arrive(n, job) and ledger.fits(n.name, job, cpu, gpus)), None)
            if node is None:
                blocker = job
                decisions[job.id] = Decision(None, why=f"waits at the head of the queue: no node has {ask} free")
                continue
            ledger.take(node, job, cpu, gpus)
            decisions[job.id] = Decision(node, cpu, gpus, f"starts on {node} with its request {ask} (queue position {pos})")
        return build_plan(
            snapshot,
            self.name,
            decisions,
            started=t0,
            devices=ledger.device,
            message="FIFO: submission order, requested resources, head-of-line blocking",
        )
