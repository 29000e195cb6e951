"""Issue 11: the phase model for GPU jobs in a contended cluster.

"Held until done" prices a long job's dip as lasting to its end, so a short job never gets the
GPUs of a long one, and serving every job first turns a contended GPU cluster into processor
sharing at the smallest GPU counts. The phase model prices an allocation as held for
``gpu_phase_seconds`` (then the fastest level), lets a GPU job wait at the cost of its time alone,
and ages long jobs so that shortest-first does not starve them. These tests pin each part.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from planner import ObjectiveWeights, PlannerConfig, Snapshot, check_plan, plan
from planner.build import gpu_phase_seconds
from planner.outlook import build_outlook

# Measured per-epoch times of a data-parallel job (seconds, by GPU count): near-linear speed-up.
SPEED = [{"cpu_millis": 4000, "gpus": g, "seconds_per_epoch": s} for g, s in ((1, 400.0), (2, 205.0), (4, 105.0))]


def _job(job_id: str, epochs_left: float, **over: Any) -> dict[str, Any]:
    done = 2.0
    job: dict[str, Any] = {
        "id": job_id,
        "status": "pending",
        "min_cpu_millis": 4000,
        "max_cpu_millis": 4000,
        "min_gpus": 1,
        "max_gpus": 4,
        "checkpoint_seconds": 30,
        "restart_seconds": 60,
        "history": [{"time": 100.0 * e, "epoch": e, "loss": 2.0 / e} for e in (1.0, done)],
        "speed": SPEED,
        "target": {"metric": "loss", "direction": "lower", "tier1": {"value": 1e-9}, "max_epochs": done + epochs_left},
    }
    job.update(over)
    return job


def _snap(jobs: list[dict[str, Any]], gpus: int = 4, nodes: int = 1) -> Snapshot:
    return Snapshot.model_validate(
        {
            "time": 10_000.0,
            "nodes": [{"name": f"n{i}", "cpu_millis": 32000, "gpus": gpus, "memory_mib": 0} for i in range(nodes)],
            "jobs": jobs,
            "settings": {"migration_budget": 4, "interval_seconds": 120},
        }
    )


def _config(**weights: Any) -> PlannerConfig:
    return PlannerConfig(time_limit=2.0, weights=dataclasses.replace(ObjectiveWeights(), **weights))


def _outlooks(snapshot: Snapshot, config: PlannerConfig) -> list[Any]:
    return [build_outlook(j, snapshot.settings, config) for j in snapshot.jobs]


def _gpus(snapshot: Snapshot, config: PlannerConfig) -> dict[str, int]:
    result = plan(snapshot, config)
    assert check_plan(snapshot, result.plan) == []
    return {a.job: (a.gpus if a.node else 0) for a in result.plan.assignments}


LONG_RUNNING = _job("long", 200.0, status="running", node="n0", allocation={"cpu_millis": 4000, "gpus": 4}, submitted=9000.0)
SHORT = _job("short", 2.0, submitted=10_000.0)


def test_contention_switches_the_phase_model_on() -> None:
    """The phase applies only when the GPU jobs' largest asks exceed the cluster's GPUs."""
    config = _config()
    contended = _snap([LONG_RUNNING, SHORT])
    roomy = _snap([LONG_RUNNING, SHORT], nodes=2)
    assert gpu_phase_seconds(contended.nodes, _outlooks(contended, config), config) == config.weights.gpu_phase_seconds
    assert gpu_phase_seconds(roomy.nodes, _outlooks(roomy, config), config) == 0.0


def test_a_short_job_takes_the_gpus_of_a_long_one() -> None:
    """Towards shortest-remaining-first on GPUs: a 2-epoch job arriving at a node held by a
    200-epoch job gets more of it than held-until-done gives it (there the long job's dip is priced
    as lasting its whole run, so the short job gets one GPU and the long one keeps three)."""
    snap = _snap([LONG_RUNNING, SHORT])
    new = _gpus(snap, _config())
    old = _gpus(snap, _config(gpu_phase_seconds=0.0))
    assert new["short"] >= 2 and new["short"] > old["short"]
    assert sum(new.values()) == 4 and sum(old.values()) == 4


def test_a_long_job_may_wait_for_a_short_one() -> None:
    """Serving every job first is processor sharing at the smallest GPU counts; in a contended
    cluster the phase model may pause a long job so that a short one runs on more GPUs."""
    mid = _job("mid", 100.0, status="running", node="n0", allocation={"cpu_millis": 4000, "gpus": 2}, submitted=9500.0)
    long_ = dict(LONG_RUNNING, allocation={"cpu_millis": 4000, "gpus": 2})
    snap = _snap([long_, mid, SHORT])
    old = _gpus(snap, _config(gpu_phase_seconds=0.0))
    assert min(old.values()) >= 1 and old["short"] == 1  # everyone served, the short job on one GPU
    new = _gpus(snap, _config())
    assert new["short"] >= 2 and min(new.values()) == 0 and sum(new.values()) == 4


def test_no_job_waits_while_its_gpus_are_free() -> None:
    """Work conservation survives the missing "serve every job" penalty: with a free GPU, a waiting
    GPU job starts (running at one GPU beats waiting for the phase in the model too)."""
    others = [
        _job(f"r{i}", 50.0, status="running", node="n0", allocation={"cpu_millis": 4000, "gpus": 1}, resizable=False)
        for i in range(3)
    ]
    got = _gpus(_snap([*others, _job("new", 100.0)]), _config())
    assert got["new"] >= 1


def test_uncontended_plans_are_unchanged() -> None:
    """Where every job can hold its largest ask the phase model is off: the plan is the old one."""
    snap = _snap([LONG_RUNNING, SHORT], nodes=2)
    new = plan(snap, _config()).plan
    old = plan(snap, _config(gpu_phase_seconds=0.0)).plan
    assert [a.model_dump() for a in new.assignments] == [a.model_dump() for a in old.assignments]


@pytest.mark.parametrize("age_exponent", [0.0, 2.0])
def test_ageing_weighs_a_job_that_waited_long(age_exponent: float) -> None:
    """A long job that has been in the system long gains completion weight (the response ratio),
    so shortest-first does not starve it; off (0), its weight does not depend on its age."""
    from planner.build import build_problem

    def weight_of(submitted: float) -> int:
        snap = _snap([_job("old", 20.0, submitted=submitted), SHORT, _job("mid", 5.0, submitted=10_000.0)])
        config = _config(gpu_age_exponent=age_exponent)
        problem, _ = build_problem(snap, _outlooks(snap, config), config)
        return problem.menus[0].completion_weight

    fresh, aged = weight_of(10_000.0), weight_of(10_000.0 - 40_000.0)
    if age_exponent:
        assert aged > fresh
    else:
        assert aged == fresh


def test_ageing_can_make_up_for_the_shortest_first_lean() -> None:
    """Ageing is capped at the square of the lean's clip: a job 64x longer than a fresh short one
    that has been in the system long enough weighs at least as much as it (with the cap at the
    lean's clip, it never weighed more than the median job: the Pollux tail waited behind every
    new short job)."""
    from planner.build import build_problem

    snap = _snap(
        [
            _job("long", 640.0, submitted=10_000.0 - 10**7),
            _job("short", 10.0, submitted=10_000.0),
            _job("mid", 80.0, submitted=10_000.0),
        ]
    )
    config = _config()
    problem, _ = build_problem(snap, _outlooks(snap, config), config)
    weight = {m.outlook.job.id: m.completion_weight for m in problem.menus}
    assert weight["long"] >= weight["short"] > weight["mid"]


def test_a_slow_level_of_a_job_that_cannot_resize_live_counts_the_restart_back() -> None:
    """The phase model prices a level below the fastest as held for the phase, then the fastest.
    A job that cannot resize live reaches the fastest level only by a checkpoint-restart, so that
    level's finish carries one more restart (checkpoint, restart and half a checkpoint period done
    again): shrinking such a job is a round trip. Live-resizable jobs and the fastest level are
    priced as before."""
    from planner.build import build_problem

    def finishes(resizable: bool) -> tuple[dict[int, float], dict[int, float]]:
        snap = _snap([dict(LONG_RUNNING, resizable=resizable, checkpoint_every_seconds=600), SHORT])
        config = _config()
        problem, _ = build_problem(snap, _outlooks(snap, config), config)
        menu = problem.menus[0]
        assert menu.phase_seconds > 0
        levels = {int(g): i for i, g in enumerate(menu.gpu)}
        return {g: float(menu.finish_s[0, i]) for g, i in levels.items()}, {
            g: float(menu.seconds_per_epoch[i]) for g, i in levels.items()
        }

    (live, epoch), (restart, _) = finishes(True), finishes(False)
    assert restart[4] == live[4]  # the fastest level: nothing to switch to
    for g in (1, 2):  # checkpoint 30 s, restart 60 s, half of min(an epoch, 600 s) done again
        assert epoch[g] > epoch[4]
        assert restart[g] == pytest.approx(live[g] + 30 + 60 + 0.5 * min(epoch[g], 600.0))


def test_the_round_trip_never_makes_waiting_beat_a_free_gpu() -> None:
    """Work conservation with the round trip priced: a job that cannot resize live and scales to 64
    GPUs finds one free GPU. In the phase it does little at one GPU, less than the round trip's
    price, so without a guard waiting for the phase (then 64 GPUs) looked better and the GPU idled.
    The round trip is never priced past waiting: it starts."""
    speed = [{"cpu_millis": 4000, "gpus": g, "seconds_per_epoch": 400.0 / g} for g in (1, 2, 4, 8, 16, 32, 64)]
    busy = [
        _job(
            f"r{i}",
            500.0,
            status="running",
            node="n0",
            allocation={"cpu_millis": 4000, "gpus": 9},
            resizable=False,
            max_gpus=9,
            min_gpus=9,
            speed=speed,
        )  # fmt: skip
        for i in range(7)
    ]
    new = _job("new", 500.0, max_gpus=64, resizable=False, speed=speed, checkpoint_every_seconds=600)
    got = _gpus(_snap([*busy, new], gpus=64), _config())
    assert sum(got[f"r{i}"] for i in range(7)) == 63
    assert got["new"] == 1


def test_ageing_counts_the_slowdown_not_the_time_in_the_system() -> None:
    """The ageing ratio is the job's slowdown if it ran at its best from now, (time in the system +
    work left) / (work done + work left): a job that has run at its best since it arrived is not
    aged however long ago that was, and the same job that has done little in that time is. (With
    ``1 + time in the system / work left`` a long job near its end weighed up to 64 times more
    for having run long, and on Pollux workload 4 with curve priors short jobs waited behind it.)"""
    from planner.build import build_problem

    best = 105.0  # seconds per epoch at 4 GPUs
    since = 10_000.0 - 100 * best

    def weights(done: float, exponent: float) -> int:
        history = [{"time": since + best * e, "epoch": e, "loss": 2.0 / e} for e in (1.0, done / 2, done)]
        job = _job(
            "job",
            20.0,
            status="running",
            node="n0",
            allocation={"cpu_millis": 4000, "gpus": 4},
            submitted=since,
            history=history,
            target={"metric": "loss", "direction": "lower", "tier1": {"value": 1e-9}, "max_epochs": done + 20.0},
        )
        snap = _snap([job, SHORT])
        config = _config(gpu_age_exponent=exponent)
        problem, _ = build_problem(snap, _outlooks(snap, config), config)
        assert problem.menus[0].phase_seconds > 0  # contended: priced with the phase model
        return problem.menus[0].completion_weight

    assert weights(100.0, 4.0) == weights(100.0, 0.0)  # served at its best all along: not aged
    assert weights(4.0, 4.0) > weights(4.0, 0.0)  # the same time in the system, little done: aged
