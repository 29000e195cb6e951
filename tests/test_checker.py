"""The independent checker catches every kind of broken plan.

Each case takes a valid plan for a small fixed snapshot and breaks it one way; the checker must name
the problem. Cases: over capacity · job missing · job twice · finished job assigned · unknown node ·
unschedulable node · wrong GPU type · missing label · CPU below min · half a gang · pinned job moved ·
pinned job paused · live resize of a non-resizable job · migrations over budget · wrong action for a
pending job · keep with a changed allocation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from planner import PlannerConfig, Snapshot, check_plan, plan

SNAP = Snapshot.model_validate(
    {
        "time": 0.0,
        "nodes": [
            {"name": "a", "cpu_millis": 8000, "gpus": 4, "memory_mib": 32000, "gpu_type": "V100", "labels": {"zone": "x"}},
            {"name": "b", "cpu_millis": 8000, "gpus": 4, "memory_mib": 32000, "gpu_type": "T4"},
            {"name": "c", "cpu_millis": 8000, "schedulable": False},
        ],
        "jobs": [
            {
                "id": "pinned",
                "status": "running",
                "node": "a",
                "allocation": {"cpu_millis": 2000},
                "min_cpu_millis": 1000,
                "max_cpu_millis": 4000,
                "migratable": False,
            },
            {
                "id": "fixed",
                "status": "running",
                "node": "b",
                "allocation": {"cpu_millis": 2000},
                "min_cpu_millis": 1000,
                "max_cpu_millis": 4000,
                "resizable": False,
            },
            {
                "id": "gang",
                "status": "pending",
                "replicas": 2,
                "min_cpu_millis": 1000,
                "max_cpu_millis": 2000,
                "min_gpus": 1,
                "max_gpus": 1,
                "gpu_type": "V100",
            },
            {"id": "zonal", "status": "pending", "min_cpu_millis": 1000, "max_cpu_millis": 2000, "node_selector": {"zone": "x"}},
            {
                "id": "mover",
                "status": "running",
                "node": "b",
                "allocation": {"cpu_millis": 1000},
                "min_cpu_millis": 1000,
                "max_cpu_millis": 2000,
            },
            {"id": "done", "status": "finished"},
        ],
        "settings": {"migration_budget": 0},
    }
)


def _plan() -> dict[str, Any]:
    p = plan(SNAP, PlannerConfig(time_limit=1)).plan
    assert check_plan(SNAP, p) == []
    return p.model_dump()


def _job(d: dict[str, Any], job: str) -> dict[str, Any]:
    return next(a for a in d["assignments"] if a["job"] == job)


def _set(job: str, **fields: Any) -> Callable[[dict[str, Any]], None]:
    def apply(d: dict[str, Any]) -> None:
        _job(d, job).update(fields)

    return apply


def _drop(job: str) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["assignments"].remove(_job(d, job))


def _dup(job: str) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["assignments"].append(dict(_job(d, job)))


def _add_done(d: dict[str, Any]) -> None:
    extra = dict(_job(d, "zonal"))
    extra["job"] = "done"
    d["assignments"].append(extra)


CASES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "job missing": (_drop("zonal"), "zonal: 0 assignments"),
    "job twice": (_dup("zonal"), "zonal: 2 assignments"),
    "finished job assigned": (_add_done, "done: assignment for a finished job"),
    "unknown node": (_set("zonal", node="nowhere"), "unknown node"),
    "unschedulable node": (_set("zonal", node="c"), "unschedulable"),
    "wrong gpu type": (_set("gang", node="b"), "needs GPU type V100"),
    "missing label": (_set("zonal", node="b"), "lacks label zone=x"),
    "cpu below min": (_set("zonal", cpu_millis=100), "outside"),
    "half a gang": (_set("gang", replicas=1), "gangs are all or nothing"),
    "pinned moved": (_set("pinned", node="b", action="migrate"), "cannot migrate"),
    "pinned paused": (_set("pinned", node=None, action="pause", cpu_millis=0), "is paused"),
    "live resize of non-resizable": (_set("fixed", cpu_millis=3000, action="resize"), "cannot resize live"),
    "migration over budget": (_set("mover", node="a", action="migrate"), "exceed the budget"),
    "pending job kept": (_set("zonal", action="keep"), "expected 'start'"),
    "keep with changed allocation": (_set("pinned", cpu_millis=3000, action="keep"), "allocation changed"),
}


def _overfill(d: dict[str, Any]) -> None:
    """Node a has 8 CPUs: 4 (pinned) + 2 (zonal) + 2x2 (gang) = 10."""
    for a in d["assignments"]:
        if a["node"] == "a" and a["job"] != "pinned":
            a["cpu_millis"] = 2000
    _job(d, "pinned").update(cpu_millis=4000, action="resize")
    _job(d, "zonal").update(node="a", cpu_millis=2000, action="start")
    _job(d, "gang").update(node="a", cpu_millis=2000, gpus=1, action="start")


CASES["over capacity"] = (_overfill, "exceeds capacity")


@pytest.mark.parametrize("case", sorted(CASES))
def test_checker_catches(case: str) -> None:
    from planner.plan import Plan

    d = _plan()
    breaker, must = CASES[case]
    breaker(d)
    broken = Plan.model_validate(d)
    found = check_plan(SNAP, broken)
    assert any(must in v for v in found), found
