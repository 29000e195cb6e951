"""The simulated cluster: an :class:`~adapters.base.Adapter` and a virtual :class:`~adapters.base.Clock`.

Jobs arrive at their scenario times and train on their *ground truth* (measured curve, measured or
Amdahl speed; :mod:`adapters.sim.truth`). Between two calls of the control loop allocations are
fixed, so progress is exact: a job at ``r`` epochs per second for ``dt`` seconds advances ``r·dt``
epochs, minus the time it is blocked starting or restarting.

What a policy sees (``observe``) is only what a real adapter observes: per-epoch metric reports
(the measured value with relative Gaussian noise), the seconds per epoch measured at the
allocations the job has held (from the step counter jobs log with their progress: time spent
training at an allocation over the epochs gained there), its targets and bounds. What it does (``apply``):

- ``start``: after ``restart_seconds`` of start-up, training runs from the last checkpoint;
- ``resize``: live, no loss (jobs that are ``resizable``); otherwise the loop sends ``migrate``;
- ``migrate``: the job checkpoints and restarts (``checkpoint_seconds + restart_seconds`` without
  progress) on its new node; jobs checkpoint at every epoch end and every
  ``checkpoint_every_seconds`` (600 by default) of training, and the work since then is lost;
- ``pause``: as a migration, but the job waits unplaced;
- ``deliver``: the tier-1 model is handed over (recorded).

A job finishes at its last epoch (``epochs``), or, with ``stop_at_target``, at the first epoch
whose reported metric reaches its last tier. Everything random comes from the run's seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from adapters.base import Change, Outcome
from adapters.sim.scenario import JobSpec, Scenario
from adapters.sim.truth import METRICS, GroundTruth, TraceLibrary, task_name
from planner.snapshot import Allocation, Job, MetricPoint, Node, QoETarget, Settings, Snapshot, SpeedPoint, Tier

#: Least progress at one allocation (in epochs) before its speed is reported.
MIN_SPEED_EPOCHS = 0.02


@dataclass
class SimJob:
    spec: JobSpec
    truth: GroundTruth
    rng: np.random.Generator
    status: str = "future"  # future | pending | running | finished
    node: str | None = None
    cpu_millis: int = 0
    gpus: int = 0
    progress: float = 0.0  # epochs done (continuous)
    blocked_until: float = 0.0
    history: list[MetricPoint] = field(default_factory=list)
    reported: list[float] = field(default_factory=list)  # reported metric per epoch
    trained: dict[tuple[int, int], list[float]] = field(default_factory=dict)  # alloc -> [seconds, epochs]
    first_start: float | None = None
    finish: float | None = None
    tier1_time: float | None = None
    tier2_time: float | None = None
    delivered_at: float | None = None
    migrations: int = 0
    resizes: int = 0
    pauses: int = 0
    lost_epochs: float = 0.0
    busy_seconds: float = 0.0  # time holding resources while placed
    work: float = 0.0  # epochs trained (checks conservation)

    @property
    def stop_value(self) -> float | None:
        s = self.spec
        return s.tier2 if s.tier2 is not None else s.tier1

    def reaches(self, value: float | None, v: float) -> bool:
        if value is None:
            return False
        return v >= value if self.truth.direction == "higher" else v <= value

    def rate(self) -> float:
        t = self.truth.epoch_seconds(self.cpu_millis, self.gpus)
        return 0.0 if not math.isfinite(t) or t <= 0 else 1.0 / t


class SimCluster:
    """A virtual cluster driven by the control loop; also its clock (``sleep`` advances the simulation)."""

    def __init__(self, scenario: Scenario, jobs: Sequence[JobSpec], library: TraceLibrary, seed: int) -> None:
        self.scenario = scenario
        self.t = 0.0
        self.nodes = {n.name: n for n in scenario.nodes}
        self.jobs: dict[str, SimJob] = {}
        for i, spec in enumerate(jobs):
            truth = GroundTruth(library, spec.model, spec.batch_size, spec.kind, spec.cpu_scale)
            self.jobs[spec.id] = SimJob(spec, truth, np.random.default_rng([seed, i]))
        self.t0 = min((j.spec.arrival for j in self.jobs.values()), default=0.0)
        self.t = self.t0
        self._arrive()
        self.events: list[tuple[float, str, str]] = []  # (time, job, what)
        self.used_cpu_seconds = 0.0
        self.used_gpu_seconds = 0.0

    # -- clock ---------------------------------------------------------------------------------
    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        end = self.t + max(0.0, seconds)
        # Arrivals inside the interval only become visible at its end (the next observation).
        for j in self.jobs.values():
            if j.status == "running":
                self._advance(j, self.t, end)
        self.t = end
        self._arrive()

    def done(self) -> bool:
        return all(j.status == "finished" for j in self.jobs.values())

    def timed_out(self) -> bool:
        return self.t - self.t0 >= self.scenario.max_hours * 3600

    # -- ground-truth progress -----------------------------------------------------------------
    def _arrive(self) -> None:
        for j in self.jobs.values():
            if j.status == "future" and j.spec.arrival <= self.t:
                j.status = "pending"

    def _advance(self, j: SimJob, t0: float, t1: float) -> None:
        held = t1 - t0
        j.busy_seconds += held
        self.used_cpu_seconds += held * j.cpu_millis / 1000.0
        self.used_gpu_seconds += held * j.gpus
        start = max(t0, j.blocked_until)
        if start >= t1:
            return
        rate = j.rate()
        if rate <= 0:
            return
        end = j.progress + (t1 - start) * rate
        trained = j.trained.setdefault((j.cpu_millis, j.gpus), [0.0, 0.0])
        k = math.floor(j.progress) + 1
        while k <= end + 1e-12 and k <= j.spec.epochs:
            tk = start + (k - j.progress) / rate
            self._epoch_done(j, k, tk)
            if j.status == "finished":
                trained[0] += tk - start
                trained[1] += k - j.progress
                held_after = t1 - tk  # resources are released at the finish, not at the interval's end
                j.busy_seconds -= held_after
                self.used_cpu_seconds -= held_after * j.cpu_millis / 1000.0
                self.used_gpu_seconds -= held_after * j.gpus
                j.work += k - j.progress
                j.progress = float(k)
                return
            k += 1
        trained[0] += t1 - start
        trained[1] += end - j.progress
        j.work += end - j.progress
        j.progress = end

    def _epoch_done(self, j: SimJob, k: int, tk: float) -> None:
        true = j.truth.metric(k)
        noise = self.scenario.noise
        v = float(true * (1.0 + noise * j.rng.standard_normal())) if noise > 0 else true
        j.reported.append(v)
        field_name = METRICS[j.spec.model][2]
        point = {"time": round(tk, 3), "epoch": k, field_name: round(v, 6)}
        j.history.append(MetricPoint(**point))
        if j.tier1_time is None and j.reaches(j.spec.tier1, v):
            j.tier1_time = tk
        if j.tier2_time is None and j.reaches(j.spec.tier2, v):
            j.tier2_time = tk
        stop = k >= j.spec.epochs or (self.scenario.stop_at_target and j.reaches(j.stop_value, v))
        if stop:
            j.status = "finished"
            j.finish = tk
            j.node = None
            self.events.append((tk, j.spec.id, "finish"))

    # -- adapter ---------------------------------------------------------------------------------
    def observe(self) -> Snapshot:
        sc = self.scenario
        nodes = [
            Node(name=n.name, cpu_millis=n.cpu_millis, gpus=n.gpus, memory_mib=n.memory_mib, gpu_type=n.gpu_type)
            for n in sc.nodes
        ]
        jobs: list[Job] = []
        for j in self.jobs.values():
            if j.status == "future":
                continue
            s = j.spec
            metric, direction, field_name = METRICS[s.model]
            # The job's final tier: the last tier it trains to (with ``stop_at_target``), shown as tier 2.
            final = s.tier2 if s.tier2 is not None else s.tier1
            tier2 = None
            if sc.stop_at_target and final is not None:
                tier2 = Tier(value=final, deadline=s.tier2_deadline if s.tier2 is not None else None)
            elif s.tier2 is not None:
                tier2 = Tier(value=s.tier2, deadline=s.tier2_deadline)
            target = QoETarget(
                metric=metric if field_name == "metric" else "loss",
                direction=direction,
                tier1=Tier(
                    value=s.tier1 if s.tier1 is not None else j.truth.curve.values[s.epochs - 1], deadline=s.tier1_deadline
                ),
                tier2=tier2,
                max_epochs=s.epochs,
            )
            # Seconds per epoch at each allocation held, from the step counter the jobs log with
            # their progress (the JSON-lines format): time spent training / epochs gained there.
            speed = [
                SpeedPoint(cpu_millis=max(1, c), gpus=g, seconds_per_epoch=round(sec / ep, 4))
                for (c, g), (sec, ep) in sorted(j.trained.items())
                if ep >= MIN_SPEED_EPOCHS and c >= 1
            ]
            running = j.status == "running"
            jobs.append(
                Job(
                    id=s.id,
                    status=j.status,
                    task=task_name(s.model, s.batch_size),
                    node=j.node if running else None,
                    allocation=Allocation(cpu_millis=j.cpu_millis, gpus=j.gpus) if running else None,
                    min_cpu_millis=s.min_cpu_millis,
                    max_cpu_millis=s.max_cpu_millis,
                    min_gpus=s.min_gpus,
                    max_gpus=s.max_gpus,
                    memory_mib=s.memory_mib,
                    resizable=s.resizable,
                    checkpoint_seconds=s.checkpoint_seconds,
                    restart_seconds=s.restart_seconds,
                    priority=s.priority,
                    submitted=s.arrival,
                    history=list(j.history),
                    speed=speed,
                    target=target,
                    delivered=j.delivered_at is not None,
                )
            )
        settings = Settings(
            interval_seconds=sc.interval_seconds,
            migration_budget=sc.migration_budget,
            deadline_confidence=sc.deadline_confidence,
        )
        return Snapshot(time=round(self.t, 3), nodes=nodes, jobs=jobs, settings=settings)

    def _free(self, node: str, exclude: str) -> tuple[int, int, int]:
        n = self.nodes[node]
        cpu, gpu, mem = n.cpu_millis, n.gpus, n.memory_mib
        for j in self.jobs.values():
            if j.status == "running" and j.node == node and j.spec.id != exclude:
                cpu -= j.cpu_millis
                gpu -= j.gpus
                mem -= j.spec.memory_mib
        return cpu, gpu, mem

    def apply(self, changes: Sequence[Change]) -> list[Outcome]:
        # A migrating job checkpoints and stops before any job is placed, so moves between nodes
        # (swaps included) find the room the movers leave, as they would on a real cluster.
        lifted: dict[str, tuple[str, int, int]] = {}
        for c in changes:
            j = self.jobs.get(c.job)
            if c.kind == "migrate" and j is not None and j.status == "running" and j.node is not None:
                lifted[c.job] = (j.node, j.cpu_millis, j.gpus)
                self._checkpoint(j)
                j.node = None  # holds nothing while it moves
        out = [self._apply_one(c, lifted) for c in changes]
        # Never neither: a mover that found no room restarts where it was, or else waits paused.
        for job_id, (src, cpu, gpus) in lifted.items():
            j = self.jobs[job_id]
            if j.node is not None:
                continue
            free_cpu, free_gpu, _ = self._free(src, job_id)
            if cpu <= free_cpu and gpus <= free_gpu:
                j.node, j.cpu_millis, j.gpus = src, cpu, gpus
                j.blocked_until = self.t + j.spec.checkpoint_seconds + j.spec.restart_seconds
            else:
                j.status, j.cpu_millis, j.gpus = "pending", 0, 0
                j.pauses += 1
        return out

    def _apply_one(self, c: Change, lifted: dict[str, tuple[str, int, int]]) -> Outcome:
        j = self.jobs.get(c.job)
        if j is None or j.status in ("future", "finished"):
            return Outcome(c, False, "not_found", f"job {c.job} is not active")
        now = self.t
        if c.kind == "deliver":
            if j.delivered_at is None:
                j.delivered_at = now
            return Outcome(c, True, message="tier-1 model delivered")
        if c.kind == "pause":
            if j.status != "running":
                return Outcome(c, False, "conflict", "not running")
            self._checkpoint(j)
            j.status, j.node, j.cpu_millis, j.gpus = "pending", None, 0, 0
            j.pauses += 1
            self.events.append((now, j.spec.id, "pause"))
            return Outcome(c, True)
        if c.node is None or c.node not in self.nodes:
            return Outcome(c, False, "invalid", f"unknown node {c.node}")
        cpu, gpu, mem = self._free(c.node, j.spec.id)
        if c.cpu_millis > cpu or c.gpus > gpu or (j.spec.memory_mib > mem and j.spec.memory_mib > 0):
            return Outcome(c, False, "conflict", f"node {c.node} lacks room ({cpu} millicores, {gpu} GPUs free)")
        if c.kind == "start":
            if j.status != "pending":
                return Outcome(c, False, "conflict", "not pending")
            j.status, j.node, j.cpu_millis, j.gpus = "running", c.node, c.cpu_millis, c.gpus
            j.blocked_until = now + j.spec.restart_seconds
            if j.first_start is None:
                j.first_start = now
            self.events.append((now, j.spec.id, f"start on {c.node}"))
            return Outcome(c, True)
        if j.status != "running":
            return Outcome(c, False, "conflict", "not running")
        if c.kind == "resize":
            if not j.spec.resizable or c.node != j.node:
                return Outcome(c, False, "invalid", "cannot resize live")
            j.cpu_millis, j.gpus = c.cpu_millis, c.gpus
            j.resizes += 1
            return Outcome(c, True)
        if c.kind == "migrate":
            if c.job not in lifted:
                self._checkpoint(j)
            j.node, j.cpu_millis, j.gpus = c.node, c.cpu_millis, c.gpus
            j.blocked_until = now + j.spec.checkpoint_seconds + j.spec.restart_seconds
            j.migrations += 1
            self.events.append((now, j.spec.id, f"migrate to {c.node}"))
            return Outcome(c, True)
        return Outcome(c, False, "invalid", f"unknown change {c.kind}")

    def _checkpoint(self, j: SimJob) -> None:
        """Stop the job: it resumes from its last checkpoint, taken at every epoch end and every
        ``checkpoint_every_seconds`` of training within an epoch; the work since then is lost."""
        done = math.floor(j.progress + 1e-9)
        frac = j.progress - done
        rate = j.rate()
        every = self.scenario.checkpoint_every_seconds
        if rate > 0 and frac > 0:
            since = (frac / rate) % every  # training seconds since the last checkpoint
            lost = min(frac, since * rate)
        else:
            lost = frac
        j.lost_epochs += lost
        j.progress -= lost
        if j.progress - math.floor(j.progress + 1e-9) < 1e-9:
            j.progress = float(math.floor(j.progress + 1e-9))
