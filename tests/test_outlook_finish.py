"""When a job is predicted to finish: at ``max_epochs`` unless a tier 2 stops it sooner, whatever the
curve says about convergence (training scripts run their epochs); at convergence only when it
declares neither. The history is the measured cifar10 (batch 512) curve from the bundled copy of the
Pollux/AdaptDL traces, observed to epoch 60 of 100, where it has flattened."""

from __future__ import annotations

import pytest

from adapters.sim.truth import TraceLibrary
from planner import PlannerConfig
from planner.outlook import JobOutlook, build_outlook
from planner.snapshot import Job, QoETarget, Settings, Tier

SEEN = 60


def _job(target: QoETarget | None) -> Job:
    values = TraceLibrary.bundled().curve("cifar10", 512).values
    history = [{"time": 30.0 * (i + 1), "epoch": i + 1, "metric": values[i]} for i in range(SEEN)]
    return Job.model_validate({"id": "j", "status": "pending", "history": history, "target": target})


def _outlook(target: QoETarget | None) -> JobOutlook:
    return build_outlook(_job(target), Settings(), PlannerConfig())


def test_the_curve_has_converged_by_then() -> None:
    """The premise: without max_epochs the finish is the curve's convergence, well short of 300."""
    o = _outlook(None)
    assert o.remaining_finish < 40


@pytest.mark.parametrize("tier1", [0.5, 0.999], ids=["tier1-reached", "tier1-unreachable"])
def test_a_tier1_only_job_runs_to_its_max_epochs(tier1: float) -> None:
    target = QoETarget(metric="accuracy", direction="higher", tier1=Tier(value=tier1), max_epochs=300)
    assert _outlook(target).remaining_finish == pytest.approx(300 - SEEN)


def test_a_reachable_tier2_still_stops_it_sooner() -> None:
    values = TraceLibrary.bundled().curve("cifar10", 512).values
    near = values[SEEN + 9]  # reached about ten epochs on
    target = QoETarget(metric="accuracy", direction="higher", tier1=Tier(value=0.5), tier2=Tier(value=near), max_epochs=300)
    assert _outlook(target).remaining_finish < 300 - SEEN


@pytest.mark.parametrize(
    ("target", "says"),
    [
        # The history carries the accuracy; a target left at the default metric reads the loss.
        (QoETarget(tier1=Tier(value=0.2), max_epochs=300), "none of its 60 history point(s) has a loss"),
        (QoETarget(metric="accuracy", direction="higher", tier1=Tier(value=0.9), max_epochs=300), None),
    ],
    ids=["target-on-the-loss", "target-on-the-accuracy"],
)
def test_a_target_on_a_column_the_history_lacks_says_so(target: QoETarget, says: str | None) -> None:
    """A target whose metric reads the loss of a job that reports only its accuracy has no curve: the
    basis says that no point has the column (a misnamed target), not only "0 usable points"."""
    o = _outlook(target)
    if says is None:
        assert o.curve is not None and "none of its" not in o.curve_note
    else:
        assert o.curve is None and says in o.curve_note and "metric 'accuracy'" in o.curve_note, o.curve_note
