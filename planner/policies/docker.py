"""Docker's default: no admission control, an equal CPU split, no migration.

Mechanism (Docker Engine without ``--cpus`` limits; the baseline of FlowCon, ICPP 2019, and DQoES):

- every pending job starts at once, in submission order. On a multi-host set-up the host is chosen
  like Docker Swarm's *spread* strategy: the eligible node running the fewest containers (ties: node
  order);
- the CPU of a node is shared by the Linux CFS scheduler, which gives busy containers equal shares:
  here a water-fill, each container's share equal, capped at the job's ``max_cpu_millis`` and at
  least its ``min_cpu_millis``. A job whose minimum does not fit beside the others at theirs waits
  (the container could not make progress). Whenever the set of containers on a node changes, the
  split changes with it; the plan expresses that as ``resize``;
- GPUs are whole devices handed out first come (``--gpus N``): a job gets ``max_gpus`` when that many
  are free, else as many as are free if that is at least ``min_gpus``, else it waits; never changed;
- nothing is ever migrated or paused. Jobs that cannot resize live keep what they have;
- a container runs on one host: a gang that may spread (``max_nodes`` above 1) runs all its
  replicas on one host, or as many as fit there (at least its ``min_replicas``), on the host with
  the fewest containers among those that hold its minimum; else it waits.
"""

from __future__ import annotations

import time

from planner.plan import Plan
from planner.policies.common import (
    Decision,
    Ledger,
    active_jobs,
    build_plan,
    decided_count,
    decided_shares,
    describe,
    held,
    may_arrive,
    spreads,
    submission_order,
    water_fill,
)
from planner.snapshot import Job, Snapshot


def gpus_first_come(job: Job, free_gpus: int) -> int | None:
    """GPUs per replica Docker would hand out: the ask if free, else what is free above the minimum."""
    per = free_gpus // job.replicas
    if per >= job.max_gpus:
        return job.max_gpus
    return per if per >= job.min_gpus else None


def spread_admit(snapshot: Snapshot, ledger: Ledger, decisions: dict[str, Decision], why: str) -> None:
    """Start every pending job at once, in submission order, on the eligible node with the fewest
    containers where its minimum CPU fits beside the others at theirs (``ledger`` holds resizable jobs
    at their minimum). The started job is charged its minimum for now; the node's split comes after."""
    for job in submission_order(j for j in active_jobs(snapshot) if j.status == "pending"):
        if spreads(job):
            decisions[job.id] = _one_host(snapshot, ledger, job, why)
            continue
        best: tuple[int, int, str, int] | None = None
        for order, node in enumerate(snapshot.nodes):
            if not may_arrive(node, job):
                continue
            gpus = gpus_first_come(job, ledger.free[node.name][1])
            if gpus is None or not ledger.fits(node.name, job, job.min_cpu_millis, gpus):
                continue
            key = (ledger.containers[node.name], order, node.name, gpus)
            if best is None or key[:2] < best[:2]:
                best = key
        if best is None:
            decisions[job.id] = Decision(
                None, why=f"waits: no node has room for its minimum {describe(job, job.min_cpu_millis, job.min_gpus)}"
            )
            continue
        _, _, name, gpus = best
        ledger.take(name, job, job.min_cpu_millis, gpus)
        decisions[job.id] = Decision(name, job.min_cpu_millis, gpus, why)


def _one_host(snapshot: Snapshot, ledger: Ledger, job: Job, why: str) -> Decision:
    """A spreading gang on one host: all its replicas, or as many as fit (at least its fewest), on the
    eligible host with the fewest containers among those that hold its fewest."""
    cpu, gpus = job.min_cpu_millis, job.max_gpus
    best: tuple[int, int, str, int] | None = None
    for order, node in enumerate(snapshot.nodes):
        count = ledger.room(node.name, job, cpu, gpus)
        if not may_arrive(node, job, job.fewest_replicas) or count < job.fewest_replicas:
            continue
        if best is None or (ledger.containers[node.name], order) < best[:2]:
            best = (ledger.containers[node.name], order, node.name, count)
    if best is None:
        return Decision(
            None, why=f"waits: no host has room for its fewest {job.fewest_replicas} replica(s) of {describe(job, cpu, gpus, ())}"
        )
    _, _, name, count = best
    ledger.take(name, job, cpu, gpus, count)
    return Decision(name, cpu, gpus, why, placement=((name, count),))


def running_at_minimum(snapshot: Snapshot, ledger: Ledger, decisions: dict[str, Decision]) -> None:
    """Running jobs stay on their node, charged to ``ledger`` at their minimum CPU when they can resize
    live (the split decides their share later) and at what they hold otherwise."""
    for job in active_jobs(snapshot):
        if job.status != "running" or job.node is None:
            continue
        cpu, gpus = held(job)
        if job.resizable:
            cpu = job.min_cpu_millis
        ledger.take_all(job, job.shares(), cpu, gpus)
        decisions[job.id] = Decision(job.node, cpu, gpus)


def flexible_by_node(snapshot: Snapshot, decisions: dict[str, Decision]) -> dict[str, list[Job]]:
    """Per node, the placed jobs whose CPU share may change (pending ones starting, resizable ones)."""
    by_node: dict[str, list[Job]] = {}
    for job in active_jobs(snapshot):
        d = decisions[job.id]
        if d.node is not None and (job.status == "pending" or job.resizable):
            by_node.setdefault(d.node, []).append(job)
    return by_node


def apply_shares(ledger: Ledger, decisions: dict[str, Decision], node: str, jobs: list[Job], shares: list[int]) -> None:
    """Move ``jobs`` on ``node`` from what ``ledger`` charged them to ``shares`` (CPU per replica)."""
    for job, cpu in zip(jobs, shares, strict=True):
        d = decisions[job.id]
        count = decided_count(job, d)
        ledger.give(node, job, d.cpu_millis, d.gpus, count)
        ledger.take(node, job, cpu, d.gpus, count)
        decisions[job.id] = Decision(node, cpu, d.gpus, d.why, d.predictions, placement=d.placement)


def pool(ledger: Ledger, decisions: dict[str, Decision], node: str, jobs: list[Job]) -> int:
    """CPU on ``node`` the split may hand to ``jobs``: what is free plus what they are charged now."""
    return ledger.free[node][0] + sum(decisions[j.id].cpu_millis * decided_count(j, decisions[j.id]) for j in jobs)


def equal_split(snapshot: Snapshot, ledger: Ledger, decisions: dict[str, Decision], policy: str) -> None:
    """Give the flexible jobs on each node an equal CPU share of what the others leave (CFS)."""
    for name, jobs in flexible_by_node(snapshot, decisions).items():
        shares = water_fill(
            pool(ledger, decisions, name, jobs),
            [j.min_cpu_millis for j in jobs],
            [j.max_cpu_millis for j in jobs],
            [decided_count(j, decisions[j.id]) for j in jobs],
            [1.0] * len(jobs),
        )
        assert shares is not None  # admission kept the minimums within the node
        apply_shares(ledger, decisions, name, jobs, shares)
        n = ledger.containers[name]
        for job, cpu in zip(jobs, shares, strict=True):
            d = decisions[job.id]
            verb = "starts on" if job.status == "pending" else "shares"
            cap = ", its max" if cpu == job.max_cpu_millis else ""
            decisions[job.id] = Decision(
                name,
                cpu,
                d.gpus,
                f"{verb} {name} with {describe(job, cpu, d.gpus, decided_shares(job, d))}"
                f" (equal CPU share among {n} containers{cap}; {policy})",
                placement=d.placement,
            )


class DockerPolicy:
    """Docker's default; see the module docstring."""

    name = "docker"

    def __call__(self, snapshot: Snapshot) -> Plan:
        t0 = time.perf_counter()
        ledger = Ledger(snapshot)
        decisions: dict[str, Decision] = {}
        running_at_minimum(snapshot, ledger, decisions)
        spread_admit(snapshot, ledger, decisions, "starts at once")
        equal_split(snapshot, ledger, decisions, "Docker default, CFS")
        for job in active_jobs(snapshot):
            d = decisions[job.id]
            if job.status == "running" and not job.resizable:
                decisions[job.id] = Decision(
                    d.node, d.cpu_millis, d.gpus, f"keeps {describe(job, d.cpu_millis, d.gpus)} on {d.node} (cannot resize live)"
                )
        return build_plan(
            snapshot,
            self.name,
            decisions,
            started=t0,
            devices=ledger.device,
            message="Docker default: start at once, equal CPU share (CFS), no migration",
        )
