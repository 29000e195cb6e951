"""One simulation run: a scenario, a policy and a seed through the shared control loop; its results.

:func:`simulate` builds the :class:`~adapters.sim.cluster.SimCluster`, drives it with
:class:`~adapters.loop.ControlLoop` on the cluster's virtual clock until every job has finished
(or the scenario's ``max_hours``), and measures the run (:class:`RunResult`): makespan, job
completion times, time to tier 1, deadlines met, utilisation, migrations and resizes, planner time
per interval, the plans that failed the checker (never applied; there should be none), and the
idle waits (a job waiting while a node it may use has room for it; none for a work-conserving policy).

A policy with ``reads_ground_truth = True`` (the oracle) gets ``observe_truth(cluster.truth())`` right
before each call; no other policy ever receives the truth.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from adapters.loop import ControlLoop, Policy, Recorder, Tick
from adapters.sim.cluster import SimCluster
from adapters.sim.scenario import JobSpec, Scenario
from adapters.sim.truth import GroundTruth, TraceLibrary
from planner.plan import Plan
from planner.snapshot import Snapshot

#: Failed intervals in a row after which a simulation stops with the error: one bad interval is
#: skipped (as the daemon skips it), a policy that fails every interval is a bug to show.
GIVE_UP_AFTER = 3


@dataclass
class JobResult:
    id: str
    model: str
    arrival: float
    start: float | None
    finish: float | None
    jct: float | None
    tier1_time: float | None  # from arrival
    tier1_deadline: float | None
    met_deadline: bool | None
    epochs: float
    migrations: int
    resizes: int
    pauses: int
    lost_epochs: float
    tag: bool
    #: checkpoint-restarts: migrations + pauses + restarts in place
    restarts: int = 0


@dataclass
class RunResult:
    scenario: str
    policy: str
    seed: int
    finished: bool
    makespan: float | None
    mean_jct: float | None
    p95_jct: float | None
    mean_tier1_time: float | None
    qoe_met: int
    qoe_total: int
    qoe_share: float | None
    cpu_utilisation: float | None
    gpu_utilisation: float | None
    migrations: int
    resizes: int
    pauses: int
    intervals: int
    plan_seconds_mean: float
    plan_seconds_p95: float
    plan_seconds_max: float
    checker_failures: int
    #: (interval, job) pairs where a job waited while a node it may use had room for its minimum
    #: (idle CPU under the water-fill, free GPUs and memory): 0 for a work-conserving policy.
    idle_waits: int
    makespan_lower_bound: float
    jobs: list[JobResult]
    #: per interval: time; per job (guaranteed millicores, GPUs) held by all its replicas ("alloc") and millicores used under
    #: the water-fill ("used_cpu"); the cluster's [CPU millicores, GPUs] ("capacity") — for the allocation plot.
    timeline: list[dict[str, Any]] = field(default_factory=list)
    #: per job: [(time, predicted finish time)] from the plans (null when the policy predicts nothing).
    eta: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    #: Intervals that raised (the loop's error boundary: logged, skipped); a run gives up after
    #: :data:`GIVE_UP_AFTER` in a row.
    failed_intervals: int = 0
    #: Planning time per interval, median and 99th percentile (beside the mean, p95 and max above).
    plan_seconds_median: float = 0.0
    plan_seconds_p99: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def makespan_lower_bound(
    scenario: Scenario, jobs: list[JobSpec], library: TraceLibrary, stop_epochs: dict[str, int] | None = None
) -> float:
    """A lower bound on any policy's makespan for this run: the largest of

    (a) the job that ends last when run alone at its best allocation from its arrival;
    (b) the total work at each job's most efficient allocation divided by the cluster's capacity
        (CPU-core-seconds and GPU-seconds separately);
    (c) for the CPU jobs, the smallest end ``T`` at which, for every arrival time ``s``, the jobs
        arriving at ``s`` or later fit their least CPU-seconds *to end by T* into ``C · (T - s)``
        (:func:`_cpu_deadline_bound`). Finishing by ``T`` forces a job's average rate up, and on a
        concave speed-up a higher rate costs more core-seconds per epoch, so (c) is at least (b)
        and sees the tail that (b) does not: the last jobs cannot all run at their most efficient
        allocation and still end together.

    Epochs: ``stop_epochs`` (the run's own stop epochs, drawn at creation and the same for every
    policy of a seed), else each job's last epoch, or with ``stop_at_target`` the first epoch whose
    truth is within three noise sigmas of its last tier. Start-up delays are left out, so it is a
    true bound."""
    if not jobs:
        return 0.0
    t0 = min(j.arrival for j in jobs)
    longest = 0.0
    cpu_work = gpu_work = 0.0
    cpu_jobs: list[tuple[float, _LeastCpuSeconds]] = []
    for s in jobs:
        truth = s.truth(library)
        epochs = float(stop_epochs[s.id]) if stop_epochs and s.id in stop_epochs else _epochs_at_least(scenario, s, truth)
        if s.replicas > 1 or s.max_nodes > 1:  # a gang: its best count and spread
            shapes = _gang_shapes(scenario, s)
            best_t = min(truth.epoch_seconds(s.max_cpu_millis, g, p) for g, p in shapes)
            longest = max(longest, s.arrival - t0 + epochs * best_t)
            gpu_work += epochs * min(g * sum(p) * truth.epoch_seconds(s.min_cpu_millis, g, p) for g, p in shapes)
            continue
        gpu_counts = range(max(s.min_gpus, 1), s.max_gpus + 1) if s.kind == "gpu" else range(0, 1)
        best_t = min(truth.epoch_seconds(s.max_cpu_millis, g) for g in gpu_counts)
        longest = max(longest, s.arrival - t0 + epochs * best_t)
        if s.kind == "gpu":
            gpu_work += epochs * min(g * truth.epoch_seconds(s.min_cpu_millis, g) for g in gpu_counts)
        else:
            cpu_work += epochs * min(
                (c / 1000.0) * truth.epoch_seconds(c, 0) for c in np.linspace(s.min_cpu_millis, s.max_cpu_millis, 16)
            )
            cpu_jobs.append((s.arrival - t0, _LeastCpuSeconds(epochs, s, truth)))
    cpu_cap = sum(n.cpu_millis for n in scenario.nodes) / 1000.0
    gpu_cap = sum(n.gpus for n in scenario.nodes)
    work_bound = max(cpu_work / cpu_cap if cpu_cap else 0.0, gpu_work / gpu_cap if gpu_cap else 0.0)
    deadline_bound = _cpu_deadline_bound(cpu_jobs, cpu_cap)
    return max(longest, work_bound, deadline_bound)


def _gang_shapes(scenario: Scenario, s: JobSpec) -> list[tuple[int, tuple[int, ...]]]:
    """Every (GPUs per replica, replicas per node) a GPU gang could run at: each count it allows, over
    each number of nodes that could hold it (the truth reads only the node and worker counts, so one
    even spread per node count stands for all)."""
    most = max((n.gpus for n in scenario.nodes), default=0)
    out: list[tuple[int, tuple[int, ...]]] = []
    for g in range(max(s.min_gpus, 1), s.max_gpus + 1):
        per_node = max(most // g, 1)
        for k in range(s.fewest_replicas, s.replicas + 1):
            for n in range(math.ceil(k / per_node), min(k, s.max_nodes, len(scenario.nodes)) + 1):
                q, r = divmod(k, n)
                out.append((g, tuple([q + 1] * r + [q] * (n - r))))
    return out or [(max(s.min_gpus, 1), (s.replicas,))]


def _epochs_at_least(scenario: Scenario, s: JobSpec, truth: GroundTruth) -> float:
    """Epochs a job needs at least: to the final tier by the measured curve (``stop_at_target``),
    else all; reports are noisy, so a job may stop where the truth is within 3 noise sigmas of it."""
    final = s.tier2 if s.tier2 is not None else s.tier1
    if scenario.stop_at_target and final is not None:
        slack = 1.0 + 3.0 * scenario.noise
        for k, v in enumerate(truth.curve.values[: s.epochs], start=1):
            if (v * slack >= final) if truth.direction == "higher" else (v / slack <= final):
                return float(k)
    return float(s.epochs)


class _LeastCpuSeconds:
    """The fewest CPU-core-seconds in which a job does its epochs within a window (``inf`` when even
    its largest allocation is too slow).

    With the rate ``r(c) = 1 / epoch_seconds(c)`` concave in the cores ``c`` (the truth's Amdahl
    curve is), a job that runs for ``tau <= window`` seconds at a varying allocation does no more
    epochs than at its mean allocation held (Jensen), and the core-seconds per epoch
    ``c · epoch_seconds(c)`` do not fall as ``c`` grows: so the cheapest way is the smallest
    allocation (at least its minimum) that is fast enough, held. On a grid of allocations, the cost
    is read at the grid point *below* that allocation (never above the true cost). Where the rate is
    not concave on the job's range, the job's cheapest allocation is used, whatever the window."""

    GRID = 513

    def __init__(self, epochs: float, s: JobSpec, truth: GroundTruth) -> None:
        self.epochs = epochs
        cores = np.unique(np.round(np.linspace(s.min_cpu_millis, s.max_cpu_millis, self.GRID)).astype(np.int64))
        self.seconds = np.array([truth.epoch_seconds(int(c), 0) for c in cores])
        self.cost = cores / 1000.0 * self.seconds
        # concave: the rate's slope never rises (on the millicores the truth is read at)
        slope = np.diff(1.0 / self.seconds) / np.diff(cores) if cores.size > 1 else np.zeros(0)
        self.concave = bool(np.all(np.diff(slope) <= 1e-9 * np.max(np.abs(slope), initial=0.0))) and bool(
            np.all(np.diff(self.cost) >= -1e-9 * np.max(self.cost))
        )
        self.cheapest = epochs * float(np.min(self.cost))

    def __call__(self, window: float) -> float:
        if self.epochs <= 0:
            return 0.0
        per_epoch = window / self.epochs  # the slowest epoch time that ends in the window
        if self.seconds[-1] > per_epoch * (1.0 + 1e-12):
            return math.inf
        if not self.concave or self.seconds[0] <= per_epoch:
            return self.cheapest
        fast_enough = int(np.argmax(self.seconds <= per_epoch))  # the first grid point fast enough
        return self.epochs * float(self.cost[fast_enough - 1])


def _cpu_deadline_bound(cpu_jobs: list[tuple[float, _LeastCpuSeconds]], capacity: float) -> float:
    """Bound (c) of :func:`makespan_lower_bound`: the least ``T`` (seconds from the first arrival)
    such that for every arrival ``s``, the jobs arriving at ``s`` or later need at most
    ``capacity · (T - s)`` CPU-core-seconds to end by ``T``. Their need falls as ``T`` grows and the
    room grows, so the least such ``T`` is found by bisection (the lower end is returned)."""
    if not cpu_jobs or capacity <= 0:
        return 0.0
    starts = sorted({a for a, _ in cpu_jobs})

    def fits(end: float) -> bool:
        for s0 in starts:
            need = 0.0
            for a, least in cpu_jobs:
                if a >= s0:
                    need += least(end - a)
            if not need <= capacity * (end - s0):  # inf and NaN do not fit
                return False
        return True

    lo, hi = 0.0, 1.0
    while not fits(hi):
        lo, hi = hi, 2.0 * hi
        if hi > 1e12:
            return 0.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return lo


def _pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def simulate(
    scenario: Scenario,
    policy: Policy,
    policy_name: str,
    seed: int,
    library: TraceLibrary,
    *,
    data: Path | None = None,
    on_tick: Callable[[SimCluster, Tick], None] | None = None,
    record_timeline: bool = True,
    recorder: Recorder | None = None,
    learn_curves: bool = False,
) -> RunResult:
    jobs = scenario.draw(seed, library, data)
    cluster = SimCluster(scenario, jobs, library, seed, learn_curves=learn_curves)
    plan_times: list[float] = []
    failures = 0
    idle_waits = 0
    timeline: list[dict[str, Any]] = []
    eta: dict[str, list[tuple[float, float]]] = {}

    def tick_hook(tick: Tick) -> None:
        nonlocal failures, idle_waits
        plan_times.append(tick.plan_seconds)
        failures += int(bool(tick.violations))
        idle_waits += cluster.idle_waits()
        if record_timeline:
            timeline.append(
                {
                    "time": tick.time,
                    "alloc": {
                        j.spec.id: [j.cpu_millis * j.replicas, j.gpus_held()]
                        for j in cluster.jobs.values()
                        if j.status == "running"
                    },
                    "used_cpu": {k: round(v, 1) for k, v in cluster.cpu_used_by_job().items()},
                    "capacity": [sum(n.cpu_millis for n in cluster.nodes.values()), sum(n.gpus for n in cluster.nodes.values())],
                }
            )
            for a in tick.plan.assignments:
                if a.predictions.eta_finish is not None and math.isfinite(a.predictions.eta_finish):
                    eta.setdefault(a.job, []).append((tick.time, a.predictions.eta_finish))
        if on_tick is not None:
            on_tick(cluster, tick)

    run_policy: Policy = policy
    if getattr(policy, "reads_ground_truth", False) is True:
        observe_truth = policy.observe_truth  # type: ignore[attr-defined]

        def run_policy(snapshot: Snapshot) -> Plan:
            observe_truth(cluster.truth())
            return policy(snapshot)

    loop = ControlLoop(
        cluster,
        run_policy,
        cluster,
        interval=scenario.interval_seconds,
        on_tick=tick_hook,
        recorder=recorder,
        give_up_after=GIVE_UP_AFTER,
    )

    def stop(_: Tick) -> bool:
        return cluster.done() or cluster.timed_out()

    # The first observation happens at the first arrival; the loop wakes at every later arrival and
    # finish (``replan_on_events``), else at the next interval.
    count, _ = loop.run(until=stop)
    # A run that ends exactly when the last job finished: advance to the last finish (already recorded).
    results: list[JobResult] = []
    for j in cluster.jobs.values():
        s = j.spec
        jct = None if j.finish is None else j.finish - s.arrival
        t1 = None if j.tier1_time is None else j.tier1_time - s.arrival
        met = None
        if s.tier1_deadline is not None:
            met = j.tier1_time is not None and j.tier1_time <= s.tier1_deadline
        results.append(
            JobResult(
                id=s.id,
                model=s.model,
                arrival=s.arrival,
                start=j.first_start,
                finish=j.finish,
                jct=jct,
                tier1_time=t1,
                tier1_deadline=s.tier1_deadline,
                met_deadline=met,
                epochs=round(j.progress, 6),
                migrations=j.migrations,
                resizes=j.resizes,
                pauses=j.pauses,
                lost_epochs=round(j.lost_epochs, 6),
                tag=s.tag,
                restarts=j.restarts,
            )
        )
    finished = all(r.finish is not None for r in results)
    finishes = [r.finish for r in results if r.finish is not None]
    makespan = (max(finishes) - cluster.t0) if finished and finishes else None
    jcts = [r.jct for r in results if r.jct is not None]
    t1s = [r.tier1_time for r in results if r.tier1_time is not None]
    with_deadline = [r for r in results if r.met_deadline is not None]
    n_met = sum(1 for r in with_deadline if r.met_deadline)
    span = (max(finishes) - cluster.t0) if finishes else (cluster.t - cluster.t0)
    cpu_cap = sum(n.cpu_millis for n in scenario.nodes) / 1000.0
    gpu_cap = sum(n.gpus for n in scenario.nodes)
    return RunResult(
        scenario=scenario.name,
        policy=policy_name,
        seed=seed,
        finished=finished,
        makespan=makespan,
        mean_jct=float(np.mean(jcts)) if finished and jcts else None,
        p95_jct=_pct(jcts, 95) if finished else None,
        mean_tier1_time=float(np.mean(t1s)) if t1s and len(t1s) == len(results) else None,
        qoe_met=n_met,
        qoe_total=len(with_deadline),
        qoe_share=(n_met / len(with_deadline)) if with_deadline else None,
        cpu_utilisation=(cluster.used_cpu_seconds / (cpu_cap * span)) if cpu_cap and span > 0 else None,
        gpu_utilisation=(cluster.used_gpu_seconds / (gpu_cap * span)) if gpu_cap and span > 0 else None,
        migrations=sum(r.migrations for r in results),
        resizes=sum(r.resizes for r in results),
        pauses=sum(r.pauses for r in results),
        intervals=count,
        plan_seconds_mean=float(np.mean(plan_times)) if plan_times else 0.0,
        plan_seconds_p95=_pct(plan_times, 95) or 0.0,
        plan_seconds_max=max(plan_times, default=0.0),
        plan_seconds_median=_pct(plan_times, 50) or 0.0,
        plan_seconds_p99=_pct(plan_times, 99) or 0.0,
        checker_failures=failures,
        idle_waits=idle_waits,
        makespan_lower_bound=makespan_lower_bound(
            scenario, jobs, library, {j.spec.id: j.stop_epoch for j in cluster.jobs.values()}
        ),
        jobs=results,
        timeline=timeline,
        eta=eta,
        failed_intervals=loop.failed,
    )
