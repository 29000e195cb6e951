"""SpeCon: speculatively migrate slow-growing jobs to the node where they compete least.

Source: SpeCon, IEEE Systems Journal 2021 (doi 10.1109/JSYST.2021.3129974), on Kubernetes; its
growth test is FlowCon's (:mod:`planner.policies.flowcon`). Mechanism:

- every interval, each running job's growth efficiency ``G`` goes through FlowCon's state machine with
  alpha 0.1 (published ~0.1): *progressing* (G >= alpha), *watching* (below once), *migratable*
  (below twice in a row);
- node score: how many progressing, watching and migratable jobs a node holds. Here a node's
  *load* is ``1 x progressing + 0.5 x watching + 0.25 x migratable`` (a job without a growth figure
  yet counts as progressing); the paper scores by these counts, the weights are this module's
  choice (a progressing job competes for the node's CPU the most). A migratable job moves, slowest
  first, within the snapshot's ``migration_budget``, to the node with the lowest load once it is
  there, and only when that is strictly lower than its own node's load now (so it never moves back
  and forth); the target must hold its requests. Migration = checkpoint, re-create the pod with
  ``nodeName``, restore (the plan's ``migrate``);
- new jobs are placed like the Kubernetes default (LeastAllocated + BalancedAllocation,
  :mod:`planner.policies.kubernetes`; a gang that may spread, pod by pod); a gang spread over nodes
  or running fewer than its replicas is never moved;
- SpeCon's pods request their minimum CPU and set no limit, so the CPU of a node is shared among its
  pods by CFS: an equal share each, between its ``min_cpu_millis`` and ``max_cpu_millis`` (the plan's
  ``resize``; jobs that cannot resize live keep theirs). That is what makes moving a slow job away
  speed up the fast ones left behind. GPUs are requested whole (``max_gpus``) and never change.

The growth test and the speculative migrations run at most once per interval ``T`` since the last
decision that ran them; called in between (the loop wakes at arrivals and finishes), SpeCon places
new pods and moves none (CFS's equal split is recomputed, as at every call).
"""

from __future__ import annotations

import time

from planner.plan import Plan
from planner.policies.common import (
    Decision,
    Ledger,
    active_jobs,
    build_plan,
    decided_shares,
    describe,
    held,
    may_arrive,
    spreads,
    submission_order,
)
from planner.policies.docker import equal_split
from planner.policies.flowcon import GrowthTest
from planner.policies.kubernetes import KubernetesPolicy, best_node
from planner.snapshot import Job, Snapshot

#: Load a job adds to its node, by growth state (None: no growth figure yet).
STATE_LOAD = {"growing": 1.0, "watching": 0.5, "completing": 0.25, None: 1.0}


def _within_bounds(job: Job, d: Decision) -> bool:
    """A job that restarts must restart within its bounds (one that cannot resize keeps what it has)."""
    return job.min_cpu_millis <= d.cpu_millis <= job.max_cpu_millis and job.min_gpus <= d.gpus <= job.max_gpus


class SpeConPolicy:
    """SpeCon; see the module docstring. ``alpha``: the growth threshold."""

    name = "specon"

    def __init__(self, alpha: float = 0.1) -> None:
        if not alpha > 0:
            raise ValueError(f"alpha: must be > 0, got {alpha!r}")
        self.test = GrowthTest(alpha)
        #: Time of the last decision that ran the growth test and the migrations (once per T).
        self.decided: float | None = None

    def _load(self, job: Job) -> float:
        return STATE_LOAD[self.test.state(job)]

    def __call__(self, snapshot: Snapshot) -> Plan:
        t0 = time.perf_counter()
        heartbeat = self.decided is None or snapshot.time - self.decided >= snapshot.settings.interval_seconds * (1.0 - 1e-9)
        if heartbeat:
            self.test.update(snapshot)
            self.decided = snapshot.time
        ledger = Ledger(snapshot)
        decisions: dict[str, Decision] = {}
        load = {n.name: 0.0 for n in snapshot.nodes}
        running = [j for j in active_jobs(snapshot) if j.status == "running" and j.node is not None]
        for job in running:
            assert job.node is not None
            cpu, gpus = held(job)
            if job.resizable:
                cpu = job.min_cpu_millis  # its request; CFS shares the rest below
            ledger.take_all(job, job.shares(), cpu, gpus)
            load[job.node] += self._load(job)
            decisions[job.id] = Decision(job.node, cpu, gpus)

        # Speculative migration of migratable (slow-growing) jobs, slowest first.
        budget = snapshot.settings.migration_budget if heartbeat else 0
        slow = sorted(
            (
                j
                for j in running
                if j.migratable
                and self.test.state(j) == "completing"
                and _within_bounds(j, decisions[j.id])
                and j.shares() == ((j.node, j.replicas),)
            ),
            key=lambda j: (self.test.growth[j.id], j.id),
        )
        moved: dict[str, str] = {}
        for job in slow:
            if budget <= 0:
                break
            src = job.node
            assert src is not None
            d = decisions[job.id]
            mine = self._load(job)
            best: tuple[float, int, str] | None = None
            for order, node in enumerate(snapshot.nodes):
                if node.name == src or not may_arrive(node, job) or not ledger.fits(node.name, job, d.cpu_millis, d.gpus):
                    continue
                after = load[node.name] + mine
                if after < load[src] - 1e-9 and (best is None or (after, order) < best[:2]):
                    best = (after, order, node.name)
            if best is None:
                continue
            dst = best[2]
            ledger.give(src, job, d.cpu_millis, d.gpus)
            ledger.take(dst, job, d.cpu_millis, d.gpus)
            load[dst] += mine
            load[src] -= mine
            decisions[job.id] = Decision(dst, d.cpu_millis, d.gpus)
            moved[job.id] = f"migrates from {src} (load {load[src] + mine:g}) to {dst} (load {best[0]:g} with it)"
            budget -= 1

        for job in submission_order(j for j in active_jobs(snapshot) if j.status == "pending"):
            if spreads(job):
                d = KubernetesPolicy.bind_pods(snapshot, ledger, job, job.min_cpu_millis, job.max_gpus)
                if d.node is not None:
                    load[d.node] += self._load(job)
                decisions[job.id] = d
                continue
            got = best_node(snapshot, ledger, job, job.min_cpu_millis, job.max_gpus)
            if got is None:
                decisions[job.id] = Decision(
                    None, why=f"pending: no node fits its request of {describe(job, job.min_cpu_millis, job.max_gpus)}"
                )
                continue
            ledger.take(got[0], job, job.min_cpu_millis, job.max_gpus)
            load[got[0]] += self._load(job)
            decisions[job.id] = Decision(got[0], job.min_cpu_millis, job.max_gpus)

        equal_split(snapshot, ledger, decisions, "SpeCon, pods without CPU limits share by CFS")
        for job in active_jobs(snapshot):
            d = decisions[job.id]
            if d.node is None:
                continue
            state = self.test.describe(job)
            if job.id in moved:
                why = f"{moved[job.id]}: slow-growing ({state}); gets {describe(job, d.cpu_millis, d.gpus)}"
            elif job.status == "pending":
                what = describe(job, d.cpu_millis, d.gpus, decided_shares(job, d))
                why = f"starts on {d.node} (Kubernetes default placement) with {what}"
            else:
                why = f"stays on {d.node} with {describe(job, d.cpu_millis, d.gpus)} ({state})"
            decisions[job.id] = Decision(d.node, d.cpu_millis, d.gpus, why, placement=d.placement)
        return build_plan(
            snapshot,
            self.name,
            decisions,
            started=t0,
            devices=ledger.device,
            message=f"SpeCon: speculative migration of slow-growing jobs, alpha {self.test.alpha:g}",
        )
