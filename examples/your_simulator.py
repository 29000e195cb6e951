"""FlowPlan as the policy of a simulator that is not FlowPlan's: the planner's Python API, no adapter.

Your simulator keeps its own clock and its own jobs. At each decision point it describes the cluster
as a :class:`planner.Snapshot`, calls :func:`planner.plan`, and applies the plan's assignments its
own way. This file is such a simulator, small on purpose: one 8-core host, four CPU training jobs
whose learning curves and epoch times are the measured ones FlowPlan bundles (the Pollux/AdaptDL
traces, ``adapters/sim/data``: nothing invented, no ``../shared`` needed), and CPU shared as the
kernel shares it: a job's guarantee is a weight, what one job leaves idle flows at once to the others,
up to each job's cap. It runs the batch once under FlowPlan and once under equal weights (Docker's
default), and prints each job's completion time.

    python examples/your_simulator.py [--interval SECONDS] [--step SECONDS]

What the snapshot needs, what a plan says and what is left to your simulator: ``docs/adapters.md``,
"The planner as a policy in your own simulator".
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field

from adapters.sim.cluster import share_cpu as cpu_shares
from adapters.sim.truth import METRICS, GroundTruth, TraceLibrary
from planner import Job, MetricPoint, Node, PlannerConfig, PlanResult, QoETarget, Snapshot, SpeedPoint, Tier, check_plan, plan
from planner.snapshot import Allocation

HOST, HOST_MILLIS = "host", 8000

#: (id, model, batch size, epochs, arrival s, min / max CPU millis): the embedded demo's CPU jobs.
JOBS = [
    ("cifar10", "cifar10", 256, 30, 0.0, 500, 6000),
    ("deepspeech2", "deepspeech2", 160, 12, 10.0, 500, 6000),
    ("yolov3", "yolov3", 128, 6, 20.0, 500, 6000),
    ("ncf", "ncf", 8192, 10, 30.0, 500, 2000),
]


@dataclass
class SimJob:
    """One job as the simulator knows it: the truth it runs on, and what it has shown so far."""

    id: str
    truth: GroundTruth
    epochs: int
    arrival: float
    min_millis: int
    max_millis: int
    done: float = 0.0  # epochs completed (fractional)
    weight: int = 0  # the guarantee FlowPlan (or the baseline) gave it; 0: not running
    cap: int = 0  # the most CPU it may use
    finish: float | None = None
    started: float | None = None  # when its current run started (it is not running: None)
    history: list[MetricPoint] = field(default_factory=list)
    speed: list[SpeedPoint] = field(default_factory=list)
    #: Since the last decision: seconds run, epochs trained, CPU-millis x seconds used (its rate).
    ran: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])

    def measure(self) -> None:
        """Report the rate the job trained at since the last decision (what an adapter reads off the
        job's step lines or progress bar), once it did at least 2 % of an epoch."""
        seconds, epochs, cpu = self.ran
        if epochs >= 0.02:
            self.speed.append(SpeedPoint(cpu_millis=max(1, round(cpu / seconds)), seconds_per_epoch=seconds / epochs))
            self.ran = [0.0, 0.0, 0.0]

    def snapshot_job(self) -> Job:
        """The job as the planner's contract describes it: what an observer of the job could see."""
        name, direction, column = METRICS[self.truth.model]
        last = self.truth.metric(float(self.epochs))
        running = self.weight > 0
        return Job(
            id=self.id,
            status="running" if running else "pending",
            node=HOST if running else None,
            allocation=Allocation(cpu_millis=self.weight) if running else None,
            started=self.started if running else None,
            min_cpu_millis=self.min_millis,
            max_cpu_millis=self.max_millis,
            # This simulator starts, pauses and resumes a job at no cost (it loses no work): say so.
            checkpoint_seconds=0.0,
            restart_seconds=0.0,
            submitted=self.arrival,
            history=self.history,
            speed=self.speed[-5:],
            target=QoETarget(
                metric="loss" if column == "loss" else name, direction=direction, tier1=Tier(value=last), max_epochs=self.epochs
            ),
        )


def share_cpu(jobs: list[SimJob]) -> dict[str, float]:
    """The host's CPU split by weights, each job up to its cap, what a capped job leaves going to the
    others: the kernel's CFS shares, by the weighted max-min split FlowPlan's own simulator uses."""
    running = [j for j in jobs if j.weight > 0]
    got = cpu_shares(HOST_MILLIS, [j.weight for j in running], [j.cap for j in running])
    return {j.id: x for j, x in zip(running, got, strict=True)}


def decide(policy: str, now: float, jobs: list[SimJob], previous: PlanResult | None, config: PlannerConfig) -> PlanResult | None:
    """Set every arrived, unfinished job's weight and cap: FlowPlan's plan, or equal weights."""
    here = [j for j in jobs if j.arrival <= now and j.finish is None]
    for j in here:
        j.measure()
    if policy == "equal":
        for j in here:
            j.weight, j.cap = 1024, j.max_millis
        return None
    snapshot = Snapshot(
        time=now, nodes=[Node(name=HOST, cpu_millis=HOST_MILLIS, memory_mib=32768)], jobs=[j.snapshot_job() for j in here]
    )
    result = plan(snapshot, config, previous=previous)  # previous: only lends the model fits (faster)
    assert not check_plan(snapshot, result.plan)  # planner.plan checks already; a simulator may check again
    by_id = {j.id: j for j in here}
    for a in result.plan.assignments:  # node None: the job waits (or is paused) this interval
        job = by_id[a.job]
        if a.node is not None and job.weight == 0:
            job.started = now  # a start (or a restart after a pause)
        job.weight = a.cpu_millis if a.node is not None else 0
        job.cap = a.cpu_limit_millis or job.max_millis
    for u in result.plan.unserved:
        by_id[u.job].weight = 0
    return result


def run(policy: str, interval: float, step: float) -> dict[str, tuple[float, float]]:
    """Run the batch under ``policy``; (arrival, finish) of each job."""
    library = TraceLibrary.bundled()
    jobs = [SimJob(i, GroundTruth(library, m, b, "cpu"), e, t, lo, hi) for i, m, b, e, t, lo, hi in JOBS]
    config = PlannerConfig(time_limit=1.0)
    now, next_plan, previous, replan = 0.0, 0.0, None, True
    while any(j.finish is None for j in jobs):
        if replan or now >= next_plan:
            previous = decide(policy, now, jobs, previous, config) or previous
            next_plan, replan = now + interval, False
        shares = share_cpu(jobs)
        for j in jobs:
            millis = shares.get(j.id, 0.0)
            if millis <= 0.0 or j.finish is not None:
                continue
            before = j.done
            j.done = min(j.done + step / j.truth.epoch_seconds(int(millis), 0), float(j.epochs))
            j.ran = [j.ran[0] + step, j.ran[1] + j.done - before, j.ran[2] + millis * step]
            if math.floor(j.done) > math.floor(before):  # an epoch ended: its validation value is reported
                _, _, column = METRICS[j.truth.model]
                epoch = float(math.floor(j.done))
                j.history.append(MetricPoint(time=now + step, epoch=epoch, **{column: j.truth.metric(epoch)}))
            if j.done >= j.epochs:
                j.finish, j.weight, replan = now + step, 0, True
        now += step
        replan = replan or any(abs(j.arrival - now) < step / 2 for j in jobs)
    return {j.id: (j.arrival, float(j.finish or 0.0)) for j in jobs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=30.0, help="seconds between plans (also at every arrival and finish)")
    ap.add_argument("--step", type=float, default=1.0, help="the simulator's time step, seconds")
    args = ap.parse_args()
    runs = {policy: run(policy, args.interval, args.step) for policy in ("flowplan", "equal")}
    jct = {policy: {job: end - start for job, (start, end) in got.items()} for policy, got in runs.items()}
    print(f"{'job':<12} {'FlowPlan JCT':>13} {'equal share':>12}")
    for job_id in jct["flowplan"]:
        print(f"{job_id:<12} {jct['flowplan'][job_id]:>12.0f}s {jct['equal'][job_id]:>11.0f}s")
    for policy, got in runs.items():
        mean = sum(jct[policy].values()) / len(got)
        print(f"{policy}: mean JCT {mean:.0f} s, makespan {max(end for _, end in got.values()):.0f} s")


if __name__ == "__main__":
    main()
