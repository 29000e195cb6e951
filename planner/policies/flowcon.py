"""FlowCon: CPU limits in proportion to each job's growth efficiency, per node.

Source: W. Zheng et al., "FlowCon: Elastic Flow Configuration for Containerized Deep Learning
Applications", ICPP 2019 (doi 10.1145/3337821.3337868); journal version IEEE TCC 2023. Mechanism:

- every interval ``T`` (the snapshot's ``interval_seconds``), per job: normalise its loss (a quality
  metric such as accuracy is read as its error, :func:`loss_like`) by the largest seen, ``E_i`` = mean
  over the last interval, progress ``P = |E_i - E_{i-1}| / T``, growth efficiency ``G = P / u``
  with ``u`` its mean CPU usage over ``T`` (:func:`models.growth.growth_efficiency`).
  ``u`` is read, as FlowCon's monitor reads ``docker stats``, as a share of the node's CPU; the policy
  sees the limit it gave, not the usage, so ``u`` = the job's CPU / the node's CPU;
- states: ``G < alpha`` makes a growing job *watching*, a second time *completing*; ``G >= alpha``
  makes it growing again (alpha 0.05 by default; published 0.03-0.05). A state changes only on new
  reports: a job that reported nothing since the last decision keeps its state;
- new CPU limits (``docker update --cpus``; the CPU a job then gets is CFS's equal share of the node
  capped at its limit): completing jobs get ``1 / (beta * N)`` of the node with
  ``beta = 1 + 1/N`` (N jobs on the node), watching jobs keep their limit, jobs without a growth figure
  yet (new, or too little history) get an equal ``1 / N``, and growing jobs share the rest in
  proportion to ``G_i / sum(G)``; all within each job's ``[min_cpu_millis, max_cpu_millis]``. When no
  job is growing, what is left is shared equally; when every job is completing, every job gets 1/N;
- new jobs start at once with an equal share (Docker underneath: see :mod:`planner.policies.docker`);
  FlowCon never moves a job; GPUs are left as Docker hands them out.

The limits are quotas: each decision carries its limit as ``cpu_limit_millis`` (what
``docker update --cpus`` sets) and, as ``cpu_millis``, the share CFS gives the job under it (the
weights stay Docker's equal ones). Called between two heartbeats (the loop wakes at arrivals and
finishes), FlowCon only admits new jobs: the growth test runs, and limits change, at most once per
interval ``T`` since its last decision, and on nodes without a new job every job keeps its share and
limit.

Adaptation: FlowCon's jobs print a loss every few iterations; snapshots carry one point per epoch,
often longer than ``T``. The window of the growth test is therefore ``max(T, time between the last two
reports)``, so each window holds at least one report, and P is the progress per window (T counted
in intervals; per second, no measured curve ever reaches the published alpha: see ``job_growth``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from models import growth_efficiency
from planner.plan import Plan
from planner.policies.common import (
    Decision,
    Ledger,
    active_jobs,
    build_plan,
    decided_count,
    decided_shares,
    describe,
    metric_series,
    running_count,
    water_fill,
)
from planner.policies.docker import apply_shares, flexible_by_node, pool, running_at_minimum, spread_admit
from planner.snapshot import Job, Node, Snapshot

State = Literal["growing", "watching", "completing"]


def loss_like(values: np.ndarray, direction: str) -> np.ndarray:
    """The series as a loss (lower is better, positive), what FlowCon reads: a higher-is-better metric
    becomes its error, ``1 - v`` for a fraction (accuracy), ``100 - v`` for a percentage, else
    ``2 max|v| - v``."""
    if direction == "lower":
        return values
    top = float(np.abs(values).max()) if values.size else 0.0
    ceiling = 1.0 if top <= 1.0 else 100.0 if top <= 100.0 else 2.0 * top
    return ceiling - values


def job_growth(job: Job, node: Node, interval: float) -> float | None:
    """FlowCon's ``G`` for a running job (``None``: too little history to tell)."""
    if job.allocation is None or node.cpu_millis <= 0:
        return None
    times, _, values, direction = metric_series(job)
    if times.size < 2:
        return None
    values = loss_like(values, direction)
    gap = float(times[-1] - times[-2])
    window = max(interval, gap * (1.0 - 1e-9))
    share = job.allocation.cpu_millis * running_count(job) / node.cpu_millis
    g = growth_efficiency(times, values, window, share)
    # Progress per window, not per second: with P per second the measured curves give G of 1e-5 to
    # 0.04, under the published alpha for every job at every epoch (FlowCon would never act); per
    # window (T counted in intervals) young jobs score ~1 and flattened ones ~0.01, which is the
    # split alpha = 0.03-0.1 was published to make.
    return None if g is None else g * window


@dataclass
class GrowthTest:
    """FlowCon's per-job state machine (growing -> watching -> completing, reset by ``G >= alpha``)."""

    alpha: float
    states: dict[str, State] = field(default_factory=dict)
    growth: dict[str, float] = field(default_factory=dict)
    seen: dict[str, float] = field(default_factory=dict)

    def update(self, snapshot: Snapshot) -> None:
        nodes = {n.name: n for n in snapshot.nodes}
        for job in active_jobs(snapshot):
            if job.status != "running" or job.node is None or not job.history:
                continue
            last = max(p.time for p in job.history)
            if self.seen.get(job.id) == last:
                continue  # nothing new reported: the state stands
            g = job_growth(job, nodes[job.node], snapshot.settings.interval_seconds)
            if g is None:
                continue
            self.seen[job.id] = last
            self.growth[job.id] = g
            before = self.states.get(job.id, "growing")
            if g >= self.alpha:
                self.states[job.id] = "growing"
            else:
                self.states[job.id] = "watching" if before == "growing" else "completing"

    def state(self, job: Job) -> State | None:
        """The job's state, ``None`` while it has no growth figure (new, or not running)."""
        return self.states.get(job.id) if job.status == "running" else None

    def describe(self, job: Job) -> str:
        s = self.state(job)
        if s is None:
            return "no growth figure yet"
        g = self.growth[job.id]
        return f"{s}, G {g:.3g} {'>=' if g >= self.alpha else '<'} alpha {self.alpha:g}"


class FlowConPolicy:
    """FlowCon; see the module docstring. ``alpha``: the growth threshold."""

    name = "flowcon"

    def __init__(self, alpha: float = 0.05) -> None:
        if not alpha > 0:
            raise ValueError(f"alpha: must be > 0, got {alpha!r}")
        self.test = GrowthTest(alpha)
        #: The CPU limit (per replica) last set per job: a watching job keeps it.
        self.limits: dict[str, float] = {}
        #: Time of the last decision that ran the growth test (limits change at most once per T).
        self.decided: float | None = None

    def __call__(self, snapshot: Snapshot) -> Plan:
        t0 = time.perf_counter()
        interval = snapshot.settings.interval_seconds
        heartbeat = self.decided is None or snapshot.time - self.decided >= interval * (1.0 - 1e-9)
        if heartbeat:
            self.test.update(snapshot)
            self.decided = snapshot.time
        ledger = Ledger(snapshot)
        decisions: dict[str, Decision] = {}
        running_at_minimum(snapshot, ledger, decisions)
        spread_admit(snapshot, ledger, decisions, "starts at once")
        for name, jobs in flexible_by_node(snapshot, decisions).items():
            if not heartbeat and all(j.status == "running" for j in jobs):
                # Between heartbeats, a node without a new job keeps its shares and limits.
                now = [j.allocation.cpu_millis if j.allocation is not None else j.min_cpu_millis for j in jobs]
                apply_shares(ledger, decisions, name, jobs, now)
                for job in jobs:
                    d, a = decisions[job.id], job.allocation
                    limit = a.cpu_limit_millis if a is not None else None
                    why = f"keeps {describe(job, d.cpu_millis, d.gpus)} on {name}, limit {self._limit_text(limit)} until T"
                    decisions[job.id] = Decision(name, d.cpu_millis, d.gpus, why, cpu_limit_millis=limit)
                continue
            shares, caps, how = self._split(ledger, decisions, ledger.nodes[name], jobs)
            apply_shares(ledger, decisions, name, jobs, shares)
            for job, cpu, cap in zip(jobs, shares, caps, strict=True):
                d = decisions[job.id]
                verb = "starts on" if job.status == "pending" else "gets"
                why = f"{verb} {describe(job, cpu, d.gpus, decided_shares(job, d))} on {name}, limit {self._limit_text(cap)}"
                why += f" ({self.test.describe(job)}; {how[job.id]})"
                decisions[job.id] = Decision(name, cpu, d.gpus, why, cpu_limit_millis=cap, placement=d.placement)
        for job in active_jobs(snapshot):
            d = decisions[job.id]
            if job.status == "running" and not job.resizable:
                a = job.allocation
                decisions[job.id] = Decision(
                    d.node,
                    d.cpu_millis,
                    d.gpus,
                    f"keeps {describe(job, d.cpu_millis, d.gpus)} (cannot resize live)",
                    cpu_limit_millis=a.cpu_limit_millis if a is not None else None,
                )
        return build_plan(
            snapshot,
            self.name,
            decisions,
            started=t0,
            devices=ledger.device,
            message=f"FlowCon: growth-efficiency CPU limits, alpha {self.test.alpha:g}",
        )

    @staticmethod
    def _limit_text(limit: int | None) -> str:
        return "none" if limit is None else f"{limit / 1000:g} CPU"

    def _split(
        self, ledger: Ledger, decisions: dict[str, Decision], node: Node, jobs: list[Job]
    ) -> tuple[list[int], list[int], dict[str, str]]:
        """CPU per replica for the flexible ``jobs`` on ``node`` (the share under the limit, and the
        limit), and a phrase per job saying why.

        FlowCon sets *limits*; the CPU a job gets is what CFS gives it under its limit: an equal share
        of the node, capped at the limit (:func:`water_fill` with the limits as caps).
        """
        total = pool(ledger, decisions, node.name, jobs)
        count = {j.id: decided_count(j, decisions[j.id]) for j in jobs}  # a gang may run fewer than its replicas
        n = max(len(ledger.jobs_on[node.name]), 1)
        beta = 1.0 + 1.0 / n
        states = [self.test.state(j) for j in jobs]
        limit: dict[str, float] = {}
        how: dict[str, str] = {}
        if all(s == "completing" for s in states):
            for j in jobs:
                limit[j.id] = node.cpu_millis / n / count[j.id]
                how[j.id] = f"every job completing: limit 1/{n} of the node"
        else:
            for j, s in zip(jobs, states, strict=True):
                if s == "completing":
                    limit[j.id] = node.cpu_millis / (beta * n) / count[j.id]
                    how[j.id] = f"completing: limit 1/(beta N) of the node, beta {beta:.2f}"
                elif s == "watching" and j.allocation is not None:
                    limit[j.id] = self.limits.get(j.id, float(j.allocation.cpu_millis))
                    how[j.id] = "watching: keeps its limit"
                elif s is None:
                    limit[j.id] = node.cpu_millis / n / count[j.id]
                    how[j.id] = f"limit 1/{n} of the node until it has history"
            growing = [j for j, s in zip(jobs, states, strict=True) if s == "growing"]
            rest = max(total - sum(limit[j.id] * count[j.id] for j in jobs if j.id in limit), 0.0)
            g_sum = sum(self.test.growth[j.id] for j in growing)
            for j in growing:
                share = self.test.growth[j.id] / g_sum
                limit[j.id] = share * rest / count[j.id]
                how[j.id] = f"growing: limit G_i / sum(G) = {share:.2f} of what the others leave"
        caps = [int(min(max(limit[j.id], j.min_cpu_millis), j.max_cpu_millis)) for j in jobs]
        for j, c in zip(jobs, caps, strict=True):
            self.limits[j.id] = float(c)
        got = water_fill(total, [j.min_cpu_millis for j in jobs], caps, [count[j.id] for j in jobs], [1.0] * len(jobs))
        assert got is not None  # admission kept the minimums within the node
        return got, caps, how
