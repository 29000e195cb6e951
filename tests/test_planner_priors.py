"""Curve priors in the planner: a job naming a task with earlier runs gets predictions before it has a curve.

The references are measured curves (cifar10 at other batch sizes than the job's) from the bundled
copy of the Pollux/AdaptDL traces; nothing is invented.
"""

from __future__ import annotations

import pytest

from adapters.sim.truth import TraceLibrary, history_priors, task_name
from planner import PlannerConfig
from planner.outlook import TAIL_QUANTILE, build_outlook
from planner.snapshot import Job, QoETarget, Settings, Tier


def _job(task: str | None, points: int) -> Job:
    lib = TraceLibrary.bundled()
    values = lib.curve("cifar10", 512).values
    history = [{"time": 30.0 * (i + 1), "epoch": i + 1, "metric": values[i]} for i in range(points)]
    return Job.model_validate(
        {
            "id": "j",
            "status": "pending",
            "task": task,
            "history": history,
            "target": QoETarget(metric="accuracy", direction="higher", tier1=Tier(value=0.85), max_epochs=60),
        }
    )


def test_history_priors_never_hold_the_tasks_own_curve() -> None:
    lib = TraceLibrary.bundled()
    priors = history_priors(lib)
    own = lib.curve("cifar10", 512).values
    refs = priors[task_name("cifar10", 512)].references
    assert len(refs) == len(lib.curves["cifar10"]) - 1
    assert all(r.values != own for r in refs)


def test_a_job_without_history_reads_its_tiers_off_earlier_runs() -> None:
    priors = history_priors(TraceLibrary.bundled())
    config = PlannerConfig(curve_priors=priors)
    with_prior = build_outlook(_job("cifar10/bs512", 0), Settings(), config)
    without = build_outlook(_job(None, 0), Settings(), config)
    unknown = build_outlook(_job("no-such-task", 0), Settings(), config)
    assert without.tiers_assumed and unknown.tiers_assumed
    assert not with_prior.tiers_assumed
    assert with_prior.remaining_tier1 is not None
    # cifar10 at the other batch sizes reaches 85% accuracy well before the job's 60 epochs.
    assert 5 <= with_prior.remaining_tier1 < 40
    assert "earlier runs of cifar10/bs512" in with_prior.curve_note


def test_a_prior_predicts_from_two_points_where_the_families_cannot() -> None:
    priors = history_priors(TraceLibrary.bundled())
    got = build_outlook(_job("cifar10/bs512", 2), Settings(), PlannerConfig(curve_priors=priors))
    bare = build_outlook(_job("cifar10/bs512", 2), Settings(), PlannerConfig())
    assert got.curve is not None and got.curve.family == "prior"
    assert bare.curve is None


def _tiered(task: str, tier2: float, max_epochs: float) -> Job:
    return Job.model_validate(
        {
            "id": "j",
            "status": "pending",
            "task": task,
            "history": [],
            "target": QoETarget(
                metric="accuracy", direction="higher", tier1=Tier(value=0.5), tier2=Tier(value=tier2), max_epochs=max_epochs
            ),
        }
    )


def test_tiers_read_off_earlier_runs_have_a_pessimistic_side() -> None:
    """A job with no curve yet whose tiers are read off earlier runs is not certain of them: the tail
    guard's pessimistic finish is the TAIL_QUANTILE of the epochs at which those runs first reached
    its tier 2 (linear between order statistics), a run that never did counting as never, so a
    quantile that falls on such runs reads max_epochs. Before, such a job had no pessimistic side
    and a long job starved while it showed its first points was never guarded (flowcon-1node)."""
    priors = history_priors(TraceLibrary.bundled())
    refs = priors["cifar10/bs512"].references
    tier2 = 0.9
    hits = sorted(next(e for e, v in zip(r.epochs, r.values, strict=False) if v >= tier2) for r in refs)
    assert len(hits) == len(refs) >= 3
    pos = TAIL_QUANTILE * (len(hits) - 1)
    lo = int(pos)
    expected = hits[lo] + (pos - lo) * (hits[min(lo + 1, len(hits) - 1)] - hits[lo])
    got = build_outlook(_tiered("cifar10/bs512", tier2, 200.0), Settings(), PlannerConfig(curve_priors=priors))
    assert got.remaining_tier2 is not None and got.remaining_finish_high is not None
    assert got.remaining_finish_high == pytest.approx(expected)
    assert got.remaining_finish_high >= got.remaining_finish
    # A tier four of the five earlier runs reach (the best accuracy of the second-worst run): the
    # median reads off the four, the pessimistic side falls on the run that never got there and
    # reads the job's max_epochs.
    best = sorted(max(r.values) for r in refs)
    assert len(refs) == 5 and best[0] < best[1]
    hard = build_outlook(_tiered("cifar10/bs512", best[1], 200.0), Settings(), PlannerConfig(curve_priors=priors))
    assert hard.remaining_tier2 is not None and hard.remaining_tier2 < 200.0
    assert hard.remaining_finish_high == pytest.approx(200.0)
