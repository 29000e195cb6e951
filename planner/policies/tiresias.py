"""Tiresias: discretised two-dimensional least-attained-service (2D-LAS), preemptive.

Source: J. Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning", NSDI 2019.
Mechanism (the discretised 2D-LAS variant, which needs no knowledge of job durations):

- *attained service* of a job = the resources it was given times the time it held them: GPU-seconds
  (CPU-core-seconds for a job without GPUs), all replicas counted. The policy accumulates it from the
  allocations it gave, across calls, using ``snapshot.time``; a job already running when the policy
  first sees it is credited with its current allocation since its first report (what a cluster
  manager would have recorded);
- queues: a job with attained service below ``thresholds[0]`` is in queue 0 (highest priority),
  below ``thresholds[1]`` in queue 1, and so on; jobs move down as they accumulate service. Within
  a queue, FIFO by submission time;
- every interval, jobs are considered in priority order; each gets what it requested (``max_cpu_millis``,
  ``max_gpus`` per replica, as in FIFO) when it fits, on the eligible node where it fits most tightly
  (Tiresias consolidates); running jobs keep their node. A gang that may spread (``max_nodes``
  above 1) gets all its ``replicas`` on one node when one holds them (best fit), else over the
  fewest nodes (those with room for the most replicas first, at most ``max_nodes``): Tiresias places
  a job consolidated when it can and spreads it otherwise. A job that does not fit is skipped (no
  head-of-line blocking). A waiting job may *preempt* (pause, checkpoint) running jobs of strictly
  lower-priority queues on one node, lowest priority first, as few as free enough room, within the
  snapshot's ``migration_budget`` (a spreading gang: on any nodes, lowest priority first, until it
  fits over nodes);
- no resizing, no migration (a preempted job resumes later wherever it fits).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

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
    most_room_first,
    place_replicas,
    running_count,
    spreads,
    submission_order,
)
from planner.snapshot import Job, Snapshot

#: Queue thresholds of attained service [GPU-s, or core-s for CPU jobs]: one hour, then ten.
DEFAULT_THRESHOLDS = (3600.0, 36000.0)


def service_rate(job: Job, cpu: int, gpus: int, replicas: int | None = None) -> float:
    """Service per second of a job holding ``cpu`` / ``gpus`` per replica over ``replicas`` replicas
    (``None``: the job's count; GPU-s, or core-s without GPUs)."""
    r = job.replicas if replicas is None else replicas
    return float(gpus * r) if job.max_gpus > 0 else cpu * r / 1000.0


def tightest(snapshot: Snapshot, ledger: Ledger, job: Job, cpu: int, gpus: int) -> str | None:
    """The eligible node where all the job's replicas fit most tightly (fewest GPUs, then CPU, left;
    ties: node order), ``None`` when none holds them (Tiresias consolidates)."""
    fits = [
        (ledger.free[n.name][1] - gpus * job.replicas, ledger.free[n.name][0] - cpu * job.replicas, i, n.name)
        for i, n in enumerate(snapshot.nodes)
        if may_arrive(n, job) and ledger.fits(n.name, job, cpu, gpus)
    ]
    return min(fits)[3] if fits else None


class TiresiasPolicy:
    """Tiresias 2D-LAS; see the module docstring. ``thresholds``: queue limits of attained service."""

    name = "tiresias"

    def __init__(self, thresholds: Sequence[float] = DEFAULT_THRESHOLDS) -> None:
        ts = tuple(float(t) for t in thresholds)
        if any(not t > 0 for t in ts) or list(ts) != sorted(ts):
            raise ValueError(f"thresholds: must be positive and increasing, got {list(thresholds)!r}")
        self.thresholds = ts
        self.attained: dict[str, float] = {}
        #: Service rate the policy gave each job in its last plan, and when.
        self.given: dict[str, float] = {}
        self.last_time: float | None = None

    def _account(self, snapshot: Snapshot) -> None:
        dt = max(snapshot.time - self.last_time, 0.0) if self.last_time is not None else 0.0
        for job in active_jobs(snapshot):
            if job.id not in self.attained:
                first = min((p.time for p in job.history), default=snapshot.time)
                ran = max(snapshot.time - first, 0.0) if job.status == "running" and job.allocation is not None else 0.0
                alloc = job.allocation
                rate = service_rate(job, alloc.cpu_millis, alloc.gpus, running_count(job)) if alloc is not None else 0.0
                self.attained[job.id] = ran * rate
            elif job.status == "running":
                self.attained[job.id] += dt * self.given.get(job.id, 0.0)
        self.last_time = snapshot.time

    def queue(self, job: Job) -> int:
        a = self.attained.get(job.id, 0.0)
        return next((i for i, t in enumerate(self.thresholds) if a < t), len(self.thresholds))

    def __call__(self, snapshot: Snapshot) -> Plan:
        t0 = time.perf_counter()
        self._account(snapshot)
        order = {j.id: i for i, j in enumerate(submission_order(active_jobs(snapshot)))}
        prio = sorted(active_jobs(snapshot), key=lambda j: (self.queue(j), order[j.id]))
        rank = {j.id: i for i, j in enumerate(prio)}
        ledger = Ledger(snapshot)
        decisions: dict[str, Decision] = {}
        for job in prio:
            if job.status == "running" and job.node is not None:
                cpu, gpus = held(job)
                ledger.take_all(job, job.shares(), cpu, gpus)
                decisions[job.id] = Decision(job.node, cpu, gpus)
        budget = snapshot.settings.migration_budget
        preempted: dict[str, str] = {}
        for job in prio:
            if job.status == "running":
                continue
            cpu, gpus = job.max_cpu_millis, job.max_gpus
            if spreads(job):
                d = self._place_gang(snapshot, ledger, job, cpu, gpus)
                got = (
                    self._gang_victims(snapshot, ledger, decisions, job, rank, budget) if d.node is None and budget > 0 else None
                )
                if got is not None:
                    d, vs = got
                    for v in vs:
                        decisions[v.id] = Decision(None)
                        preempted[v.id] = job.id
                    budget -= len(vs)
                decisions[job.id] = d
                continue
            node = tightest(snapshot, ledger, job, cpu, gpus)
            if node is not None:
                ledger.take(node, job, cpu, gpus)
                decisions[job.id] = Decision(node, cpu, gpus)
                continue
            victims = self._victims(snapshot, ledger, decisions, job, rank, budget) if budget > 0 else None
            if victims is None:
                decisions[job.id] = Decision(
                    None, why=f"waits in queue {self.queue(job)}: no node has its request of {describe(job, cpu, gpus)} free"
                )
                continue
            node, vs = victims
            for v in vs:
                d = decisions[v.id]
                ledger.give(node, v, d.cpu_millis, d.gpus, running_count(v))
                decisions[v.id] = Decision(None)
                preempted[v.id] = job.id
            budget -= len(vs)
            ledger.take(node, job, cpu, gpus)
            decisions[job.id] = Decision(node, cpu, gpus)
        jobs = {j.id: j for j in snapshot.jobs}
        self.given = {}
        for job in prio:
            d = decisions[job.id]
            q = self.queue(job)
            a = self.attained[job.id]
            unit = "GPU-s" if job.max_gpus > 0 else "core-s"
            if d.node is None and job.id in preempted:
                by = jobs[preempted[job.id]]
                why = f"preempted for {by.id} (queue {self.queue(by)}): this job is in queue {q} with {a:.0f} {unit} attained"
            elif d.node is None:
                why = d.why
            else:
                shares = decided_shares(job, d)
                self.given[job.id] = service_rate(job, d.cpu_millis, d.gpus, sum(k for _, k in shares))
                verb = "keeps" if job.status == "running" else "starts with"
                what = describe(job, d.cpu_millis, d.gpus, shares)
                why = f"{verb} {what} on {d.node} (queue {q}, {a:.0f} {unit} attained)"
            decisions[job.id] = Decision(d.node, d.cpu_millis, d.gpus, why, placement=d.placement)
        return build_plan(
            snapshot,
            self.name,
            decisions,
            started=t0,
            devices=ledger.device,
            message=f"Tiresias 2D-LAS: queue thresholds {', '.join(f'{t:g}' for t in self.thresholds)}",
        )

    @staticmethod
    def _place_gang(snapshot: Snapshot, ledger: Ledger, job: Job, cpu: int, gpus: int) -> Decision:
        """A spreading gang with all its replicas: on the one node that holds them most tightly, else
        over the fewest nodes; waits when they do not fit (no preemption for it)."""
        node = tightest(snapshot, ledger, job, cpu, gpus)
        if node is not None:
            ledger.take(node, job, cpu, gpus)
            return Decision(node, cpu, gpus, placement=((node, job.replicas),))
        shares = place_replicas(ledger, job, cpu, gpus, job.replicas, most_room_first(ledger, job, cpu, gpus))
        if shares is None:
            return Decision(None, why=f"waits: the nodes lack room for its request of {describe(job, cpu, gpus)}")
        return Decision(shares[0][0], cpu, gpus, placement=shares)

    def _gang_victims(
        self, snapshot: Snapshot, ledger: Ledger, decisions: dict[str, Decision], job: Job, rank: dict[str, int], budget: int
    ) -> tuple[Decision, list[Job]] | None:
        """For a spreading gang that does not fit: running jobs of strictly lower-priority queues
        (whole-GPU ones, on any nodes), lowest priority first, paused one by one until the gang
        fits over nodes, within ``budget``; the gang's decision and the jobs paused, or ``None``
        (and nothing changed) when that is not enough."""
        q = self.queue(job)
        cands = sorted(
            (
                j
                for j in snapshot.jobs
                if j.status == "running" and j.migratable and j.gpu_milli is None
                and decisions[j.id].node is not None and self.queue(j) > q
            ),
            key=lambda j: -rank[j.id],
        )  # fmt: skip
        chosen: list[Job] = []
        for v in cands[:budget]:
            d = decisions[v.id]
            ledger.give_all(v, decided_shares(v, d), d.cpu_millis, d.gpus)
            chosen.append(v)
            placed = self._place_gang(snapshot, ledger, job, job.max_cpu_millis, job.max_gpus)
            if placed.node is not None:
                return placed, chosen
        for v in chosen:
            d = decisions[v.id]
            ledger.take_all(v, decided_shares(v, d), d.cpu_millis, d.gpus)
        return None

    def _victims(
        self, snapshot: Snapshot, ledger: Ledger, decisions: dict[str, Decision], job: Job, rank: dict[str, int], budget: int
    ) -> tuple[str, list[Job]] | None:
        """The node and the fewest running jobs of strictly lower-priority queues to pause there so that
        ``job`` fits (lowest priority first); ``None`` when no node works within ``budget``."""
        q = self.queue(job)
        cpu, gpus = job.max_cpu_millis, job.max_gpus
        best: tuple[int, int, str, list[Job]] | None = None
        for order, node in enumerate(snapshot.nodes):
            if not may_arrive(node, job):
                continue
            cands = sorted(
                (
                    j
                    for j in snapshot.jobs
                    if j.status == "running"
                    and j.migratable
                    and decisions[j.id].node == node.name
                    and j.node == node.name
                    and len(j.shares()) == 1
                    and self.queue(j) > q
                ),
                key=lambda j: -rank[j.id],
            )
            # Pause candidates on the ledger itself (a fraction frees its device only when it was
            # the last on it), then put them back as they were: stayers get their own device back.
            on_node = list(ledger.jobs_on[node.name])
            chosen: list[Job] = []
            for v in cands:
                if len(chosen) >= budget or ledger.fits(node.name, job, cpu, gpus):
                    break
                d = decisions[v.id]
                ledger.give(node.name, v, d.cpu_millis, d.gpus, running_count(v))
                chosen.append(v)
            ok = ledger.fits(node.name, job, cpu, gpus)
            for v in chosen:
                d = decisions[v.id]
                ledger.take(node.name, v, d.cpu_millis, d.gpus, running_count(v))
            ledger.jobs_on[node.name] = on_node
            if chosen and ok and (best is None or (len(chosen), order) < best[:2]):
                best = (len(chosen), order, node.name, chosen)
        return (best[2], best[3]) if best is not None else None
