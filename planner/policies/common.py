"""What every scheduling policy shares: the Policy protocol, a ledger of free resources, water-filling,
the observations a policy may read from a job, and the one function that turns decisions into a Plan.

A policy decides, per active job, a :class:`Decision` (node, CPU and GPUs per replica, one sentence
why, optionally its own predictions). :func:`build_plan` derives the action from the job's state
(start / wait for pending jobs; keep / resize / migrate / pause for running ones), fills the Plan
contract honestly (no prediction where the policy makes none, objective terms it has no notion of
left at zero, counts of migrations and resizes) and runs the independent checker: a policy whose plan
breaks a hard rule is a bug, raised as :class:`planner.errors.PlanCheckError`.

Everything here reads only the snapshot: a policy never sees ground truth.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from models import Direction
from planner.check import check_plan
from planner.core import snapshot_digest
from planner.errors import PlanCheckError
from planner.plan import Action, Assignment, ObjectiveTerms, Plan, PlanSummary, Predictions, SolverReport, Unserved
from planner.policies.shared_gpus import SharedGpus
from planner.progress import judged_series, reached
from planner.snapshot import Job, Node, Share, Snapshot
from planner.transitions import action_for, lost_seconds, previous_placement

Shares = tuple[tuple[str, int], ...]


class Policy(Protocol):
    """A scheduling policy: one plan per control interval from the snapshot alone.

    It may keep state between calls (it sees the successive snapshots of one run), must not do I/O,
    and must be deterministic: the same sequence of snapshots gives the same plans (all fields but
    ``solver.seconds``, the measured wall time).
    """

    name: str

    def __call__(self, snapshot: Snapshot) -> Plan: ...


@dataclass(frozen=True)
class Decision:
    """What a policy wants for one job: where (``None``: not running), how much per replica, and why."""

    node: str | None
    cpu_millis: int = 0
    gpus: int = 0
    why: str = ""
    predictions: Predictions | None = None
    #: A hard CPU cap per replica (a quota, e.g. FlowCon's ``docker update --cpus``); ``None``: the
    #: share is a weight only, and idle capacity flows to the job up to its max.
    cpu_limit_millis: int | None = None
    #: Where the replicas go, ``(node, replicas)`` per node, rank 0's (``node``) first; ``None``: a
    #: running job on its own node keeps its replicas where they are, any other all its ``replicas``
    #: on ``node`` (:func:`decided_shares`).
    placement: Shares | None = None
    #: A parameter-server job's servers on each of its nodes; ``None``: :func:`fewest_servers`.
    servers: int | None = None


# --------------------------------------------------------------------------------------------------
# Jobs and nodes: what a policy may observe
# --------------------------------------------------------------------------------------------------


def active_jobs(snapshot: Snapshot) -> list[Job]:
    return [j for j in snapshot.jobs if j.status != "finished"]


def submission_order(jobs: Iterable[Job]) -> list[Job]:
    """Oldest first: by ``submitted`` (unknown: by first report, else last), then by id."""

    def key(j: Job) -> tuple[float, str]:
        if j.submitted is not None:
            return (j.submitted, j.id)
        first = min((p.time for p in j.history), default=math.inf)
        return (first, j.id)

    return sorted(jobs, key=key)


def held(job: Job) -> tuple[int, int]:
    """What a running job keeps when a policy leaves it alone: its allocation, brought within its
    bounds when it can resize live (a job that cannot resize keeps exactly what it has)."""
    assert job.allocation is not None
    cpu, gpus = job.allocation.cpu_millis, job.allocation.gpus
    if job.resizable:
        cpu = min(max(cpu, job.min_cpu_millis), job.max_cpu_millis)
        gpus = min(max(gpus, job.min_gpus), job.max_gpus)
    return cpu, gpus


def may_arrive(node: Node, job: Job, replicas: int | None = None) -> bool:
    """Whether ``job`` may start on (or move to) ``node`` at all: schedulable, GPU type, labels, and
    an empty node would hold its minimum (``replicas`` of it; ``None``: the job's ``replicas``)."""
    if not node.schedulable:
        return False
    if not job.takes_gpu_type(node.gpu_type):
        return False
    if any(node.labels.get(k) != v for k, v in job.node_selector.items()):
        return False
    r = job.replicas if replicas is None else replicas
    return job.min_cpu_millis * r <= node.cpu_millis and job.min_gpus * r <= node.gpus and job.memory_mib * r <= node.memory_mib


def decided_shares(job: Job, d: Decision) -> Shares:
    """Where ``d`` puts ``job``'s replicas (see :attr:`Decision.placement`)."""
    if d.node is None:
        return ()
    if d.placement is not None:
        return d.placement
    if job.status == "running" and d.node == job.node:
        return job.shares()
    return ((d.node, job.replicas),)


def decided_count(job: Job, d: Decision) -> int:
    """Replicas ``d`` runs (the job's ``replicas`` when it places none)."""
    shares = decided_shares(job, d)
    return sum(k for _, k in shares) if shares else job.replicas


def running_count(job: Job) -> int:
    """Replicas a running job runs now (its ``replicas`` for any other)."""
    return sum(k for _, k in job.shares()) if job.status == "running" else job.replicas


def spreads(job: Job) -> bool:
    """Whether the job is a gang the baselines may place replica by replica over nodes or run at
    another count (``max_nodes`` above 1 or a ``min_replicas``); every other job is placed whole on
    one node, as before gangs."""
    return job.max_nodes > 1 or job.fewest_replicas != job.replicas


def cores(millis: int) -> str:
    return f"{millis / 1000:g} CPU"


def describe(job: Job, cpu: int, gpus: int, shares: Shares | None = None) -> str:
    """``4 CPU + 1 GPU x2``: an allocation per replica, as the explanations print it; with ``shares``
    over several nodes, ``x6 (4 on a, 2 on b)``."""
    gpu = f" + {job.gpu_milli / 1000:g} GPU (shared)" if job.gpu_milli is not None and gpus else f" + {gpus} GPU" if gpus else ""
    count = job.replicas if shares is None else sum(k for _, k in shares)
    where = f" ({', '.join(f'{k} on {n}' for n, k in shares)})" if shares is not None and len(shares) > 1 else ""
    return cores(cpu) + gpu + (f" x{count}" if count > 1 else "") + where


def metric_series(job: Job) -> tuple[np.ndarray, np.ndarray, np.ndarray, Direction]:
    """Times, epochs and values of the series the job is judged on, oldest first, and its direction
    (:func:`planner.progress.judged_series`, as the planner's outlook reads it)."""
    times, epochs, values, _, direction = judged_series(job)
    return times, epochs, values, direction


def epoch_of(job: Job) -> float:
    return float(max((p.epoch for p in job.history), default=0.0))


def _tier_reached(job: Job) -> bool:
    if job.target is None:
        return False
    _, _, values, direction = metric_series(job)
    return reached(values, job.target.tier1.value, direction)


# --------------------------------------------------------------------------------------------------
# Resources
# --------------------------------------------------------------------------------------------------


class Ledger:
    """Free CPU / GPU / memory and container counts per node while a policy hands resources out.

    ``free[node][1]`` counts whole GPU devices: none held whole, none shared. A fractional job
    (``gpu_milli``) with a GPU shares a device instead (:mod:`planner.policies.shared_gpus`); the
    device each got is in ``device``, for :func:`build_plan`.
    """

    def __init__(self, snapshot: Snapshot) -> None:
        self.nodes: dict[str, Node] = {n.name: n for n in snapshot.nodes}
        self.free: dict[str, list[int]] = {n.name: [n.cpu_millis, n.gpus, n.memory_mib] for n in snapshot.nodes}
        self.containers: dict[str, int] = {n.name: 0 for n in snapshot.nodes}
        self.jobs_on: dict[str, list[str]] = {n.name: [] for n in snapshot.nodes}
        self.shared = SharedGpus(snapshot.nodes)
        self.device = self.shared.device
        #: A parameter-server job's workers on each node (job id -> node -> replicas) and the servers
        #: charged there (job id -> node -> servers): :meth:`servers_per_node` of its nodes, on each.
        self.workers: dict[str, dict[str, int]] = {}
        self.servers: dict[str, dict[str, int]] = {}
        #: Servers per node a policy chose for a job (:meth:`choose_servers`); else :func:`fewest_servers`.
        self.chosen: dict[str, int] = {}

    def servers_per_node(self, job: Job, nodes: Iterable[str]) -> int | None:
        """The servers a parameter-server job gets on each of ``nodes``: what a policy chose for it
        (:meth:`choose_servers`), else :func:`fewest_servers`; ``None`` where no count is valid (more
        nodes than its ``servers.max`` allows); 0 for any other job or no nodes."""
        names = tuple(nodes)
        if job.servers is None or not names:
            return 0
        per = self.chosen.get(job.id)
        if per is None:
            same = {n for n, _ in job.shares()} == set(names)
            per = job.running_servers if same else job.fewest_servers(len(names))
        return per if per * len(names) <= job.servers.max else None

    def choose_servers(self, job: Job, per_node: int) -> bool:
        """Give ``job`` ``per_node`` servers on each of its nodes from now on, if they fit (the servers
        it holds now are given back first); whether they did (if not, nothing changed)."""
        before = self.chosen.get(job.id)
        self.chosen[job.id] = per_node
        if self._server_delta(job, self.workers.get(job.id, {})) is None:
            if before is None:
                del self.chosen[job.id]
            else:
                self.chosen[job.id] = before
            return False
        self._charge_servers(job)
        return True

    def _server_delta(self, job: Job, workers: Mapping[str, int]) -> dict[str, int] | None:
        """Servers to charge (+) or give back (-) per node for ``job`` to hold ``workers``, or ``None``
        where they do not fit (or no server count is valid for that many nodes)."""
        per = self.servers_per_node(job, [n for n, k in workers.items() if k > 0])
        if per is None or job.servers is None:
            return None
        have = self.servers.get(job.id, {})
        delta = {n: (per if workers.get(n, 0) > 0 else 0) - have.get(n, 0) for n in set(have) | set(workers)}
        role = job.servers
        for n, d in delta.items():
            f = self.free[n]
            if d > 0 and (d * role.cpu_millis > f[0] or d * role.memory_mib > f[2]):
                return None
        return delta

    def _charge_servers(self, job: Job) -> None:
        """Charge (or give back) ``job``'s servers for the workers it holds, fit or not (a give may
        leave the remaining nodes more servers each, as when a pause is undone)."""
        if job.servers is None:
            return
        workers = self.workers.get(job.id, {})
        nodes = [n for n, k in workers.items() if k > 0]
        per = self.servers_per_node(job, nodes) or 0
        have = self.servers.setdefault(job.id, {})
        for n in set(have) | set(nodes):
            d = (per if n in nodes else 0) - have.get(n, 0)
            f = self.free[n]
            f[0] -= d * job.servers.cpu_millis
            f[2] -= d * job.servers.memory_mib
            self.containers[n] += d
            have[n] = have.get(n, 0) + d
            if have[n] == 0:
                del have[n]

    def fits(self, node: str, job: Job, cpu: int, gpus: int, count: int | None = None) -> bool:
        """Whether ``count`` replicas (``None``: the job's ``replicas``) fit on ``node``, with the servers
        that puts there and on the job's other nodes."""
        f, r = self.free[node], job.replicas if count is None else count
        if job.gpu_milli is not None and gpus > 0:
            gpu_ok = self.shared.pick(node, job, f[1]) is not None
        else:
            gpu_ok = gpus * r <= f[1]
        if not (cpu * r <= f[0] and gpu_ok and job.memory_mib * r <= f[2]):
            return False
        if job.servers is None:
            return True
        workers = dict(self.workers.get(job.id, {}))
        workers[node] = workers.get(node, 0) + r
        delta = self._server_delta(job, workers)
        if delta is None:
            return False
        role = job.servers
        d = delta.get(node, 0)
        return cpu * r + max(d, 0) * role.cpu_millis <= f[0] and job.memory_mib * r + max(d, 0) * role.memory_mib <= f[2]

    def take(self, node: str, job: Job, cpu: int, gpus: int, count: int | None = None) -> None:
        f, r = self.free[node], job.replicas if count is None else count
        f[0] -= cpu * r
        if job.gpu_milli is not None and gpus > 0:
            device = self.shared.pick(node, job, f[1])
            # Only a policy that skipped fits() gets None: the least-used device, which the checker refuses.
            load = self.shared.load[node]
            f[1] -= self.shared.take(node, job, device if device is not None else min(range(len(load)), key=load.__getitem__))
        else:
            f[1] -= gpus * r
        f[2] -= job.memory_mib * r
        self.containers[node] += r
        self.jobs_on[node].append(job.id)
        if job.servers is not None:
            workers = self.workers.setdefault(job.id, {})
            workers[node] = workers.get(node, 0) + r
            self._charge_servers(job)

    def give(self, node: str, job: Job, cpu: int, gpus: int, count: int | None = None) -> None:
        f, r = self.free[node], job.replicas if count is None else count
        f[0] += cpu * r
        if job.gpu_milli is not None and job.id in self.device:
            f[1] += self.shared.give(node, job)
        else:
            f[1] += gpus * r
        f[2] += job.memory_mib * r
        self.containers[node] -= r
        self.jobs_on[node].remove(job.id)
        if job.servers is not None:
            workers = self.workers.setdefault(job.id, {})
            workers[node] = workers.get(node, 0) - r
            if workers[node] <= 0:
                del workers[node]
            self._charge_servers(job)

    def take_all(self, job: Job, shares: Shares, cpu: int, gpus: int) -> None:
        for node, k in shares:
            self.take(node, job, cpu, gpus, k)

    def give_all(self, job: Job, shares: Shares, cpu: int, gpus: int) -> None:
        for node, k in shares:
            self.give(node, job, cpu, gpus, k)

    def room(self, node: str, job: Job, cpu: int, gpus: int) -> int:
        """How many replicas of ``job`` at ``cpu`` / ``gpus`` each still fit on ``node`` (whole GPUs), with
        the servers they put there (:meth:`fits`)."""
        f = self.free[node]
        count = min(
            f[0] // cpu if cpu > 0 else job.replicas,
            f[1] // gpus if gpus > 0 else job.replicas,
            f[2] // job.memory_mib if job.memory_mib > 0 else job.replicas,
            job.replicas,
        )
        while job.servers is not None and count > 0 and not self.fits(node, job, cpu, gpus, count):
            count -= 1
        return count

    def share_free(self, node: str) -> float:
        """Fraction of the node's CPU still free (1 for a node without CPU)."""
        cap = self.nodes[node].cpu_millis
        return self.free[node][0] / cap if cap else 1.0


def water_fill(capacity: float, lows: list[int], highs: list[int], replicas: list[int], weights: list[float]) -> list[int] | None:
    """Per-replica shares ``s_j = clamp(lam * w_j, low_j, high_j)`` with ``sum r_j * s_j <= capacity``, the
    level ``lam`` as high as capacity allows (integers, rounded down); ``None`` when even the lows do
    not fit. Equal weights give the equal split a fair-share scheduler (CFS) converges to.
    """
    n = len(lows)
    if n == 0:
        return []
    lo = np.asarray(lows, dtype=float)
    hi = np.maximum(np.asarray(highs, dtype=float), lo)
    r = np.asarray(replicas, dtype=float)
    w = np.maximum(np.asarray(weights, dtype=float), 0.0)
    if float(r @ lo) > capacity:
        return None
    if float(r @ hi) <= capacity:
        return [int(x) for x in hi]
    # f(lam) = sum r * clamp(lam * w, lo, hi) is piecewise linear and non-decreasing: find the
    # segment where it crosses the capacity, then solve the linear piece exactly.
    pos = w > 0
    breaks = np.unique(np.concatenate([lo[pos] / w[pos], hi[pos] / w[pos], [0.0]]))

    def f(lam: float) -> float:
        return float(r @ np.clip(lam * w, lo, hi))

    k = int(np.searchsorted([f(b) for b in breaks], capacity, side="right"))
    a = breaks[k - 1]
    free_mask = pos & (a * w >= lo) & (a * w < hi)
    fixed = float(r @ np.clip(a * w, lo, hi)) - float((r * w)[free_mask].sum()) * a
    slope = float((r * w)[free_mask].sum())
    lam = (capacity - fixed) / slope if slope > 0 else a
    shares = np.floor(np.clip(lam * w, lo, hi) + 1e-6)
    shares = np.maximum(shares, lo)
    # Rounding up by the 1e-6 guard may overshoot by a few millis: take them back from the largest.
    over = float(r @ shares) - capacity
    order = np.argsort(-shares, kind="stable")
    i = 0
    while over > 0 and i < 10 * n:
        j = int(order[i % n])
        if shares[j] - 1 >= lo[j]:
            shares[j] -= 1
            over -= r[j]
        i += 1
    return [int(x) for x in shares]


# --------------------------------------------------------------------------------------------------
# Decisions -> Plan
# --------------------------------------------------------------------------------------------------


def no_prediction(job: Job, policy: str) -> Predictions:
    """The predictions of a policy that makes none: only what is observed (epoch, deadlines, tier 1)."""
    t = job.target
    return Predictions(
        seconds_per_epoch=None,
        epoch=epoch_of(job),
        tier1_deadline=t.tier1.deadline if t is not None else None,
        tier2_deadline=t.tier2.deadline if t is not None and t.tier2 is not None else None,
        tier1_reached=_tier_reached(job),
        basis=f"no prediction: {policy} does not predict progress",
    )


def _action(job: Job, d: Decision) -> Action:
    now = job.allocation
    same = now is not None and (d.cpu_millis, d.gpus, d.cpu_limit_millis) == (now.cpu_millis, now.gpus, now.cpu_limit_millis)
    return action_for(job, d.node, same, dict(decided_shares(job, d)) == dict(job.shares()))


def fewest_servers(job: Job, shares: Sequence[tuple[str, int]]) -> int | None:
    """The servers a baseline gives a parameter-server job on each node of ``shares``: what it runs with
    where its nodes stay, else its fewest spread over the nodes (the Docker adapter's default: most
    baselines have no speed model for servers); None for any other job. :class:`Ledger` charges the
    same (:meth:`Ledger.servers_per_node`)."""
    if job.servers is None or not shares:
        return None
    if {n for n, _ in shares} == {n for n, _ in job.shares()}:
        return job.running_servers
    return job.fewest_servers(len(shares))


def build_plan(
    snapshot: Snapshot,
    policy: str,
    decisions: Mapping[str, Decision],
    *,
    started: float,
    message: str,
    devices: Mapping[str, int] | None = None,
) -> Plan:
    """The Plan for ``decisions`` (one per active job), checked; ``started`` is ``time.perf_counter()``
    at the start of the policy call (for ``solver.seconds``); ``devices``: the GPU device of each
    placed fractional job (``Ledger.device``)."""
    devices = devices or {}
    assignments: list[Assignment] = []
    unserved: list[Unserved] = []
    migrations = resizes = 0
    lost_total = 0.0
    for job in active_jobs(snapshot):
        d = decisions[job.id]
        action = _action(job, d)
        lost = lost_seconds(job, action)
        lost_total += lost
        migrations += int(action == "migrate")
        resizes += int(action == "resize")
        why = d.why or ("runs" if d.node is not None else "waits")
        if d.node is None:
            unserved.append(Unserved(job=job.id, reason=why))
        prev = previous_placement(job)
        shares = decided_shares(job, d)
        assignments.append(
            Assignment(
                job=job.id,
                node=d.node,
                cpu_millis=d.cpu_millis if d.node is not None else 0,
                cpu_limit_millis=d.cpu_limit_millis if d.node is not None else None,
                gpus=d.gpus if d.node is not None else 0,
                gpu_device=devices.get(job.id) if d.node is not None and job.gpu_milli is not None else None,
                replicas=sum(k for _, k in shares) if shares else job.replicas,
                placement=[Share(node=n, replicas=k) for n, k in shares] if len(shares) > 1 else None,
                servers=(d.servers or fewest_servers(job, shares)) if d.node is not None else None,
                action=action,
                previous=prev,
                lost_seconds=lost,
                predictions=d.predictions or no_prediction(job, policy),
                explanation=why,
            )
        )
    etas = [a.predictions.eta_finish for a in assignments]
    known = [e - snapshot.time for e in etas if e is not None]
    terms = ObjectiveTerms(
        total=0.0,
        unserved_cost=0.0,
        qoe_cost=0.0,
        makespan_cost=0.0,
        completion_cost=0.0,
        churn_cost=0.0,
        tier1_met=sum(a.predictions.tier1_satisfied is True for a in assignments),
        tier1_missed=sum(a.predictions.tier1_satisfied is False for a in assignments),
        tier2_met=sum(a.predictions.tier2_satisfied is True for a in assignments),
        tier2_missed=sum(a.predictions.tier2_satisfied is False for a in assignments),
        makespan_seconds=max(known) if known and len(known) == len(etas) else None,
        total_completion_seconds=float(sum(known)),
        migrations=migrations,
        resizes=resizes,
        lost_seconds=lost_total,
    )
    plan = Plan(
        time=snapshot.time,
        snapshot_digest=snapshot_digest(snapshot),
        assignments=assignments,
        unserved=unserved,
        objective=terms,
        solver=SolverReport(
            name=policy,
            status="trivial" if not assignments else "feasible",
            seconds=time.perf_counter() - started,
            gap=None,
            time_limit=0.0,
            variables=0,
            message=message,
        ),
        summary=PlanSummary(
            active_jobs=len(assignments),
            placed=len(assignments) - len(unserved),
            unserved=len(unserved),
            finished_jobs=sum(1 for j in snapshot.jobs if j.status == "finished"),
        ),
    )
    violations = check_plan(snapshot, plan)
    if violations:
        raise PlanCheckError([f"policy {policy}: {v}" for v in violations])
    return plan


def stay_decisions(snapshot: Snapshot, ledger: Ledger, policy_why: str) -> dict[str, Decision]:
    """Every running job keeps its node and :func:`held` allocation (charged to ``ledger``); pending
    jobs are left out for the policy to place."""
    out: dict[str, Decision] = {}
    for job in active_jobs(snapshot):
        if job.status == "running" and job.node is not None:
            cpu, gpus = held(job)
            ledger.take_all(job, job.shares(), cpu, gpus)
            what = describe(job, cpu, gpus, job.shares())
            out[job.id] = Decision(job.node, cpu, gpus, f"keeps {what} on {job.node} ({policy_why})")
    return out


def place_replicas(
    ledger: Ledger, job: Job, cpu: int, gpus: int, count: int, pick: Callable[[list[str], Shares], str]
) -> Shares | None:
    """Place ``count`` replicas of ``job`` one at a time, each on the node ``pick(candidates, so_far)``
    chooses among the eligible nodes where one more replica fits (only the nodes already used once it
    uses ``max_nodes``), charged to ``ledger``; ``None`` (and nothing charged) when they do not all fit.
    The shares come out in the order their nodes were first used (rank 0's first)."""
    placed: dict[str, int] = {}
    eligible = [n.name for n in ledger.nodes.values() if may_arrive(n, job, 1)]
    for _ in range(count):
        pool = list(placed) if len(placed) >= job.max_nodes else eligible
        cands = [n for n in pool if ledger.fits(n, job, cpu, gpus, 1)]
        if not cands:
            ledger.give_all(job, tuple(placed.items()), cpu, gpus)
            return None
        node = pick(cands, tuple(placed.items()))
        ledger.take(node, job, cpu, gpus, 1)
        placed[node] = placed.get(node, 0) + 1
    return tuple(placed.items())


def most_room_first(ledger: Ledger, job: Job, cpu: int, gpus: int) -> Callable[[list[str], Shares], str]:
    """A :func:`place_replicas` rule that uses the fewest nodes: a node already used while it has room,
    else the one with room for the most replicas (ties: node order)."""
    order = {name: i for i, name in enumerate(ledger.nodes)}

    def pick(cands: list[str], so_far: Shares) -> str:
        used = [n for n, _ in so_far if n in cands]
        if used:
            return used[0]
        return min(cands, key=lambda n: (-ledger.room(n, job, cpu, gpus), order[n]))

    return pick


def capacity_over_nodes(snapshot: Snapshot, job: Job, cpu: int, gpus: int) -> int:
    """Most replicas of ``job`` at ``cpu`` / ``gpus`` each that empty eligible nodes hold, over at most
    ``max_nodes`` of them (what it could ever run with)."""
    per = sorted(
        (
            min(
                n.cpu_millis // cpu if cpu > 0 else job.replicas,
                n.gpus // gpus if gpus > 0 else job.replicas,
                n.memory_mib // job.memory_mib if job.memory_mib > 0 else job.replicas,
            )
            for n in snapshot.nodes
            if may_arrive(n, job, 1)
        ),
        reverse=True,
    )
    return min(sum(per[: job.max_nodes]), job.replicas)
