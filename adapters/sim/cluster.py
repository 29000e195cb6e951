"""The simulated cluster: an :class:`~adapters.base.Adapter` and a virtual :class:`~adapters.base.Clock`.

Jobs arrive at their scenario times and train on their *ground truth* (measured curve, measured or
Amdahl speed; :mod:`adapters.sim.truth`). The CPU of a node is shared as the Linux kernel shares it
among cgroups (work-conserving shares):

- a job's ``cpu_millis`` is a *guaranteed share*, a weight (cgroup ``cpu.weight``, Docker
  ``--cpu-shares``, a Kubernetes request); ``cpu_limit_millis``, when the plan sets one, is a hard
  cap (a quota: ``docker update --cpus``);
- the node's CPU goes to its running jobs by weighted max-min water-filling (:func:`share_cpu`):
  weight = guarantee × replicas, cap = replicas × min(limit, ``max_cpu_millis``); what a capped job
  leaves goes to the others in proportion to their weights, at once. GPU jobs' speed does not depend
  on CPU in the truth: they use exactly their guarantee. A job starting or restarting uses no CPU
  (with the scenario's ``startup_cpu``, a CPU job then uses its share, at most one core a replica);
- the split is recomputed at every event (a job finishes, a blocked job resumes, the loop applies a
  change), so rates are piecewise constant between events and progress is exact.

What a policy sees (``observe``) is only what a real adapter observes: per-epoch metric reports
(the measured value with relative Gaussian noise, drawn for every epoch when the job is created),
the seconds per epoch measured at the CPU the job actually used (from the step counter jobs log with
their progress: time spent training at an allocation over the epochs gained there), its guarantee
and cap, its targets and bounds. A finished job is shown for :data:`FINISHED_SHOWN_SECONDS` after it
ends, then no more, as a cluster removes finished work (a Kubernetes Job's
``ttlSecondsAfterFinished``; exited containers pruned): no policy reads a finished job, and over a
months-long trace every observation and plan digest would otherwise carry every job that ever ran.
What it does (``apply``):

- ``start``: after ``restart_seconds`` of start-up, training runs from the last checkpoint;
- ``resize``: live, no loss (jobs that are ``resizable``; a change of the cap alone is live for
  every job); otherwise the loop sends ``migrate``;
- ``migrate``: the job checkpoints and restarts (``checkpoint_seconds + restart_seconds`` without
  progress) on its new node; jobs checkpoint at every epoch end and every
  ``checkpoint_every_seconds`` (600 by default) of training, and the work since then is lost;
- ``pause``: as a migration, but the job waits unplaced;
- gangs (:mod:`adapters.sim.gangs`): a change's ``replicas`` and ``placement`` say how many replicas
  run on which nodes; each holds the per-replica share on its node, and the job trains at the truth's
  speed for that placement. A new count or placement is live (``resize``) only for an ``elastic``
  job; for any other the loop sends ``migrate`` (a checkpoint-restart);
- ``deliver``: the tier-1 model is handed over (recorded).

As every adapter (:mod:`adapters.base`), it treats a change already in effect as an ``ok`` no-op
(nothing placed again, nothing counted) and a change for a job in another state than its action
starts from (a start of a running job, a migration or resize of a pending one) as a ``conflict``;
a resize, move or pause of a job that has finished is ``ok`` with nothing changed, as on Docker and
Kubernetes (there, the job ended between the observe and the change).

``sleep`` (the clock) ends early at the first arrival or finish (``replan_on_events``), so the loop
re-plans at once. A job finishes at its last epoch (``epochs``), or, with ``stop_at_target``, at the
first epoch whose reported metric reaches its last tier. Everything random comes from the run's seed.
:meth:`SimCluster.truth` exposes what really remains of each job, for the oracle policy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from adapters.base import MOOT_WHEN_ENDED, Adapter, Change, Outcome, Shares, change_shares, finished_before
from adapters.sim.gangs import could_start, shares_problem, snapshot_placement
from adapters.sim.scenario import JobSpec, Scenario
from adapters.sim.truth import METRICS, GroundTruth, TraceLibrary, task_name
from planner.outlook import JobTruth
from planner.snapshot import MILLI_PER_GPU as ONE_GPU_MILLI
from planner.snapshot import (
    Allocation,
    Job,
    JobStatus,
    MetricPoint,
    Node,
    QoETarget,
    ServerRole,
    Settings,
    Snapshot,
    SpeedPoint,
    TaskCurves,
    Tier,
)
from store import task_curves_from

#: A finished job stays in the snapshot this long after it ended (module docstring).
FINISHED_SHOWN_SECONDS = 3600.0
#: Least progress at one allocation (in epochs) before its speed is reported.
MIN_SPEED_EPOCHS = 0.02
#: Seconds per epoch reported by the truth's speed where a job cannot run (finite, for the solvers).
CANNOT_RUN_SECONDS = 1e12
#: Tolerance on event times and progress (seconds, epochs).
EPS = 1e-9


def share_cpu(capacity: float, weights: Sequence[float], caps: Sequence[float]) -> list[float]:
    """Weighted max-min (water-filling) split of ``capacity``: each gets ``min(cap, lam * weight)`` with
    ``lam`` as high as the capacity allows, so what a capped one leaves flows to the others in
    proportion to their weights (the kernel's CPU shares). Weights below 1 count as 1 (a cgroup's least)."""
    n = len(weights)
    out = [0.0] * n
    w = [max(float(x), 1.0) for x in weights]
    c = [max(float(x), 0.0) for x in caps]
    left = max(float(capacity), 0.0)
    wsum = sum(w)
    for i in sorted(range(n), key=lambda i: (c[i] / w[i], i)):
        fair = left * w[i] / wsum if wsum > 0 else 0.0
        if c[i] <= fair:
            out[i] = c[i]
            left -= c[i]
            wsum -= w[i]
        else:
            out[i] = fair
            left -= fair
            wsum -= w[i]
    return out


def _epoch_seconds(
    truth: GroundTruth, cpu_millis: float, gpus: int, placement: tuple[int, ...] = (), servers: int | None = None
) -> float:
    # ``epoch_seconds`` reads ``cpu_millis / 1000``: a fractional effective share is exact.
    return truth.epoch_seconds(cast(int, cpu_millis), gpus, placement, servers)


class TruthSpeed:
    """The ground truth's speed of one job as a :class:`planner.outlook.SpeedLike` (for the oracle):
    seconds per epoch per replica at an allocation, :data:`CANNOT_RUN_SECONDS` where it cannot run."""

    def __init__(self, truth: GroundTruth) -> None:
        self.truth = truth

    @property
    def source(self) -> str:
        return "truth"

    @property
    def n_observations(self) -> int:
        return 0

    def seconds_per_epoch(self, cpu_millis: float, gpus: float) -> float:
        t = _epoch_seconds(self.truth, float(cpu_millis), int(round(gpus)))
        return t if math.isfinite(t) and t > 0 else CANNOT_RUN_SECONDS

    def seconds_per_epoch_many(self, cpu_millis: np.ndarray, gpus: np.ndarray) -> np.ndarray:
        cpu = np.asarray(cpu_millis, dtype=float)
        gpu = np.asarray(gpus, dtype=float)
        cpu, gpu = np.broadcast_arrays(cpu, gpu)
        pairs = np.stack([cpu.ravel(), np.round(gpu.ravel())], axis=1)
        uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
        vals = np.array([self.seconds_per_epoch(float(c), float(g)) for c, g in uniq], dtype=float)
        return vals[np.asarray(inverse).ravel()].reshape(cpu.shape)


@dataclass
class SimJob:
    spec: JobSpec
    truth: GroundTruth
    rng: np.random.Generator
    status: str = "future"  # future | pending | running | finished
    node: str | None = None
    cpu_millis: int = 0  # guaranteed share (weight) per replica
    gpus: int = 0
    cpu_limit: int | None = None  # hard cap (quota) per replica set by the plan
    gpu_device: int | None = None  # a fractional job's shared device (spec.gpu_milli)
    replicas: int = 1  # replicas running (the spec's count while not running)
    shares: Shares = ()  # where they run: (node, replicas) per node, rank 0's (``node``) first
    servers: int = 0  # a parameter-server job's servers on each of its nodes (0: none)
    progress: float = 0.0  # epochs done (continuous)
    blocked_until: float = 0.0
    history: list[MetricPoint] = field(default_factory=list)
    reported: list[float] = field(default_factory=list)  # reported metric per epoch so far
    values: list[float] = field(default_factory=list)  # the reported metric of every epoch, drawn at creation
    stop_epoch: int = 0  # the epoch at which the job stops (from ``values``)
    #: CPU used, GPUs, replicas, nodes, servers in all -> [seconds, epochs]
    trained: dict[tuple[int, int, int, int, int], list[float]] = field(default_factory=dict)
    first_start: float | None = None
    started: float | None = None  # the start of its current run (a start, a migration, a restart in place)
    finish: float | None = None
    tier1_time: float | None = None
    tier2_time: float | None = None
    delivered_at: float | None = None
    migrations: int = 0
    resizes: int = 0
    pauses: int = 0
    in_place: int = 0  # restarts where it was (a mover that found no room)
    lost_epochs: float = 0.0
    busy_seconds: float = 0.0  # time holding resources while placed
    work: float = 0.0  # epochs trained (checks conservation)
    # Piecewise-constant state between events.
    effective: float = 0.0  # CPU used per replica now (0 while blocked)
    rate: float = 0.0  # epochs per second now
    t_adv: float = 0.0  # progress is accounted up to this time
    ckpt_progress: float = 0.0  # progress at the last checkpoint
    since_ckpt: float = 0.0  # training seconds since the last checkpoint
    next_event: float = math.inf  # its next resume or finish at the current rates
    speed: TruthSpeed | None = None
    view: Job | None = None  # what ``observe`` last showed of the job, reused while ``view_key`` holds
    view_key: tuple[object, ...] = ()

    @property
    def stop_value(self) -> float | None:
        s = self.spec
        return s.tier2 if s.tier2 is not None else s.tier1

    @property
    def restarts(self) -> int:
        """Checkpoint-restarts: migrations, pauses and restarts in place."""
        return self.migrations + self.pauses + self.in_place

    def reaches(self, value: float | None, v: float) -> bool:
        if value is None:
            return False
        return v >= value if self.truth.direction == "higher" else v <= value

    def here(self, node: str) -> int:
        """Replicas placed on ``node``."""
        return dict(self.shares).get(node, 0)

    def server_cpu(self, node: str) -> int:
        """CPU share of the job's parameter servers on ``node`` (0 without servers there)."""
        if self.spec.servers is None or self.here(node) == 0:
            return 0
        return self.servers * self.spec.servers[2]

    def weight_on(self, node: str) -> float:
        """The job's CPU weight on ``node``: its replicas' guarantees there and its servers'."""
        return float(self.cpu_millis * self.here(node) + self.server_cpu(node))

    def cap_on(self, node: str) -> float:
        """Most CPU the job can use on ``node`` (its replicas there): its cap, or, for GPU jobs, its
        guarantee (and its servers' there)."""
        if self.spec.kind == "gpu":
            return float(self.cpu_millis * self.here(node) + self.server_cpu(node))
        top = self.spec.max_cpu_millis
        limit = top if self.cpu_limit is None else min(self.cpu_limit, top)
        return float(limit * self.here(node))

    def gpus_held(self) -> float:
        """GPUs the job holds, every replica's: GPUs per replica times the replicas, or a fractional
        job's share of its one device."""
        if self.spec.gpu_milli is not None and self.gpus:
            return self.spec.gpu_milli / ONE_GPU_MILLI
        return float(self.gpus * self.replicas)

    def servers_in_all(self) -> int | None:
        """A parameter-server job's servers over all its nodes (None for any other job)."""
        return None if self.spec.servers is None else self.servers * len(self.shares)

    def spread(self) -> tuple[int, ...]:
        """The replicas per node the truth's speed reads (``()`` for one replica on one node)."""
        return tuple(k for _, k in self.shares) if self.replicas > 1 or len(self.shares) > 1 else ()

    def first_reaching(self, value: float | None) -> int | None:
        """First epoch (up to the stop) whose reported value reaches ``value``."""
        if value is None:
            return None
        for k in range(1, self.stop_epoch + 1):
            if self.reaches(value, self.values[k - 1]):
                return k
        return None


class SimCluster(Adapter):
    """A virtual cluster driven by the control loop; also its clock (``sleep`` advances the simulation)."""

    def __init__(
        self, scenario: Scenario, jobs: Sequence[JobSpec], library: TraceLibrary, seed: int, *, learn_curves: bool = False
    ) -> None:
        self.scenario = scenario
        #: Put the curves of the jobs finished so far into each snapshot, per task (``curve_priors``),
        #: as the state store gives a daemon (``store.curves``).
        self.learn_curves = learn_curves
        self._curves: dict[str, tuple[tuple[str, ...], TaskCurves | None]] = {}
        self.t = 0.0
        self.nodes = {n.name: n for n in scenario.nodes}
        # The snapshot's nodes never change (capacity, not free room; the models are frozen): built
        # once, not at every observation (a 1,523-node cluster spent most of its observations here).
        self._node_views = tuple(
            Node(name=n.name, cpu_millis=n.cpu_millis, gpus=n.gpus, memory_mib=n.memory_mib, gpu_type=n.gpu_type)
            for n in scenario.nodes
        )
        self.jobs: dict[str, SimJob] = {}
        for i, spec in enumerate(jobs):
            truth = spec.truth(library)
            j = SimJob(spec, truth, np.random.default_rng([seed, i]), replicas=spec.replicas)
            self._draw(j)
            self.jobs[spec.id] = j
        self.on: dict[str, dict[str, SimJob]] = {n: {} for n in self.nodes}  # running jobs per node
        self._dirty: set[str] = set()
        self._arrivals = sorted((j.spec.arrival, j.spec.id) for j in self.jobs.values())
        self._next_arrival = 0
        self.t0 = min((j.spec.arrival for j in self.jobs.values()), default=0.0)
        self.t = self.t0
        self.events: list[tuple[float, str, str]] = []  # (time, job, what)
        self.used_cpu_seconds = 0.0
        self.used_gpu_seconds = 0.0
        self._arrive()

    def _draw(self, j: SimJob) -> None:
        """The reported metric of every epoch, in order, from the job's own generator; the stop epoch."""
        noise = self.scenario.noise
        vals: list[float] = []
        for k in range(1, j.spec.epochs + 1):
            true = j.truth.metric(k)
            vals.append(float(true * (1.0 + noise * j.rng.standard_normal())) if noise > 0 else true)
        j.values = vals
        j.stop_epoch = j.spec.epochs
        if self.scenario.stop_at_target:
            j.stop_epoch = j.first_reaching(j.stop_value) or j.spec.epochs
        j.speed = TruthSpeed(j.truth)

    # -- clock ---------------------------------------------------------------------------------
    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        """Advance the simulation by ``seconds``, or, with ``replan_on_events``, to the first arrival or
        finish inside them (the loop then re-plans at once)."""
        end = self.t + max(0.0, seconds)
        wake = self.scenario.replan_on_events
        if wake and self._next_arrival < len(self._arrivals):
            arrival = self._arrivals[self._next_arrival][0]
            if self.t < arrival < end:
                end = arrival
        self._run(end, stop_at_finish=wake)
        self._arrive()

    def done(self) -> bool:
        return all(j.status == "finished" for j in self.jobs.values())

    def timed_out(self) -> bool:
        return self.t - self.t0 >= self.scenario.max_hours * 3600

    # -- ground-truth progress -----------------------------------------------------------------
    def _arrive(self) -> None:
        while self._next_arrival < len(self._arrivals) and self._arrivals[self._next_arrival][0] <= self.t:
            j = self.jobs[self._arrivals[self._next_arrival][1]]
            if j.status == "future":
                j.status = "pending"
            self._next_arrival += 1

    def _running(self) -> list[SimJob]:
        seen: dict[str, SimJob] = {}
        for per in self.on.values():
            for j in per.values():
                seen.setdefault(j.spec.id, j)  # a gang over several nodes once
        return list(seen.values())

    def _run(self, end: float, *, stop_at_finish: bool) -> None:
        """Event by event up to ``end``: between events every rate is constant."""
        while True:
            self._refresh()
            running = self._running()
            t_next = min((j.next_event for j in running), default=math.inf)
            if t_next > end:
                for j in running:
                    self._advance(j, end)
                self.t = max(self.t, end)
                return
            self.t = max(self.t, t_next)
            finished = False
            for j in running:
                if j.next_event <= t_next + EPS:
                    nodes = [n for n, _ in j.shares]
                    self._advance(j, self.t)
                    self._dirty.update(nodes)  # a finish or a resume: the nodes' split changes
                    finished = finished or j.status == "finished"
            if finished and stop_at_finish:
                self._refresh()
                for j in self._running():
                    self._advance(j, self.t)
                return

    def _refresh(self) -> None:
        """Recompute the CPU split of every node whose set of busy jobs changed."""
        while self._dirty:
            name = self._dirty.pop()
            for j in list(self.on[name].values()):
                self._advance(j, self.t)  # at the old rates, up to now
            jobs = list(self.on[name].values())
            active = [j for j in jobs if j.blocked_until <= self.t + EPS]
            # Checkpointing or starting up (scenario ``startup_cpu``): a CPU job's process is busy
            # on one core a replica, and makes no progress.
            warming = [j for j in jobs if self._warming(j, self.t)]
            busy = active + warming
            caps = [j.cap_on(name) for j in active] + [min(j.cap_on(name), 1000.0 * j.here(name)) for j in warming]
            shares = share_cpu(self.nodes[name].cpu_millis, [j.weight_on(name) for j in busy], caps)
            for j in jobs:
                j.effective, j.rate = 0.0, 0.0
            for j, s in zip(warming, shares[len(active) :], strict=True):
                j.effective = s / j.here(name)
            for j, s in zip(active, shares[: len(active)], strict=True):
                # A gang spans nodes only on GPUs, whose speed does not depend on CPU: it uses its
                # guarantee on every node, so any of its nodes gives the same share per replica.
                j.effective = max(s - j.server_cpu(name), 0.0) / j.here(name)
                t = _epoch_seconds(j.truth, j.effective, j.gpus, j.spread(), j.servers_in_all())
                j.rate = 0.0 if not math.isfinite(t) or t <= 0 else 1.0 / t
            for j in jobs:
                if j.blocked_until > self.t + EPS:
                    j.next_event = j.blocked_until
                elif j.rate > 0:
                    j.next_event = j.t_adv + max(j.stop_epoch - j.progress, 0.0) / j.rate
                else:
                    j.next_event = math.inf

    def _warming(self, j: SimJob, t: float) -> bool:
        """Whether ``j`` is checkpointing or starting up at ``t`` and uses CPU meanwhile (``startup_cpu``)."""
        return self.scenario.startup_cpu and j.spec.kind == "cpu" and j.blocked_until > t + EPS

    def _advance(self, j: SimJob, t: float) -> None:
        """Account ``j`` from ``j.t_adv`` to ``t`` at its current (constant) rate."""
        t0 = j.t_adv
        if t <= t0 or j.status != "running":
            return
        j.t_adv = t
        rate = j.rate
        if rate <= 0:  # blocked (or cannot run): holds its GPUs, uses no CPU but a start-up's (``_refresh``)
            self._hold(j, t - t0, (t - t0) * j.effective * j.replicas / 1000.0 if self._warming(j, t0) else 0.0)
            return
        p0 = j.progress
        stop = j.stop_epoch
        p1 = p0 + (t - t0) * rate
        finishing = p1 >= stop - EPS
        if finishing:
            p1 = float(stop)
            t = min(t, t0 + (stop - p0) / rate)
        train = t - t0
        self._hold(j, train, train * j.effective * j.replicas / 1000.0)
        key = (int(round(j.effective)), j.gpus, j.replicas, len(j.shares), j.servers_in_all() or 0)
        rec = j.trained.setdefault(key, [0.0, 0.0])
        rec[0] += train
        rec[1] += p1 - p0
        j.work += p1 - p0
        first = math.floor(p0 + EPS) + 1
        last = stop if finishing else math.floor(p1 + EPS)
        for k in range(first, last + 1):
            self._epoch_done(j, k, t0 + (k - p0) / rate)
        # Checkpoints: at every epoch end, and every ``checkpoint_every_seconds`` of training since the
        # last one (tracked in training seconds, whatever the rates were).
        every = self.scenario.checkpoint_every_seconds
        if last >= first:  # the last epoch end in this stretch is a checkpoint
            base = anchor = float(last)
            prev, since = 0.0, max(t - (t0 + (last - p0) / rate), 0.0)
        else:
            base, anchor = j.ckpt_progress, p0
            prev, since = j.since_ckpt, j.since_ckpt + train
        n = math.floor(since / every + 1e-12)
        if n >= 1:
            # the periodic checkpoints fall ``every - prev``, ``2 every - prev``, ... training seconds
            # after ``anchor`` (at this stretch's constant rate)
            base = anchor + (n * every - prev) * rate
            since -= n * every
        j.ckpt_progress, j.since_ckpt = min(base, p1), since
        j.progress = p1
        if finishing:
            self._finish(j, t)

    def _hold(self, j: SimJob, seconds: float, cpu_seconds: float) -> None:
        j.busy_seconds += seconds
        self.used_gpu_seconds += seconds * j.gpus_held()  # a fractional job: its share of one device
        self.used_cpu_seconds += cpu_seconds

    def _epoch_done(self, j: SimJob, k: int, tk: float) -> None:
        v = j.values[k - 1]
        j.reported.append(v)
        field_name = METRICS[j.spec.model][2]
        point = {"time": round(tk, 3), "epoch": k, field_name: round(v, 6)}
        j.history.append(MetricPoint(**point))
        if j.tier1_time is None and j.reaches(j.spec.tier1, v):
            j.tier1_time = tk
        if j.tier2_time is None and j.reaches(j.spec.tier2, v):
            j.tier2_time = tk

    def _finish(self, j: SimJob, tk: float) -> None:
        self._unplace(j)
        j.status = "finished"
        j.finish = tk
        self.events.append((tk, j.spec.id, "finish"))

    # -- placing -----------------------------------------------------------------------------------
    def _place(
        self,
        j: SimJob,
        shares: Shares,
        cpu: int,
        gpus: int,
        limit: int | None,
        blocked_until: float,
        device: int | None = None,
        servers: int = 0,
    ) -> None:
        j.status, j.node, j.cpu_millis, j.gpus, j.cpu_limit = "running", shares[0][0], cpu, gpus, limit
        j.servers = servers if j.spec.servers is not None else 0
        j.shares, j.replicas = shares, sum(k for _, k in shares)
        j.gpu_device = device if j.spec.gpu_milli is not None and gpus else None
        j.blocked_until = blocked_until
        j.t_adv = self.t
        j.effective, j.rate, j.next_event = 0.0, 0.0, math.inf
        for node, _ in shares:
            self.on[node][j.spec.id] = j
            self._dirty.add(node)

    def _unplace(self, j: SimJob) -> None:
        for node, _ in j.shares:
            self.on[node].pop(j.spec.id, None)
            self._dirty.add(node)
        j.node, j.shares = None, ()
        j.effective, j.rate, j.next_event = 0.0, 0.0, math.inf

    def _sync(self) -> None:
        """Every running job accounted up to now (before its allocation changes)."""
        for j in self._running():
            self._advance(j, self.t)

    # -- adapter ---------------------------------------------------------------------------------
    def observe(self) -> Snapshot:
        sc = self.scenario
        self._sync()
        nodes = list(self._node_views)
        jobs: list[Job] = []
        used = self.cpu_used_by_job()  # what each placed job uses now under its node's water-fill
        for j in self.jobs.values():
            if j.status == "future":
                continue
            if j.status == "finished" and j.finish is not None and self.t - j.finish > FINISHED_SHOWN_SECONDS:
                continue
            mine = round(used[j.spec.id] / j.replicas, 1) if j.status == "running" and j.spec.id in used else None
            s = j.spec
            # Seconds per epoch at each CPU actually used (and GPUs), from the step counter the jobs
            # log with their progress (the JSON-lines format): time spent training / epochs gained there.
            speeds = tuple(
                (max(1, c), g, round(sec / ep, 4), None if k == s.replicas else k, n, ps or None)
                for (c, g, k, n, ps), (sec, ep) in sorted(j.trained.items())
                if ep >= MIN_SPEED_EPOCHS and c >= 1
            )
            key = (
                j.status,
                j.shares,
                j.cpu_millis,
                j.gpus,
                j.gpu_device,
                j.cpu_limit,
                j.servers,
                len(j.history),
                j.started,
                j.delivered_at is not None,
                speeds,
            )
            if j.view is not None and j.view_key == key:
                # Nothing it shows changed (validating it again is most of the cost) but the CPU it uses.
                if j.view.cpu_used_millis != mine:
                    j.view = j.view.model_copy(update={"cpu_used_millis": mine})
                jobs.append(j.view)
                continue
            metric, direction, field_name = METRICS[s.model]
            tier1, tier2 = self._tiers(j)
            target = QoETarget(
                metric=metric if field_name == "metric" else "loss",
                direction=direction,
                tier1=tier1,
                tier2=tier2,
                max_epochs=s.epochs,
            )
            speed = [
                SpeedPoint(cpu_millis=c, gpus=g, seconds_per_epoch=v, replicas=k, nodes=n, servers=ps)
                for c, g, v, k, n, ps in speeds
            ]
            running = j.status == "running"
            jobs.append(
                Job(
                    id=s.id,
                    status=cast(JobStatus, j.status),  # "future" jobs are not in a snapshot
                    task=task_name(s.model, s.batch_size),
                    node=j.node if running else None,
                    allocation=Allocation(
                        cpu_millis=j.cpu_millis,
                        gpus=j.gpus,
                        cpu_limit_millis=j.cpu_limit,
                        gpu_device=j.gpu_device,
                        servers=j.servers or None,
                    )
                    if running
                    else None,
                    gpu_milli=s.gpu_milli,
                    gpu_type=list(s.gpu_type) if isinstance(s.gpu_type, tuple) else s.gpu_type,
                    replicas=s.replicas,
                    min_replicas=s.min_replicas,
                    max_nodes=s.max_nodes,
                    elastic=s.elastic,
                    placement=snapshot_placement(j.shares, s.replicas) if running else None,
                    cpu_used_millis=mine,
                    min_cpu_millis=s.min_cpu_millis,
                    max_cpu_millis=s.max_cpu_millis,
                    min_gpus=s.min_gpus,
                    max_gpus=s.max_gpus,
                    memory_mib=s.memory_mib,
                    resizable=s.resizable,
                    checkpoint_seconds=s.checkpoint_seconds,
                    restart_seconds=s.restart_seconds,
                    checkpoint_every_seconds=sc.checkpoint_every_seconds,
                    priority=s.priority,
                    submitted=s.arrival,
                    started=j.started if running else None,
                    history=list(j.history),
                    speed=speed,
                    target=target,
                    delivered=j.delivered_at is not None,
                    servers=None
                    if s.servers is None
                    else ServerRole(min=s.servers[0], max=s.servers[1], cpu_millis=s.servers[2], form=s.servers[3]),  # type: ignore[arg-type]
                )
            )
            j.view, j.view_key = jobs[-1], key
        settings = Settings(
            interval_seconds=sc.interval_seconds,
            migration_budget=sc.migration_budget,
            deadline_confidence=sc.deadline_confidence,
        )
        curves = self._finished_curves(jobs) if self.learn_curves else []
        return Snapshot(time=round(self.t, 3), nodes=nodes, jobs=jobs, settings=settings, curve_priors=curves)

    def _finished_curves(self, jobs: Sequence[Job]) -> list[TaskCurves]:
        """The curves of the finished jobs of each task a job not finished names, newest first, as
        the state store lends them (:func:`store.task_curves_from`); kept until another finishes."""
        tasks = sorted({j.task for j in jobs if j.task is not None and j.status != "finished"})
        finished: dict[str, list[SimJob]] = {}
        for sj in self.jobs.values():  # one pass, not one per task
            if sj.status == "finished":
                finished.setdefault(task_name(sj.spec.model, sj.spec.batch_size), []).append(sj)
        out = []
        for task in tasks:
            done = sorted(finished.get(task, []), key=lambda j: (-(j.finish or 0.0), j.spec.id))
            ids = tuple(j.spec.id for j in done)
            cached = self._curves.get(task)
            if cached is None or cached[0] != ids:
                cached = (ids, task_curves_from(((j.spec.id, j.history, None) for j in done), task=task))
                self._curves[task] = cached
            if cached[1] is not None:
                out.append(cached[1])
        return out

    def _tiers(self, j: SimJob) -> tuple[Tier, Tier | None]:
        """The tiers as the snapshot shows them: the final tier (the last one the job trains to, with
        ``stop_at_target``) as tier 2, so the planner knows when a job stops."""
        s = j.spec
        final = s.tier2 if s.tier2 is not None else s.tier1
        tier2 = None
        if self.scenario.stop_at_target and final is not None:
            tier2 = Tier(value=final, deadline=s.tier2_deadline if s.tier2 is not None else None)
        elif s.tier2 is not None:
            tier2 = Tier(value=s.tier2, deadline=s.tier2_deadline)
        tier1 = Tier(value=s.tier1 if s.tier1 is not None else j.truth.curve.values[s.epochs - 1], deadline=s.tier1_deadline)
        return tier1, tier2

    def truth(self) -> dict[str, JobTruth]:
        """What really remains of each active (pending or running) job: epochs to tier 1, tier 2 (as the
        snapshot shows them; ``None`` if the reports never reach it) and to its stop, from the reported
        values drawn at creation, and its true speed. For the oracle policy only."""
        self._sync()
        out: dict[str, JobTruth] = {}
        for j in self.jobs.values():
            if j.status not in ("pending", "running"):
                continue
            tier1, tier2 = self._tiers(j)
            k1 = j.first_reaching(tier1.value)
            k2 = j.first_reaching(tier2.value) if tier2 is not None else None
            assert j.speed is not None
            out[j.spec.id] = JobTruth(
                remaining_tier1=None if k1 is None else k1 - j.progress,
                remaining_tier2=None if k2 is None else k2 - j.progress,
                remaining_finish=j.stop_epoch - j.progress,
                speed=j.speed,
            )
        return out

    def cpu_used_by_job(self) -> dict[str, float]:
        """Millicores each placed job uses now under its node's water-fill (all replicas)."""
        out: dict[str, float] = {}
        for name, placed in self.on.items():
            if not placed:
                continue
            jobs = list(placed.values())
            weights = [j.weight_on(name) for j in jobs]
            split = share_cpu(self.nodes[name].cpu_millis, weights, [j.cap_on(name) for j in jobs])
            for j, used in zip(jobs, split, strict=True):
                out[j.spec.id] = out.get(j.spec.id, 0.0) + used
        return out

    def cpu_use(self, node: str) -> float:
        """CPU (millicores) the node's placed jobs use under the water-fill, jobs starting or restarting
        counted busy (they are about to use their share)."""
        jobs = list(self.on[node].values())
        weights = [j.weight_on(node) for j in jobs]
        return sum(share_cpu(self.nodes[node].cpu_millis, weights, [j.cap_on(node) for j in jobs]))

    def idle_waits(self) -> int:
        """Pending (or paused) jobs that some node could hold now: its idle CPU (capacity minus what the
        placed jobs use under the water-fill, starting ones counted busy), free GPUs and free memory (by
        guarantees) cover the job's minimum (a gang: its fewest replicas over up to ``max_nodes`` nodes),
        on nodes of its GPU model. Zero for a work-conserving policy."""
        waiting = [j for j in self.jobs.values() if j.status == "pending"]
        if not waiting:
            return 0
        room: list[tuple[float, int, int, int]] = []  # CPU, whole GPUs, memory, most milli one device has free
        models = [n.gpu_type for n in self.nodes.values()]
        for name, n in self.nodes.items():
            placed = self.on[name].values()
            gpus, load = self._gpu_room(name, "")
            mem = n.memory_mib - sum(j.spec.memory_mib * j.here(name) for j in placed)
            most = max([ONE_GPU_MILLI - x for x in load if x > 0] + ([ONE_GPU_MILLI] if gpus > 0 else [0]))
            room.append((n.cpu_millis - self.cpu_use(name), gpus, mem, most))
        return sum(
            could_start(
                j.spec,
                room if j.spec.gpu_type is None else [r for r, m in zip(room, models, strict=True) if j.spec.takes_gpu_type(m)],
            )
            for j in waiting
        )

    def _gpu_room(self, node: str, exclude: str) -> tuple[int, list[int]]:
        """``node``'s whole devices free (none held whole, none shared) and the milli-GPUs used on
        each device by fractional jobs, leaving ``exclude`` out."""
        load = [0] * self.nodes[node].gpus
        whole = 0
        for j in self.on[node].values():
            if j.spec.id == exclude:
                continue
            if j.gpu_device is not None and j.spec.gpu_milli is not None and j.gpu_device < len(load):
                load[j.gpu_device] += j.spec.gpu_milli
            else:
                whole += j.gpus * j.here(node)
        return len(load) - whole - sum(1 for x in load if x > 0), load

    def _gpu_fits(self, node: str, j: SimJob, gpus: int, device: int | None, count: int) -> str | None:
        """Why ``count`` replicas of ``j`` with ``gpus`` each (a fractional job: on ``device``) do not
        fit the GPUs of ``node`` (``None``: they do)."""
        free, load = self._gpu_room(node, j.spec.id)
        milli = j.spec.gpu_milli
        if milli is None or not gpus:
            return None if gpus * count <= free else f"{free} GPUs free"
        if device is None or not 0 <= device < len(load):
            return f"no GPU device {device} for a fraction of {milli} milli"
        if load[device] + milli > ONE_GPU_MILLI or (load[device] == 0 and free < 1):
            room = ONE_GPU_MILLI - load[device] if load[device] > 0 else 0
            return f"GPU device {device} has {room} milli free for a fraction of {milli}"
        return None

    def _free(self, node: str, exclude: str) -> tuple[int, int, int]:
        """Room on ``node`` by guarantees (admission), leaving ``exclude`` out."""
        n = self.nodes[node]
        cpu, mem = n.cpu_millis, n.memory_mib
        for j in self.on[node].values():
            if j.spec.id != exclude:
                cpu -= int(j.weight_on(node))
                mem -= j.spec.memory_mib * j.here(node)
        return cpu, self._gpu_room(node, exclude)[0], mem

    def _lacks(self, j: SimJob, shares: Shares, cpu_millis: int, gpus: int, device: int | None, servers: int = 0) -> str | None:
        """Why ``j`` at ``cpu_millis`` / ``gpus`` per replica (and ``servers`` on each node) does not
        fit ``shares`` (leaving what it holds out; ``None``: it fits), naming the node."""
        own = servers * j.spec.servers[2] if j.spec.servers is not None else 0
        for node, k in shares:
            cpu, gpu, mem = self._free(node, j.spec.id)
            short = self._gpu_fits(node, j, gpus, device, k)
            if cpu_millis * k + own > cpu or short is not None or (j.spec.memory_mib * k > mem and j.spec.memory_mib > 0):
                return f"node {node} lacks room for {k} replica(s) ({cpu} millicores, {short or f'{gpu} GPUs free'})"
        return None

    def apply(self, changes: Sequence[Change]) -> list[Outcome]:
        self._sync()
        # A migrating job checkpoints and stops before any job is placed, so moves between nodes
        # (swaps included) find the room the movers leave, as they would on a real cluster.
        lifted: dict[str, tuple[Shares, int, int, int | None, int | None, int]] = {}
        for c in changes:
            j = self.jobs.get(c.job)
            if c.kind == "migrate" and j is not None and j.status == "running" and j.node is not None and not _in_effect(j, c):
                lifted[c.job] = (j.shares, j.cpu_millis, j.gpus, j.cpu_limit, j.gpu_device, j.servers)
                self._checkpoint(j)
                self._unplace(j)  # holds nothing while it moves
        out = [self._apply_one(c, lifted) for c in changes]
        # Never neither: a mover that found no room restarts where it was, or else waits paused.
        for job_id, (src, cpu, gpus, limit, device, servers) in lifted.items():
            j = self.jobs[job_id]
            if j.node is not None:
                continue
            if self._lacks(j, src, cpu, gpus, device, servers) is None:
                back = self.t + j.spec.checkpoint_seconds + j.spec.restart_seconds
                self._place(j, src, cpu, gpus, limit, back, device, servers)
                j.in_place += 1
                j.started = self.t + j.spec.checkpoint_seconds  # it restarts once checkpointed
            else:
                j.status, j.cpu_millis, j.gpus, j.cpu_limit, j.gpu_device = "pending", 0, 0, None, None
                j.pauses += 1
        self._refresh()
        return out

    def _apply_one(self, c: Change, lifted: dict[str, tuple[Shares, int, int, int | None, int | None, int]]) -> Outcome:
        j = self.jobs.get(c.job)
        if j is not None and j.status == "finished" and c.kind in MOOT_WHEN_ENDED:
            # As on Docker and Kubernetes: a plan made while the job ran its last epoch, applied after
            # it ended, changes nothing (adapters/base.py); no such race arises inside one simulated instant.
            return Outcome(c, True, message=finished_before(c.kind))
        if j is None or j.status in ("future", "finished"):
            return Outcome(c, False, "not_found", f"job {c.job} is not active")
        now = self.t
        if c.kind == "deliver":
            if j.delivered_at is None:
                j.delivered_at = now
            return Outcome(c, True, message="tier-1 model delivered")
        if c.kind == "pause":
            if j.status != "running":
                return Outcome(c, True, message="already paused (pending)")
            self._checkpoint(j)
            self._unplace(j)
            j.status, j.cpu_millis, j.gpus, j.cpu_limit, j.gpu_device = "pending", 0, 0, None, None
            j.pauses += 1
            self.events.append((now, j.spec.id, "pause"))
            return Outcome(c, True)
        if c.node is None or c.node not in self.nodes:
            return Outcome(c, False, "invalid", f"unknown node {c.node}")
        shares = change_shares(c)
        problem = shares_problem(j.spec, shares, self.nodes)
        if problem is not None:
            return Outcome(c, False, "invalid", f"job {c.job}: {problem}")
        servers = _servers_asked(j, c)
        if servers < 0:
            return Outcome(
                c, False, "invalid", f"job {c.job}: {c.servers} server(s) on each of {len(shares)} node(s), outside its bounds"
            )
        if _in_effect(j, c):  # applied already (a repeated change): nothing to do, nothing counted
            return Outcome(c, True, message=f"already running on {c.node} at {c.cpu_millis}m/{c.gpus}g")
        if c.kind == "start" and j.status != "pending":
            return Outcome(c, False, "conflict", f"running on {j.node} at {j.cpu_millis}m: a start is for a pending job")
        if c.kind in ("migrate", "resize") and j.status != "running":
            return Outcome(c, False, "conflict", f"not running: a pending job is started, not {c.kind}d")
        short = self._lacks(j, shares, c.cpu_millis, c.gpus, c.gpu_device, servers)
        if short is not None:
            return Outcome(c, False, "conflict", short)
        if c.kind == "start":
            self._place(j, shares, c.cpu_millis, c.gpus, c.cpu_limit_millis, now + j.spec.restart_seconds, c.gpu_device, servers)
            j.since_ckpt = 0.0
            j.started = now
            if j.first_start is None:
                j.first_start = now
            self.events.append((now, j.spec.id, f"start on {c.node}"))
            return Outcome(c, True)
        if c.kind == "resize":
            cap_only = (c.cpu_millis, c.gpus) == (j.cpu_millis, j.gpus)  # docker update --cpus: live for any job
            if c.node != j.node or not (j.spec.resizable or cap_only):
                return Outcome(c, False, "invalid", "cannot resize live")
            if shares != j.shares or servers != j.servers:  # a new count, placement or servers: live only if elastic
                if not j.spec.elastic:
                    return Outcome(c, False, "invalid", f"job {c.job}: not elastic, its replicas change by a restart (migrate)")
                blocked = j.blocked_until
                self._unplace(j)
                self._place(j, shares, j.cpu_millis, j.gpus, j.cpu_limit, blocked, j.gpu_device, servers)
            j.cpu_millis, j.gpus, j.cpu_limit = c.cpu_millis, c.gpus, c.cpu_limit_millis
            j.gpu_device = c.gpu_device if j.spec.gpu_milli is not None and c.gpus else None
            j.resizes += 1
            self._dirty.update(n for n, _ in shares)
            return Outcome(c, True)
        if c.kind == "migrate":
            if c.job not in lifted:
                self._checkpoint(j)
                self._unplace(j)
            back = now + j.spec.checkpoint_seconds + j.spec.restart_seconds
            self._place(j, shares, c.cpu_millis, c.gpus, c.cpu_limit_millis, back, c.gpu_device, servers)
            j.migrations += 1
            j.started = now + j.spec.checkpoint_seconds  # it restarts there once checkpointed
            self.events.append((now, j.spec.id, f"migrate to {c.node}"))
            return Outcome(c, True)
        return Outcome(c, False, "invalid", f"unknown change {c.kind}")

    def _checkpoint(self, j: SimJob) -> None:
        """Stop the job: it resumes from its last checkpoint, taken at every epoch end and every
        ``checkpoint_every_seconds`` of training; the work since then is lost."""
        lost = max(j.progress - j.ckpt_progress, 0.0)
        j.lost_epochs += lost
        j.progress = j.ckpt_progress
        j.since_ckpt = 0.0


def _servers_asked(j: SimJob, c: Change) -> int:
    """The servers on each node ``c`` gives a parameter-server job (the plan's, else its fewest spread
    over the nodes, as the Docker adapter does); 0 for any other job; -1 outside its bounds."""
    if j.spec.servers is None or c.node is None:
        return 0
    lo, hi = j.spec.servers[:2]
    nodes = len(change_shares(c))
    per = c.servers if c.servers is not None else max(1, -(-lo // nodes))
    return per if lo <= per * nodes <= hi else -1


def _in_effect(j: SimJob, c: Change) -> bool:
    """Does ``j`` already run where and as ``c`` asks (so applying it again changes nothing)?"""
    return (
        j.status == "running"
        and j.servers == _servers_asked(j, c)
        and j.shares == change_shares(c)
        and (j.cpu_millis, j.gpus, j.cpu_limit, j.gpu_device) == (c.cpu_millis, c.gpus, c.cpu_limit_millis, c.gpu_device)
    )
