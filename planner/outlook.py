"""Per-job outlook: what the models predict for a job independently of where it runs.

The learning curve says how many *epochs* remain to tier 1, tier 2 and the finish; the speed model
turns epochs into seconds for any allocation. The planner combines the two per candidate option.
Tier epochs are read at the snapshot's ``deadline_confidence`` (the median by default; higher
values take the pessimistic side of the curve's band, so a deadline counts as met only with that
confidence).

A job's finish is the first of ``max_epochs`` and reaching tier 2 (when it has one the curve can
reach): a job that declares ``max_epochs`` trains until then unless its tier 2 stops it sooner,
whatever the curve says about convergence (training scripts run their epochs). Only a job that
declares neither a reachable tier 2 nor ``max_epochs`` is predicted to finish at the curve's
convergence (improvement per epoch below the snapshot's ``convergence_tolerance``). It is never
before tier 1 when tier 1 is reachable.

A job that declares its learning-rate ``schedule`` is fitted with the schedule-aware curve
(:mod:`models.schedule_curve`): a plateau before a declared drop is not convergence, and a rate
annealed to zero at ``max_epochs`` flattens the curve there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Literal, Protocol

import numpy as np

from models import CannotPredict, CurveFit, Direction, fit_learning_curve
from models.curve_prior import CurvePrior, ReferenceCurve
from models.curves import report_cadence
from planner.config import PlannerConfig
from planner.progress import (
    UNREPORTED_SHARE,
    SpeedBasis,
    epoch_seconds_now,
    job_speed,
    judged_on_loss,
    judged_series,
    reached,
    trained_since_report,
    unread_history,
)
from planner.snapshot import MIN_REFERENCE_POINTS, Job, QoETarget, Settings, Snapshot, TaskCurves, lr_schedule

#: Cap on predicted remaining epochs so one job with a nearly flat curve cannot dominate the horizon.
MAX_REMAINING_EPOCHS = 100_000.0
#: An unreached tier is at least this many epochs away, whatever the fitted curve says.
MIN_REMAINING_EPOCHS = 1.0
#: Longer histories are thinned to this many points before fitting (evenly spaced, newest kept):
#: a curve needs far fewer, and a million-point history must not stall the planner.
MAX_FIT_POINTS = 400


class SpeedLike(Protocol):
    """What the planner asks of a speed model (:class:`models.SpeedModel`, or the oracle's truth)."""

    @property
    def source(self) -> str: ...

    @property
    def n_observations(self) -> int: ...

    def seconds_per_epoch(self, cpu_millis: float, gpus: float) -> float: ...

    def seconds_per_epoch_many(self, cpu_millis: np.ndarray, gpus: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class JobTruth:
    """What really remains of one job and how fast it really trains: given to the planner only by the
    *oracle* policy (:mod:`planner.policies.oracle`), which reads the simulator's ground truth so that
    a gap between FlowPlan and the oracle measures prediction error, not the formulation's."""

    remaining_tier1: float | None
    remaining_tier2: float | None
    remaining_finish: float
    speed: SpeedLike
    #: What of it the planner is given: ``"all"``; ``"speed"`` (the true speed, the epochs left still
    #: predicted from the job's curve); ``"epochs"`` (the true epochs left to each tier and the end,
    #: the speed still fitted from what the job showed). The last two split the oracle's gap to
    #: FlowPlan into the two predictions' parts (``oracle-speed``, ``oracle-epochs``).
    knows: Literal["all", "speed", "epochs"] = "all"


@dataclass(frozen=True)
class JobOutlook:
    """Allocation-independent predictions for one job."""

    job: Job
    epoch: float
    curve: CurveFit | None
    curve_note: str
    speed: SpeedLike
    tier1_reached: bool
    tier2_reached: bool
    #: Remaining epochs, ``None`` when the tier is unreachable or the job has no such tier.
    remaining_tier1: float | None
    remaining_tier2: float | None
    remaining_finish: float
    #: True when remaining_tier* are stand-ins (no curve yet): the finish estimate is used instead.
    tiers_assumed: bool
    #: Deadlines ``None`` when the tier has none or it is already reached (nothing left to plan for).
    tier1_deadline: float | None
    tier2_deadline: float | None
    #: What the speed rests on (:func:`planner.progress.job_speed`; "truth" for the oracle) and that in words.
    speed_basis: SpeedBasis | Literal["truth"] = "assumed"
    speed_note: str = ""
    #: Epochs to the finish read on the pessimistic side of the curve's band (:data:`TAIL_QUANTILE`);
    #: ``None``: the same as ``remaining_finish`` (no band, or a finish that is not predicted).
    remaining_finish_high: float | None = None
    #: Epochs to tier 1 on the pessimistic side of the band (:data:`TAIL_QUANTILE`, or the
    #: snapshot's ``deadline_confidence`` where higher), for a job with an open tier-1 deadline;
    #: ``None``: no band (or no such deadline).
    remaining_tier1_high: float | None = None
    #: Epochs between the job's reports of its judged metric (:func:`models.curves.report_cadence`):
    #: what :meth:`~models.curves.CurveFit.epoch_seen` reads the curve with.
    report_cadence: float = 1.0


@dataclass(frozen=True)
class _Series:
    epochs: np.ndarray  # thinned for the fit
    values: np.ndarray
    name: str
    direction: Direction
    #: Epochs between the job's reports (:func:`models.curves.report_cadence`, before thinning): where
    #: a tier read at a quantile of the band is shown (:meth:`models.curves.CurveFit.epoch_seen`).
    cadence: float


def _series(job: Job) -> _Series:
    """Epochs, values, name and direction of the judged metric (:func:`planner.progress.judged_series`),
    thinned evenly to at most :data:`MAX_FIT_POINTS` for the fit, and how often the job reports it."""
    _, epochs, values, name, direction = judged_series(job)
    cadence = report_cadence(epochs)
    if epochs.size > MAX_FIT_POINTS:
        keep = np.unique(np.linspace(0, epochs.size - 1, MAX_FIT_POINTS).round().astype(int))
        epochs, values = epochs[keep], values[keep]
    return _Series(epochs, values, name, direction, cadence)


def task_curves(snapshot: Snapshot) -> dict[str, TaskCurves]:
    """The snapshot's finished runs by task (``Snapshot.curve_priors``)."""
    return {c.task: c for c in snapshot.curve_priors}


def job_curve_prior(job: Job, config: PlannerConfig, curves: TaskCurves | None = None) -> CurvePrior | None:
    """The curve prior of ``job``: the finished runs of its task the snapshot carries (``curves``, its
    entry of ``Snapshot.curve_priors``) on the column the job is judged on, without a run of the job
    itself or one with fewer than 3 such points, then the planner's library for its task
    (``PlannerConfig.curve_priors``); ``None`` if neither has any. A job that declares a
    learning-rate schedule gets only the runs that declared the same one over the same planned
    epochs (measured on the recorded schedule runs: ``docs/models.md``)."""
    # A job that declares a schedule reads only runs under the same one (the library's runs say
    # nothing of theirs): without such runs its schedule's own curve is the better guide.
    declared = job.schedule is not None
    library = config.curve_priors.get(job.task) if job.task is not None and not declared else None
    planned = job.target.max_epochs if job.target is not None else None
    carried: list[ReferenceCurve] = []
    if curves is not None and curves.task == job.task:
        use_loss = judged_on_loss(job)
        for run in curves.runs:
            if declared and (run.schedule != job.schedule or run.max_epochs != planned):
                continue
            points = sorted((p.epoch, v) for p in run.points if (v := p.loss if use_loss else p.metric) is not None)
            if run.job != job.id and len(points) >= MIN_REFERENCE_POINTS:
                carried.append(ReferenceCurve(tuple(e for e, _ in points), tuple(v for _, v in points), label=run.job))
    if not carried:
        return library
    if library is None or not library.same_task:  # runs of the task itself say more than other models' shapes
        return CurvePrior(tuple(carried))
    return CurvePrior(tuple(carried) + library.references, same_task=True, warp_range=library.warp_range)


def _prior_epoch(prior: CurvePrior, value: float, direction: str, q: float = 0.5) -> float | None:
    """The ``q`` quantile of the epoch at which earlier runs first reached ``value``, a run that never
    did counting as never (``None`` when the quantile falls on such runs). ``q = 0.5``: the median,
    read over the runs that reached it, as long as most did."""
    hits: list[float] = []
    for ref in prior.references:
        d = ref.direction or direction
        for e, v in zip(ref.epochs, ref.values, strict=False):
            if (v >= value) if d == "higher" else (v <= value):
                hits.append(float(e))
                break
    if not prior.references or 2 * len(hits) < len(prior.references):
        return None
    if q == 0.5:
        return float(np.median(hits))
    # Linear interpolation between order statistics, as np.quantile's default, over every run.
    ranked = sorted(hits) + [math.inf] * (len(prior.references) - len(hits))
    pos = q * (len(ranked) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    if not math.isfinite(ranked[hi]):
        return None
    return ranked[lo] + (pos - lo) * (ranked[hi] - ranked[lo])


def _open_deadlines(target: QoETarget | None, t1_reached: bool, t2_reached: bool) -> tuple[float | None, float | None]:
    """The tier deadlines still to plan for (``None``: no such tier, no deadline, or already reached)."""
    if target is None:
        return None, None
    d1 = None if t1_reached else target.tier1.deadline
    d2 = target.tier2.deadline if (target.tier2 is not None and not t2_reached) else None
    return d1, d2


def with_truth(predicted: JobOutlook, truth: JobTruth) -> JobOutlook:
    """``predicted`` (the job's fitted outlook) with what ``truth`` gives the planner (its ``knows``):
    all of it, only the speed, or only the epochs left (the speed then stays the fitted one)."""
    if truth.knows == "speed":
        return replace(predicted, speed=truth.speed, speed_basis="truth", speed_note="speed: ground truth (oracle)")
    known = outlook_from_truth(predicted.job, truth)
    if truth.knows == "epochs":
        return replace(known, speed=predicted.speed, speed_basis=predicted.speed_basis, speed_note=predicted.speed_note)
    return known


def outlook_from_truth(job: Job, truth: JobTruth) -> JobOutlook:
    """The outlook of a job whose remaining epochs and speed are known (the oracle's)."""
    target = job.target
    epoch = float(max((p.epoch for p in job.history), default=0.0))
    r1, r2 = truth.remaining_tier1, truth.remaining_tier2
    t1_reached = target is not None and r1 is not None and r1 <= 0
    t2_reached = target is not None and target.tier2 is not None and r2 is not None and r2 <= 0
    d1, d2 = _open_deadlines(target, t1_reached, t2_reached)
    return JobOutlook(
        job=job,
        epoch=epoch,
        curve=None,
        curve_note="ground truth (oracle)",
        speed=truth.speed,
        tier1_reached=t1_reached,
        tier2_reached=t2_reached,
        remaining_tier1=None if r1 is None else max(r1, 0.0),
        remaining_tier2=None if r2 is None else max(r2, 0.0),
        remaining_finish=max(truth.remaining_finish, 0.0),
        tiers_assumed=False,
        tier1_deadline=d1,
        tier2_deadline=d2,
        speed_basis="truth",
        speed_note="speed: ground truth (oracle)",
        remaining_tier1_high=None if (r1 is None or d1 is None) else max(r1, 0.0),
    )


def with_progress(outlook: JobOutlook, now: float | None) -> JobOutlook:
    """``outlook`` with what its job has trained since its newest report taken off the epochs it has
    left (:func:`planner.progress.trained_since_report`, at the job's predicted speed at its
    allocation now): the reports show whole epochs, the job is part-way through the next one.

    Only where the speed is the job's own (observed, or the oracle's true speed): an assumed or
    borrowed speed is too rough to place the job inside an epoch. Applied at each plan, not kept in
    the fit (the fit is reused while the job's reports stay the same; the time since them does not).
    What is left never drops below a tenth of itself (:data:`~planner.progress.UNREPORTED_SHARE`)."""
    if outlook.speed_basis not in ("observed", "truth"):
        return outlook
    seconds = epoch_seconds_now(outlook.job, outlook.speed.seconds_per_epoch)
    if seconds is None:
        return outlook
    done = trained_since_report(outlook.job, now, seconds, outlook.report_cadence)
    if done <= 0:
        return outlook

    def less(left: float | None) -> float | None:
        return left if left is None or left <= 0 else left - min(done, UNREPORTED_SHARE * left)

    finish = less(outlook.remaining_finish)
    assert finish is not None
    return replace(
        outlook,
        remaining_tier1=less(outlook.remaining_tier1),
        remaining_tier2=less(outlook.remaining_tier2),
        remaining_finish=finish,
        remaining_finish_high=less(outlook.remaining_finish_high),
        remaining_tier1_high=less(outlook.remaining_tier1_high),
    )


#: The pessimistic side the tail guard reads a finish on (the curve's band, one-sided): a job that
#: may well take this long is protected like the one the median says is longest.
TAIL_QUANTILE = 0.8
TAIL_Z = NormalDist().inv_cdf(TAIL_QUANTILE)


def build_outlook(
    job: Job, settings: Settings, config: PlannerConfig, curves: TaskCurves | None = None, now: float | None = None
) -> JobOutlook:
    """What the planner believes of ``job``: its curve and speed, and what is left to its tiers and its
    end. ``curves``: the snapshot's finished runs of its task (``Snapshot.curve_priors``), if any;
    ``now``: the snapshot's time (a job that has reported nothing yet is slowed by its silence,
    :func:`planner.progress.job_speed`)."""
    series = _series(job)
    epochs, values, metric, direction = series.epochs, series.values, series.name, series.direction
    epoch = float(max((p.epoch for p in job.history), default=0.0))
    target = job.target

    prior = job_curve_prior(job, config, curves)
    # A declared learning-rate schedule (with its planned epochs) lets the curve see drops and an
    # annealed end coming; without one the fit is the schedule-free model. Runs of the task under
    # the same schedule (the only prior such a job gets) carry its drops already, and more: the
    # prior then competes with the families as it does without a schedule.
    planned = target.max_epochs if target is not None else None
    declared = lr_schedule(job.schedule, planned) if job.schedule is not None else None
    schedule = declared if prior is None else None
    fit = fit_learning_curve(epochs, values, direction, prior=prior, schedule=schedule)
    curve = fit if isinstance(fit, CurveFit) else None
    # Where those runs do not reach a tier (or not by the planned end: the job's own run may end
    # lower than theirs), the declared schedule's curve is read instead.
    fallback: CurveFit | None = None
    if curve is not None and declared is not None and schedule is None:
        other = fit_learning_curve(epochs, values, direction, schedule=declared)
        fallback = other if isinstance(other, CurveFit) else None
    if curve is not None:
        curve_note = f"{curve.family} fit of {metric} on {curve.n_points} points"
        if curve.family == "prior" and prior is not None:
            same = f", the same {job.schedule.kind} schedule" if job.schedule is not None else ""
            curve_note += f" ({len(prior.references)} earlier runs of {job.task}{same})"
        if fallback is not None:
            curve_note += f"; the declared {fallback.family} curve where they miss a tier"
        if schedule is not None:
            curve_note += f" with the declared {schedule.kind} learning-rate schedule"
    else:
        assert isinstance(fit, CannotPredict)
        curve_note = f"no curve yet ({unread_history(job) or fit.reason})"

    speed = job_speed(job, now)

    t1_reached = target is not None and reached(values, target.tier1.value, direction)
    t2_reached = target is not None and target.tier2 is not None and reached(values, target.tier2.value, direction)
    max_left = (target.max_epochs - epoch) if (target is not None and target.max_epochs is not None) else None
    if max_left is not None:
        max_left = max(max_left, 0.0)

    # A deadline is judged at the snapshot's confidence: the curve read at that normal quantile of
    # its prediction band, towards worse (0 at the median).
    quantile = NormalDist().inv_cdf(settings.deadline_confidence)

    def read(c: CurveFit, value: float, z: float | None) -> float | None:
        # A quantile of the band is read at the report that will show it (on the job's report grid).
        k = c.epoch_seen(value, quantile_z=quantile if z is None else z, cadence=series.cadence)
        if k is None:
            return None
        # Not reached in the data (the caller checked): at least one more epoch to show it.
        return min(max(k - epoch, MIN_REMAINING_EPOCHS), MAX_REMAINING_EPOCHS)

    def left_to(value: float, z: float | None = None) -> float | None:
        if curve is None:
            return None
        got = read(curve, value, z)
        if fallback is not None and (got is None or (max_left is not None and got > max_left)):
            other = read(fallback, value, z)
            return other if other is not None else got
        return got

    r1 = 0.0 if t1_reached else (left_to(target.tier1.value) if target is not None else None)
    r2: float | None = None
    if target is not None and target.tier2 is not None:
        r2 = 0.0 if t2_reached else left_to(target.tier2.value)

    # Finish: tier 2 if reachable, else max_epochs, else convergence, else the configured guess.
    finish_high: float | None = None
    if r2 is not None:
        finish = r2
        if not t2_reached and target is not None and target.tier2 is not None:
            high = left_to(target.tier2.value, TAIL_Z)
            finish_high = high if high is not None else (max_left if max_left is not None else None)
    elif max_left is not None:
        # A job that declares max_epochs runs until then unless it reaches a tier 2 first (one the
        # curve says it will not reach, or none at all): a job does not stop because the planner
        # thinks it has converged. Convergence is the finish only of a job that declares neither.
        finish = max_left
    elif curve is not None:
        finish = max(curve.convergence_epoch(settings.convergence_tolerance) - epoch, 0.0)
    else:
        finish = max_left if max_left is not None else config.unknown_remaining_epochs
    if r1 is not None:
        finish = max(finish, r1)
    if max_left is not None:
        finish = min(finish, max_left)
        r1 = None if (r1 is not None and r1 > max_left) else r1
        r2 = None if (r2 is not None and r2 > max_left) else r2
    # The model's belief that a job has converged is a reason to give it less, never to starve it: a
    # job runs until it says it is done (max_epochs, its target, or it exits), so at least one more
    # epoch is left unless max_epochs is reached (at a plateau before a learning-rate drop the curve
    # predicts nothing left; pausing such jobs "for free" left nodes empty for hours).
    if max_left is None or max_left > 0:
        finish = max(finish, min(MIN_REMAINING_EPOCHS, max_left if max_left is not None else MIN_REMAINING_EPOCHS))
    finish = min(finish, MAX_REMAINING_EPOCHS)
    if finish_high is not None:
        finish_high = min(max(finish_high, finish), max_left if max_left is not None else MAX_REMAINING_EPOCHS)

    tiers_from_prior = False
    if curve is None and prior is not None and target is not None:
        # No curve yet (0-2 points), but earlier runs of the same task: read the tiers off them.
        refs = prior

        def from_prior(value: float) -> float | None:
            k = _prior_epoch(refs, value, direction)
            return None if k is None else min(max(k - epoch, MIN_REMAINING_EPOCHS), MAX_REMAINING_EPOCHS)

        p1 = 0.0 if t1_reached else from_prior(target.tier1.value)
        p2 = None if target.tier2 is None else (0.0 if t2_reached else from_prior(target.tier2.value))
        if p1 is not None:
            r1, r2 = p1, p2
            if p2 is not None:
                finish = max(p2, p1)
                if not t2_reached and target.tier2 is not None:
                    # The pessimistic side is the spread of the earlier runs: the TAIL_QUANTILE of
                    # the epochs at which they reached tier 2 (a run that never did: max_epochs).
                    k = _prior_epoch(refs, target.tier2.value, direction, TAIL_QUANTILE)
                    high = max_left if k is None else min(max(k - epoch, MIN_REMAINING_EPOCHS), MAX_REMAINING_EPOCHS)
                    finish_high = None if high is None else max(high, finish)
            if max_left is not None:
                finish = min(finish, max_left)
                finish_high = None if finish_high is None else min(finish_high, max_left)
                r1 = None if r1 > max_left else r1
                r2 = None if (r2 is not None and r2 > max_left) else r2
            curve_note += f"; tiers read off {len(prior.references)} earlier runs of {job.task}"
            tiers_from_prior = True

    assumed = curve is None and target is not None and not tiers_from_prior
    if assumed:
        # Without a curve the best guess for an unreached tier is "by the time the job finishes".
        r1 = r1 if t1_reached else finish
        if target is not None and target.tier2 is not None and not t2_reached:
            r2 = finish

    d1, d2 = _open_deadlines(target, t1_reached, t2_reached)
    r1_high = None
    if d1 is not None and r1 is not None and not assumed and not tiers_from_prior and target is not None:
        r1_high = left_to(target.tier1.value, max(TAIL_Z, quantile))
        r1_high = None if r1_high is None else max(r1_high, r1)
    return JobOutlook(
        job=job,
        epoch=epoch,
        curve=curve,
        curve_note=curve_note,
        speed=speed.model,
        tier1_reached=t1_reached,
        tier2_reached=t2_reached,
        remaining_tier1=r1,
        remaining_tier2=r2,
        remaining_finish=float(finish),
        tiers_assumed=assumed,
        tier1_deadline=d1,
        tier2_deadline=d2,
        speed_basis=speed.basis,
        speed_note=speed.note,
        remaining_finish_high=None if finish_high is None else float(finish_high),
        remaining_tier1_high=r1_high,
        report_cadence=series.cadence,
    )
