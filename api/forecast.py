"""Live predictions for one job from its stored history and target: when will it reach each tier?

The numbers come from the planner's own per-job outlook (:func:`planner.outlook.build_outlook`: which
metric and direction, which curve family, tiers reached, the finish epoch), so the service predicts
what the planner plans with; the 80% bands come from the fitted curve
(:meth:`models.curves.CurveFit.epoch_interval`). Epochs become times at the job's *observed* speed:
seconds per epoch over its latest points (the allocation a plan may change is not known here).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from api.schemas import LivePredictions, TierForecast
from planner.config import PlannerConfig
from planner.outlook import JobOutlook, build_outlook
from planner.progress import recent_seconds_per_epoch
from planner.snapshot import Job, MetricPoint, QoETarget, Settings, Tier


def _job(job_id: str, history: list[MetricPoint], target: QoETarget | None, spec: dict[str, Any] | None) -> Job:
    if spec is not None:
        try:
            return Job.model_validate({**spec, "id": job_id, "history": history, "target": target})
        except ValidationError:
            pass  # a spec the daemon wrote for an older contract: predict from the history alone
    return Job(id=job_id, status="pending", history=history, target=target)


def _tier(
    tier: Tier, reached: bool, outlook: JobOutlook, last_epoch: float, last_time: float | None, spe: float | None
) -> TierForecast:
    curve = outlook.curve
    epoch: float | None
    lo: float | None
    hi: float | None
    if reached:
        epoch = lo = hi = None
    elif curve is not None:
        # As the planner reads it (CurveFit.epoch_seen): the interval's ends at the reports that show them.
        cadence = outlook.report_cadence
        epoch = curve.epoch_seen(tier.value, cadence=cadence)
        lo, hi = curve.seen_interval(tier.value, cadence=cadence)
    else:
        epoch = lo = hi = None

    def eta(e: float | None) -> float | None:
        if e is None or spe is None or last_time is None:
            return None
        return last_time + max(e - last_epoch, 0.0) * spe

    at = eta(epoch)
    on_track: bool | None = None
    if tier.deadline is not None:
        on_track = True if reached else (at <= tier.deadline if at is not None else None)
    return TierForecast(
        value=tier.value,
        deadline=tier.deadline,
        reached=reached,
        epoch=epoch,
        epoch_interval=(lo, hi),
        eta=at,
        eta_interval=(eta(lo), eta(hi)),
        on_track=on_track,
    )


def live_predictions(
    job_id: str, history: list[MetricPoint], target: QoETarget | None, spec: dict[str, Any] | None = None
) -> LivePredictions:
    job = _job(job_id, history, target, spec)
    outlook = build_outlook(job, Settings(), PlannerConfig())
    curve = outlook.curve
    if target is not None:
        metric, direction = target.metric, target.direction
    elif curve is not None:
        metric, direction = ("loss" if any(p.loss is not None for p in history) else "metric"), curve.direction
    else:
        metric, direction = ("loss", "lower") if any(p.loss is not None for p in history) else ("metric", "higher")
    spe = recent_seconds_per_epoch(history)
    last_time = history[-1].time if history else None
    epoch = outlook.epoch
    finish_epoch = epoch + outlook.remaining_finish if curve is not None or (target and target.max_epochs) else None
    eta_finish = last_time + outlook.remaining_finish * spe if finish_epoch is not None and spe and last_time else None
    tol = 1e-3 * max(abs(curve.plateau), 1e-9) if curve is not None else None
    return LivePredictions(
        metric=metric,
        direction=direction,
        basis=outlook.curve_note,
        family=curve.family if curve is not None else None,
        epoch=epoch,
        seconds_per_epoch=spe,
        plateau=curve.plateau if curve is not None else None,
        convergence_epoch=curve.convergence_epoch(tol) if curve is not None and tol is not None else None,
        finish_epoch=finish_epoch,
        eta_finish=eta_finish,
        residual_std=curve.residual_std if curve is not None else None,
        tier1=_tier(target.tier1, outlook.tier1_reached, outlook, epoch, last_time, spe) if target is not None else None,
        tier2=(
            _tier(target.tier2, outlook.tier2_reached, outlook, epoch, last_time, spe)
            if target is not None and target.tier2 is not None
            else None
        ),
    )
