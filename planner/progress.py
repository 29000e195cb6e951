"""What a job's reports say, read once for everyone: the series it is judged on, whether it has
reached a value, the speed its recent history shows, and the speed model it is planned with (and
on what basis: observed, borrowed from similar jobs, or assumed).

The planner's outlook, the baseline policies and the service's forecasts all read a job through
these functions, so they cannot disagree on which metric counts, which way is better, or how many
points make an observed speed.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from models import Direction, SpeedModel, SpeedObservation, fit_speed_model
from models.gang_speed import gang_scaling
from planner.snapshot import MAX_SECONDS, Job, MetricPoint, SpeedPoint

#: Newest history points (by time) that make an observed speed.
SPEED_WINDOW = 6


def judged_on_loss(job: Job) -> bool:
    """Whether the job is judged on its loss (else on its quality metric): its target's metric is
    ``"loss"``, or, without a target, it reports a loss."""
    if job.target is not None:
        return job.target.metric == "loss"
    return any(p.loss is not None for p in job.history)


def unread_history(job: Job) -> str | None:
    """Why none of a job's history points can be read, where that is a column mismatch (the target's
    metric reads the loss and the job reports only a quality metric, or the other way round): a
    misnamed target is the likely cause, and the plan should say so rather than "no curve yet".
    ``None`` when some point has the judged column, or no point has either."""
    if not job.history:
        return None
    use_loss = judged_on_loss(job)
    if any((p.loss if use_loss else p.metric) is not None for p in job.history):
        return None
    if not any((p.metric if use_loss else p.loss) is not None for p in job.history):
        return None
    n, name = len(job.history), job.target.metric if job.target is not None else "loss"
    if use_loss:
        return (
            f"none of its {n} history point(s) has a loss, which the target's metric {name!r} reads; they carry a "
            "quality metric only (a target on it names it: metric 'accuracy', direction 'higher')"
        )
    return (
        f"none of its {n} history point(s) has a quality metric, which the target's metric {name!r} reads; they "
        "carry a loss only (a target on the loss says metric 'loss')"
    )


def judged_series(job: Job) -> tuple[np.ndarray, np.ndarray, np.ndarray, str, Direction]:
    """Times, epochs and values of the metric the job is judged on (by epoch, then time), its name
    and its direction.

    With a target: the target's metric and direction. Without one: the loss (lower is better) if the
    job reports a loss, else its quality metric, whose direction is read from the trend (first vs
    last third of the history), since nothing else says whether it should go up or down.
    """
    target = job.target
    use_loss = judged_on_loss(job)
    if target is not None:
        name, direction = target.metric, target.direction
    else:
        name, direction = ("loss", "lower") if use_loss else ("metric", "higher")
    rows = sorted((p.epoch, p.time, v) for p in job.history if (v := p.loss if use_loss else p.metric) is not None)
    arr = np.array(rows, dtype=float).reshape(-1, 3)
    if target is None and not use_loss and arr.shape[0] >= 3:
        third = max(1, arr.shape[0] // 3)
        direction = "higher" if arr[-third:, 2].mean() >= arr[:third, 2].mean() else "lower"
    return arr[:, 1], arr[:, 0], arr[:, 2], name, direction


def reached(values: np.ndarray, value: float, direction: str) -> bool:
    """Whether any of ``values`` is at least as good as ``value``."""
    if values.size == 0:
        return False
    return bool(values.max() >= value) if direction == "higher" else bool(values.min() <= value)


def recent_seconds_per_epoch(history: Iterable[MetricPoint]) -> float | None:
    """Seconds per epoch over the newest :data:`SPEED_WINDOW` points; ``None`` if not measurable."""
    pts = heapq.nlargest(SPEED_WINDOW, ((p.time, p.epoch) for p in history))[::-1]
    if len(pts) < 2:
        return None
    dt, de = pts[-1][0] - pts[0][0], pts[-1][1] - pts[0][1]
    return dt / de if dt > 0 and de > 0 else None


def observed_speeds(job: Job) -> list[SpeedObservation]:
    """The job's reported speeds, or, without any, its recent history at its current allocation."""
    obs = [SpeedObservation(s.cpu_millis, s.gpus, s.seconds_per_epoch) for s in job.speed]
    if obs or job.status != "running" or job.allocation is None:
        return obs
    spe = recent_seconds_per_epoch(job.history)
    if spe is not None:
        obs.append(SpeedObservation(job.allocation.cpu_millis, job.allocation.gpus, spe))
    return obs


def _to_full(job: Job, point: SpeedPoint) -> float:
    """A borrowed point's epoch time over the borrower's at its full count on one node (what its
    speed model stands for): 1 for a point measured at that shape, or one that does not say its
    replicas (its lender's full count, taken as the borrower's), else the data-parallel scaling's
    prior between the two shapes (:func:`models.gang_speed.gang_scaling`; a lender's 1-replica epoch
    of a 16-replica job's model is some 12 times its full count's). A parameter-server job's points
    are taken as they are (their servers' share is not known here)."""
    return 1.0 if point.replicas is None else _full_factor(job, point.replicas, point.nodes or 1)


def _full_factor(job: Job, replicas: int, nodes: int) -> float:
    """An epoch's time with ``replicas`` over ``nodes`` over its time at the job's full count on one
    node (:func:`_to_full`)."""
    if job.servers is not None or (replicas, nodes) == (job.replicas, 1):
        return 1.0
    scaling = gang_scaling(job.replicas, [])
    factor = float(scaling.factor(np.array([replicas]), np.array([nodes]))[0])
    return factor if factor > 0 and np.isfinite(factor) else 1.0


def _full_factor_now(job: Job) -> float:
    """:func:`_full_factor` at the replicas and nodes the job runs on now (1 where it runs nowhere)."""
    shares = job.shares()
    return _full_factor(job, sum(k for _, k in shares), len(shares)) if shares else 1.0


#: Jobs a speed basis names before it says "and N more".
NAMED_JOBS = 3

SpeedBasis = Literal["observed", "borrowed", "assumed"]


@dataclass(frozen=True)
class JobSpeed:
    """The speed model a job is planned with, what it rests on, and that in words (for the plan's basis)."""

    model: SpeedModel
    basis: SpeedBasis
    note: str


def silent_seconds(job: Job, now: float | None) -> float | None:
    """Seconds a running job has run without reporting anything (no history point, no speed, nothing
    borrowed): ``now`` less the start of its current run (``Job.started``) and the start-up it
    declares (``restart_seconds``, not training), or ``None`` where that does not apply or is not
    known. A job reports at least once an epoch, so an epoch takes at least this long at its
    allocation."""
    if (
        now is None
        or job.status != "running"
        or job.allocation is None
        or job.started is None
        or job.history
        or job.speed
        or job.speed_prior is not None
    ):
        return None
    silent = now - job.started - job.restart_seconds
    return silent if silent > 0 else None


def since_checkpoint(job: Job, now: float | None, epoch_seconds: float) -> float | None:
    """Seconds a running job has trained since its last checkpoint, as its reports show it, or
    ``None`` where they do not say (not running; no start and no epoch end reported; or the newest
    of those older than an epoch at its current speed, ``epoch_seconds``: an epoch end has passed
    unreported, or the speed is off, and the reports no longer place the checkpoint).

    A job checkpoints at every epoch end and every ``checkpoint_every_seconds`` of training since
    the last one (the snapshot's contract), and a restart resumes from the last one. So the newest
    checkpoint is at the later of the newest epoch end its history shows (the report at which the
    epoch count reached a whole number, or the time between two reports at which it passed one, by
    their rate) and the start of its current run (``Job.started``), then every
    ``checkpoint_every_seconds`` after that."""
    if now is None or job.status != "running" or job.allocation is None:
        return None
    anchor = job.started
    points = sorted((p.time, p.epoch) for p in job.history if p.time <= now)
    if points:
        whole = math.floor(points[-1][1] + 1e-9)
        i = len(points) - 1
        while i > 0 and points[i - 1][1] >= whole - 1e-9:
            i -= 1
        at, epoch = points[i]
        end: float | None = None
        if whole >= 1 and epoch <= whole + 1e-9:
            end = at
        elif whole >= 1 and i > 0 and epoch > points[i - 1][1]:
            (t0, e0), (t1, e1) = points[i - 1], points[i]
            end = t0 + (whole - e0) / (e1 - e0) * (t1 - t0)
        if end is not None and (anchor is None or end > anchor):
            anchor = end
    if anchor is None:
        return None
    since = max(now - anchor, 0.0)
    if not since <= epoch_seconds:
        return None
    if job.checkpoint_every_seconds is not None:
        since = math.fmod(since, job.checkpoint_every_seconds)
    return since


#: Most of a report's span a job is credited with between two reports: the credit rests on the
#: predicted speed, and a report that is late says the speed was off, not that the epoch is done.
UNREPORTED_SHARE = 0.9


def epoch_seconds_now(job: Job, seconds_per_epoch: Callable[[float, float], float]) -> float | None:
    """A running job's predicted epoch time at what it holds now: its speed model's
    ``seconds_per_epoch(cpu_millis, gpus)`` at its allocation, on the replicas and nodes it runs on
    (the model stands for its full count on one node). ``None`` if not running, or a
    parameter-server job (whose model reads workers and servers)."""
    if job.status != "running" or job.allocation is None or job.servers is not None:
        return None
    return float(seconds_per_epoch(job.allocation.cpu_millis, job.allocation.gpus)) * _full_factor_now(job)


def trained_since_report(job: Job, now: float | None, seconds_per_epoch: float, cadence: float = 1.0) -> float:
    """Epochs a running job has trained since its newest report, by the time it has run since then
    at ``seconds_per_epoch`` (its predicted epoch time at its allocation now): the part of the
    current epoch the reports do not show yet. A job that reports once an epoch is, on average, half
    an epoch further than its last report says, and a plan that reads only the reports sees every
    such job up to an epoch behind: its finish comes later than it will, the more so the longer its
    epochs. 0 where that does not apply: not running, no time, no report and no start of its run.

    Counted from the newest report, or from the end of the start-up of its current run
    (``started + restart_seconds``) where that is later (a restart resumes from a checkpoint no
    later than its reports show); at most :data:`UNREPORTED_SHARE` of ``cadence``, the epochs
    between its reports."""
    if now is None or job.status != "running" or job.allocation is None or not seconds_per_epoch > 0:
        return 0.0
    anchor = max((p.time for p in job.history), default=None)
    if job.started is not None:
        resumed = job.started + job.restart_seconds
        anchor = resumed if anchor is None else max(anchor, resumed)
    if anchor is None or not now > anchor:
        return 0.0
    return min((now - anchor) / seconds_per_epoch, UNREPORTED_SHARE * cadence)


def job_speed(job: Job, now: float | None = None) -> JobSpeed:
    """The job's speed model, from the most trusted source it has:

    1. **observed**: its own ``speed`` points, or, without any, its recent history at its current
       allocation (:func:`observed_speeds`);
    2. **borrowed**: its ``speed_prior`` (similar jobs' speeds, put in the snapshot by the adapter),
       fitted as if they were its own, only while nothing of its own is observed: the first
       observation replaces it, not averaged in, since a similar job is only a guess at this one;
    3. **assumed**: the speed model's prior (``models.speed.DEFAULT_EPOCH_SECONDS`` on one core,
       plus one GPU for GPU jobs), slowed where the job has run longer than that without one report
       (``now``: the snapshot's time; :func:`silent_seconds`): an epoch at its allocation then takes
       at least what it has run, the prior's shape through that point.
    """
    uses_gpu = job.max_gpus > 0
    one = " + 1 GPU" if uses_gpu else ""
    own = observed_speeds(job)
    if own:
        model = fit_speed_model(own, uses_gpu=uses_gpu)
        # How much a CPU job scales, where its observations say (a job that does not is given little CPU).
        scales = f"; serial fraction {model.serial_fraction:.2f}" if not uses_gpu and model.source == "fitted" else ""
        return JobSpeed(model, "observed", f"speed observed ({len(own)} obs, {model.source}{scales})")
    prior = job.speed_prior
    if prior is None:
        model = fit_speed_model([], uses_gpu=uses_gpu)
        why = "none observed, no similar job"
        silent = silent_seconds(job, now)
        if silent is not None:
            assert job.allocation is not None
            cpu, gpus = job.allocation.cpu_millis, job.allocation.gpus
            # At the replicas and nodes it runs on now, as its model stands for its full count on one node.
            floor = min(silent, MAX_SECONDS) / _full_factor_now(job)
            if floor > model.seconds_per_epoch(cpu, gpus):
                model = fit_speed_model([SpeedObservation(cpu, gpus, floor)], uses_gpu=uses_gpu)
                why = f"no report in its {silent:.3g} s at {cpu}m{f' + {gpus} GPU' if gpus else ''}: an epoch takes at least that"
        t = model.seconds_per_epoch(1000, 1 if uses_gpu else 0)
        return JobSpeed(model, "assumed", f"speed assumed: {t:.3g} s/epoch on 1 CPU{one} ({why})")
    borrowed = [SpeedObservation(p.cpu_millis, p.gpus, p.seconds_per_epoch / _to_full(job, p)) for p in prior.points]
    model = replace(fit_speed_model(borrowed, uses_gpu=uses_gpu), source="borrowed")
    t = model.seconds_per_epoch(1000, 1 if uses_gpu else 0)
    names = ", ".join(prior.jobs[:NAMED_JOBS])
    if len(prior.jobs) > NAMED_JOBS:
        names += f" and {len(prior.jobs) - NAMED_JOBS} more"
    note = f"speed borrowed from {len(prior.jobs)} job(s) of {prior.basis} {prior.key} ({names}): {t:.3g} s/epoch on 1 CPU{one}"
    return JobSpeed(model, "borrowed", note)
