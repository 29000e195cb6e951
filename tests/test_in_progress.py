"""A job is part-way through the epoch its reports do not show yet, and the plan counts that
(``planner.progress.trained_since_report``, applied by ``planner.outlook.with_progress`` at each plan).

A job that reports once an epoch is, between two reports, up to an epoch further than its last
report says. The planner read only the reports, so every prediction was late by the part of the
current epoch done, and rose by the interval at each re-plan until the next report brought it back:
on the README's demo the predicted finish of yolov3 (epochs of some 280 s) swung between 1,451 and
1,689 s against its actual 1,496 s. The oracle, given the simulator's true progress, never had that
error.

Case matrix:

- ``trained_since_report``: half an epoch after a report; counted from the end of a restart's
  start-up when that is later; capped at :data:`UNREPORTED_SHARE` of the report cadence when the
  report is late (the speed was off, the epoch is not done); nothing for a job not running, or at
  the report's own time.
- ``with_progress``: takes the epochs trained since the report off the epochs left (finish, tiers,
  their pessimistic sides), never below a tenth of what is left; leaves a job whose speed is only
  assumed as it is.
- The plan: a job planned at a report and half an epoch later is predicted to finish at the same
  time (before, half an epoch later); a plan that reuses the previous plan's fits predicts what a
  fresh one does (the fits are kept as fitted, the credit is taken at each plan).

Histories are prefixes of the measured cifar10 (batch 512) validation curve from the bundled
Pollux/AdaptDL traces; nothing is faked.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapters.sim.truth import TraceLibrary
from planner import PlannerConfig, plan
from planner.outlook import build_outlook, with_progress
from planner.progress import UNREPORTED_SHARE, trained_since_report
from planner.snapshot import Job, Settings, Snapshot

EPOCH = 100.0  # seconds per epoch at the job's allocation in every history below
SEEN = 12


def _job(seen: int = SEEN, *, every: float = 1.0, **extra: Any) -> Job:
    """A running job on ``n0`` at 2 cores (its max) whose history is the first ``seen`` reports of the
    measured cifar10 curve, one every ``every`` epochs of ``EPOCH`` seconds, 60 epochs planned."""
    values = TraceLibrary.bundled().curve("cifar10", 512).values
    history = [
        {"time": EPOCH * every * (i + 1), "epoch": every * (i + 1), "metric": float(values[int(every * (i + 1)) - 1])}
        for i in range(seen)
    ]
    doc: dict[str, Any] = {
        "id": "j",
        "status": "running",
        "node": "n0",
        "allocation": {"cpu_millis": 2000},
        "min_cpu_millis": 500,
        "max_cpu_millis": 2000,
        "history": history,
        "target": {"metric": "accuracy", "direction": "higher", "tier1": {"value": 0.88}, "max_epochs": 60},
    }
    doc.update(extra)
    return Job.model_validate(doc)


def _last(job: Job) -> float:
    return max(p.time for p in job.history)


def test_half_an_epoch_after_a_report() -> None:
    job = _job()
    assert trained_since_report(job, _last(job) + 50.0, EPOCH) == pytest.approx(0.5)


def test_at_the_report_nothing_more() -> None:
    job = _job()
    assert trained_since_report(job, _last(job), EPOCH) == 0.0


def test_counted_from_the_end_of_a_restarts_start_up() -> None:
    """Restarted 20 s after the report with a 30-s start-up: it has trained 40 s of the 90 since."""
    job = _job(started=SEEN * EPOCH + 20.0, restart_seconds=30.0)
    assert trained_since_report(job, _last(job) + 90.0, EPOCH) == pytest.approx(0.4)
    assert trained_since_report(job, _last(job) + 45.0, EPOCH) == 0.0  # still starting


@pytest.mark.parametrize("every", [1.0, 5.0])
def test_a_late_report_is_not_a_done_epoch(every: float) -> None:
    """Two epochs' time since the report (the speed was off): at most 90 % of the reports' span."""
    job = _job(every=every)
    assert trained_since_report(job, _last(job) + 2 * EPOCH * every, EPOCH, cadence=every) == pytest.approx(
        UNREPORTED_SHARE * every
    )


def test_a_job_not_running_has_trained_nothing() -> None:
    job = _job(status="pending", node=None, allocation=None)
    assert trained_since_report(job, _last(job) + 50.0, EPOCH) == 0.0


def test_the_epochs_left_less_what_is_trained() -> None:
    job = _job()
    fitted = build_outlook(job, Settings(), PlannerConfig(), now=_last(job) + 50.0)
    assert fitted.speed_basis == "observed"
    assert fitted.speed.seconds_per_epoch(2000, 0) == pytest.approx(EPOCH, rel=0.01)
    got = with_progress(fitted, _last(job) + 50.0)
    assert fitted.remaining_finish == pytest.approx(60 - SEEN)
    assert got.remaining_finish == pytest.approx(60 - SEEN - 0.5, abs=0.01)
    assert fitted.remaining_tier1 is not None and got.remaining_tier1 is not None
    assert got.remaining_tier1 == pytest.approx(fitted.remaining_tier1 - 0.5, abs=0.01)
    assert got.epoch == fitted.epoch  # the reports' count, as the plan shows it


def test_never_below_a_tenth_of_what_is_left() -> None:
    """One epoch left (of 13) and 0.9 of it trained by the clock: a tenth stays."""
    job = _job(target={"metric": "accuracy", "direction": "higher", "tier1": {"value": 0.5}, "max_epochs": SEEN + 1})
    got = with_progress(build_outlook(job, Settings(), PlannerConfig()), _last(job) + 99.0)
    assert got.remaining_finish == pytest.approx(0.1)


def test_an_assumed_speed_is_not_read_inside_an_epoch() -> None:
    """One report: no observed speed, so the assumed 60 s/epoch on one core cannot place the job."""
    job = _job(seen=1)
    fitted = build_outlook(job, Settings(), PlannerConfig(), now=_last(job) + 50.0)
    assert fitted.speed_basis == "assumed"
    assert with_progress(fitted, _last(job) + 50.0) == fitted


def _snapshot(now: float) -> Snapshot:
    return Snapshot.model_validate(
        {
            "time": now,
            "nodes": [{"name": "n0", "cpu_millis": 8000, "gpus": 0, "memory_mib": 16384}],
            "jobs": [_job().model_dump()],
        }
    )


def test_the_predicted_finish_holds_between_reports() -> None:
    """Planned at its report and half an epoch later, at the same share: the same predicted finish
    (reading only the reports put it half an epoch later, 50 s)."""
    at_report = plan(_snapshot(SEEN * EPOCH)).plan.assignments[0]
    later = plan(_snapshot(SEEN * EPOCH + 50.0)).plan.assignments[0]
    assert at_report.cpu_millis == later.cpu_millis == 2000
    assert at_report.predictions.eta_finish is not None and later.predictions.eta_finish is not None
    assert at_report.predictions.eta_finish == pytest.approx(SEEN * EPOCH + (60 - SEEN) * EPOCH, abs=15.0)
    assert later.predictions.eta_finish == pytest.approx(at_report.predictions.eta_finish, abs=2.0)


def test_a_reused_fit_plans_as_a_fresh_one() -> None:
    """The previous plan's fits are reused (the job's reports are the same), the credit taken anew."""
    first = plan(_snapshot(SEEN * EPOCH + 20.0))
    again = plan(_snapshot(SEEN * EPOCH + 70.0), previous=first)
    fresh = plan(_snapshot(SEEN * EPOCH + 70.0))
    assert again.plan.assignments == fresh.plan.assignments
    assert list(again.outlooks) == list(first.outlooks)
    assert again.outlooks["j"][1].remaining_finish == first.outlooks["j"][1].remaining_finish == 60 - SEEN
