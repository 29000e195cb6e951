"""Property-based fuzzing of the snapshot contract and the planner (Hypothesis, derandomized).

Two generators, 1,200 snapshots per run in all:

- *valid-shaped* snapshots built field by field, with every number drawn across and at the
  contract's bounds (capacities up to 1e9 millicores, seconds per epoch up to 1e9, epochs up to 1e9,
  loss and metric values up to ±1e12, histories that are flat, noisy, backwards in time or
  duplicated, learning-rate schedules of every kind at their edges, speeds borrowed from similar
  jobs at the bounds), so the models and the integer
  program see the worst the contract allows;
- *mutated* real snapshots (the bundled examples): one field replaced by a value of the wrong
  kind, out of range, NaN/Infinity in the JSON text, a misspelt key, a deleted key.

Properties: parsing either gives a Snapshot (the same one the careful path, ``json.loads`` and then
the objects validated, gives) or raises SnapshotError with one line naming a field;
a Snapshot always plans without an exception (greedy, so a run stays in seconds), the plan passes
the independent checker, and every number in it is finite. Nothing here is faked.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner import PlannerConfig, SnapshotError, check_plan, parse_snapshot, plan
from planner.io import validate_snapshot


def fuzz(n: int) -> settings:
    return settings(max_examples=n, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))


CONFIG = PlannerConfig(solver="greedy", time_limit=0.2)
EXAMPLES = [json.loads(p.read_text()) for p in sorted((REPO / "examples" / "snapshots").glob("*.json"))]

# Numbers at and near the contract's edges, and ordinary ones.
EDGE_FLOATS = st.sampled_from([0.0, 1e-300, 5e-324, 1e-9, 0.5, 1.0, 3.0, 1e6, 1e9, 1e12, -1e12, -1.0])
FLOATS = st.one_of(EDGE_FLOATS, st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False))
SECONDS = st.one_of(st.sampled_from([0.0, 1e-9, 1.0, 60.0, 1e9]), st.floats(0, 1e9, allow_nan=False))
MILLIS = st.one_of(st.sampled_from([1, 250, 1000, 96_000, 10**9]), st.integers(1, 10**9))
NAMES = st.from_regex(r"\A[a-z][a-z0-9-]{0,6}[a-z0-9]\Z")
# Learning-rate schedules of every kind (the warm-ups shorter than the smallest max_epochs drawn).
SCHEDULES = st.sampled_from(
    [
        {"kind": "constant"},
        {"kind": "step", "milestones": [0.0, 30.0, 1e9], "gamma": 1e-9},
        {"kind": "step", "milestones": [2.0], "gamma": 0.5},
        {"kind": "exp", "gamma": 0.93},
        {"kind": "exp", "gamma": 1.0},
        {"kind": "cosine"},
        {"kind": "warmup_cosine", "warmup": 0.5},
        {"kind": "warmup_linear", "warmup": 0.0},
        {"kind": "plateau", "factor": 0.5, "patience": 0, "min_lr": 0.0},
        {"kind": "plateau", "factor": 1e-9, "patience": 10**6, "min_lr": 1.0},
    ]
)


@st.composite
def valid_shaped(draw: st.DrawFn) -> dict[str, Any]:
    now = draw(st.sampled_from([0.0, 1767000000.0, 1e12]))
    node_names = draw(st.lists(NAMES, min_size=0, max_size=4, unique=True))
    nodes = [
        {
            "name": n,
            "cpu_millis": draw(MILLIS),
            "gpus": draw(st.sampled_from([0, 0, 1, 4, 8, 10**6])),
            "memory_mib": draw(st.integers(0, 10**9)),
        }
        for n in node_names
    ]
    jobs = []
    for i in range(draw(st.integers(0, 6))):
        lo_c = draw(MILLIS)
        hi_c = draw(st.integers(lo_c, 10**9))
        lo_g = draw(st.sampled_from([0, 0, 1, 2]))
        hi_g = draw(st.integers(lo_g, lo_g + 8))
        job: dict[str, Any] = {
            "id": f"j{i}",
            "status": "pending",
            "min_cpu_millis": lo_c,
            "max_cpu_millis": hi_c,
            "min_gpus": lo_g,
            "max_gpus": hi_g,
            "checkpoint_seconds": draw(SECONDS),
            "restart_seconds": draw(SECONDS),
            "priority": draw(st.sampled_from([0.01, 1.0, 100.0])),
        }
        if node_names and draw(st.booleans()):
            job.update(
                status="running",
                node=draw(st.sampled_from(node_names)),
                allocation={"cpu_millis": draw(st.integers(0, 10**9)), "gpus": draw(st.integers(0, 16))},
            )
        kind = draw(st.sampled_from(["none", "curve", "flat", "noise", "backwards", "duplicates"]))
        n = draw(st.integers(1, 40))
        if kind != "none":
            epochs = [float(e + 1) for e in range(n)]
            if kind == "curve":
                values = [1.0 / (e + 1) for e in range(n)]
            elif kind == "flat":
                values = [draw(FLOATS)] * n
            else:
                values = [draw(FLOATS) for _ in range(n)]
            if kind == "backwards":
                epochs = epochs[::-1]
            if kind == "duplicates":
                epochs = [1.0] * n
            if draw(st.booleans()):
                epochs[-1] = draw(st.sampled_from([1e6, 1e9]))
            key = draw(st.sampled_from(["loss", "metric"]))
            pairs = enumerate(zip(epochs, values, strict=True))
            job["history"] = [{"time": now - 10.0 * (n - k), "epoch": e, key: v} for k, (e, v) in pairs]
            direction = "lower" if key == "loss" else "higher"
            if draw(st.booleans()):
                job["target"] = {
                    "metric": "loss" if key == "loss" else "accuracy",
                    "direction": direction,
                    "tier1": {"value": draw(FLOATS), "deadline": now + draw(SECONDS)},
                    "max_epochs": draw(st.sampled_from([1.0, 20.0, 1e9])),
                }
                if draw(st.booleans()):
                    job["schedule"] = draw(SCHEDULES)
        if draw(st.booleans()):
            spe = draw(st.sampled_from([1e-9, 1.0, 37.0, 1e9]))
            job["speed"] = [{"cpu_millis": draw(MILLIS), "gpus": draw(st.integers(0, 8)), "seconds_per_epoch": spe}]
        if draw(st.booleans()):  # speeds borrowed from similar jobs, at the contract's edges
            job["task"] = "fuzz-task"
            points = [
                {
                    "cpu_millis": draw(MILLIS),
                    "gpus": draw(st.integers(0, 8)) if hi_g > 0 else 0,
                    "seconds_per_epoch": draw(st.sampled_from([1e-9, 1.46, 60.0, 1e9])),
                }
                for _ in range(draw(st.integers(1, 4)))
            ]
            job["speed_prior"] = {"basis": "task", "key": "fuzz-task", "jobs": ["other"], "points": points}
        jobs.append(job)
    settings_ = {"interval_seconds": draw(st.sampled_from([1e-3, 60.0, 86400.0])), "migration_budget": draw(st.integers(0, 10))}
    return {"apiVersion": "flowplan/v1", "kind": "Snapshot", "time": now, "nodes": nodes, "jobs": jobs, "settings": settings_}


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            out += _paths(v, (*prefix, i))
    return out


WRONG = st.sampled_from(
    [True, False, None, "16000", "yes", "", [], {}, -1, 0, 1e308, -1e308, 10**30, 2.5, "NaN", "Infinity", "x" * 300]
)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    snap = json.loads(json.dumps(draw(st.sampled_from(EXAMPLES))))
    paths = _paths(snap)
    path = draw(st.sampled_from(paths))
    parent = snap
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    action = draw(st.sampled_from(["replace", "replace", "delete", "misspell", "nan"]))
    if action == "delete" and isinstance(parent, dict):
        del parent[last]
    elif action == "misspell" and isinstance(parent, dict):
        parent[str(last)[:-1] + "x"] = parent.pop(last)
    elif action == "nan":
        parent[last] = "__NAN__"
    else:
        parent[last] = draw(WRONG)
    text = json.dumps(snap)
    return text.replace('"__NAN__"', draw(st.sampled_from(["NaN", "Infinity", "-Infinity"])))


def _finite_everywhere(obj: Any) -> bool:
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(_finite_everywhere(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_finite_everywhere(v) for v in obj)
    return True


def _parse_or_refuse(text: str) -> Any:
    try:
        snapshot = parse_snapshot(text)
    except SnapshotError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg and "Traceback" not in msg, msg
        return None
    # What pydantic's JSON parser accepted in one step, the careful path (``json.loads``, then the
    # objects validated: the one that names the field in errors) accepts too, as the same snapshot.
    assert validate_snapshot(json.loads(text)) == snapshot
    return snapshot


def _plans_cleanly(snapshot: Any) -> None:
    result = plan(snapshot, CONFIG)
    assert check_plan(snapshot, result.plan) == []
    assert _finite_everywhere(result.plan.model_dump(mode="json")), "a non-finite number in the plan"


@fuzz(700)
@given(valid_shaped())
def test_any_valid_shaped_snapshot_is_planned_or_refused_in_one_line(data: dict[str, Any]) -> None:
    snapshot = _parse_or_refuse(json.dumps(data))
    if snapshot is not None:
        _plans_cleanly(snapshot)


@fuzz(500)
@given(mutated())
def test_a_mutated_real_snapshot_is_planned_or_refused_in_one_line(text: str) -> None:
    snapshot = _parse_or_refuse(text)
    if snapshot is not None:
        _plans_cleanly(snapshot)


def test_the_generators_reach_both_outcomes(tmp_path: Path) -> None:
    """The suite is only worth something if it plans some snapshots and refuses others."""
    outcomes = {"planned": 0, "refused": 0}

    @fuzz(60)
    @given(st.one_of(valid_shaped().map(json.dumps), mutated()))
    def sample(text: str) -> None:
        outcomes["planned" if _parse_or_refuse(text) is not None else "refused"] += 1

    sample()
    assert outcomes["planned"] >= 5 and outcomes["refused"] >= 5, outcomes
