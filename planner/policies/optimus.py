"""Optimus-style greedy marginal-gain allocation.

Source: Y. Peng et al., "Optimus: An Efficient Dynamic Resource Scheduler for Deep Learning
Clusters", EuroSys 2018. Mechanism, per interval:

- per job, fit the convergence curve ``1 / (a k + b) + c`` (the hyperbola family of
  :func:`models.fit_learning_curve`, and only it) to the metric history, and read the remaining epochs:
  to tier 2 if the job has one, else to convergence (improvement per epoch below the snapshot's
  ``convergence_tolerance``), never before tier 1, capped by ``max_epochs``; without a fit (fewer than 3 points)
  what ``max_epochs`` leaves, else :data:`UNKNOWN_REMAINING_EPOCHS`;
- per job, fit the speed model (:func:`models.fit_speed_model`) to its observed epoch times, so the
  remaining time at an allocation is ``remaining epochs x seconds per epoch``;
- every job first gets its minimum (Optimus gives each job one worker and one server): running jobs
  on their node, pending jobs in submission order on the eligible node with the most room;
- then resources go one unit at a time (``cpu_unit_millis`` of CPU, or one GPU, per replica) to the job
  whose remaining time falls the most per unit, as a share of its node's capacity of that resource,
  until no unit fits or gains anything. Jobs are not moved (Optimus' placement packs tasks onto few
  servers; here each job is one gang on one node, so it stays where it runs).

A gang that may spread or shrink (``max_nodes`` above 1 or a ``min_replicas``) gets its request per
replica (``min_cpu_millis``, ``min_gpus``) and Optimus chooses its *count*: it starts with its
``min_replicas`` (on the fewest nodes) and then competes for one more replica at a time, by the same
marginal gain per share of a node (a replica on a node it already uses while there is room, else on
the node with the most room, within ``max_nodes``). Its epoch time at ``k`` replicas is Optimus' data-
parallel speed function without parameter servers, ``theta0 / k + theta1 + theta2 * k`` (non-negative
least squares on its observed speeds once it ran at 3 counts; before that ideal scaling from what it
observed, else from its speed model at its full count). A running gang keeps its count and placement
(a change would restart it).

The reallocation runs at most once per interval ``T`` since the last decision that ran it; called in
between (the loop wakes at arrivals and finishes), Optimus only places new jobs (their minimum, then
units by marginal gain from what is free) and every running job keeps what it holds.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import nnls

from models import CurveFit, PSSpeedModel, PSSpeedObservation, SpeedModel, fit_learning_curve, fit_ps_speed_model, fit_speed_model
from planner.plan import Plan, Predictions
from planner.policies.common import (
    Decision,
    Ledger,
    active_jobs,
    build_plan,
    describe,
    epoch_of,
    held,
    may_arrive,
    metric_series,
    most_room_first,
    place_replicas,
    spreads,
    submission_order,
)
from planner.progress import observed_speeds
from planner.snapshot import Job, Snapshot

#: Remaining epochs assumed for a job with no fit and no ``max_epochs``.
UNKNOWN_REMAINING_EPOCHS = 30.0
#: Cap on the remaining epochs (a nearly flat fitted curve must not run forever).
MAX_REMAINING_EPOCHS = 100_000.0


@dataclass(frozen=True)
class JobModel:
    """What Optimus predicts for one job."""

    job: Job
    remaining: float
    to_tier1: float | None
    to_tier2: float | None
    speed: SpeedModel
    basis: str
    #: A parameter-server job's (w, s) model, Optimus' form (:func:`ps_model`); ``None`` for any other.
    ps: PSSpeedModel | None = None

    def seconds(self, cpu: int, gpus: int) -> float:
        return self.remaining * self.speed.seconds_per_epoch(cpu, gpus)

    def gang_epoch(self, cpu: int, gpus: int, count: int, servers: int = 0) -> float:
        """Seconds per epoch of a gang at ``count`` replicas and, for a parameter-server job, ``servers``
        servers in all (module docstring)."""
        at_full = self.speed.seconds_per_epoch(cpu, gpus)
        if self.ps is None:
            return count_seconds_per_epoch(self.job, at_full, count)
        return ps_seconds_per_epoch(self.job, self.ps, at_full, count, servers)

    def gang_seconds(self, cpu: int, gpus: int, count: int, servers: int = 0) -> float:
        """Remaining seconds of a gang at ``count`` replicas (and ``servers`` servers in all)."""
        return self.remaining * self.gang_epoch(cpu, gpus, count, servers)


def count_seconds_per_epoch(job: Job, at_full_count: float, count: int) -> float:
    """Seconds per epoch of ``job`` at ``count`` replicas: ``theta0 / k + theta1 + theta2 * k`` fitted
    (non-negative least squares) to its speeds at 3 or more counts, else ideal scaling from its
    observed speeds, else from ``at_full_count`` (its speed model's time at its ``replicas``)."""
    pts = [(float(s.replicas or job.replicas), s.seconds_per_epoch) for s in job.speed]
    if len({k for k, _ in pts}) >= 3:
        rows = np.array([[1.0 / k, 1.0, k] for k, _ in pts])
        theta, _ = nnls(rows, np.array([t for _, t in pts]))
        t = float(theta @ np.array([1.0 / count, 1.0, count]))
        if t > 0 and math.isfinite(t):
            return t
    c = float(np.median([t * k for k, t in pts])) if pts else at_full_count * job.replicas
    return c / count


def ps_model(job: Job) -> PSSpeedModel | None:
    """Optimus' speed function of a parameter-server job, ``t(w, s) = θ0 M / w + θ1 + θ2 w / s + θ3 w + θ4 s``
    (whatever form the job declares: Optimus has one), fitted by non-negative least squares to its
    observed epochs at their workers and servers in all, on :func:`models.fit_ps_speed_model`'s prior
    (so with one shape observed it is the prior scaled through it); ``None`` for any other job."""
    if job.servers is None:
        return None
    obs = [
        PSSpeedObservation(p.replicas or job.replicas, p.servers or job.fewest_servers(p.nodes) * p.nodes, p.seconds_per_epoch)
        for p in job.speed
    ]
    return fit_ps_speed_model(obs, "optimus", default_epoch_seconds=1.0)


def ps_seconds_per_epoch(job: Job, model: PSSpeedModel, at_full_count: float, count: int, servers: int) -> float:
    """Seconds per epoch of parameter-server ``job`` at ``count`` workers and ``servers`` servers in all:
    ``model`` where it was fitted to the job's epochs, else its prior shape scaled so that the job's
    full count with its fewest servers on one node takes ``at_full_count``."""
    t = model.seconds_per_epoch(count, max(servers, 1))
    if model.source != "prior":
        return t
    return at_full_count * t / model.seconds_per_epoch(job.replicas, job.fewest_servers(1))


def _epochs_to(curve: CurveFit | None, value: float | None, epoch: float) -> float | None:
    if curve is None or value is None:
        return None
    k = curve.epoch_reaching(value)
    return None if k is None else max(k - epoch, 0.0)


def job_model(job: Job, tolerance: float) -> JobModel:
    _, epochs, values, direction = metric_series(job)
    epoch = epoch_of(job)
    fit = fit_learning_curve(epochs, values, direction, families=("hyperbola",))
    curve = fit if isinstance(fit, CurveFit) else None
    t = job.target
    to1 = _epochs_to(curve, t.tier1.value if t is not None else None, epoch)
    to2 = _epochs_to(curve, t.tier2.value if t is not None and t.tier2 is not None else None, epoch)
    left_max = max(t.max_epochs - epoch, 0.0) if t is not None and t.max_epochs is not None else None
    if to2 is not None:
        remaining = to2
    elif curve is not None:
        remaining = max(curve.convergence_epoch(tolerance) - epoch, 0.0)
    else:
        remaining = left_max if left_max is not None else UNKNOWN_REMAINING_EPOCHS
    if to1 is not None:
        remaining = max(remaining, to1)
    if left_max is not None:
        remaining = min(remaining, left_max)
    remaining = min(remaining, MAX_REMAINING_EPOCHS) if math.isfinite(remaining) else MAX_REMAINING_EPOCHS
    speed = fit_speed_model(observed_speeds(job), uses_gpu=job.max_gpus > 0)
    curve_note = f"hyperbola fit on {curve.n_points} points" if curve is not None else f"no hyperbola fit ({fit.reason})"  # type: ignore[union-attr]
    basis = f"Optimus: {curve_note}; speed {speed.source} ({speed.n_observations} obs)"
    ps = ps_model(job)
    if ps is not None:
        basis += f"; parameter servers: Optimus form, {ps.source} ({ps.n_observations} obs)"
    return JobModel(job, remaining, to1, to2, speed, basis, ps)


def _predictions(m: JobModel, d: Decision, now: float, count: int | None = None, servers: int = 0) -> Predictions:
    job, t = m.job, m.job.target
    d1 = t.tier1.deadline if t is not None else None
    d2 = t.tier2.deadline if t is not None and t.tier2 is not None else None
    if d.node is None:
        return Predictions(
            seconds_per_epoch=None,
            epoch=epoch_of(job),
            epochs_to_tier1=m.to_tier1,
            epochs_to_tier2=m.to_tier2,
            epochs_to_finish=m.remaining,
            tier1_deadline=d1,
            tier2_deadline=d2,
            basis=m.basis + "; not running this interval",
        )
    spe = m.speed.seconds_per_epoch(d.cpu_millis, d.gpus)
    if count is not None:
        spe = m.gang_epoch(d.cpu_millis, d.gpus, count, servers)
    eta1 = now + m.to_tier1 * spe if m.to_tier1 is not None else None
    eta2 = now + m.to_tier2 * spe if m.to_tier2 is not None else None
    return Predictions(
        seconds_per_epoch=spe,
        epoch=epoch_of(job),
        epochs_to_tier1=m.to_tier1,
        epochs_to_tier2=m.to_tier2,
        epochs_to_finish=m.remaining,
        eta_tier1=eta1,
        eta_tier2=eta2,
        eta_finish=now + m.remaining * spe,
        tier1_deadline=d1,
        tier2_deadline=d2,
        tier1_satisfied=(eta1 <= d1) if eta1 is not None and d1 is not None else None,
        tier2_satisfied=(eta2 <= d2) if eta2 is not None and d2 is not None else None,
        basis=m.basis,
    )


class OptimusPolicy:
    """Optimus-style greedy allocator; see the module docstring."""

    name = "optimus"

    def __init__(self, cpu_unit_millis: int = 500) -> None:
        if not cpu_unit_millis >= 1:
            raise ValueError(f"cpu_unit_millis: must be >= 1, got {cpu_unit_millis!r}")
        self.unit = int(cpu_unit_millis)
        #: Time of the last decision that reallocated every job (once per T).
        self.decided: float | None = None

    def __call__(self, snapshot: Snapshot) -> Plan:
        t0 = time.perf_counter()
        tol = snapshot.settings.convergence_tolerance
        heartbeat = self.decided is None or snapshot.time - self.decided >= snapshot.settings.interval_seconds * (1.0 - 1e-9)
        if heartbeat:
            self.decided = snapshot.time
        models = {j.id: job_model(j, tol) for j in active_jobs(snapshot)}
        ledger = Ledger(snapshot)
        alloc: dict[str, list[int]] = {}  # job id -> [cpu, gpus] per replica
        where: dict[str, str] = {}
        decisions: dict[str, Decision] = {}
        gangs: dict[str, dict[str, int]] = {}  # pending spreading gangs: node -> replicas, rank 0's first
        for job in active_jobs(snapshot):
            if job.status == "running" and job.node is not None:
                cpu, gpus = held(job)
                if job.resizable and heartbeat and not spreads(job):
                    cpu, gpus = job.min_cpu_millis, job.min_gpus
                ledger.take_all(job, job.shares(), cpu, gpus)
                alloc[job.id], where[job.id] = [cpu, gpus], job.node
        for job in submission_order(j for j in active_jobs(snapshot) if j.status == "pending"):
            if spreads(job) or job.servers is not None:
                cpu, gpus = job.min_cpu_millis, job.min_gpus
                least = place_replicas(ledger, job, cpu, gpus, job.fewest_replicas, most_room_first(ledger, job, cpu, gpus))
                if least is None:
                    need = describe(job, cpu, gpus, ())  # one replica's share
                    servers = " beside its servers" if job.servers is not None else ""
                    why = f"waits: the nodes lack room for its minimum of {job.fewest_replicas} replica(s) of {need}{servers}"
                    decisions[job.id] = Decision(None, why=why)
                    continue
                gangs[job.id] = dict(least)
                if job.servers is not None:  # its fewest, from now on grown only by marginal gain
                    ledger.choose_servers(job, ledger.servers_per_node(job, gangs[job.id]) or 1)
                alloc[job.id], where[job.id] = [cpu, gpus], least[0][0]
                continue
            cands = [
                (-min(ledger.share_free(n.name), _gpu_free(ledger, n.name) if job.min_gpus else 1.0), order, n.name)
                for order, n in enumerate(snapshot.nodes)
                if may_arrive(n, job) and ledger.fits(n.name, job, job.min_cpu_millis, job.min_gpus)
            ]
            if not cands:
                need = describe(job, job.min_cpu_millis, job.min_gpus)
                decisions[job.id] = Decision(None, why=f"waits: no node has room for its minimum {need}")
                continue
            name = min(cands)[2]
            ledger.take(name, job, job.min_cpu_millis, job.min_gpus)
            alloc[job.id], where[job.id] = [job.min_cpu_millis, job.min_gpus], name
        growing = set(alloc) if heartbeat else {j.id for j in active_jobs(snapshot) if j.status == "pending"}
        self._grow(snapshot, ledger, models, alloc, where, growing, gangs)
        for job in active_jobs(snapshot):
            if job.id in decisions:
                decisions[job.id] = Decision(
                    None, why=decisions[job.id].why, predictions=_predictions(models[job.id], decisions[job.id], snapshot.time)
                )
                continue
            cpu, gpus = alloc[job.id]
            node = where[job.id]
            m = models[job.id]
            if job.id in gangs:
                shares = tuple(gangs[job.id].items())
                count = sum(k for _, k in shares)
                per = ledger.chosen.get(job.id) if job.servers is not None else None
                what = describe(job, cpu, gpus, shares)
                if per is not None:
                    what += f", {per * len(shares)} parameter server(s), {per} on each node"
                d = Decision(
                    node,
                    cpu,
                    gpus,
                    f"{what}: count by greedy marginal gain, {m.remaining:.1f} epochs left",
                    placement=shares,
                    servers=per,
                )
                decisions[job.id] = replace(d, predictions=_predictions(m, d, snapshot.time, count, (per or 0) * len(shares)))
                continue
            fixed = job.status == "running" and not job.resizable
            why = (
                f"keeps {describe(job, cpu, gpus)} on {node} (cannot resize live)"
                if fixed
                else f"{describe(job, cpu, gpus)} on {node}: greedy marginal gain, {m.remaining:.1f} epochs left"
            )
            d = Decision(node, cpu, gpus, why)
            decisions[job.id] = Decision(node, cpu, gpus, why, _predictions(m, d, snapshot.time))
        return build_plan(
            snapshot,
            self.name,
            decisions,
            started=t0,
            devices=ledger.device,
            message="Optimus: hyperbola + speed fits, greedy marginal gain per unit",
        )

    def _grow(
        self,
        snapshot: Snapshot,
        ledger: Ledger,
        models: dict[str, JobModel],
        alloc: dict[str, list[int]],
        where: dict[str, str],
        growing: set[str],
        gangs: dict[str, dict[str, int]],
    ) -> None:
        """Hand out units to the ``growing`` jobs by largest remaining-time reduction per share of the
        node, while any fits; a pending gang's unit is one more replica (with its node's servers when
        it is on a new node), or, for a parameter-server job, one more server on each of its nodes.
        A gang's heap entry is (count, servers per node) before and after."""
        heap: list[tuple[float, str, int, int, int, int]] = []
        jobs = {j.id: j for j in snapshot.jobs}

        def push(jid: str) -> None:
            job, m = jobs[jid], models[jid]
            if jid in gangs:
                shares, role = gangs[jid], job.servers
                count, per, nodes = sum(shares.values()), ledger.chosen.get(jid, 0), len(shares)
                cpu, gpus = alloc[jid]
                now = m.gang_seconds(cpu, gpus, count, per * nodes)
                step = _next_replica(snapshot, ledger, job, alloc[jid], shares)
                if step is not None:
                    wider = step[0] not in shares
                    size = step[1]
                    if wider and role is not None:  # and its servers there
                        size += _cpu_share(ledger, step[0], per * role.cpu_millis)
                    gain = now - m.gang_seconds(cpu, gpus, count + 1, per * (nodes + wider))
                    if gain > 0 and np.isfinite(gain) and size > 0:
                        heapq.heappush(heap, (-gain / size, jid, count, per, count + 1, per))
                if role is not None and (per + 1) * nodes <= role.max:
                    size = sum(_cpu_share(ledger, n, role.cpu_millis) for n in shares)
                    gain = now - m.gang_seconds(cpu, gpus, count, (per + 1) * nodes)
                    if gain > 0 and np.isfinite(gain) and size > 0:
                        heapq.heappush(heap, (-gain / size, jid, count, per, count, per + 1))
                return
            if job.status == "running" and (not job.resizable or spreads(job)):
                return
            cpu, gpus = alloc[jid]
            node = ledger.nodes[where[jid]]
            now = m.seconds(cpu, gpus)
            steps = []
            if cpu < job.max_cpu_millis and node.cpu_millis > 0:
                nxt = min(cpu + self.unit, job.max_cpu_millis)
                steps.append((nxt, gpus, (nxt - cpu) * job.replicas / node.cpu_millis))
            if gpus < job.max_gpus and node.gpus > 0:
                steps.append((cpu, gpus + 1, job.replicas / node.gpus))
            for c, g, size in steps:
                gain = now - m.seconds(c, g)
                if gain > 0 and np.isfinite(gain):
                    heapq.heappush(heap, (-gain / size, jid, cpu, gpus, c, g))

        for jid in sorted(alloc):
            if jid in growing:
                push(jid)
        while heap:
            _, jid, cpu, gpus, c, g = heapq.heappop(heap)
            if jid in gangs:
                if (sum(gangs[jid].values()), ledger.chosen.get(jid, 0)) != (cpu, gpus):
                    continue  # stale: the count and servers it was pushed at changed since
                if c > cpu:
                    step = _next_replica(snapshot, ledger, jobs[jid], alloc[jid], gangs[jid])
                    if step is not None:
                        ledger.take(step[0], jobs[jid], alloc[jid][0], alloc[jid][1], 1)
                        gangs[jid][step[0]] = gangs[jid].get(step[0], 0) + 1
                        push(jid)
                elif ledger.choose_servers(jobs[jid], g):
                    push(jid)
                continue
            if alloc[jid] != [cpu, gpus]:
                continue  # stale: the job grew since
            job, node = jobs[jid], where[jid]
            ledger.give(node, job, cpu, gpus)
            if ledger.fits(node, job, c, g):
                ledger.take(node, job, c, g)
                alloc[jid] = [c, g]
                push(jid)
            else:
                ledger.take(node, job, cpu, gpus)


def _next_replica(
    snapshot: Snapshot, ledger: Ledger, job: Job, alloc: list[int], shares: dict[str, int]
) -> tuple[str, float] | None:
    """Where a gang's next replica would go and its size as a share of that node (GPUs, else CPU):
    a node it uses with room, else the eligible node with the most room within ``max_nodes``;
    ``None`` at its ``replicas`` or when none has room."""
    cpu, gpus = alloc
    if sum(shares.values()) >= job.replicas:
        return None
    used = [n for n in shares if ledger.fits(n, job, cpu, gpus, 1)]
    if used:
        node = used[0]
    elif len(shares) < job.max_nodes:
        order = {n.name: i for i, n in enumerate(snapshot.nodes)}
        cands = [n.name for n in snapshot.nodes if may_arrive(n, job, 1) and ledger.fits(n.name, job, cpu, gpus, 1)]
        if not cands:
            return None
        node = min(cands, key=lambda n: (-ledger.room(n, job, cpu, gpus), order[n]))
    else:
        return None
    cap = ledger.nodes[node]
    size = gpus / cap.gpus if gpus and cap.gpus else cpu / cap.cpu_millis if cap.cpu_millis else 1.0
    return node, size


def _cpu_share(ledger: Ledger, node: str, millis: int) -> float:
    cap = ledger.nodes[node].cpu_millis
    return millis / cap if cap else 0.0


def _gpu_free(ledger: Ledger, node: str) -> float:
    cap = ledger.nodes[node].gpus
    return ledger.free[node][1] / cap if cap else 0.0
