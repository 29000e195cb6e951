"""A job that has reported its last epoch (``max_epochs``) but whose process still runs is left to end
by itself: it is neither paused nor moved, whatever a waiting job could do with its CPU.

Found on the real engine (``docs/docker.md``, "Session 43"): the daemon read a job's last epoch a
moment before its container exited and paused it ("nothing left to learn ... its CPU go to jobs
still learning") to start a waiting job. The example job exits right after its last report, so
there it cost nothing but a signal; a real training script evaluates on its test set, saves and
uploads its model after the last epoch, and a pause (a checkpoint request, then the engine's stop)
interrupts exactly that, after which the job is "pending" with nothing left and is never started
again. Planner-level cases, each planned by CP-SAT and checked."""

from __future__ import annotations

from typing import Any

import pytest

from planner import PlannerConfig, Snapshot, check_plan, plan

CURVE = [(1, 0.40), (2, 0.55), (3, 0.63), (4, 0.69), (5, 0.73), (6, 0.76), (7, 0.78), (8, 0.795)]  # cifar10-like


def _running(job_id: str, epochs: int, max_epochs: int, cpu: int = 2000, **extra: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "status": "running",
        "node": "n1",
        "allocation": {"cpu_millis": cpu},
        "min_cpu_millis": 2000,
        "max_cpu_millis": 4000,
        "checkpoint_seconds": 5,
        "restart_seconds": 5,
        "history": [{"time": 100.0 * e, "epoch": e, "metric": v} for e, v in CURVE[:epochs]],
        "speed": [{"cpu_millis": cpu, "seconds_per_epoch": 100}],
        "target": {"metric": "accuracy", "direction": "higher", "tier1": {"value": 0.9}, "max_epochs": max_epochs},
        **extra,
    }


def _snapshot(jobs: list[dict[str, Any]], nodes: list[dict[str, Any]] | None = None) -> Snapshot:
    nodes = nodes or [{"name": "n1", "cpu_millis": 4000, "memory_mib": 8192}]
    return Snapshot.model_validate({"time": 1000.0, "nodes": nodes, "jobs": jobs})


def _planned(snap: Snapshot) -> dict[str, Any]:
    p = plan(snap, PlannerConfig(time_limit=2)).plan
    assert check_plan(snap, p) == []
    return {a.job: a for a in p.assignments}


WAITING = {
    "id": "next",
    "status": "pending",
    "min_cpu_millis": 2000,
    "max_cpu_millis": 4000,
    "target": {"metric": "accuracy", "direction": "higher", "tier1": {"value": 0.9}, "max_epochs": 60},
}


def test_a_job_past_its_last_epoch_is_not_paused_for_a_waiting_one() -> None:
    """The node is full: ``done`` has reported epoch 8 of 8, ``busy`` trains on; ``next`` waits for
    room. ``done`` keeps its share until it exits, and the plan says why; ``next`` waits."""
    snap = _snapshot([_running("done", 8, 8), _running("busy", 4, 60), WAITING])
    got = _planned(snap)
    assert got["done"].action == "keep", (got["done"].action, got["done"].explanation)
    assert got["done"].node == "n1" and got["done"].cpu_millis >= 2000
    assert "reached max_epochs 8" in got["done"].explanation and "left to end by itself" in got["done"].explanation
    assert got["busy"].action in ("keep", "resize") and got["next"].action == "wait"


def test_nor_moved_when_another_node_is_free() -> None:
    """With an empty second node the waiting job starts there; the finished one stays where it is."""
    nodes = [{"name": "n1", "cpu_millis": 4000, "memory_mib": 8192}, {"name": "n2", "cpu_millis": 4000, "memory_mib": 8192}]
    got = _planned(_snapshot([_running("done", 8, 8), _running("busy", 4, 60), WAITING], nodes))
    assert got["done"].action == "keep" and got["done"].node == "n1", (got["done"].action, got["done"].explanation)
    assert got["next"].action == "start"


@pytest.mark.parametrize("epochs", [4, 7], ids=["half-way", "one-epoch-left"])
def test_a_job_still_training_may_still_be_paused(epochs: int) -> None:
    """The premise, and the control: the same snapshot with ``done`` short of its last epoch, and a
    waiting job worth far more (priority 50), pauses the low-priority running job as before."""
    snap = _snapshot([_running("done", epochs, 8), _running("busy", 4, 60, priority=1), dict(WAITING, priority=50)])
    got = _planned(snap)
    assert got["next"].action == "start", {j: (a.action, a.explanation) for j, a in got.items()}
    assert "pause" in {got["done"].action, got["busy"].action}
