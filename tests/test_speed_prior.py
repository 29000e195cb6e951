"""A new job's speed: observed, borrowed from similar jobs (``Job.speed_prior``), or assumed (issue 13,
"speed known fast").

Case matrix:

- planner: a pending job with no observation and a prior from a finished job of its task is planned
  at that job's speed (not 60 s/epoch), the plan's basis and explanation name the task and the job;
  the job's own observation (``speed`` points, or its running history) wins over the prior; without
  either the basis says "assumed"; a running job silent for longer than the assumed epoch is
  planned at least that slow (and a fit cached at another time is not reused for it);
- contract: a bad or foreign prior (another task, no task, another image, naming the job itself, a
  GPU speed for a CPU-only job, no points, a non-positive time, an unknown basis) is refused with
  one line naming the field.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from planner import PlannerConfig, plan
from planner.errors import SnapshotError
from planner.io import parse_snapshot
from planner.snapshot import Job, Snapshot

#: The example job of issue 13: 1.46 s an epoch on the real engine, planned at 60 s/epoch before.
REAL_SECONDS = 1.46


def _job(**over: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "id": "new",
        "status": "pending",
        "task": "digits-mlp",
        "min_cpu_millis": 1000,
        "max_cpu_millis": 1000,
        "restart_seconds": 10.0,
        "target": {"metric": "loss", "direction": "lower", "tier1": {"value": 0.1}, "max_epochs": 30},
    }
    job.update(over)
    return job


PRIOR = {
    "basis": "task",
    "key": "digits-mlp",
    "jobs": ["old-1"],
    "points": [{"cpu_millis": 1000, "seconds_per_epoch": REAL_SECONDS}],
}


def _snapshot(*jobs: dict[str, Any]) -> Snapshot:
    return Snapshot.model_validate(
        {"time": 1000.0, "nodes": [{"name": "n", "cpu_millis": 4000}], "jobs": list(jobs)}, strict=False
    )


def _planned(job: dict[str, Any]) -> Any:
    result = plan(_snapshot(job), PlannerConfig(solver="greedy", time_limit=0.5))
    (a,) = result.plan.assignments
    return a


def test_pending_job_is_planned_at_the_borrowed_speed() -> None:
    a = _planned(_job(speed_prior=PRIOR))
    assert a.node == "n" and a.action == "start"
    assert a.predictions.seconds_per_epoch == pytest.approx(REAL_SECONDS, rel=1e-6)
    assert "speed borrowed from 1 job(s) of task digits-mlp (old-1): 1.46 s/epoch on 1 CPU" in a.predictions.basis
    assert "speed not yet observed: borrowed from 1 job(s) of task digits-mlp (old-1)" in a.explanation
    # start-up, then 30 epochs at 1.46 s (not at 60 s: 30 min)
    assert a.predictions.eta_finish - 1000.0 == pytest.approx(10.0 + 30 * REAL_SECONDS, rel=0.01)


def test_without_a_prior_the_speed_is_assumed_and_says_so() -> None:
    a = _planned(_job())
    assert a.predictions.seconds_per_epoch == pytest.approx(60.0)
    assert "speed assumed: 60 s/epoch on 1 CPU (none observed, no similar job)" in a.predictions.basis
    assert "speed not yet observed: assuming 60 s/epoch on 1 CPU" in a.explanation


def _running(started: float | None, **over: Any) -> dict[str, Any]:
    return _job(status="running", node="n", allocation={"cpu_millis": 1000}, submitted=0.0, started=started, task=None, **over)


def test_a_job_silent_longer_than_the_assumed_epoch_is_planned_slower() -> None:
    """A running job that has reported nothing in the 300 s since its start-up (10 s) ended (at 1000m,
    a history at epoch ends only, say; it arrived long before) takes at least 300 s an epoch there,
    not the assumed 60 s; one silent for less than 60 s, a pending one, one that has reported, or one
    whose start is not known keeps the assumed speed."""
    a = _planned(_running(started=690.0))
    assert a.predictions.seconds_per_epoch == pytest.approx(300.0, rel=1e-6)
    assert "speed assumed: 300 s/epoch on 1 CPU (no report in its 300 s at 1000m: an epoch takes at least that)" in (
        a.predictions.basis
    )
    assert "speed not yet observed: assuming 300 s/epoch on 1 CPU" in a.explanation
    for job in (
        _running(started=940.0),
        _job(submitted=700.0, task=None),
        _running(started=700.0, history=[{"time": 990.0, "epoch": 0.5, "loss": 1.0}]),
        _running(started=None),
    ):
        assert _planned(job).predictions.seconds_per_epoch == pytest.approx(60.0), job


def test_the_silence_is_not_read_from_a_fit_cached_at_another_time() -> None:
    """The fit of a silent job depends on the snapshot's time: a plan that lends its fits
    (``previous``) to a later snapshot of the same job does not lend that one."""
    config = PlannerConfig(solver="greedy", time_limit=0.5)
    first = plan(_snapshot(_running(started=690.0)), config)
    later = Snapshot.model_validate(
        {"time": 1600.0, "nodes": [{"name": "n", "cpu_millis": 4000}], "jobs": [_running(started=690.0)]}, strict=False
    )
    (a,) = plan(later, config, previous=first).plan.assignments
    assert a.predictions.seconds_per_epoch == pytest.approx(900.0, rel=1e-6)


@pytest.mark.parametrize("own", ["speed points", "running history"])
def test_the_jobs_own_observation_wins_over_the_borrowed_one(own: str) -> None:
    if own == "speed points":
        job = _job(speed_prior=PRIOR, speed=[{"cpu_millis": 1000, "seconds_per_epoch": 5.0}])
    else:  # two points 10 s apart, one epoch between them, at its current 1 CPU
        history = [{"time": 980.0, "epoch": 1.0, "loss": 1.0}, {"time": 990.0, "epoch": 2.0, "loss": 0.8}]
        job = _job(speed_prior=PRIOR, status="running", node="n", allocation={"cpu_millis": 1000}, history=history)
    a = _planned(job)
    assert a.predictions.seconds_per_epoch == pytest.approx(5.0 if own == "speed points" else 10.0, rel=1e-6)
    assert "speed observed (1 obs" in a.predictions.basis and "borrowed" not in a.predictions.basis
    assert "not yet observed" not in a.explanation


@pytest.mark.parametrize(
    ("replicas", "point", "ratio"),
    [
        (1, {}, 1.0),  # one replica on one node: as measured
        (8, {}, 1.0),  # a point without its replicas: its lender's full count, taken as this job's
        (8, {"replicas": 8}, 1.0),  # measured at this job's full count on one node
        (8, {"replicas": 1}, None),  # one replica: this job's 8 on one node are faster, by the prior's factor
        (8, {"replicas": 8, "nodes": 2}, None),  # over two nodes: slower than on one
    ],
    ids=["one replica", "replicas not said", "the full count", "one of eight", "over two nodes"],
)
def test_a_borrowed_speed_is_scaled_to_the_jobs_own_count(replicas: int, point: dict[str, int], ratio: float | None) -> None:
    """A prior's points may say the replicas and nodes they were measured with; the borrower's speed
    model stands for its full count on one node (as its own epochs are scaled there), so each point
    is divided by the data-parallel prior's factor between the two shapes. Before, a 16-replica
    imagenet gang took a lender's 1-replica epoch (7,480 s) for its full count's and was offered 1
    replica at 112,000 s an epoch."""
    import numpy as np

    from models.gang_speed import gang_scaling
    from planner.progress import job_speed

    prior = dict(PRIOR, points=[{"cpu_millis": 1000, "seconds_per_epoch": 40.0, **point}])
    job = Job.model_validate(_job(replicas=replicas, speed_prior=prior))
    got = job_speed(job).model.seconds_per_epoch(1000, 0)
    if ratio is None:
        scaling = gang_scaling(replicas, [])
        ratio = float(scaling.factor(np.array([point["replicas"]]), np.array([point.get("nodes", 1)]))[0])
        assert (ratio > 1.0) == (point["replicas"] < replicas or point.get("nodes", 1) > 1)
    assert got == pytest.approx(40.0 / ratio, rel=1e-6)


def test_a_gpu_job_borrows_at_its_gpu_count() -> None:
    prior = {
        "basis": "image",
        "key": "reg/train:1",
        "jobs": ["g1", "g2"],
        "points": [
            {"cpu_millis": 2000, "gpus": 1, "seconds_per_epoch": 30.0},
            {"cpu_millis": 2000, "gpus": 1, "seconds_per_epoch": 34.0},
        ],
    }
    job = _job(image="reg/train:1", max_gpus=1, min_gpus=1, min_cpu_millis=2000, max_cpu_millis=2000, speed_prior=prior)
    snap = Snapshot.model_validate(
        {"time": 1000.0, "nodes": [{"name": "n", "cpu_millis": 4000, "gpus": 1}], "jobs": [job]}, strict=False
    )
    (a,) = plan(snap, PlannerConfig(solver="greedy", time_limit=0.5)).plan.assignments
    assert a.gpus == 1
    assert a.predictions.seconds_per_epoch == pytest.approx((30.0 * 34.0) ** 0.5, rel=1e-6)  # geometric mean
    assert "of image reg/train:1 (g1, g2)" in a.predictions.basis


BAD = {
    # name: (job fields over _job(), the field named, a word of the message)
    "another task": ({"speed_prior": {**PRIOR, "key": "cifar10"}}, "jobs[0].speed_prior.key", "not the job's task"),
    "job has no task": ({"task": None, "speed_prior": PRIOR}, "jobs[0].speed_prior.key", "has no task"),
    "another image": (
        {"image": "a:1", "speed_prior": {**PRIOR, "basis": "image", "key": "b:1"}},
        "jobs[0].speed_prior.key",
        "not the job's image",
    ),
    "names the job itself": ({"speed_prior": {**PRIOR, "jobs": ["new"]}}, "jobs[0].speed_prior.jobs", "itself"),
    "GPU speed for a CPU-only job": (
        {"speed_prior": {**PRIOR, "points": [{"cpu_millis": 1000, "gpus": 2, "seconds_per_epoch": 3.0}]}},
        "jobs[0].speed_prior.points[0].gpus",
        "uses none",
    ),
    "no points": ({"speed_prior": {**PRIOR, "points": []}}, "jobs[0].speed_prior.points", "at least 1"),
    "zero seconds": (
        {"speed_prior": {**PRIOR, "points": [{"cpu_millis": 1000, "seconds_per_epoch": 0}]}},
        "jobs[0].speed_prior.points[0].seconds_per_epoch",
        "greater than 0",
    ),
    "unknown basis": ({"speed_prior": {**PRIOR, "basis": "user"}}, "jobs[0].speed_prior.basis", "'task' or 'image'"),
    "unknown field": ({"speed_prior": {**PRIOR, "weight": 2}}, "jobs[0].speed_prior.weight", ""),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_or_foreign_prior_is_refused_in_one_line_naming_the_field(name: str) -> None:
    over, field, word = BAD[name]
    text = json.dumps({"time": 1000.0, "nodes": [{"name": "n", "cpu_millis": 4000}], "jobs": [_job(**over)]})
    with pytest.raises(SnapshotError) as err:
        parse_snapshot(text)
    assert err.value.field == field, str(err.value)
    assert word in err.value.message and "\n" not in str(err.value)


def test_the_contract_documents_the_prior() -> None:
    schema = Snapshot.model_json_schema()
    prior = schema["$defs"]["SpeedPrior"]
    assert set(prior["properties"]) == {"basis", "key", "jobs", "points"}
    assert "speed_prior" in schema["$defs"]["Job"]["properties"] and "image" in schema["$defs"]["Job"]["properties"]
    assert Job.model_fields["speed_prior"].description


def test_a_silent_gang_at_fewer_replicas_is_floored_at_its_full_count() -> None:
    """A gang of up to 4 replicas running 2 that has said nothing for 300 s: its model stands for the
    full count on one node, so the floor there is 300 s over what 2 replicas are slower by (the
    data-parallel prior's factor), not 300 s."""
    from planner.progress import _full_factor, job_speed

    spec = _running(690.0, min_gpus=1, max_gpus=1, replicas=4, min_replicas=2, placement=[{"node": "n", "replicas": 2}])
    job = Job.model_validate({**spec, "allocation": {"cpu_millis": 1000, "gpus": 1}})
    factor = _full_factor(job, 2, 1)
    assert factor > 1.0
    got = job_speed(job, now=1000.0)
    assert got.basis == "assumed" and "no report in its 300 s at 1000m + 1 GPU" in got.note
    assert float(got.model.seconds_per_epoch(1000, 1)) == pytest.approx(300.0 / factor, rel=1e-6)
