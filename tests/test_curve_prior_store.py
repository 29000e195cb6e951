"""A new job's learning curve, with earlier runs of its task as the prior (issue 13: "learn priors
automatically from the finished runs in the state store (same task, other batch sizes)").

Case matrix:

- store (SQLite file and the adapters' in-memory store, the same answers): finished runs of the task
  lend their curves, newest first, at most ``CURVE_PRIOR_MAX_RUNS``; a run still training, a run of
  another task, the job itself and a run with fewer than 3 points of the column do not; the loss or
  the metric column as asked; a run longer than the contract allows is thinned, first and last kept;
- planner: on the measured curves of ``../shared/data`` (cifar10, yolov3, deepspeech2, imagenet, every
  batch size in turn the new job, 25 % of its epochs observed, targets at 80 / 90 / 95 % of its
  range), the prior the store gives cuts the median epochs-to-target error several-fold, as
  ``docs/models.md`` measures for the planner's own library; the plan says where the curve came from;
- contract: a foreign or malformed prior (another task, no task, naming the job itself, too few
  points, a non-finite value, too many runs) is refused in one line naming the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import TRACES, real_curve

from adapters.docker.memory import MemoryStore
from planner import PlannerConfig, plan
from planner.errors import SnapshotError
from planner.io import parse_snapshot
from planner.outlook import build_outlook
from planner.snapshot import MAX_REFERENCE_POINTS, Job, MetricPoint, Node, Settings, Snapshot
from store import CURVE_PRIOR_MAX_RUNS, StateStore

#: (model, metric the target reads, direction) of the measured curves used here.
MODELS = [
    ("cifar10", "accuracy", "higher"),
    ("yolov3", "loss", "lower"),
    ("deepspeech2", "wer", "lower"),
    ("imagenet", "accuracy", "higher"),
]


def _batches(model: str) -> list[int]:
    return sorted(int(f.name.split("-")[1].split(".")[0]) for f in (TRACES / model).glob("validation-*.csv"))


def _points(values: Any, column: str, t0: float = 0.0) -> list[MetricPoint]:
    return [MetricPoint(time=t0 + 60.0 * (i + 1), epoch=float(i + 1), **{column: float(v)}) for i, v in enumerate(values)]


def _finish(store: Any, job: str, task: str | None, points: list[MetricPoint], *, finished: bool = True) -> None:
    """What the Docker adapter records of a job: its points and (task, finished) row."""
    store.add_points(job, points)
    store.record_speeds(job, [], task=task, image=None, epochs=max(p.epoch for p in points), finished=finished)


@pytest.fixture(params=["sqlite", "memory"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        yield MemoryStore()
        return
    with StateStore(tmp_path / "state.db") as store:
        yield store


def test_finished_runs_of_the_task_lend_their_curves(any_store: Any) -> None:
    store = any_store
    curve = real_curve("cifar10", 128)
    _finish(store, "old-a", "cifar10", _points(curve[:40], "metric"))
    _finish(store, "old-b", "cifar10", _points(curve[:30], "metric"))
    _finish(store, "short", "cifar10", _points(curve[:2], "metric"))  # 2 points: no shape
    _finish(store, "running", "cifar10", _points(curve[:50], "metric"), finished=False)  # would read as a plateau
    _finish(store, "other-task", "yolov3", _points(real_curve("yolov3", 64), "loss"))
    _finish(store, "new", "cifar10", _points(curve[:20], "metric"))  # the job itself (resubmitted)

    got = store.curve_prior(task="cifar10", column="metric", exclude="new")
    assert got is not None and got.key == "cifar10" and got.basis == "task"
    assert [r.job for r in got.runs] == ["old-b", "old-a"]  # newest first
    assert [len(r.points) for r in got.runs] == [30, 40]
    assert got.runs[0].points[0].value == pytest.approx(curve[0]) and got.runs[0].points[-1].epoch == 30.0

    # The loss column: none of those reported one; the yolov3 run did.
    assert store.curve_prior(task="cifar10", column="loss", exclude="new") is None
    loss = store.curve_prior(task="yolov3", column="loss", exclude="new")
    assert loss is not None and [r.job for r in loss.runs] == ["other-task"]
    assert store.curve_prior(task=None, column="loss", exclude="new") is None
    assert store.curve_prior(task="bert", column="loss", exclude="new") is None


def test_the_newest_runs_lend_and_a_long_one_is_thinned(any_store: Any) -> None:
    store = any_store
    for k in range(CURVE_PRIOR_MAX_RUNS + 3):
        _finish(store, f"run-{k:02d}", "t", _points(np.linspace(1.0, 0.1, 5 + k), "loss"))
    long = np.linspace(2.0, 0.5, MAX_REFERENCE_POINTS + 500)
    _finish(store, "long", "t", [MetricPoint(time=float(i), epoch=i / 10, loss=float(v)) for i, v in enumerate(long)])
    got = store.curve_prior(task="t", column="loss", exclude="x")
    assert got is not None and len(got.runs) == CURVE_PRIOR_MAX_RUNS
    assert got.runs[0].job == "long" and [r.job for r in got.runs[1:]] == [f"run-{k:02d}" for k in range(10, 3, -1)]
    thinned = got.runs[0].points
    assert len(thinned) == MAX_REFERENCE_POINTS
    assert (thinned[0].epoch, thinned[-1].epoch) == (0.0, pytest.approx((len(long) - 1) / 10))
    assert [p.epoch for p in thinned] == sorted(p.epoch for p in thinned)


def _epochs_to_target_errors(store: StateStore, with_prior: bool) -> list[float]:
    errors = []
    for model, metric, direction in MODELS:
        column = "loss" if metric == "loss" else "metric"
        for batch in _batches(model):
            values = real_curve(model, batch)
            n = max(3, round(0.25 * values.size))
            prior = store.curve_prior(task=model, column=column, exclude=f"{model}-{batch}") if with_prior else None
            if with_prior:
                assert prior is not None and len(prior.runs) == len(_batches(model)) - 1
            for p in (0.8, 0.9, 0.95):
                target = float(values[0] + p * (values[-1] - values[0]))
                hit = values >= target if direction == "higher" else values <= target
                true_epoch = int(np.argmax(hit)) + 1
                if true_epoch <= n:
                    continue  # reached already: nothing to predict
                job = Job(
                    id=f"{model}-{batch}",
                    status="pending",
                    task=model,
                    min_cpu_millis=500,
                    max_cpu_millis=1000,
                    history=_points(values[:n], column),
                    target={"metric": metric, "direction": direction, "tier1": {"value": target}},
                    curve_prior=prior,
                )
                o = build_outlook(job, Settings(), PlannerConfig())
                predicted = None if o.remaining_tier1 is None else o.epoch + o.remaining_tier1
                errors.append(1.0 if predicted is None else min(1.0, abs(predicted - true_epoch) / true_epoch))
    return errors


def test_the_stores_prior_predicts_a_new_jobs_target_several_times_better(tmp_path: Path) -> None:
    """Every measured run is in the store as a finished job of its model's task; each in turn is the
    new job (its own run excluded), 25 % observed. The figures (61 cases): 61.6 % median error
    without, 5.8 % with the store's prior, the same as ``docs/models.md``'s "+ prior" column."""
    with StateStore(tmp_path / "state.db") as store:
        for model, metric, _ in MODELS:
            for batch in _batches(model):
                _finish(
                    store, f"{model}-{batch}", model, _points(real_curve(model, batch), "loss" if metric == "loss" else "metric")
                )
        without = _epochs_to_target_errors(store, with_prior=False)
        with_prior = _epochs_to_target_errors(store, with_prior=True)
    assert len(without) == len(with_prior) >= 50
    print(
        f"median epochs-to-target error at 25 % observed, {len(without)} cases: "
        f"{np.median(without):.1%} without, {np.median(with_prior):.1%} with the store's prior"
    )
    assert np.median(with_prior) < 0.15 < 0.4 < np.median(without)


def test_the_plan_says_where_the_curve_came_from() -> None:
    """yolov3 at batch 16, 5 epochs observed: the prior of the other six batch sizes wins the fit."""
    values = real_curve("yolov3", 16)
    runs = [
        {
            "job": f"yolov3-{b}",
            "points": [{"epoch": float(i + 1), "value": float(v)} for i, v in enumerate(real_curve("yolov3", b))],
        }
        for b in _batches("yolov3")
        if b != 16
    ]
    job = Job(
        id="yolov3-16",
        status="pending",
        task="yolov3",
        min_cpu_millis=500,
        max_cpu_millis=1000,
        history=_points(values[:5], "loss"),
        target={"metric": "loss", "direction": "lower", "tier1": {"value": float(values[-1])}},
        curve_prior={"key": "yolov3", "runs": runs},
    )
    snap = Snapshot(time=1000.0, nodes=[Node(name="n", cpu_millis=4000)], jobs=[job])
    (a,) = plan(snap, PlannerConfig(solver="greedy", time_limit=0.5)).plan.assignments
    assert "prior fit of loss on 5 points (6 earlier runs of yolov3)" in a.predictions.basis
    alone = plan(snap.model_copy(update={"jobs": [job.model_copy(update={"curve_prior": None})]}), PlannerConfig(solver="greedy"))
    assert "earlier runs" not in alone.plan.assignments[0].predictions.basis


def _job(**over: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "id": "new",
        "status": "pending",
        "task": "digits",
        "min_cpu_millis": 1000,
        "max_cpu_millis": 1000,
        "curve_prior": PRIOR,
    }
    job.update(over)
    return job


RUN = {"job": "old", "points": [{"epoch": 1, "value": 1.0}, {"epoch": 2, "value": 0.5}, {"epoch": 3, "value": 0.4}]}
PRIOR = {"basis": "task", "key": "digits", "runs": [RUN]}

BAD: dict[str, tuple[dict[str, Any], str, str]] = {
    "another task": ({"curve_prior": {**PRIOR, "key": "mnist"}}, "jobs[0].curve_prior.key", "not the job's task"),
    "job has no task": ({"task": None}, "jobs[0].curve_prior.key", "has no task"),
    "names the job itself": (
        {"curve_prior": {**PRIOR, "runs": [{**RUN, "job": "new"}]}},
        "jobs[0].curve_prior.runs[0].job",
        "itself",
    ),
    "two points": (
        {"curve_prior": {**PRIOR, "runs": [{**RUN, "points": RUN["points"][:2]}]}},
        "jobs[0].curve_prior.runs[0].points",
        "at least 3",
    ),
    "a NaN value": (
        {"curve_prior": {**PRIOR, "runs": [{**RUN, "points": [*RUN["points"][:2], {"epoch": 3, "value": float("nan")}]}]}},
        "jobs[0].curve_prior.runs[0].points[2].value",
        "finite",
    ),
    "no runs": ({"curve_prior": {**PRIOR, "runs": []}}, "jobs[0].curve_prior.runs", "at least 1"),
    "too many runs": (
        {"curve_prior": {**PRIOR, "runs": [{**RUN, "job": f"o{k}"} for k in range(21)]}},
        "jobs[0].curve_prior.runs",
        "at most 20",
    ),
    "unknown basis": ({"curve_prior": {**PRIOR, "basis": "image"}}, "jobs[0].curve_prior.basis", "'task'"),
}


@pytest.mark.parametrize("name", BAD)
def test_a_foreign_or_malformed_prior_is_refused_in_one_line_naming_the_field(name: str) -> None:
    over, field, word = BAD[name]
    text = json.dumps({"time": 1000.0, "nodes": [{"name": "n", "cpu_millis": 4000}], "jobs": [_job(**over)]})
    with pytest.raises(SnapshotError) as err:
        parse_snapshot(text)
    assert err.value.field == field, str(err.value)
    assert word in err.value.message and "\n" not in str(err.value), str(err.value)


def test_a_good_prior_is_accepted_and_documented() -> None:
    snap = parse_snapshot(json.dumps({"time": 1000.0, "nodes": [{"name": "n", "cpu_millis": 4000}], "jobs": [_job()]}))
    assert snap.jobs[0].curve_prior is not None and snap.jobs[0].curve_prior.runs[0].job == "old"
    schema = Snapshot.model_json_schema()
    assert set(schema["$defs"]["CurveReferences"]["properties"]) == {"basis", "key", "runs"}
    assert Job.model_fields["curve_prior"].description


def test_the_adapters_ask_for_the_column_the_job_is_judged_on(any_store: Any) -> None:
    """``LogProgress.curve_prior`` (both adapters'): the target's column; without a target, the loss if
    the job reports one, else its metric; with neither a target nor a point, whichever the runs have."""
    import logging

    from adapters.docker.progress import LogProgress
    from planner.snapshot import QoETarget

    store = any_store
    _finish(store, "acc-run", "cifar10", _points(real_curve("cifar10", 128)[:10], "metric"))
    progress = LogProgress(store, "docker", logging.getLogger("test"))
    on_loss = QoETarget(metric="loss", tier1={"value": 0.1})
    on_accuracy = QoETarget(metric="accuracy", direction="higher", tier1={"value": 0.9})
    assert progress.curve_prior("new", "cifar10", on_loss, []) is None  # no run reported a loss
    assert progress.curve_prior("new", "cifar10", on_accuracy, []) is not None
    assert progress.curve_prior("new", "cifar10", None, _points([2.0, 1.5], "loss")) is None
    assert progress.curve_prior("new", "cifar10", None, _points([0.3, 0.4], "metric")) is not None
    got = progress.curve_prior("new", "cifar10", None, [])
    assert got is not None and got.runs[0].job == "acc-run"
    assert progress.curve_prior("new", None, on_accuracy, []) is None
